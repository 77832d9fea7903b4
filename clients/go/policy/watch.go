// Package policy fetches and watches a service's dependencies' retry
// policies from the stormguard daemon, as the Rust library does: at
// start-up it waits at most StartupWait for the daemon, then falls back to
// its cache file, then to the built-in defaults, and keeps trying; then it
// long-polls every dependency at once, never two requests less than
// MinPollInterval apart, backing off with full jitter (the shared delay
// law) after a failure and honouring Retry-After. An answer it cannot read
// changes nothing. An https:// daemon is reached with Config.TLS, whose
// files are read again when they change (package connect).
package policy

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math/rand"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stormguard/stormguard/clients/go/backoff"
	"github.com/stormguard/stormguard/clients/go/connect"
)

//go:embed default_policy.json
var defaultPolicy []byte

// Policy is a resolved policy as the daemon serves it (docs/api.md).
type Policy map[string]any

// Source says where the current policies came from.
type Source string

// The sources, from best to worst.
const (
	FromDaemon   Source = "daemon"
	FromCache    Source = "cache"
	FromDefaults Source = "defaults"
)

// Config says how to reach the daemon and how patient to be.
type Config struct {
	Daemon          string
	Services        []string
	Cache           string // file for the last good policies; empty for none
	StartupWait     time.Duration
	WatchWait       time.Duration
	MinPollInterval time.Duration
	RetryInitial    time.Duration
	RetryMax        time.Duration
	// TLS is TLS towards an https:// daemon: the CA to trust, a client
	// certificate. Its files are read again when they change.
	TLS connect.TLS
	// Logger receives TLS files that changed and cannot be used, a cache
	// that cannot be written, and policies a dependency (package
	// dependency) refuses to use; log.Default() when nil.
	Logger *log.Logger
}

// Defaults fills the zero settings: a 5 s start-up wait, 60 s watches at
// most once a second, retries from 100 ms up to 30 s.
func (c Config) Defaults() Config {
	if c.StartupWait == 0 {
		c.StartupWait = 5 * time.Second
	}
	if c.WatchWait == 0 {
		c.WatchWait = 60 * time.Second
	}
	if c.MinPollInterval == 0 {
		c.MinPollInterval = time.Second
	}
	if c.RetryInitial == 0 {
		c.RetryInitial = 100 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 30 * time.Second
	}
	return c
}

// Watch holds the current policy of each dependency.
type Watch struct {
	config  Config
	client  *http.Client
	delay   backoff.Backoff
	random  *rand.Rand
	mu      sync.Mutex
	current map[string]Policy
	etag    string
	source  Source
	cancel  context.CancelFunc
}

// Start checks config, fetches within its StartupWait (else loads its cache,
// else the defaults), and watches until ctx ends or Stop is called. A TLS
// file that cannot be used is a *connect.FileError naming it.
func Start(ctx context.Context, config Config) (*Watch, error) {
	config = config.Defaults()
	if u, err := url.Parse(config.Daemon); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("daemon: %q is not an http(s) URL", config.Daemon)
	}
	if len(config.Services) == 0 {
		return nil, errors.New("services: name at least one dependency")
	}
	services := append([]string(nil), config.Services...)
	sort.Strings(services)
	config.Services = services
	config.Daemon = strings.TrimRight(config.Daemon, "/")
	if config.Logger == nil {
		config.Logger = log.Default()
	}
	var defaults Policy
	if err := json.Unmarshal(defaultPolicy, &defaults); err != nil {
		return nil, fmt.Errorf("the built-in default policy: %w", err)
	}
	transport, err := connect.NewTransport(config.TLS, http.DefaultTransport.(*http.Transport).Clone(), config.Logger)
	if err != nil {
		return nil, err
	}
	w := &Watch{
		config:  config,
		client:  &http.Client{Transport: transport},
		delay:   backoff.Backoff{Initial: config.RetryInitial, Max: config.RetryMax, Multiplier: 2, Jitter: backoff.Full},
		random:  rand.New(rand.NewSource(time.Now().UnixNano())),
		current: map[string]Policy{},
		source:  FromDefaults,
	}
	for _, s := range services {
		w.current[s] = defaults
	}
	ctx, w.cancel = context.WithCancel(ctx)
	w.startup(ctx)
	go w.watch(ctx)
	return w, nil
}

// Policy is the current policy of service (nil if it is not watched).
func (w *Watch) Policy(service string) Policy {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current[service]
}

// Version is the current policy of service (nil if it is not watched) and
// the ETag it came with (see ETag), read together.
func (w *Watch) Version(service string) (Policy, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current[service], w.etag
}

// Logger is where the watch, and what follows it, log what goes wrong
// (Config.Logger).
func (w *Watch) Logger() *log.Logger { return w.config.Logger }

// Default is the built-in default policy, a copy of its own.
func Default() Policy {
	var p Policy
	if err := json.Unmarshal(defaultPolicy, &p); err != nil {
		panic("stormguard: the built-in default policy does not read: " + err.Error())
	}
	return p
}

// Source says where the current policies came from.
func (w *Watch) Source() Source {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.source
}

// ETag is the daemon's ETag of the current policies ("" while they are the
// built-in defaults): it changes whenever a new policy is applied.
func (w *Watch) ETag() string { return w.currentETag() }

// Stop ends the watch and closes its idle connections.
func (w *Watch) Stop() {
	w.cancel()
	w.client.CloseIdleConnections()
}

func (w *Watch) startup(ctx context.Context) {
	deadline := time.Now().Add(w.config.StartupWait)
	var failures uint32
	var previous uint64
	for {
		fetchCtx, cancel := context.WithDeadline(ctx, deadline)
		etag, policies, err := w.fetch(fetchCtx, "", false)
		cancel()
		if err == nil {
			w.apply(etag, policies)
			return
		}
		pause := time.Duration(w.delay.Delay(failures, previous, w.random.Uint64()))
		failures, previous = failures+1, uint64(pause)
		if time.Now().Add(pause).After(deadline) {
			if w.loadCache() {
				w.setSource(FromCache)
			}
			return
		}
		time.Sleep(pause)
	}
}

func (w *Watch) watch(ctx context.Context) {
	var failures uint32
	var previous uint64
	for ctx.Err() == nil {
		started := time.Now()
		var pause time.Duration
		// Until the daemon has answered once, ask without waiting: a cached
		// ETag it still serves would hold a long-poll open.
		etag, policies, err := w.fetch(ctx, w.currentETag(), w.Source() == FromDaemon)
		if err == nil {
			if policies != nil {
				w.apply(etag, policies)
			}
			w.setSource(FromDaemon)
			failures, previous = 0, 0
		} else if ctx.Err() == nil {
			pause = time.Duration(w.delay.Delay(failures, previous, w.random.Uint64()))
			failures, previous = failures+1, uint64(pause)
			var unavailable retryAfter
			if errors.As(err, &unavailable) && time.Duration(unavailable) > pause {
				pause = time.Duration(unavailable)
			}
		}
		if floor := time.Until(started.Add(w.config.MinPollInterval)); floor > pause {
			pause = floor
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// retryAfter is a 503's Retry-After.
type retryAfter time.Duration

func (r retryAfter) Error() string {
	return fmt.Sprintf("unavailable; retry after %s", time.Duration(r))
}

// fetch asks the daemon; policies is nil on a 304.
func (w *Watch) fetch(ctx context.Context, etag string, wait bool) (string, map[string]Policy, error) {
	query := url.Values{"services": {strings.Join(w.config.Services, ",")}}
	if wait {
		query.Set("wait", fmt.Sprintf("%dms", w.config.WatchWait.Milliseconds()))
	}
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, w.config.Daemon+"/v1/policies?"+query.Encode(), nil)
	if err != nil {
		return "", nil, err
	}
	if etag != "" {
		request.Header.Set("If-None-Match", etag)
	}
	answer, err := w.client.Do(request)
	if err != nil {
		return "", nil, err
	}
	defer answer.Body.Close()
	if max, err := strconv.Atoi(answer.Header.Get("Stormguard-Max-Wait-Ms")); err == nil && max > 0 {
		if d := time.Duration(max) * time.Millisecond; d < w.config.WatchWait {
			w.config.WatchWait = d
		}
	}
	switch answer.StatusCode {
	case http.StatusOK:
	case http.StatusNotModified:
		return etag, nil, nil
	case http.StatusServiceUnavailable:
		seconds, _ := strconv.Atoi(answer.Header.Get("Retry-After"))
		return "", nil, retryAfter(time.Duration(seconds) * time.Second)
	default:
		return "", nil, fmt.Errorf("the daemon answered %s", answer.Status)
	}
	var body struct {
		Services map[string]struct {
			Policy Policy `json:"policy"`
		} `json:"services"`
	}
	if err := json.NewDecoder(answer.Body).Decode(&body); err != nil {
		return "", nil, fmt.Errorf("the daemon's answer cannot be read: %w", err)
	}
	policies := map[string]Policy{}
	for _, s := range w.config.Services {
		entry, ok := body.Services[s]
		if !ok || entry.Policy["maxRetries"] == nil {
			return "", nil, fmt.Errorf("the daemon's answer holds no policy for %s", s)
		}
		policies[s] = entry.Policy
	}
	return answer.Header.Get("ETag"), policies, nil
}

func (w *Watch) currentETag() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.etag
}

func (w *Watch) setSource(source Source) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.source = source
}

func (w *Watch) apply(etag string, policies map[string]Policy) {
	w.mu.Lock()
	w.current, w.etag, w.source = policies, etag, FromDaemon
	w.mu.Unlock()
	w.saveCache(etag, policies)
}

type cached struct {
	ETag     string            `json:"etag"`
	Services map[string]Policy `json:"services"`
}

func (w *Watch) saveCache(etag string, policies map[string]Policy) {
	if w.config.Cache == "" {
		return
	}
	text, err := json.Marshal(cached{etag, policies})
	if err != nil {
		return
	}
	if err := writeStaged(filepath.Clean(w.config.Cache), text); err != nil {
		w.config.Logger.Printf("stormguard: cannot write the policy cache: %v", err)
	}
}

// writeStaged writes text to path through a staged file of this write's
// own (the processes of a pre-forking server share one cache path), so a
// reader never sees half of it.
func writeStaged(path string, text []byte) error {
	staged, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.partial")
	if err != nil {
		return err
	}
	_, err = staged.Write(text)
	if closeErr := staged.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Rename(staged.Name(), path)
	}
	if err != nil {
		_ = os.Remove(staged.Name())
	}
	return err
}

func (w *Watch) loadCache() bool {
	if w.config.Cache == "" {
		return false
	}
	text, err := os.ReadFile(w.config.Cache)
	if err != nil {
		return false
	}
	var c cached
	if json.Unmarshal(text, &c) != nil {
		return false
	}
	for _, s := range w.config.Services {
		if c.Services[s] == nil {
			return false
		}
	}
	w.mu.Lock()
	w.current, w.etag = c.Services, c.ETag
	w.mu.Unlock()
	return true
}

// Retries is the number of retries after the first attempt (maxRetries).
func (p Policy) Retries() uint32 {
	n, _ := p["maxRetries"].(float64)
	return uint32(n)
}

// Backoff is the policy's delay law (initialDelayMs, maxDelayMs,
// multiplier, jitter, jitterFactor, delaysMs).
func (p Policy) Backoff() backoff.Backoff {
	millis := func(v any) time.Duration {
		f, _ := v.(float64)
		return time.Duration(f * float64(time.Millisecond))
	}
	b := backoff.Backoff{
		Initial: millis(p["initialDelayMs"]),
		Max:     millis(p["maxDelayMs"]),
		Jitter:  backoff.Jitter(fmt.Sprint(p["jitter"])),
	}
	b.Multiplier, _ = p["multiplier"].(float64)
	b.JitterFactor, _ = p["jitterFactor"].(float64)
	if delays, ok := p["delaysMs"].([]any); ok {
		for _, d := range delays {
			b.Delays = append(b.Delays, millis(d))
		}
	}
	return b
}
