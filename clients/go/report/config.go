// The reporter's Config, its defaults and checks, and the names the
// daemon accepts for services, instances and endpoints.

package report

import (
	"fmt"
	"log"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stormguard/stormguard/clients/go/connect"
)

// The daemon's limits on names in reports.
const (
	// MaxInstanceLen is the longest instance name (a Kubernetes pod name).
	MaxInstanceLen = 253
	// MaxEndpointLen is the longest endpoint name.
	MaxEndpointLen = 256
)

// Config says where to report and how often.
type Config struct {
	// Daemon is the daemon's base URL (http:// or https://).
	Daemon string
	// Instance is this process, as reports name it (in Kubernetes, the pod name).
	Instance string
	// Caller is the service this process is, if it wants it named; empty for none.
	Caller string
	// Interval is the time between reports (10 s when zero).
	Interval time.Duration
	// Timeout is how long one send may take before it is given up and
	// sent again later (10 s when zero).
	Timeout time.Duration
	// MaxEndpoints is the number of endpoints kept per dependency between
	// sends (100 when zero); more are counted as "other".
	MaxEndpoints int
	// MaxServices is the number of dependencies kept (100 when zero); more
	// are not counted.
	MaxServices int
	// TokenFile is the service-account token file sent with reports as
	// "Authorization: Bearer <token>", for a daemon that checks who reports
	// (in Kubernetes, a projected token volume with audience stormguard).
	// It is read at each send, so the kubelet's rotations are followed;
	// empty, no token is sent.
	TokenFile string
	// TLS is TLS towards an https:// daemon: the CA to trust, a client
	// certificate. Its files are read again when they change.
	TLS connect.TLS
	// Logger receives what goes wrong that Flush does not return (a token
	// file that cannot be read, TLS files that changed and cannot be used,
	// a refused token); log.Default() when nil.
	Logger *log.Logger
	// DebugLogger receives what goes wrong routinely and changes nothing: a
	// pace ask that got no grant (the gate paces alone meanwhile), which
	// recurs at every ask while the daemon cannot be reached. Nil discards it.
	DebugLogger *log.Logger
	// DisableFleetPacing keeps each dependency's send gate to what this
	// process alone learns. By default, while a tracked dependency's gate is
	// on, the reporter asks the daemon for this process's share of the rate
	// the whole fleet may send it, and the gate paces at that share.
	DisableFleetPacing bool
	// FirstReport is how soon the first report goes while a fleet-scoped
	// retry budget waits for its part of the fleet's floor (1 s when zero;
	// at most Interval): until it comes, the budget has the whole floor.
	FirstReport time.Duration
}

// Defaults fills the zero settings: reports every 10 s, 10 s for a send,
// 100 endpoints per dependency and 100 dependencies, the first report a
// second after start while a fleet-scoped budget waits for its part.
func (c Config) Defaults() Config {
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.MaxEndpoints == 0 {
		c.MaxEndpoints = 100
	}
	if c.MaxServices == 0 {
		c.MaxServices = 100
	}
	if c.FirstReport == 0 {
		c.FirstReport = time.Second
	}
	return c
}

// Check says which setting cannot work, or nil: a daemon that is not an
// http(s) URL, a name the daemon would refuse, a negative setting.
func (c Config) Check() error {
	scheme := strings.HasPrefix(c.Daemon, "http://") || strings.HasPrefix(c.Daemon, "https://")
	if _, host, _ := strings.Cut(c.Daemon, "://"); !scheme || host == "" {
		return fmt.Errorf("daemon %q: not an http:// or https:// URL", c.Daemon)
	}
	if err := CheckInstance(c.Instance); err != nil {
		return fmt.Errorf("instance %q: %v", c.Instance, err)
	}
	if c.Caller != "" {
		if err := CheckService(c.Caller); err != nil {
			return fmt.Errorf("caller %q: %v", c.Caller, err)
		}
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"interval", c.Interval}, {"timeout", c.Timeout}, {"firstReport", c.FirstReport}} {
		if d.value <= 0 {
			return fmt.Errorf("%s must be more than zero", d.name)
		}
	}
	if c.MaxEndpoints < 1 {
		return fmt.Errorf("maxEndpoints must be more than zero")
	}
	if c.MaxServices < 1 {
		return fmt.Errorf("maxServices must be more than zero")
	}
	return nil
}

// CheckService says what is wrong with a service name, as the daemon
// does: a DNS-1123 label (like a Kubernetes Service name).
func CheckService(name string) error {
	var problem string
	switch {
	case name == "":
		problem = "is empty"
	case len(name) > 63:
		problem = "is longer than 63 characters"
	case strings.IndexFunc(name, func(c rune) bool { return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') }) >= 0:
		problem = "may contain only lowercase letters, digits and '-'"
	case name[0] == '-' || name[len(name)-1] == '-':
		problem = "must start and end with a letter or digit"
	default:
		return nil
	}
	return fmt.Errorf("service name %q %s (service names are DNS-1123 labels, like Kubernetes Service names)", name, problem)
}

// CheckInstance says what is wrong with an instance name: it must be 1 to
// MaxInstanceLen characters.
func CheckInstance(name string) error {
	if n := utf8.RuneCountInString(name); n < 1 || n > MaxInstanceLen {
		return fmt.Errorf("must be 1 to %d characters (the pod name), found %d", MaxInstanceLen, n)
	}
	return nil
}

// CheckEndpoint says what is wrong with an endpoint name: it must be 1 to
// MaxEndpointLen characters.
func CheckEndpoint(name string) error {
	if n := utf8.RuneCountInString(name); n < 1 || n > MaxEndpointLen {
		return fmt.Errorf("must be 1 to %d characters, found %d", MaxEndpointLen, n)
	}
	return nil
}
