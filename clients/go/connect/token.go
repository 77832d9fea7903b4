// The service-account token file reports carry: read at each send, its
// errors logged once, and set on a request as a Bearer token.

package connect

import (
	"errors"
	"io/fs"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
)

// TokenFile is the service-account token file reports carry, read at each
// send: the kubelet replaces it well before it expires, and a send is rare
// enough that reading a small file costs nothing that matters. A file that
// cannot be read, or holds no token, is logged once per distinct error
// (not at every send), and the request goes without a token. Its methods
// may be called from any goroutine.
type TokenFile struct {
	path   string
	logger *log.Logger

	mu sync.Mutex
	// lastError is the last read's error ("" for none), so that a missing
	// file is logged once, not at every send.
	lastError string
}

// NewTokenFile reads path at each send ("" for no token), logging to
// logger (log.Default() when nil).
func NewTokenFile(path string, logger *log.Logger) *TokenFile {
	if logger == nil {
		logger = log.Default()
	}
	return &TokenFile{path: path, logger: logger}
}

// Token is the token the file holds now, whitespace around it trimmed; ""
// when there is no file, or it cannot be read, is empty, or holds
// characters a header cannot carry.
func (f *TokenFile) Token() string {
	if f.path == "" {
		return ""
	}
	token, problem := readToken(f.path)
	f.mu.Lock()
	defer f.mu.Unlock()
	if problem != "" && problem != f.lastError {
		f.logger.Printf("stormguard: cannot read the service-account token %s (%s); reports go without it", f.path, problem)
	}
	f.lastError = problem
	return token
}

// Authorize sets "Authorization: Bearer <token>" on r when the file holds
// a token; without one, r goes as it is (a daemon that requires tokens
// answers 401, and the reporter keeps the batch).
func (f *TokenFile) Authorize(r *http.Request) {
	if token := f.Token(); token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
}

// readToken is path's token, or what is wrong with it.
func readToken(path string) (token, problem string) {
	text, err := os.ReadFile(path)
	if err != nil {
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			err = pathErr.Err
		}
		return "", err.Error()
	}
	token = strings.TrimSpace(string(text))
	if token == "" {
		return "", "the file is empty"
	}
	if strings.IndexFunc(token, func(c rune) bool { return c < '!' || c > '~' }) >= 0 {
		return "", "the file holds characters a header cannot carry"
	}
	return token, ""
}
