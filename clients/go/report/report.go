// Package report aggregates what calls to dependencies did and sends it to
// the stormguard daemon, as the Rust library does. Counts are taken into a
// numbered batch, and that batch is sent until the daemon answers it: sent
// again, unchanged and under the same number, after a network error, a
// timeout, a 5xx, a 429 or a 401 (the daemon refused the service-account
// token: nothing was counted, and the next send reads the token file
// again), so the daemon counts it once. New counts aggregate meanwhile and
// go in the next batch. A batch the daemon refuses (another 4xx) is
// dropped and counted in Stats, never resent.
//
// While a tracked dependency's send gate is on, or watching one that
// accepts, the reporter also asks the daemon for this process's share of
// the rate the whole fleet may send it (fleet pacing; see
// Config.DisableFleetPacing).
package report

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/budget"
	"github.com/stormguard/stormguard/clients/go/connect"
	"github.com/stormguard/stormguard/clients/go/gate"
)

// Outcome is how an attempt ended, as reports count it.
type Outcome int

// The outcomes, labelled as the status of http_client_requests_total.
const (
	// Success is an answer that is not a 5xx.
	Success Outcome = iota
	// Error is no answer: a connect error, a timeout, a reset.
	Error
	// ServerError is a 5xx answer.
	ServerError
)

// Stats is what the reporter has sent.
type Stats struct {
	// BatchesSent is the number of batches the daemon counted (or had counted already).
	BatchesSent uint64
	// BatchesDropped is the number of batches the daemon refused whole (4xx): not resent.
	BatchesDropped uint64
	// ReportsRejected is the number of reports within counted batches that the daemon refused.
	ReportsRejected uint64
	// SendFailures is the number of sends that failed and will be tried
	// again (daemon unreachable, 5xx, 429, 401, timeout).
	SendFailures uint64
	// PaceAsks is the number of asks for a paced dependency's share of the
	// fleet's rate (made while its send gate is on, or watching).
	PaceAsks uint64
	// PaceFailures is the number of those that got no grant: the gate
	// paced alone meanwhile.
	PaceFailures uint64
}

// UnavailableError is a send that did not reach the daemon or was not
// taken (5xx, 429, a refused token's 401, timeout): the batch is kept and
// sent again.
type UnavailableError struct {
	// Status is the daemon's HTTP status when it answered (a 5xx, 429 or
	// 401); 0 when no answer came.
	Status int
	// Reason says what happened.
	Reason string
}

func (e *UnavailableError) Error() string {
	return "the stormguard daemon did not take the report: " + e.Reason
}

// RefusedError is a batch the daemon refused (a 4xx other than 429 and
// 401): it was dropped.
type RefusedError struct {
	// Status is the daemon's HTTP status.
	Status int
	// Body is the daemon's explanation.
	Body string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the stormguard daemon refused the report (%d): %s", e.Status, e.Body)
}

// Reporter aggregates attempts and sends them to the daemon; its methods
// may be called from any goroutine.
type Reporter struct {
	config Config
	client *http.Client
	// asker is client with the pace asks' timeout.
	asker  *http.Client
	token  *connect.TokenFile
	logger *log.Logger
	debug  *log.Logger

	mu       sync.Mutex
	services map[string]*serviceCounts
	next     uint64 // the next batch's sequence
	// takenAt is when the counts were last taken: what the next batch covers starts there.
	takenAt time.Time

	// sending holds a token while a send is under way: one at a time. It
	// also guards pending.
	sending chan struct{}
	pending *batch

	statsMu sync.Mutex
	stats   Stats

	// classes says the daemon's last grant said it reads an ask's classes
	// (shed and demand): only then does an ask carry them, as a daemon
	// that predates them refuses an ask with fields it does not know. An
	// ask that gets no grant clears it.
	classes atomic.Bool

	stopLoop context.CancelFunc
	loopDone chan struct{}
	paceDone chan struct{}
	stopOnce sync.Once
}

type tally struct {
	outcomes [3]uint64
	retries  map[uint32]uint64
}

type serviceCounts struct {
	endpoints map[string]*tally
	inFlight  int64
	breaker   *breaker.Breaker
	// breakerBorn is when breaker's clock started.
	breakerBorn time.Time
	budget      *budget.Budget
	gate        *gate.Gate
	// gateBorn is when gate's clock started.
	gateBorn    time.Time
	deniedTaken uint64
	// deniedPending counts a replaced budget's denials not yet taken.
	deniedPending uint64
	// floor is a fleet-scoped budget's floor, while budget is one.
	floor *fleetFloor
}

// batch is a batch taken and not yet answered: its number and its body.
type batch struct {
	sequence uint64
	body     []byte
}

// Start checks config (after Defaults) and starts sending every
// config.Interval; it fails only on settings that cannot work (a TLS file
// that cannot be used is a *connect.FileError naming it).
func Start(config Config) (*Reporter, error) {
	config = config.Defaults()
	if err := config.Check(); err != nil {
		return nil, err
	}
	config.Daemon = strings.TrimRight(config.Daemon, "/")
	logger := config.Logger
	if logger == nil {
		logger = log.Default()
	}
	dial := 2 * time.Second
	if config.Timeout < dial {
		dial = config.Timeout
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.DialContext = (&net.Dialer{Timeout: dial}).DialContext
	transport, err := connect.NewTransport(config.TLS, base, logger)
	if err != nil {
		return nil, err
	}
	var seed [8]byte
	if _, err := crand.Read(seed[:]); err != nil {
		seed = [8]byte{}
		binary.LittleEndian.PutUint64(seed[:], uint64(time.Now().UnixNano()))
	}
	debug := config.DebugLogger
	if debug == nil {
		debug = log.New(io.Discard, "", 0)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Reporter{
		config:   config,
		client:   &http.Client{Transport: transport, Timeout: config.Timeout},
		asker:    &http.Client{Transport: transport, Timeout: askTimeout},
		token:    connect.NewTokenFile(config.TokenFile, logger),
		logger:   logger,
		debug:    debug,
		services: map[string]*serviceCounts{},
		// A random start: a restarted process under the same name does not
		// repeat the numbers of its previous run.
		next:     binary.LittleEndian.Uint64(seed[:]) >> 1,
		takenAt:  time.Now(),
		sending:  make(chan struct{}, 1),
		stopLoop: cancel,
		loopDone: make(chan struct{}),
		paceDone: make(chan struct{}),
	}
	go r.loop(ctx)
	if config.DisableFleetPacing {
		close(r.paceDone)
	} else {
		go r.paceLoop(ctx)
	}
	return r, nil
}

// Record counts one attempt at service's endpoint; retry is 0 for a first
// try. An endpoint past MaxEndpoints, or with a name the daemon would
// refuse, is counted as "other"; a service past MaxServices, or with a
// name the daemon would refuse, is not counted.
func (r *Reporter) Record(service, endpoint string, retry uint32, outcome Outcome) {
	if outcome < Success || outcome > ServerError {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	counts := r.entry(service)
	if counts == nil {
		return
	}
	key := endpoint
	if _, known := counts.endpoints[endpoint]; !known && len(counts.endpoints) >= r.config.MaxEndpoints || CheckEndpoint(endpoint) != nil {
		key = "other"
	}
	t := counts.endpoints[key]
	if t == nil {
		t = &tally{retries: map[uint32]uint64{}}
		counts.endpoints[key] = t
	}
	t.outcomes[outcome]++
	if retry > 0 {
		t.retries[retry]++
	}
}

// InFlight counts a call to service in flight until the returned func is
// called (more calls of it do nothing).
func (r *Reporter) InFlight(service string) func() {
	r.mu.Lock()
	counts := r.entry(service)
	if counts == nil {
		r.mu.Unlock()
		return func() {}
	}
	counts.inFlight++
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			counts.inFlight--
			r.mu.Unlock()
		})
	}
}

// Track makes service's reports carry b's state and the retries bu denied
// since the last report, and, while g is on (or watching: see
// gate.Gate.AsksFleet), paces g at this process's share of the fleet's
// rate; while a fleet-scoped b is open, it asks the daemon for b's trial
// slots (see breaker.Breaker.Heard). b's and g's times are nanoseconds
// since breakerBorn and gateBorn, as their caller keeps them. The latest
// call wins; nil for none.
func (r *Reporter) Track(service string, b *breaker.Breaker, breakerBorn time.Time, bu *budget.Budget, g *gate.Gate, gateBorn time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	counts := r.entry(service)
	if counts == nil {
		return
	}
	counts.breaker, counts.breakerBorn = b, breakerBorn
	counts.gate, counts.gateBorn = g, gateBorn
	if counts.budget != bu {
		// A new policy built a new budget: the old one's last denials still go
		// in the next report, and the new one's count from zero.
		if counts.budget != nil && counts.budget.Refused() > counts.deniedTaken {
			counts.deniedPending += counts.budget.Refused() - counts.deniedTaken
		}
		counts.budget, counts.deniedTaken = bu, 0
		counts.floor = followFloor(counts.floor, bu)
	}
}

// Stats is what has been sent so far.
func (r *Reporter) Stats() Stats {
	r.statsMu.Lock()
	defer r.statsMu.Unlock()
	return r.stats
}

// Flush sends the pending batch, if any, then the counts aggregated now,
// and waits for the answers. It stops at the first batch that could not
// be delivered: an *UnavailableError (the batch stays pending; its Status
// is 401 when the daemon refused the token), a *RefusedError (the batch
// was dropped), or ctx's error.
func (r *Reporter) Flush(ctx context.Context) error {
	return r.send(ctx)
}

// Stop ends the periodic sends (a batch one was sending stays pending, to
// go first) and the pace asks, then flushes. Nothing is sent after it but
// by Flush; a lease granted before runs to its end.
func (r *Reporter) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() {
		r.stopLoop()
		<-r.loopDone
		<-r.paceDone
	})
	return r.send(ctx)
}

// entry is service's counts, made if there is room; nil if it is not
// counted. r.mu is held.
func (r *Reporter) entry(service string) *serviceCounts {
	if counts, ok := r.services[service]; ok {
		return counts
	}
	if CheckService(service) != nil || len(r.services) >= r.config.MaxServices {
		return nil
	}
	counts := &serviceCounts{endpoints: map[string]*tally{}}
	r.services[service] = counts
	return counts
}

func (r *Reporter) loop(ctx context.Context) {
	defer close(r.loopDone)
	interval := r.config.Interval
	early := interval
	if early > r.config.FirstReport {
		early = r.config.FirstReport
	}
	if !sleep(ctx, early) {
		return
	}
	if !r.awaitsPart() && !sleep(ctx, interval-early) {
		return
	}
	for {
		_ = r.send(ctx) // an undelivered batch is kept for the next send
		if !sleep(ctx, interval) {
			return
		}
	}
}

// sleep waits d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

func (r *Reporter) send(ctx context.Context) error {
	select {
	case r.sending <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.sending }()
	// The pending batch first, if any; then the counts aggregated now.
	for fresh := false; !fresh; {
		if r.pending == nil {
			r.pending, fresh = r.take(), true
		}
		if r.pending == nil {
			return nil
		}
		err := r.deliver(ctx, r.pending)
		var refused *RefusedError
		switch {
		case err == nil:
			r.pending = nil
		case errors.As(err, &refused):
			r.pending = nil
			r.count(func(s *Stats) { s.BatchesDropped++ })
			return err
		case ctx.Err() != nil:
			// Cancelled by the caller: the batch stays pending, not a failure of the daemon's.
			return ctx.Err()
		default:
			r.count(func(s *Stats) { s.SendFailures++ })
			r.unreachable()
			return err
		}
	}
	return nil
}

func (r *Reporter) count(change func(*Stats)) {
	r.statsMu.Lock()
	defer r.statsMu.Unlock()
	change(&r.stats)
}

// deliver POSTs b once: nil once the daemon counted it (now or before).
func (r *Reporter) deliver(ctx context.Context, b *batch) error {
	ctx, cancel := context.WithTimeout(ctx, r.config.Timeout)
	defer cancel()
	request, err := http.NewRequestWithContext(ctx, http.MethodPost, r.config.Daemon+"/v1/reports", bytes.NewReader(b.body))
	if err != nil {
		return &UnavailableError{Reason: err.Error()}
	}
	request.Header.Set("Content-Type", "application/json")
	r.token.Authorize(request)
	response, err := r.client.Do(request)
	if err != nil {
		return &UnavailableError{Reason: err.Error()}
	}
	defer response.Body.Close()
	body, readErr := io.ReadAll(io.LimitReader(response.Body, 1<<16))
	status := response.StatusCode
	if status >= 500 || status == http.StatusTooManyRequests {
		return &UnavailableError{Status: status, Reason: "the daemon answered " + response.Status}
	}
	if status == http.StatusUnauthorized {
		// Nothing was counted, and the next send reads the token file again.
		r.logger.Printf("stormguard reporter: the daemon refused the service-account token; the batch is kept: %s", body)
		return &UnavailableError{Status: status, Reason: fmt.Sprintf("the daemon refused the token (%s): %s", response.Status, body)}
	}
	if status < 200 || status > 299 {
		return &RefusedError{Status: status, Body: string(body)}
	}
	if readErr != nil {
		// The answer was cut short: whether the daemon counted the batch is
		// unknown, so it goes again (a batch counted before is not counted twice).
		return &UnavailableError{Reason: readErr.Error()}
	}
	var answer struct {
		Rejected     []json.RawMessage          `json:"rejected"`
		FleetBudgets map[string]json.RawMessage `json:"fleetBudgets"`
	}
	_ = json.Unmarshal(body, &answer)
	r.answered(answer.FleetBudgets)
	r.count(func(s *Stats) {
		s.BatchesSent++
		s.ReportsRejected += uint64(len(answer.Rejected))
	})
	return nil
}

// The wire format (crates/core/src/wire/report.rs).
type wireBatch struct {
	Instance string       `json:"instance"`
	Sequence uint64       `json:"sequence"`
	Reports  []wireReport `json:"reports"`
}

type wireReport struct {
	Service      string         `json:"service"`
	Instance     string         `json:"instance"`
	Caller       string         `json:"caller,omitempty"`
	Endpoints    []wireEndpoint `json:"endpoints"`
	InFlight     uint64         `json:"inFlight"`
	CircuitState string         `json:"circuitState,omitempty"`
	Budget       *wireBudget    `json:"budget,omitempty"`
	// SpanMs is the time the counts cover, for a fleet-scoped budget's
	// dependency: the daemon takes the process's request rate from it.
	SpanMs *uint64 `json:"spanMs,omitempty"`
}

type wireEndpoint struct {
	Endpoint string            `json:"endpoint"`
	Requests wireStatuses      `json:"requests"`
	Retries  map[string]uint64 `json:"retries"`
}

type wireStatuses struct {
	Success     uint64 `json:"success"`
	Error       uint64 `json:"error"`
	ServerError uint64 `json:"server_error"`
}

type wireBudget struct {
	RetriesDenied uint64 `json:"retriesDenied"`
}

// take takes the counts aggregated now into the next numbered batch; nil
// if no dependency has been seen.
func (r *Reporter) take() *batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.services) == 0 {
		return nil
	}
	names := make([]string, 0, len(r.services))
	for name := range r.services {
		names = append(names, name)
	}
	sort.Strings(names)
	out := wireBatch{Instance: r.config.Instance, Sequence: r.next, Reports: make([]wireReport, 0, len(names))}
	r.next++
	now := time.Now()
	spanMs := uint64(now.Sub(r.takenAt).Milliseconds())
	r.takenAt = now
	for _, name := range names {
		counts := r.services[name]
		report := wireReport{
			Service:   name,
			Instance:  r.config.Instance,
			Caller:    r.config.Caller,
			Endpoints: make([]wireEndpoint, 0, len(counts.endpoints)),
		}
		if counts.inFlight > 0 {
			report.InFlight = uint64(counts.inFlight)
		}
		if counts.floor != nil {
			report.SpanMs = &spanMs
		}
		endpoints := make([]string, 0, len(counts.endpoints))
		for e := range counts.endpoints {
			endpoints = append(endpoints, e)
		}
		sort.Strings(endpoints)
		for _, e := range endpoints {
			t := counts.endpoints[e]
			w := wireEndpoint{
				Endpoint: e,
				Requests: wireStatuses{t.outcomes[Success], t.outcomes[Error], t.outcomes[ServerError]},
				Retries:  map[string]uint64{},
			}
			for attempt, n := range t.retries {
				w.Retries[strconv.FormatUint(uint64(attempt), 10)] = n
			}
			report.Endpoints = append(report.Endpoints, w)
		}
		counts.endpoints = map[string]*tally{}
		if counts.breaker != nil {
			report.CircuitState = counts.breaker.State().String()
		}
		if counts.budget != nil || counts.deniedPending > 0 {
			since := counts.deniedPending
			counts.deniedPending = 0
			if counts.budget != nil {
				denied := counts.budget.Refused()
				if denied > counts.deniedTaken {
					since += denied - counts.deniedTaken
				}
				counts.deniedTaken = denied
			}
			report.Budget = &wireBudget{RetriesDenied: since}
		}
		out.Reports = append(out.Reports, report)
	}
	body, _ := json.Marshal(out) // plain data: it always encodes
	return &batch{sequence: out.Sequence, body: body}
}
