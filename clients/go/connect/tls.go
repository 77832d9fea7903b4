// Package connect says how the policy watch and the reporter reach the
// daemon beyond its URL, as the Rust library's connect module does: the CA
// the daemon's certificate must chain to, the certificate this process
// presents, and the service-account token reports carry. Each is a file
// that Kubernetes rotates in place (cert-manager's Secrets, the kubelet's
// projected token), so each is read again rather than once:
//
//   - the TLS files (TLS) are read again at most every Recheck, when a
//     request is about to go; if their contents changed, the transport is
//     built again from them, and if the new files cannot be used the
//     transport in use stays (the error is logged);
//   - the token file (TokenFile) is read at each send.
package connect

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"log"
	"net/http"
	"os"
	"sync"
	"time"
)

// Recheck is how often the TLS files are read again to see whether they changed.
const Recheck = time.Minute

// TLS is TLS towards an https:// daemon, for the policy watch and the
// reporter alike. Zero, the daemon's certificate is checked against the
// system's CAs and no client certificate is sent. The files are checked
// when the watch or the reporter starts, whatever the daemon's scheme.
type TLS struct {
	// CAFile holds the PEM CA certificates the daemon's certificate must
	// chain to, in place of the system's (e.g. the ca.crt of the daemon's
	// cert-manager Secret); empty for the system's.
	CAFile string
	// CertFile holds the PEM certificate chain this process presents, for
	// a daemon that requires client certificates; needs KeyFile.
	CertFile string
	// KeyFile holds the PEM private key of CertFile (not encrypted).
	KeyFile string
}

// IsZero says whether no file is set.
func (c TLS) IsZero() bool { return c == TLS{} }

// FileError is a TLS file (CA, client certificate or key) that cannot be
// read or used.
type FileError struct {
	// File is the file's path.
	File string
	// Problem says what is wrong with it.
	Problem string
}

// Error is "<file>: <problem>".
func (e *FileError) Error() string { return e.File + ": " + e.Problem }

// contents are what TLS's files held when last read (nil: not set).
type contents struct {
	ca, cert, key []byte
}

func (c contents) equal(other contents) bool {
	return bytes.Equal(c.ca, other.ca) && bytes.Equal(c.cert, other.cert) && bytes.Equal(c.key, other.key)
}

// read is each file's contents, now.
func (c TLS) read() (contents, error) {
	var out contents
	for _, f := range []struct {
		path string
		into *[]byte
	}{{c.CAFile, &out.ca}, {c.CertFile, &out.cert}, {c.KeyFile, &out.key}} {
		if f.path == "" {
			continue
		}
		data, err := os.ReadFile(f.path)
		if err != nil {
			var pathErr *fs.PathError
			if errors.As(err, &pathErr) {
				err = pathErr.Err
			}
			return contents{}, &FileError{File: f.path, Problem: "cannot be read: " + err.Error()}
		}
		*f.into = data
	}
	return out, nil
}

// config is the tls.Config of files that held read; nil when no file is set.
func (c TLS) config(read contents) (*tls.Config, error) {
	if c.IsZero() {
		return nil, nil
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(read.ca) {
			return nil, &FileError{File: c.CAFile, Problem: "no CERTIFICATE block"}
		}
		config.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		file := c.CertFile + c.KeyFile // the one that is set
		return nil, &FileError{File: file, Problem: "a client certificate needs both CertFile and KeyFile"}
	}
	if c.CertFile != "" {
		pair, err := tls.X509KeyPair(read.cert, read.key)
		if err != nil {
			return nil, &FileError{File: c.CertFile, Problem: "with its key file " + c.KeyFile + ": " + err.Error()}
		}
		// Presented whatever CAs the daemon names as acceptable (Certificates
		// would be left out on a mismatch): the daemon decides.
		config.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &pair, nil
		}
	}
	return config, nil
}

// Transport is an http.RoundTripper to the daemon with TLS's settings,
// built again when its files change (looked at every Recheck, when a
// request is about to go); a change that cannot be used keeps the
// transport in use, and is logged. Its methods may be called from any
// goroutine.
type Transport struct {
	files   TLS
	base    *http.Transport
	logger  *log.Logger
	recheck time.Duration

	mu       sync.Mutex
	current  *http.Transport
	contents contents
	checked  time.Time
}

// NewTransport is a transport like base (which it does not change) with
// files' TLS settings, logging to logger (log.Default() when nil). A file
// that cannot be used is a *FileError naming it.
func NewTransport(files TLS, base *http.Transport, logger *log.Logger) (*Transport, error) {
	if logger == nil {
		logger = log.Default()
	}
	read, err := files.read()
	if err != nil {
		return nil, err
	}
	current, err := build(files, read, base)
	if err != nil {
		return nil, err
	}
	return &Transport{
		files:    files,
		base:     base,
		logger:   logger,
		recheck:  Recheck,
		current:  current,
		contents: read,
		checked:  time.Now(),
	}, nil
}

// build is a clone of base with the tls.Config of files that held read.
func build(files TLS, read contents, base *http.Transport) (*http.Transport, error) {
	config, err := files.config(read)
	if err != nil {
		return nil, err
	}
	transport := base.Clone()
	if config != nil {
		transport.TLSClientConfig = config
	}
	return transport, nil
}

// RoundTrip sends r with the transport of the files as they are now.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.transport().RoundTrip(r)
}

// CloseIdleConnections closes the idle connections of the transport in use.
func (t *Transport) CloseIdleConnections() {
	t.transport().CloseIdleConnections()
}

// transport is the transport to send with now.
func (t *Transport) transport() *http.Transport {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.files.IsZero() && time.Since(t.checked) >= t.recheck {
		t.checked = time.Now()
		t.followFiles()
	}
	return t.current
}

// followFiles builds the transport again if the files' contents changed.
// t.mu is held.
func (t *Transport) followFiles() {
	read, err := t.files.read()
	if err == nil && read.equal(t.contents) {
		return
	}
	var rebuilt *http.Transport
	if err == nil {
		rebuilt, err = build(t.files, read, t.base)
	}
	if err != nil {
		t.logger.Printf("stormguard: the daemon's TLS files changed and cannot be used (%v); the ones read before stay in use", err)
		return
	}
	t.logger.Printf("stormguard: the daemon's TLS files changed; new connections use them")
	// Requests under way finish on the old transport; its idle connections go now.
	t.current.CloseIdleConnections()
	t.current, t.contents = rebuilt, read
}
