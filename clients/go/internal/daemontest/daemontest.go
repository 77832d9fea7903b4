// Package daemontest starts the real stormguard daemon for the clients'
// tests and reads its metrics.
package daemontest

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
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

// Address is a loopback address a test holds: a socket bound to it and
// not listening, so that a client meets a refusal there (nobody is there)
// and no other test can take its port while it is held; never a port
// probed free and bound later, which another test could take between.
// Serve hands the socket to the daemon, as systemd's socket activation
// hands one (LISTEN_FDS), and the daemon listens on it; the socket keeps
// listening when that daemon exits, and connections then wait for the
// next daemon served on it.
type Address struct {
	socket *os.File
	// Port is the address's port, on 127.0.0.1.
	Port int
}

// Reserve holds a new loopback address for the test.
func Reserve(t testing.TB) *Address {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	bound, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	address := &Address{socket: os.NewFile(uintptr(fd), "reserved"), Port: bound.(*syscall.SockaddrInet4).Port}
	t.Cleanup(func() { address.socket.Close() })
	return address
}

// URL is the address's http:// URL.
func (a *Address) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", a.Port) }

// Release lets go of the test's hold on the socket. A daemon serving on it
// is then its only holder, so once that daemon is gone nothing listens at
// the address and connections are refused, where a held socket would take
// them and leave them waiting for the next daemon.
func (a *Address) Release() { _ = a.socket.Close() }

// Serve starts the daemon on the socket at holds, with policyFile and extra
// flags, waits until it says it serves (its start-up line, alike for HTTP
// and HTTPS; a socket another daemon listened on before queues connections
// whoever is there, so a connection proves nothing), and stops it with the
// test.
func Serve(t testing.TB, at *Address, policyFile string, extra ...string) *exec.Cmd {
	args := append([]string{"serve", "--policy", policyFile, "--listen", fmt.Sprintf("127.0.0.1:%d", at.Port)}, extra...)
	cmd := exec.Command(Binary(t), args...)
	cmd.ExtraFiles = []*os.File{at.socket}
	cmd.Env = append(os.Environ(), "LISTEN_FDS=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	serving := make(chan bool, 1)
	go func() {
		lines := bufio.NewScanner(stderr)
		said := false
		for lines.Scan() {
			if !said && strings.Contains(lines.Text(), "serving on http") {
				said = true
				serving <- true
			}
		}
		if !said {
			serving <- false
		}
	}()
	select {
	case ok := <-serving:
		if !ok {
			t.Fatal("the daemon exited before it served")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon did not start within 10 s")
	}
	return cmd
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
