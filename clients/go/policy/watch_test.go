// Tests of the policy watch's settings, its defaults and its cache file; its
// behaviour against the daemon is the conformance scenarios'.

package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/connect"
)

// The watch's behaviour against the daemon (fetch and follow an edit, the
// daemon down, the cache, bad and lost answers, a draining daemon) is
// checked by clients/go/conformance, which runs clients/conformance.json.

func TestBadSettingsAreRefusedNamingThem(t *testing.T) {
	if _, err := Start(context.Background(), Config{Daemon: "ftp://x", Services: []string{"a"}}); err == nil || err.Error() != `daemon: "ftp://x" is not an http(s) URL` {
		t.Fatalf("%v", err)
	}
	if _, err := Start(context.Background(), Config{Daemon: "http://127.0.0.1:1"}); err == nil || err.Error() != "services: name at least one dependency" {
		t.Fatalf("%v", err)
	}
}

func TestATLSFileThatCannotBeUsedIsNamedAtStart(t *testing.T) {
	files := connect.TLS{CAFile: "../../credentials/ca.crt", KeyFile: "../../credentials/client.key"}
	_, err := Start(context.Background(), Config{Daemon: "https://localhost:1", Services: []string{"a"}, TLS: files})
	var fileErr *connect.FileError
	if !errors.As(err, &fileErr) || err.Error() != "../../credentials/client.key: a client certificate needs both CertFile and KeyFile" {
		t.Fatalf("%v", err)
	}
}

// ExampleStart is docs/adopt-a-client.md's: a Go service retrying a call
// to payments as the fleet's policy says.
func ExampleStart() {
	watch, err := Start(context.Background(), Config{Daemon: "http://127.0.0.1:1", Services: []string{"payments"}, StartupWait: time.Millisecond})
	if err != nil {
		panic(err)
	}
	defer watch.Stop()
	call := func() error { return errors.New("refused") } // your call to payments
	p := watch.Policy("payments")
	var previous uint64
	for attempt := uint32(0); call() != nil && attempt < p.Retries(); attempt++ {
		previous = p.Backoff().Delay(attempt, previous, rand.Uint64())
		time.Sleep(time.Duration(previous) / 1000) // a thousandth, to keep the example quick
	}
	fmt.Println(watch.Source(), p.Retries())
	// Output: defaults 3
}

func TestTheDefaultsAreCores(t *testing.T) {
	vectors, err := os.ReadFile("../../vectors/default-policy.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(vectors) != string(defaultPolicy) {
		t.Fatal("default_policy.json is not clients/vectors/default-policy.json: copy it again")
	}
}

// servePolicies is a daemon serving payments at the default policy,
// counting its answers.
func servePolicies(t *testing.T) *httptest.Server {
	t.Helper()
	body := fmt.Sprintf(`{"services":{"payments":{"policy":%s}}}`, defaultPolicy)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(server.Close)
	return server
}

func TestProcessesSharingACacheEachWriteAFileOfTheirOwn(t *testing.T) {
	// A pre-forking server's workers share one cache path: one worker's
	// staged file (here one that cannot be written over) is not another's.
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "cache.json.partial"), 0o700); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache.json")
	watch, err := Start(context.Background(), Config{Daemon: servePolicies(t).URL, Services: []string{"payments"}, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	watch.Stop()
	var written cached
	if text, err := os.ReadFile(cache); err != nil || json.Unmarshal(text, &written) != nil || written.ETag != `"v1"` {
		t.Fatalf("the cache was not written: %v %+v", err, written)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("a staged file was left behind: %v", entries)
	}
}

func TestACacheThatCannotBeWrittenIsLogged(t *testing.T) {
	var logged bytes.Buffer
	cache := filepath.Join(t.TempDir(), "no-such-directory", "cache.json")
	watch, err := Start(context.Background(), Config{Daemon: servePolicies(t).URL, Services: []string{"payments"}, Cache: cache, Logger: log.New(&logged, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	watch.Stop()
	if watch.Source() != FromDaemon || !strings.Contains(logged.String(), "cannot write the policy cache") {
		t.Fatalf("source %v, logged %q", watch.Source(), logged.String())
	}
}
