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
// the start in seconds.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
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

func main() {
	daemon := flag.String("daemon", "", "the stormguard daemon's base URL (required)")
	service := flag.String("service", "", "the dependency's name in the daemon's policies (required)")
	instance := flag.String("instance", "", "this process's name in reports (required)")
	target := flag.String("dependency", "", "the dependency's base URL; callers GET {dependency}/call (required)")
	callers := flag.Int("callers", 50, "the callers, each wanting one call served")
	startAt := flag.Int64("start-at", 0, "when the callers start, in Unix milliseconds (required)")
	alone := flag.Bool("no-fleet-pacing", false, "keep each send gate to what this process learns alone")
	flag.Parse()
	for _, required := range []struct{ name, value string }{{"--daemon", *daemon}, {"--service", *service}, {"--instance", *instance}, {"--dependency", *target}} {
		if required.value == "" {
			log.Fatalf("%s is required", required.name)
		}
	}
	if *startAt == 0 {
		log.Fatal("--start-at is required")
	}
	start := time.UnixMilli(*startAt)

	watch, err := policy.Start(context.Background(), policy.Config{Daemon: *daemon, Services: []string{*service}})
	if err != nil {
		log.Fatal(err)
	}
	defer watch.Stop()
	reporter, err := report.Start(report.Config{Daemon: *daemon, Instance: *instance, Interval: 2 * time.Second, DisableFleetPacing: *alone})
	if err != nil {
		log.Fatal(err)
	}
	calls := dependency.New(watch, *service, reporter)
	// A connection kept for every caller, as the Rust client's pool keeps
	// them, rather than the two a host gets by default.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = *callers
	client := &http.Client{Transport: transport}
	url := *target + "/call"

	var attempts atomic.Uint64
	var mu sync.Mutex
	out := result{Instance: *instance, Seconds: make([]float64, 0, *callers)}
	time.Sleep(time.Until(start))
	var running sync.WaitGroup
	for i := 0; i < *callers; i++ {
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
			took := time.Since(start).Seconds()
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
