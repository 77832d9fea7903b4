// Package daemontest starts the real stormguard daemon for the clients'
// tests and reads its metrics.
package daemontest

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Binary is the daemon to test against: $STORMGUARD_BINARY, else the
// workspace's debug build (from a package directory under clients/go).
// Missing, the test fails.
func Binary(t testing.TB) string {
	path := os.Getenv("STORMGUARD_BINARY")
	if path == "" {
		path = "../../../target/debug/stormguard"
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: build it with cargo build (or set STORMGUARD_BINARY)", path)
	}
	return path
}

// FreePort is a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Serve starts the daemon on port with policyFile and extra flags, waits
// until it listens, and stops it with the test. It waits for the port to
// accept a connection, not for the start-up log line, so a daemon serving
// HTTP and one serving HTTPS (--tls-cert) are waited for alike.
func Serve(t testing.TB, port int, policyFile string, extra ...string) *exec.Cmd {
	args := append([]string{"serve", "--policy", policyFile, "--listen", fmt.Sprintf("127.0.0.1:%d", port)}, extra...)
	cmd := exec.Command(Binary(t), args...)
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

// Eventually says whether check holds within 10 s.
func Eventually(check func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if check() {
			return true
		}
	}
	return false
}

// Metric is the value of the sample exactly so named and labelled, in the
// daemon's label order (endpoint, service, status), or -1 if it has none.
func Metric(t testing.TB, daemon, sample string) float64 {
	t.Helper()
	return MetricVia(t, http.DefaultClient, daemon, sample)
}

// MetricVia is Metric read with client (for an HTTPS daemon, one that
// trusts its CA and presents a certificate it takes).
func MetricVia(t testing.TB, client *http.Client, daemon, sample string) float64 {
	t.Helper()
	answer, err := client.Get(daemon + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer answer.Body.Close()
	lines := bufio.NewScanner(answer.Body)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		if line := lines.Text(); strings.HasPrefix(line, sample+" ") {
			v, err := strconv.ParseFloat(strings.TrimPrefix(line, sample+" "), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	return -1
}
