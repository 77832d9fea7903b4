package policy

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

const policyText = "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: %d\n"

func binary(t *testing.T) string {
	path := os.Getenv("STORMGUARD_BINARY")
	if path == "" {
		path = "../../../target/debug/stormguard"
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: build it with cargo build (or set STORMGUARD_BINARY)", path)
	}
	return path
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// serve starts the daemon on port with policyFile and extra flags, waits
// until it listens, and stops it with the test.
func serve(t *testing.T, port int, policyFile string, extra ...string) *exec.Cmd {
	args := append([]string{"serve", "--policy", policyFile, "--listen", fmt.Sprintf("127.0.0.1:%d", port)}, extra...)
	cmd := exec.Command(binary(t), args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return cmd
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the daemon did not start")
	return nil
}

func eventually(check func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if check() {
			return true
		}
	}
	return false
}

func TestItFetchesAtStartAndFollowsAnEditThroughTheLongPoll(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(policyText, 2)), 0o600)
	port := freePort(t)
	serve(t, port, file)
	w, err := Start(context.Background(), Config{Daemon: fmt.Sprintf("http://127.0.0.1:%d", port), Services: []string{"payments", "search"}, WatchWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if w.Source() != FromDaemon || w.Policy("payments").Retries() != 2 || w.Policy("search").Retries() != 3 {
		t.Fatalf("%s %v %v", w.Source(), w.Policy("payments"), w.Policy("search"))
	}
	os.WriteFile(file, []byte(fmt.Sprintf(policyText, 7)), 0o600)
	if !eventually(func() bool { return w.Policy("payments").Retries() == 7 }) {
		t.Fatal("the edit never arrived")
	}
}

func TestWithTheDaemonDownItStartsOnItsCacheOrTheDefaultsAndCatchesUp(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(policyText, 5)), 0o600)
	port := freePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	bare, _ := Start(context.Background(), Config{Daemon: url, Services: []string{"payments"}, StartupWait: 300 * time.Millisecond})
	if bare.Source() != FromDefaults || bare.Policy("payments").Retries() != 3 {
		t.Fatalf("%s %v", bare.Source(), bare.Policy("payments"))
	}
	bare.Stop()

	cache := filepath.Join(dir, "cache.json")
	first := serve(t, port, file)
	w, _ := Start(context.Background(), Config{Daemon: url, Services: []string{"payments"}, Cache: cache})
	w.Stop()
	_ = first.Process.Kill()
	_ = first.Wait()
	config := Config{Daemon: url, Services: []string{"payments"}, Cache: cache, StartupWait: 300 * time.Millisecond, MinPollInterval: 100 * time.Millisecond, RetryMax: 200 * time.Millisecond}
	restarted, _ := Start(context.Background(), config)
	defer restarted.Stop()
	if restarted.Source() != FromCache || restarted.Policy("payments").Retries() != 5 {
		t.Fatalf("%s %v", restarted.Source(), restarted.Policy("payments"))
	}
	serve(t, port, file)
	if !eventually(func() bool { return restarted.Source() == FromDaemon }) {
		t.Fatal("it never caught up with the daemon")
	}
}

func TestBadSettingsAreRefusedNamingThem(t *testing.T) {
	if _, err := Start(context.Background(), Config{Daemon: "ftp://x", Services: []string{"a"}}); err == nil || err.Error() != `daemon: "ftp://x" is not an http(s) URL` {
		t.Fatalf("%v", err)
	}
	if _, err := Start(context.Background(), Config{Daemon: "http://127.0.0.1:1"}); err == nil || err.Error() != "services: name at least one dependency" {
		t.Fatalf("%v", err)
	}
}

// ExampleStart is the README's: a Go service retrying a call to payments
// as the fleet's policy says.
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

func TestALostResponseIsAskedAgainAndThePoliciesStay(t *testing.T) {
	answer := func(w http.ResponseWriter, retries int) {
		w.Header().Set("ETag", fmt.Sprintf(`"%d"`, retries))
		fmt.Fprintf(w, `{"services": {"payments": {"policy": {"maxRetries": %d}}}}`, retries)
	}
	var mu sync.Mutex
	calls := 0
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch {
		case n == 1:
			answer(w, 9)
		case n <= 3: // lost: the connection closes unanswered
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		default:
			answer(w, 4)
		}
	}))
	defer server.Close()
	w, err := Start(context.Background(), Config{Daemon: server.URL, Services: []string{"payments"}, MinPollInterval: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if w.Policy("payments").Retries() != 9 {
		t.Fatalf("%v", w.Policy("payments"))
	}
	if !eventually(func() bool { return w.Policy("payments").Retries() == 4 }) {
		t.Fatal("never asked again after the lost answers")
	}
}

func TestADrainingDaemonLeavesThePoliciesAsTheyAre(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	os.WriteFile(file, []byte(fmt.Sprintf(policyText, 4)), 0o600)
	port := freePort(t)
	cmd := serve(t, port, file, "--shutdown-delay", "2s")
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	w, _ := Start(context.Background(), Config{Daemon: url, Services: []string{"payments"}, WatchWait: 5 * time.Second, MinPollInterval: 50 * time.Millisecond})
	defer w.Stop()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(time.Second)
	if w.Policy("payments").Retries() != 4 {
		t.Fatalf("%v", w.Policy("payments"))
	}
}
