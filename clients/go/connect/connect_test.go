// Tests of the connection to the daemon: the token file followed as it
// rotates, and TLS (the CA trusted, the client certificate presented,
// files followed, unusable ones named and the transport kept).

package connect

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// credential is a file of clients/credentials.
func credential(name string) string {
	return filepath.Join("..", "..", "credentials", name)
}

// logged is a logger writing into a buffer, and the buffer.
func logged() (*log.Logger, *bytes.Buffer) {
	var out bytes.Buffer
	return log.New(&out, "", 0), &out
}

func write(t *testing.T, file, text string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTheTokenFollowsARotation(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	write(t, file, "first-token\n")
	tokens := NewTokenFile(file, nil)
	if got := tokens.Token(); got != "first-token" {
		t.Fatalf("%q", got)
	}
	write(t, file, "  rotated-token ")
	if got := tokens.Token(); got != "rotated-token" {
		t.Fatalf("%q", got)
	}
}

func TestWithoutAUsableTokenNoneIsSentAndEachErrorIsLoggedOnce(t *testing.T) {
	logger, out := logged()
	if token := NewTokenFile("", logger).Token(); token != "" || out.Len() != 0 {
		t.Fatalf("no file: %q, logged %q", token, out)
	}
	file := filepath.Join(t.TempDir(), "token")
	tokens := NewTokenFile(file, logger)
	request, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:9/v1/reports", nil)
	for i := 0; i < 3; i++ {
		tokens.Authorize(request)
	}
	if h := request.Header.Get("Authorization"); h != "" {
		t.Fatalf("a missing file sent %q", h)
	}
	if n := strings.Count(out.String(), "\n"); n != 1 || !strings.Contains(out.String(), file+" (no such file or directory)") {
		t.Fatalf("logged %d times: %q", n, out)
	}
	for _, text := range []string{"  \n", "bad\x01token"} {
		write(t, file, text)
		if token := tokens.Token(); token != "" {
			t.Fatalf("%q gave %q", text, token)
		}
	}
	if n := strings.Count(out.String(), "\n"); n != 3 || !strings.Contains(out.String(), "(the file is empty)") || !strings.Contains(out.String(), "a header cannot carry") {
		t.Fatalf("each new error is logged: %q", out)
	}
	write(t, file, "now-there")
	tokens.Authorize(request)
	if h := request.Header.Get("Authorization"); h != "Bearer now-there" {
		t.Fatalf("%q", h)
	}
	_ = os.Remove(file)
	_ = tokens.Token()
	if n := strings.Count(out.String(), "\n"); n != 4 {
		t.Fatalf("an error after a good read is logged again: %q", out)
	}
}

func transport(files TLS) (*Transport, error) {
	return NewTransport(files, http.DefaultTransport.(*http.Transport).Clone(), nil)
}

func TestEachUnusableTLSFileIsNamedWithWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	write(t, notPEM, "hello")
	absent := filepath.Join(dir, "absent.crt")
	for _, c := range []struct {
		files TLS
		file  string
		want  string
	}{
		{TLS{CAFile: absent}, absent, "cannot be read: no such file or directory"},
		{TLS{CAFile: notPEM}, notPEM, "no CERTIFICATE block"},
		{TLS{CertFile: credential("client.crt")}, credential("client.crt"), "a client certificate needs both CertFile and KeyFile"},
		{TLS{KeyFile: credential("client.key")}, credential("client.key"), "a client certificate needs both CertFile and KeyFile"},
		{TLS{CertFile: credential("client.crt"), KeyFile: notPEM}, credential("client.crt"), "with its key file " + notPEM + ": tls: failed to find any PEM data in key input"},
		{TLS{CertFile: credential("client.crt"), KeyFile: credential("daemon.key")}, credential("client.crt"), "with its key file " + credential("daemon.key") + ": tls: private key does not match public key"},
		{TLS{CertFile: credential("client.crt"), KeyFile: absent}, absent, "cannot be read: no such file or directory"},
	} {
		_, err := transport(c.files)
		var fileErr *FileError
		if !errors.As(err, &fileErr) || fileErr.File != c.file || fileErr.Problem != c.want || err.Error() != c.file+": "+c.want {
			t.Errorf("%+v: %v, want %s: %s", c.files, err, c.file, c.want)
		}
	}
	for _, files := range []TLS{{}, {CAFile: credential("ca.crt"), CertFile: credential("client.crt"), KeyFile: credential("client.key")}} {
		if _, err := transport(files); err != nil {
			t.Errorf("%+v: %v", files, err)
		}
	}
}

// mutualTLS is an HTTPS server with daemon.crt that requires client
// certificates signed by ca.crt, answering 200 "hello <client's CN>".
func mutualTLS(t *testing.T) *httptest.Server {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(credential("daemon.crt"), credential("daemon.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(credential("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(ca)
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("hello " + r.TLS.PeerCertificates[0].Subject.CommonName))
	}))
	server.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	server.StartTLS()
	t.Cleanup(server.Close)
	return server
}

func get(rt http.RoundTripper, url string) (string, error) {
	answer, err := (&http.Client{Transport: rt, Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return "", err
	}
	defer answer.Body.Close()
	var body bytes.Buffer
	_, err = body.ReadFrom(answer.Body)
	return body.String(), err
}

func TestTheCAIsTrustedAndTheClientCertificatePresented(t *testing.T) {
	server := mutualTLS(t)
	port := server.URL[strings.LastIndex(server.URL, ":"):]
	files := TLS{CAFile: credential("ca.crt"), CertFile: credential("client.crt"), KeyFile: credential("client.key")}
	rt, err := transport(files)
	if err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{"https://localhost" + port, "https://127.0.0.1" + port} {
		if body, err := get(rt, url); err != nil || body != "hello checkout" {
			t.Fatalf("%s: %q %v", url, body, err)
		}
	}
	withoutCA, _ := transport(TLS{CertFile: files.CertFile, KeyFile: files.KeyFile})
	if _, err := get(withoutCA, server.URL); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("the system's CAs trusted the test CA: %v", err)
	}
	withoutCertificate, _ := transport(TLS{CAFile: files.CAFile})
	if _, err := get(withoutCertificate, server.URL); err == nil {
		t.Fatal("the server took a client without a certificate")
	}
}

func TestChangedFilesRebuildTheTransportAndUnusableOnesKeepIt(t *testing.T) {
	// An HTTPS server whose certificate (httptest's own) is not signed by ca.crt.
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("hello"))
	}))
	defer server.Close()
	ca := filepath.Join(t.TempDir(), "ca.crt")
	trusted, err := os.ReadFile(credential("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, ca, string(trusted))
	logger, out := logged()
	rt, err := NewTransport(TLS{CAFile: ca}, http.DefaultTransport.(*http.Transport).Clone(), logger)
	if err != nil {
		t.Fatal(err)
	}
	rt.recheck = 0 // look at the files before every request
	if _, err := get(rt, server.URL); err == nil {
		t.Fatal("a certificate ca.crt did not sign was trusted")
	}
	first := rt.transport()

	write(t, ca, "not a certificate")
	if _, err := get(rt, server.URL); err == nil || rt.transport() != first {
		t.Fatalf("unusable files replaced the transport in use: %v", err)
	}
	if !strings.Contains(out.String(), ca+": no CERTIFICATE block") || !strings.Contains(out.String(), "stay in use") {
		t.Fatalf("logged %q", out)
	}

	serverCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw})
	write(t, ca, string(trusted)+string(serverCA))
	if body, err := get(rt, server.URL); err != nil || body != "hello" {
		t.Fatalf("the rotated CA file was not followed: %q %v", body, err)
	}
	if !strings.Contains(out.String(), "changed; new connections use them") {
		t.Fatalf("logged %q", out)
	}

	rt.recheck = time.Hour
	write(t, ca, string(trusted))
	if body, err := get(rt, server.URL); err != nil || body != "hello" {
		t.Fatalf("the files were read again before Recheck: %q %v", body, err)
	}
}
