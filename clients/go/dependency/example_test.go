// The client page's example of guarding an HTTP client's calls with
// Transport.

package dependency_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/stormguard/stormguard/clients/go/dependency"
	"github.com/stormguard/stormguard/clients/go/policy"
	"github.com/stormguard/stormguard/clients/go/report"
)

// ExampleDependency_Transport guards an *http.Client in one line: a
// dependency that answers 503 once is retried under the policy, and the
// caller sees the 200. (With no daemon to ask, the policy is the built-in
// default, 3 retries from 100 ms, and the reports are not delivered.)
func ExampleDependency_Transport() {
	var calls atomic.Int64
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(w, "charged")
	}))
	defer server.Close()
	paymentsURL := server.URL
	quiet := log.New(io.Discard, "", 0)
	watch, _ := policy.Start(context.Background(), policy.Config{
		Daemon: "http://127.0.0.1:9", Services: []string{"payments"},
		StartupWait: 100 * time.Millisecond, Logger: quiet,
	})
	defer watch.Stop()
	reporter, _ := report.Start(report.Config{Daemon: "http://127.0.0.1:9", Instance: "pod-1", Logger: quiet})
	defer reporter.Stop(context.Background())

	payments := dependency.New(watch, "payments", reporter)
	client := &http.Client{Transport: payments.Transport(nil)} // nil: http.DefaultTransport
	response, err := client.Get(paymentsURL + "/charge")

	if err != nil {
		fmt.Println(err)
		return
	}
	defer response.Body.Close()
	body, _ := io.ReadAll(response.Body)
	fmt.Println(response.StatusCode, string(body), calls.Load(), "attempts")
	// Output: 200 charged 2 attempts
}
