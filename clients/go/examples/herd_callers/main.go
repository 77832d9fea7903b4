// Command herd_callers is one process of a herd, for the fleet recovery
// benchmark (bench/real_fleet.py), the twin of the Rust client's example
// of the same name: --callers callers each want one call to --dependency
// served, all starting at --start-at, through the Go client under the
// policy the daemon serves for --service.
//
//	go run ./examples/herd_callers --daemon http://127.0.0.1:8080 \
//	    --service dependency --instance pod-1 --dependency http://127.0.0.1:9000 \
//	    --callers 50 --start-at "$(date +%s%3N)"
//
// --no-fleet-pacing keeps each send gate to what this process learns
// alone. Once every caller is done it prints one JSON line: the calls that
// succeeded and gave up, the attempts sent, and each success's time from
// its call's arrival (the start, unless --rate is given) in seconds.
//
// With --rate R --seconds S the calls arrive instead, one at a time from
// --start-at, at random (a Poisson process seeded by --seed) at R a
// second for S seconds: the open-loop callers of `stormguard simulate
// --scenario errors` (bench/fleet_budget.py, bench/real_fleet.py --errors).
// --report-every sets the reporter's interval (2 s unless given).
//
// --critical SHARE --sheddable SHARE make those shares of the calls, drawn
// call by call from --seed, of those classes (the rest name none). The
// JSON line then (or with --records) also holds every call: [arrival, class, outcome, seconds,
// attempts], the arrival in seconds from the start, the class ("critical",
// "sheddable", or "-" for none), the outcome "ok" or why it gave up
// ("shed", "no-turn", "circuit-open", "exhausted", "deadline", "budget",
// "not-retryable", "cancelled": the Rust example's words), the seconds it
// took to succeed or to fail, and the attempts a failed call sent.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stormguard/stormguard/clients/go/dependency"
	"github.com/stormguard/stormguard/clients/go/gate"
	"github.com/stormguard/stormguard/clients/go/policy"
	"github.com/stormguard/stormguard/clients/go/report"
)

// result is the line the process prints.
type result struct {
	Instance  string    `json:"instance"`
	Succeeded int       `json:"succeeded"`
	GaveUp    int       `json:"gave_up"`
	Attempts  uint64    `json:"attempts"`
	Seconds   []float64 `json:"seconds"`
	// Calls is every call, with --critical, --sheddable or --records.
	Calls *[]call `json:"calls,omitempty"`
}

// call is one call's record: [arrival, class, outcome, seconds, attempts].
type call [5]any

// class is a call's class, or none.
type class struct {
	criticality gate.Criticality
	named       bool
}

// name is the class as the JSON line names it ("-" for none).
func (c class) name() string {
	if !c.named {
		return "-"
	}
	return c.criticality.String()
}

// classes is the class of each of calls calls: critical and sheddable
// shares of them, drawn call by call from seed; the rest name none.
func classes(calls int, critical, sheddable float64, seed int64) []class {
	random := rand.New(rand.NewSource(seed ^ 0x5eed))
	out := make([]class, calls)
	for i := range out {
		switch draw := random.Float64(); {
		case draw < critical:
			out[i] = class{gate.Critical, true}
		case draw < critical+sheddable:
			out[i] = class{gate.Sheddable, true}
		}
	}
	return out
}

// outcome names why a call gave up as the Rust example does.
func outcome(reason dependency.Reason) string {
	switch reason {
	case dependency.Shed:
		return "shed"
	case dependency.NoTurn:
		return "no-turn"
	case dependency.CircuitOpen:
		return "circuit-open"
	case dependency.Exhausted:
		return "exhausted"
	case dependency.Deadline:
		return "deadline"
	case dependency.BudgetExhausted:
		return "budget"
	case dependency.NotRetryable:
		return "not-retryable"
	case dependency.Cancelled:
		return "cancelled"
	}
	return string(reason)
}

// poisson is the arrival times of a Poisson process of rate a second over
// seconds.
func poisson(rate, seconds float64, seed int64) []time.Duration {
	random := rand.New(rand.NewSource(seed))
	var at float64
	var arrivals []time.Duration
	for {
		at += -math.Log(1-random.Float64()) / rate
		if at >= seconds {
			return arrivals
		}
		arrivals = append(arrivals, time.Duration(at*float64(time.Second)))
	}
}

func main() {
	daemon := flag.String("daemon", "", "the stormguard daemon's base URL (required)")
	service := flag.String("service", "", "the dependency's name in the daemon's policies (required)")
	instance := flag.String("instance", "", "this process's name in reports (required)")
	target := flag.String("dependency", "", "the dependency's base URL; callers GET {dependency}/call (required)")
	callers := flag.Int("callers", 50, "the callers, each wanting one call served (ignored with --rate)")
	startAt := flag.Int64("start-at", 0, "when the callers start, in Unix milliseconds (required)")
	alone := flag.Bool("no-fleet-pacing", false, "keep each send gate to what this process learns alone")
	rate := flag.Float64("rate", 0, "calls a second arriving at random from --start-at, instead of --callers all at once")
	seconds := flag.Float64("seconds", 0, "how long calls arrive for, in seconds (required with --rate)")
	seed := flag.Int64("seed", 1, "the seed of the arrivals' randomness, with --rate")
	reportEvery := flag.Float64("report-every", 2, "the seconds between reports")
	critical := flag.Float64("critical", 0, "the share of calls that are critical, drawn call by call")
	sheddable := flag.Float64("sheddable", 0, "the share of calls that are sheddable, drawn call by call")
	records := flag.Bool("records", false, "print every call, whatever the shares")
	flag.Parse()
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, required := range []struct{ name, value string }{{"--daemon", *daemon}, {"--service", *service}, {"--instance", *instance}, {"--dependency", *target}} {
		if required.value == "" {
			log.Fatalf("%s is required", required.name)
		}
	}
	if *startAt == 0 {
		log.Fatal("--start-at is required")
	}
	start := time.UnixMilli(*startAt)
	if !(*reportEvery > 0) || math.IsInf(*reportEvery, 0) {
		log.Fatalf("--report-every takes a positive number of seconds, not %v", *reportEvery)
	}
	interval := time.Duration(*reportEvery * float64(time.Second))
	// Every call at once, or each at its arrival.
	var arrivals []time.Duration
	if given["rate"] {
		if !given["seconds"] {
			log.Fatal("--seconds is required with --rate")
		}
		if !(*rate > 0) || math.IsInf(*rate, 0) {
			log.Fatalf("--rate takes a positive number of calls a second, not %v", *rate)
		}
		if !(*seconds >= 0) || math.IsInf(*seconds, 0) {
			log.Fatalf("--seconds takes a number of seconds, not %v", *seconds)
		}
		arrivals = poisson(*rate, *seconds, *seed)
	} else {
		arrivals = make([]time.Duration, *callers)
	}
	for _, share := range []struct {
		name  string
		value float64
	}{{"--critical", *critical}, {"--sheddable", *sheddable}} {
		if !(share.value >= 0 && share.value <= 1) {
			log.Fatalf("%s takes a share in [0, 1], not %v", share.name, share.value)
		}
	}
	classed := *critical > 0 || *sheddable > 0 || *records
	classOf := classes(len(arrivals), *critical, *sheddable, *seed)

	watch, err := policy.Start(context.Background(), policy.Config{Daemon: *daemon, Services: []string{*service}})
	if err != nil {
		log.Fatal(err)
	}
	defer watch.Stop()
	reporter, err := report.Start(report.Config{Daemon: *daemon, Instance: *instance, Interval: interval, DisableFleetPacing: *alone})
	if err != nil {
		log.Fatal(err)
	}
	calls := dependency.New(watch, *service, reporter)
	// A connection kept for every caller, as the Rust client's pool keeps
	// them, rather than the two a host gets by default; open loop, one for
	// every arrival up to 1,000, since only the calls in flight at once
	// hold one.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	idle := len(arrivals)
	if given["rate"] && idle > 1000 {
		idle = 1000
	}
	transport.MaxIdleConnsPerHost = idle
	client := &http.Client{Transport: transport}
	url := *target + "/call"

	var attempts atomic.Uint64
	var mu sync.Mutex
	out := result{Instance: *instance, Seconds: make([]float64, 0, len(arrivals))}
	if classed {
		every := make([]call, 0, len(arrivals))
		out.Calls = &every
	}
	time.Sleep(time.Until(start))
	var running sync.WaitGroup
	for i, arrival := range arrivals {
		arrived := start.Add(arrival)
		time.Sleep(time.Until(arrived))
		running.Add(1)
		go func(i int, arrival time.Duration) {
			defer running.Done()
			ctx := context.Background()
			if classOf[i].named {
				ctx = dependency.WithCriticality(ctx, classOf[i].criticality)
			}
			var last int
			var sent uint32
			err := calls.Call(ctx, "/call", func(ctx context.Context) (int, error) {
				attempts.Add(1)
				sent++
				status, err := get(ctx, client, url)
				last = status
				return status, err
			})
			took := time.Since(arrived).Seconds()
			// A status under 500 the policy does not retry ends the call,
			// but only a 2xx is the call served: the Rust example's
			// attempt fails it, and the call gives up as not retryable.
			what := "ok"
			var callError *dependency.CallError
			switch {
			case errors.As(err, &callError):
				what, sent = outcome(callError.Reason), callError.Attempts
			case err != nil || last < 200 || last > 299:
				what = "not-retryable"
			}
			mu.Lock()
			defer mu.Unlock()
			if what == "ok" {
				out.Seconds = append(out.Seconds, took)
				sent = 0
			} else {
				out.GaveUp++
			}
			if out.Calls != nil {
				*out.Calls = append(*out.Calls, call{arrival.Seconds(), classOf[i].name(), what, took, sent})
			}
		}(i, arrival)
	}
	running.Wait()
	if err := reporter.Stop(context.Background()); err != nil {
		log.Printf("the last report could not be sent: %v", err)
	}
	out.Succeeded, out.Attempts = len(out.Seconds), attempts.Load()
	line, _ := json.Marshal(out)
	fmt.Fprintln(os.Stdout, string(line))
}

// get is one attempt: the answer's status, or the error when none came.
func get(ctx context.Context, client *http.Client, url string) (int, error) {
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	answer, err := client.Do(request)
	if err != nil {
		return 0, err
	}
	// Read to the end, so that the connection goes back to the pool.
	_, _ = io.Copy(io.Discard, answer.Body)
	answer.Body.Close()
	return answer.StatusCode, nil
}
