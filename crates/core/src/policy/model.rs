//! The retry policy a client applies to calls to one service, and its blocks.
//!
//! Defaults that come from elsewhere say so: the backoff numbers are seed
//! 003's ConfigMap, the retry budget is Finagle's (as in Linkerd and tower),
//! retry throttling is gRPC's, the circuit breaker follows Resilience4j.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::millis;
use super::layer::{layered_leaves, policy_block, Leaf};
use super::named::unknown_name;
use super::tree::{Errors, KeyPath, Node, PolicyError};

policy_block! {
    /// How a client retries calls to one service: backoff, which failures to
    /// retry, and the budget, throttling, breaker and hedging around them.
    pub struct RetryPolicy, layer RetryPolicySpec {
        /// Retries after the first attempt ([`limits::MAX_RETRIES`](super::limits::MAX_RETRIES)); attempts = 1 + maxRetries.
        max_retries: u32 = "maxRetries",
        /// The delay before the first retry, and the base of the exponential schedule.
        #[serde(rename = "initialDelayMs", with = "millis")]
        initial_delay: Duration = "initialDelay",
        /// The cap on any delay, whatever the attempt number or jitter.
        #[serde(rename = "maxDelayMs", with = "millis")]
        max_delay: Duration = "maxDelay",
        /// Growth per attempt of the exponential schedule (1 = constant).
        multiplier: f64 = "multiplier",
        /// How each delay is randomised so that clients fall out of step.
        jitter: Jitter = "jitter",
        /// Spread of proportional jitter: delay × (1 ± jitterFactor), in [0, 1].
        jitter_factor: f64 = "jitterFactor",
        /// An explicit delay schedule; when non-empty it replaces the
        /// exponential one, and retries past its end reuse its last entry.
        #[serde(rename = "delaysMs", with = "millis::list")]
        delays: Vec<Duration> = "delays",
        /// Timeout of each attempt; `None` (`0s` in a file) waits as long as the call does.
        #[serde(rename = "perTryTimeoutMs", with = "millis::option")]
        per_try_timeout: Option<Duration> = "perTryTimeout",
        /// Deadline for all attempts and delays together; `None` (`0s`) for none.
        #[serde(rename = "maxElapsedMs", with = "millis::option")]
        max_elapsed: Option<Duration> = "maxElapsed",
        /// Which failures are retried.
        retry_on: RetryOn = "retryOn",
        /// The retry budget: retries as a share of requests (Finagle, Linkerd).
        budget: BudgetPolicy = "budget",
        /// gRPC-style retry throttling: a token bucket that stops retries when half empty.
        retry_throttling: RetryThrottlingPolicy = "retryThrottling",
        /// The circuit breaker in front of the service.
        circuit_breaker: CircuitBreakerPolicy = "circuitBreaker",
        /// Hedged requests: extra attempts sent before the first one fails.
        hedging: HedgingPolicy = "hedging",
        /// The send gate: paces every attempt while the service is unwell.
        /// Missing from the JSON of a daemon that predates it: off.
        #[serde(default)]
        gate: GatePolicy = "gate",
    }
}

policy_block! {
    /// A retry budget (Finagle's, as in Linkerd and tower): retries may be at most
    /// `retryRatio` of the requests seen over `ttl`, plus `minRetriesPerSecond`.
    pub struct BudgetPolicy, layer BudgetPolicySpec {
        /// Whether the budget applies.
        enabled: bool = "enabled",
        /// Retries allowed per request (0.2 = 20 %; [`limits::budget::RETRY_RATIO`](super::limits::budget::RETRY_RATIO)).
        retry_ratio: f64 = "retryRatio",
        /// Retries always allowed per second, so low traffic can still retry
        /// ([`limits::budget::MIN_RETRIES_PER_SECOND`](super::limits::budget::MIN_RETRIES_PER_SECOND)).
        min_retries_per_second: u32 = "minRetriesPerSecond",
        /// How long a request counts towards the budget ([`limits::budget::TTL`](super::limits::budget::TTL)).
        #[serde(rename = "ttlMs", with = "millis")]
        ttl: Duration = "ttl",
        /// Whose floor `minRetriesPerSecond` is: each process's, or the
        /// whole fleet's, divided among its processes by the daemon.
        /// Missing from the JSON of a daemon that predates it: each process's.
        #[serde(default)]
        scope: BudgetScope = "scope",
    }
}

policy_block! {
    /// gRPC retry throttling: each failure takes a token, each success returns
    /// `tokenRatio`; retries stop while fewer than half of `maxTokens` remain.
    pub struct RetryThrottlingPolicy, layer RetryThrottlingPolicySpec {
        /// Whether throttling applies.
        enabled: bool = "enabled",
        /// Bucket size ([`limits::throttling::MAX_TOKENS`](super::limits::throttling::MAX_TOKENS)).
        max_tokens: u32 = "maxTokens",
        /// Tokens returned per success ([`limits::throttling::TOKEN_RATIO`](super::limits::throttling::TOKEN_RATIO)).
        token_ratio: f64 = "tokenRatio",
    }
}

policy_block! {
    /// A circuit breaker: stops calls to a failing service, then lets a few
    /// trial calls through to see whether it has recovered.
    pub struct CircuitBreakerPolicy, layer CircuitBreakerPolicySpec {
        /// Whether the breaker applies.
        enabled: bool = "enabled",
        /// Opens after this many failures in a row that the failure rate
        /// before them does not explain, and after twice as many whatever
        /// it was ([`breaker::RUN_BY_CHANCE`](crate::breaker::RUN_BY_CHANCE));
        /// 0 turns this trigger off.
        consecutive_failures: u32 = "consecutiveFailures",
        /// Opens when the failure rate over the window reaches this
        /// ([`limits::breaker::FAILURE_RATE_THRESHOLD`](super::limits::breaker::FAILURE_RATE_THRESHOLD)).
        failure_rate_threshold: f64 = "failureRateThreshold",
        /// Opens when the share of slow calls reaches this; 1 = only if all are slow
        /// ([`limits::breaker::SLOW_CALL_RATE_THRESHOLD`](super::limits::breaker::SLOW_CALL_RATE_THRESHOLD)).
        slow_call_rate_threshold: f64 = "slowCallRateThreshold",
        /// A call slower than this counts as slow.
        #[serde(rename = "slowCallDurationMs", with = "millis")]
        slow_call_duration: Duration = "slowCallDuration",
        /// Rates are judged only once the window holds this many calls
        /// ([`limits::breaker::MINIMUM_CALLS`](super::limits::breaker::MINIMUM_CALLS)).
        minimum_calls: u32 = "minimumCalls",
        /// The window rates are computed over: a number of calls or a duration.
        sliding_window: SlidingWindow = "slidingWindow",
        /// How long the breaker stays open before it lets trial calls through.
        #[serde(rename = "openTimeoutMs", with = "millis")]
        open_timeout: Duration = "openTimeout",
        /// Trial calls admitted at once while half-open
        /// ([`limits::breaker::HALF_OPEN_MAX_CALLS`](super::limits::breaker::HALF_OPEN_MAX_CALLS)).
        half_open_max_calls: u32 = "halfOpenMaxCalls",
        /// Successful trial calls needed to close again
        /// ([`limits::breaker::SUCCESS_THRESHOLD`](super::limits::breaker::SUCCESS_THRESHOLD)).
        success_threshold: u32 = "successThreshold",
        /// Who decides when an open breaker tries its dependency again:
        /// each process alone, or the daemon for the whole fleet. Missing
        /// from the JSON of a daemon that predates it: each process.
        #[serde(default)]
        scope: BreakerScope = "scope",
    }
}

policy_block! {
    /// Hedging: when a call is slow, send another attempt without cancelling
    /// the first; the first success wins. Only for idempotent calls.
    pub struct HedgingPolicy, layer HedgingPolicySpec {
        /// Whether hedging applies.
        enabled: bool = "enabled",
        /// Wait before each extra attempt.
        #[serde(rename = "delayMs", with = "millis")]
        delay: Duration = "delay",
        /// Extra attempts at most ([`limits::hedging::MAX_HEDGES`](super::limits::hedging::MAX_HEDGES); gRPC allows 5
        /// attempts in all).
        max_hedges: u32 = "maxHedges",
    }
}

policy_block! {
    /// The send gate: while the service is unwell, every attempt (first tries
    /// and retries) waits for a turn, and turns come at a rate learned from
    /// how the service answers, so that callers return to a recovering
    /// service as fast as it can take them and no faster. Off while the
    /// service is healthy. CUBIC's `beta` and `scale` and the lowest rate
    /// are those of the AWS SDKs' adaptive retry mode.
    pub struct GatePolicy, layer GatePolicySpec {
        /// Whether the gate applies.
        enabled: bool = "enabled",
        /// The lowest rate, attempts per second: the probe rate during a
        /// full outage ([`limits::gate::MIN_RATE`](super::limits::gate::MIN_RATE)).
        min_rate: f64 = "minRate",
        /// The highest rate the gate paces at, attempts per second, not
        /// below minRate ([`limits::gate::MAX_RATE`](super::limits::gate::MAX_RATE)).
        max_rate: f64 = "maxRate",
        /// The share of the rate kept after an overload ([`limits::gate::BETA`](super::limits::gate::BETA)).
        beta: f64 = "beta",
        /// How fast the rate regrows after an overload (CUBIC's C;
        /// [`limits::gate::SCALE`](super::limits::gate::SCALE)).
        scale: f64 = "scale",
        /// Slow start: attempts per second each accepted attempt adds to the
        /// rate ([`limits::gate::RAMP`](super::limits::gate::RAMP)); at 8 the rate doubles about every 90 ms.
        ramp: f64 = "ramp",
        /// The gate turns off after this long without an overload and
        /// without a caller having to wait ([`limits::gate::QUIET`](super::limits::gate::QUIET)).
        #[serde(rename = "quietMs", with = "millis")]
        quiet: Duration = "quiet",
        /// Which of the failures `retryOn` retries say the service is
        /// overloaded or down, written as `retryOn` is: those turn the gate
        /// on and cut its rate. Any other (a 500, say) is an error the
        /// service answered with, which says nothing of its load: the gate
        /// counts it as answered, as the AWS SDKs' adaptive mode feeds only
        /// throttling errors to its rate. An answer with `Retry-After`
        /// always says overload.
        overload_on: RetryOn = "overloadOn",
        /// When the refusals `overloadOn` names say overload: by the
        /// evidence (`evidence`, the default: at once from a dependency
        /// that accepts nothing, and from one that accepts once a cut does
        /// not leave them at the share failure at random explains), at the
        /// first (`any-refusal`, for a service that refuses only when
        /// full), or only once they go beyond what failure at random
        /// explains or nothing is accepted (`most-refused`).
        overload_when: OverloadWhen = "overloadWhen",
        /// The class of a call that names none: which calls the gate
        /// serves first, and sheds first, when it cannot serve them all.
        /// Missing from the JSON of a daemon that predates it: `default`.
        #[serde(default)]
        criticality: Criticality = "criticality",
        /// How long after it began a call of each class may still wait for
        /// a turn. A call whose turn, at the present pace, would come
        /// later fails at once (shed), instead of waiting in a line that
        /// grows for as long as an overload lasts. Missing from the JSON
        /// of a daemon that predates it: the defaults.
        #[serde(default)]
        max_wait: MaxWait = "maxWait",
    }
}

policy_block! {
    /// How long after it began a call of each class may still wait for the
    /// send gate's turn ([`limits::gate::MAX_WAIT`](super::limits::gate::MAX_WAIT)):
    /// `0s` sends it only if a turn is free at once. The call's deadline
    /// (`maxElapsed`, or the caller's) bounds it too.
    pub struct MaxWait, layer MaxWaitSpec {
        /// Calls that must be served if anything is: served first.
        #[serde(rename = "criticalMs", with = "millis")]
        critical: Duration = "critical",
        /// Calls that name no class, unless the policy's `criticality` says otherwise.
        #[serde(rename = "defaultMs", with = "millis")]
        default: Duration = "default",
        /// Calls that may be dropped first: served last, shed first.
        #[serde(rename = "sheddableMs", with = "millis")]
        sheddable: Duration = "sheddable",
    }
}

impl Default for RetryPolicy {
    /// The built-in policy, used for any key neither `defaults` nor an override sets.
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: Jitter::Proportional,
            jitter_factor: 0.5,
            delays: Vec::new(),
            per_try_timeout: None,
            max_elapsed: None,
            retry_on: RetryOn::default(),
            budget: BudgetPolicy::default(),
            retry_throttling: RetryThrottlingPolicy::default(),
            circuit_breaker: CircuitBreakerPolicy::default(),
            hedging: HedgingPolicy::default(),
            gate: GatePolicy::default(),
        }
    }
}

impl Default for BudgetPolicy {
    /// Finagle's defaults: 20 % of requests, 10 retries a second, a 10 s window.
    fn default() -> Self {
        Self {
            enabled: true,
            retry_ratio: 0.2,
            min_retries_per_second: 10,
            ttl: Duration::from_secs(10),
            scope: BudgetScope::Process,
        }
    }
}

impl Default for RetryThrottlingPolicy {
    /// Off; when turned on, the numbers of gRPC's own example.
    fn default() -> Self {
        Self {
            enabled: false,
            max_tokens: 10,
            token_ratio: 0.1,
        }
    }
}

impl Default for CircuitBreakerPolicy {
    /// Off; when turned on, Resilience4j's numbers, with a 30 s open timeout.
    fn default() -> Self {
        Self {
            enabled: false,
            consecutive_failures: 5,
            failure_rate_threshold: 0.5,
            slow_call_rate_threshold: 1.0,
            slow_call_duration: Duration::from_secs(60),
            minimum_calls: 100,
            sliding_window: SlidingWindow::Count { calls: 100 },
            open_timeout: Duration::from_secs(30),
            half_open_max_calls: 10,
            success_threshold: 3,
            scope: BreakerScope::Process,
        }
    }
}

impl Default for GatePolicy {
    /// Off; when turned on, the AWS SDKs' constants (β = 0.7, C = 0.4, at
    /// least 0.5 attempts per second), a slow start that doubles the rate
    /// about every 45 ms, and off again after 5 s of quiet.
    fn default() -> Self {
        Self {
            enabled: false,
            min_rate: 0.5,
            max_rate: 100_000.0,
            beta: 0.7,
            scale: 0.4,
            ramp: 16.0,
            quiet: Duration::from_secs(5),
            overload_on: RetryOn::overload(),
            overload_when: OverloadWhen::Evidence,
            criticality: Criticality::Default,
            max_wait: MaxWait::default(),
        }
    }
}

impl Default for MaxWait {
    /// A second for a call of no class: a line that holds a call longer
    /// holds it past the point most callers still want the answer, and a
    /// call that fails at once can be answered from elsewhere. Critical
    /// calls wait five: served first, they wait only while critical
    /// calls alone outrun the pace, and a process paced below a turn a
    /// second waits that long for its next. Sheddable calls a quarter of
    /// one: they are sent on a turn that is free, or dropped.
    fn default() -> Self {
        Self {
            critical: Duration::from_secs(5),
            default: Duration::from_secs(1),
            sheddable: Duration::from_millis(250),
        }
    }
}

impl MaxWait {
    /// The bound of `class`.
    pub fn of(&self, class: Criticality) -> Duration {
        match class {
            Criticality::Critical => self.critical,
            Criticality::Default => self.default,
            Criticality::Sheddable => self.sheddable,
        }
    }
}

impl Default for HedgingPolicy {
    /// Off; when turned on, one extra attempt after 50 ms.
    fn default() -> Self {
        Self {
            enabled: false,
            delay: Duration::from_millis(50),
            max_hedges: 1,
        }
    }
}

/// How a delay is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Jitter {
    /// No randomness: every client waits the same (herds stay in step).
    None,
    /// delay × (1 ± jitterFactor), symmetric around the delay.
    Proportional,
    /// A uniform draw from [0, delay] (AWS "full jitter").
    Full,
    /// delay / 2 + a uniform draw from [0, delay / 2] (AWS "equal jitter").
    Equal,
    /// min(maxDelay, a uniform draw from [initialDelay, 3 × previous delay]) (AWS).
    Decorrelated,
}

/// Whose floor a retry budget's `minRetriesPerSecond` is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BudgetScope {
    /// Each process's: a fleet of N processes may retry N × the floor a
    /// second, whatever its traffic (Finagle's, Linkerd's and Envoy's budgets).
    #[default]
    Process,
    /// The fleet's: the daemon divides the floor among the processes that
    /// call the service, in proportion to their requests, so the parts add
    /// up to the floor. `retryRatio` stays a share of each process's own
    /// requests, which adds up to the same share of the fleet's.
    Fleet,
}

/// Who decides when an open circuit breaker tries its dependency again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BreakerScope {
    /// Each process: its breaker goes half-open `openTimeout` after it
    /// opened and sends up to `halfOpenMaxCalls` trials. A fleet whose
    /// breakers opened together sends that many trials from every process
    /// at once (Resilience4j, Polly, Hystrix, Envoy's outlier detection).
    #[default]
    Process,
    /// The fleet: a process's open breaker asks the daemon for a trial
    /// slot instead, and the daemon lets `halfOpenMaxCalls` trials through
    /// for the whole fleet. When `successThreshold` of them succeed every
    /// breaker closes, and the fleet returns at the daemon's pace. A
    /// process that cannot reach the daemon for a second decides alone.
    Fleet,
}

/// How much a call matters, when the send gate cannot serve them all:
/// critical calls are served first and shed last, sheddable ones the
/// other way round (the classes of gRPC's and Google's load shedding,
/// three of their four). Within a class, first come, first served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Criticality {
    /// Served first, shed last: what the service exists to answer.
    Critical,
    /// A call that names no class.
    #[default]
    Default,
    /// Served last, shed first: prefetches, batch work, retries of
    /// background jobs.
    Sheddable,
}

impl Criticality {
    /// Every class, most critical first: the order the gate serves them in.
    pub const ALL: [Criticality; 3] = [
        Criticality::Critical,
        Criticality::Default,
        Criticality::Sheddable,
    ];

    /// The class's place in [`ALL`](Self::ALL): 0 is served first.
    pub fn rank(self) -> usize {
        self as usize
    }
}

/// When the send gate takes the refusals it hears for overload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OverloadWhen {
    /// By the evidence, the default: a dependency that has accepted
    /// nothing lately is down at once (five refusals in a row, or three
    /// over a second), and its recovery is paced as under `any-refusal`,
    /// except that a process's gate tries its cuts: refusals that keep
    /// their share over two cuts were a chance run from a dependency
    /// failing at random, not an outage, and from then on cut only while
    /// most are refused. Refusals from a dependency that has been accepting
    /// are weighed as under `most-refused`: the gate watches, and the
    /// daemon, hearing the whole fleet, paces it once they go beyond what
    /// failure at random explains. A herd is paced after an outage, and a
    /// dependency that fails a share at random keeps its throughput.
    #[default]
    Evidence,
    /// At the first: a refusal turns the gate on, and every refusal cuts
    /// its rate (never below what was accepted over the last second). For
    /// a service that refuses only when it is overloaded: one that fails a
    /// share at random is paced down by that share, every second.
    AnyRefusal,
    /// A process's gate turns on only once refusals outnumber
    /// acceptances by more than chance would (Google's client-side
    /// throttling, K = 2), or three have come with nothing accepted for
    /// three seconds (the service is down); until then it watches, and
    /// tells the daemon what it hears. The daemon, hearing the whole fleet,
    /// paces it once the fleet's refusals go beyond what failure at random
    /// explains, and frees it again when they keep their share after its
    /// cuts. A service that fails a share of requests at random keeps its
    /// throughput; a brownout is paced only once most of what is sent is
    /// refused.
    MostRefused,
}

impl OverloadWhen {
    /// Whether refusals from a dependency that has been accepting are
    /// weighed before they say overload: under every setting but
    /// `any-refusal`.
    pub fn weighs_refusals(self) -> bool {
        self != OverloadWhen::AnyRefusal
    }
}

named_values!(Jitter, "jitter", {
    None => "none",
    Proportional => "proportional",
    Full => "full",
    Equal => "equal",
    Decorrelated => "decorrelated",
});

named_values!(BudgetScope, "scope", {
    Process => "process",
    Fleet => "fleet",
});

named_values!(BreakerScope, "scope", {
    Process => "process",
    Fleet => "fleet",
});

named_values!(Criticality, "class", {
    Critical => "critical",
    Default => "default",
    Sheddable => "sheddable",
});

named_values!(OverloadWhen, "overloadWhen value", {
    Evidence => "evidence",
    AnyRefusal => "any-refusal",
    MostRefused => "most-refused",
});

/// A kind of failure that a policy may retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RetryCondition {
    /// The connection could not be made (refused, DNS, unreachable).
    ConnectFailure,
    /// No response within the per-try timeout.
    Timeout,
    /// The connection dropped before a response arrived.
    Reset,
    /// Any 5xx response except 501 Not Implemented, which no retry can fix.
    ServerError,
    /// 502, 503 and 504: the failures a gateway reports for a dependency.
    GatewayError,
    /// One HTTP status code, 400 to 599 (429, say).
    Status(u16),
}

impl RetryCondition {
    /// The named conditions as written in a policy file.
    pub const NAMES: &'static [&'static str] =
        &["connect-failure", "timeout", "reset", "5xx", "gateway-error"];

    const NAMED: [RetryCondition; 5] = [
        RetryCondition::ConnectFailure,
        RetryCondition::Timeout,
        RetryCondition::Reset,
        RetryCondition::ServerError,
        RetryCondition::GatewayError,
    ];

    /// Whether a response with this HTTP status is covered by the condition.
    pub fn covers_status(self, status: u16) -> bool {
        match self {
            RetryCondition::ServerError => (500..600).contains(&status) && status != 501,
            RetryCondition::GatewayError => matches!(status, 502..=504),
            RetryCondition::Status(code) => code == status,
            _ => false,
        }
    }

    fn name(self) -> Option<&'static str> {
        let index = Self::NAMED.iter().position(|c| *c == self)?;
        Some(Self::NAMES[index])
    }
}

impl fmt::Display for RetryCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self, self.name()) {
            (_, Some(name)) => f.write_str(name),
            (RetryCondition::Status(code), None) => write!(f, "{code}"),
            _ => unreachable!("every condition but Status has a name"),
        }
    }
}

impl Serialize for RetryCondition {
    /// A name as a string, a status code as a number.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (self, self.name()) {
            (_, Some(name)) => s.serialize_str(name),
            (RetryCondition::Status(code), None) => s.serialize_u16(*code),
            _ => unreachable!("every condition but Status has a name"),
        }
    }
}

impl<'de> Deserialize<'de> for RetryCondition {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Code(u16),
            Name(String),
        }
        match Raw::deserialize(d)? {
            Raw::Code(code) => Ok(RetryCondition::Status(code)),
            Raw::Name(name) => RetryCondition::NAMED
                .into_iter()
                .find(|c| c.name() == Some(name.as_str()))
                .ok_or_else(|| serde::de::Error::custom(format!("unknown retry condition {name:?}"))),
        }
    }
}

/// The failures a policy retries, in file order without repeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RetryOn(pub Vec<RetryCondition>);

impl Default for RetryOn {
    /// Connection failures, timeouts, resets, 5xx but 501, and 429 Too Many Requests.
    fn default() -> Self {
        Self(vec![
            RetryCondition::ConnectFailure,
            RetryCondition::Timeout,
            RetryCondition::Reset,
            RetryCondition::ServerError,
            RetryCondition::Status(429),
        ])
    }
}

impl RetryOn {
    /// The failures that say a service is overloaded or down, by the
    /// conventions of HTTP and gRPC: a refused connection, a timeout, 429
    /// Too Many Requests and 503 Service Unavailable (gRPC's
    /// RESOURCE_EXHAUSTED and UNAVAILABLE, as gateways map them). A 500 is
    /// an error, not a sign of load.
    pub fn overload() -> Self {
        Self(vec![
            RetryCondition::ConnectFailure,
            RetryCondition::Timeout,
            RetryCondition::Status(429),
            RetryCondition::Status(503),
        ])
    }

    /// Whether any listed condition covers a response with this HTTP status.
    pub fn covers_status(&self, status: u16) -> bool {
        self.0.iter().any(|c| c.covers_status(status))
    }

    /// Whether `condition` is listed.
    pub fn contains(&self, condition: RetryCondition) -> bool {
        self.0.contains(&condition)
    }
}

impl Leaf for RetryOn {
    fn from_node(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<Self> {
        let Node::Seq(items) = node else {
            errors.push(PolicyError::value(
                path,
                format!(
                    "expected a list of conditions (e.g. [5xx, 429]), found {}",
                    node.kind()
                ),
            ));
            return None;
        };
        let before = errors.len();
        let mut conditions = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = path.index(i);
            let Some(condition) = retry_condition(item, &at, errors) else {
                continue;
            };
            if conditions.contains(&condition) {
                errors.push(PolicyError::value(&at, format!("{condition} is listed twice")));
            }
            conditions.push(condition);
        }
        (errors.len() == before).then_some(RetryOn(conditions))
    }

    fn write(&self) -> String {
        let conditions: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        format!("[{}]", conditions.join(", "))
    }
}

fn retry_condition(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<RetryCondition> {
    let problem = match node {
        Node::Int(code @ 400..=599) => return Some(RetryCondition::Status(*code as u16)),
        Node::Int(code) => format!("status {code} is not an error status; retry only on 400 to 599"),
        Node::Str(name) => match RetryCondition::NAMED.into_iter().find(|c| c.name() == Some(name)) {
            Some(condition) => return Some(condition),
            None => unknown_name("retry condition", name, RetryCondition::NAMES),
        },
        other => format!(
            "expected a condition ({}) or a status code, found {}",
            RetryCondition::NAMES.join(", "),
            other.kind()
        ),
    };
    errors.push(PolicyError::value(path, problem));
    None
}

/// The window a circuit breaker computes failure rates over (Resilience4j).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum SlidingWindow {
    /// The last `calls` calls (written as a number: `slidingWindow: 100`).
    Count {
        /// Calls in the window ([`limits::breaker::WINDOW_CALLS`](super::limits::breaker::WINDOW_CALLS)).
        calls: u32,
    },
    /// The calls of the last `duration` (written as a duration: `slidingWindow: 60s`).
    Time {
        /// Length of the window ([`limits::breaker::WINDOW_DURATION`](super::limits::breaker::WINDOW_DURATION)).
        #[serde(rename = "durationMs", with = "millis")]
        duration: Duration,
    },
}

impl Leaf for SlidingWindow {
    fn from_node(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<Self> {
        match node {
            Node::Int(_) => u32::from_node(node, path, errors).map(|calls| SlidingWindow::Count { calls }),
            Node::Str(_) => {
                Duration::from_node(node, path, errors).map(|duration| SlidingWindow::Time { duration })
            }
            other => {
                errors.push(PolicyError::value(
                    path,
                    format!(
                        "expected a number of calls (e.g. 100) or a duration (e.g. 60s), found {}",
                        other.kind()
                    ),
                ));
                None
            }
        }
    }

    fn write(&self) -> String {
        match self {
            SlidingWindow::Count { calls } => calls.to_string(),
            SlidingWindow::Time { duration } => duration.write(),
        }
    }
}

layered_leaves!(
    Criticality,
    Jitter,
    BudgetScope,
    BreakerScope,
    OverloadWhen,
    RetryOn,
    SlidingWindow
);
