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
package main

import (
	"context"
	"encoding/json"
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
	time.Sleep(time.Until(start))
	var running sync.WaitGroup
	for _, arrival := range arrivals {
		arrived := start.Add(arrival)
		time.Sleep(time.Until(arrived))
		running.Add(1)
		go func() {
			defer running.Done()
			var last int
			err := calls.Call(context.Background(), "/call", func(ctx context.Context) (int, error) {
				attempts.Add(1)
				status, err := get(ctx, client, url)
				last = status
				return status, err
			})
			took := time.Since(arrived).Seconds()
			mu.Lock()
			defer mu.Unlock()
			// A status under 500 the policy does not retry ends the call,
			// but only a 2xx is the call served.
			if err == nil && last >= 200 && last <= 299 {
				out.Seconds = append(out.Seconds, took)
			} else {
				out.GaveUp++
			}
		}()
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
