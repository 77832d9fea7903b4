//! The storm-risk lint: what in a *valid* policy is likely to cause or feed a
//! retry storm, why, and what to change; and, per service, what the policy
//! does to a recovering server under a thundering herd (a simulated forecast).
//!
//! A warning about a key is reported in the layer that set it: once under
//! `(defaults)` for everything services inherit, and under a service only
//! for what its own override changes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;
use stormguard_core::backoff::Backoff;
use stormguard_core::fleet::floor::Claims;
use stormguard_core::policy::{
    did_you_mean, BudgetPolicy, BudgetScope, FleetShape, ForecastScenario, GoDuration, Jitter,
    PolicyDocument, RetryPolicy,
};

use crate::sim::{self, Fleet, Scenario, Summary};

/// A single wait longer than this looks, from outside, like a hung pod (a zombie).
pub const LONG_WAIT: Duration = Duration::from_secs(120);
/// Constant waits shorter than this flood a recovering server (a 1 ms constant retry does).
pub const TINY_WAIT: Duration = Duration::from_millis(100);
/// Forecast runs at most, one per distinct policy and herd; beyond, services are listed without.
pub const MAX_FORECASTS: usize = 100;
/// How `(defaults)` is named in reports.
pub const DEFAULTS: &str = "(defaults)";

/// A kind of risk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// Delays without randomness: clients that failed together retry together.
    NoJitter,
    /// A maximum wait so long the pod looks dead.
    LongMaxDelay,
    /// Tiny constant delays: a retry flood.
    TinyConstantDelay,
    /// Retries that nothing caps as a share of traffic.
    NoBudget,
    /// Retries at several layers of a call chain, multiplying.
    RetryAmplification,
    /// A call cycle: retries can feed back on themselves.
    CallCycle,
    /// Retries spent before an outage ends: load, then failure anyway.
    ShortRetrySpan,
    /// `reporters` names a service the file names nowhere else: likely a
    /// misspelling, which leaves the dependency meant open to any caller.
    UnknownReporterDependency,
    /// A process-scoped budget whose floors, over the processes seen
    /// calling the service, allow more retries than its ratio at their
    /// traffic: the budget never binds.
    ProcessFloors,
}

impl Rule {
    /// The rule's name in reports.
    pub fn code(self) -> &'static str {
        match self {
            Rule::NoJitter => "no-jitter",
            Rule::LongMaxDelay => "long-max-delay",
            Rule::TinyConstantDelay => "tiny-constant-delay",
            Rule::NoBudget => "no-budget",
            Rule::RetryAmplification => "retry-amplification",
            Rule::CallCycle => "call-cycle",
            Rule::ShortRetrySpan => "short-retry-span",
            Rule::UnknownReporterDependency => "unknown-reporter-dependency",
            Rule::ProcessFloors => "process-floors",
        }
    }
}

/// One storm risk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// The service (or `(defaults)`) whose policy carries the risk.
    pub service: String,
    /// What kind of risk.
    pub rule: Rule,
    /// Why it is risky and what to change.
    pub message: String,
}

/// What a herd does to a service under its policy, in one outage of the
/// service's forecast: `clients` calls failing at once from the fleet its
/// forecast states, a service that takes `capacity` requests a second once
/// the outage ends.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forecast {
    /// The service (or `(defaults)`).
    pub service: String,
    /// Calls failing at once.
    pub clients: u32,
    /// Requests a second the service takes once back.
    pub capacity: u32,
    /// How long the outage lasts.
    pub outage_seconds: f64,
    /// Requests the server rejected.
    pub wasted: u64,
    /// 99th percentile time to success, if any client succeeded.
    pub p99_seconds: Option<f64>,
    /// When the last client finished, served or not.
    pub drain_seconds: f64,
    /// Clients served.
    pub succeeded: u32,
    /// Clients that gave up.
    pub gave_up: u32,
    /// Whether the calls were paced through the daemon's replicas: the
    /// policy's send gate is on.
    pub paced: bool,
    /// The fleet the calls came from.
    #[serde(flatten)]
    pub fleet: Fleet,
    /// What the figures mean, in words, and what to change.
    pub explanation: String,
}

/// The lint's findings for a document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lint {
    /// Every warning, by service then rule.
    pub warnings: Vec<Warning>,
    /// A forecast per service (and the defaults), while under [`MAX_FORECASTS`] distinct policies.
    pub forecasts: Vec<Forecast>,
}

/// Lints `document`, forecasting each service on the herd and fleet its
/// `forecast:` block states, as `reshape` changes them (the command line's
/// overrides; the identity for the file as it stands).
pub fn lint(document: &PolicyDocument, reshape: &dyn Fn(ForecastScenario) -> ForecastScenario) -> Lint {
    let mut warnings = Vec::new();
    let shortest = |herd: ForecastScenario| herd.outages.into_iter().min().unwrap_or_default();
    let outage = shortest(document.forecast.defaults());
    for (rule, message) in policy_risks(&document.defaults_policy(), outage) {
        warnings.push(Warning {
            service: DEFAULTS.into(),
            rule,
            message: format!("{message} (every service that does not override it inherits this)"),
        });
    }
    for name in document.services.keys() {
        let resolved = document.resolve(name);
        let own: BTreeSet<&str> = resolved.overridden.iter().map(String::as_str).collect();
        let outage = shortest(document.forecast.resolve(name));
        for (rule, message) in policy_risks(&resolved.policy, outage) {
            if keys_of(rule).iter().any(|key| own.contains(key)) {
                warnings.push(Warning {
                    service: name.clone(),
                    rule,
                    message,
                });
            }
        }
    }
    warnings.extend(call_chain_risks(document));
    warnings.extend(unknown_reporter_dependencies(document));
    warnings.sort_by(|a, b| (&a.service, a.rule).cmp(&(&b.service, b.rule)));
    Lint {
        warnings,
        forecasts: forecasts(document, reshape),
    }
}

/// The keys whose value decides a rule: a service is warned only if it sets one.
fn keys_of(rule: Rule) -> &'static [&'static str] {
    match rule {
        Rule::NoJitter => &["jitter", "jitterFactor", "delays"],
        Rule::LongMaxDelay => &["maxDelay", "delays"],
        Rule::TinyConstantDelay => &["multiplier", "initialDelay", "delays"],
        Rule::NoBudget => &["budget.enabled", "retryThrottling.enabled"],
        Rule::ShortRetrySpan => &[
            "maxRetries",
            "initialDelay",
            "maxDelay",
            "multiplier",
            "jitter",
            "jitterFactor",
            "delays",
            "maxElapsed",
            "gate.enabled",
        ],
        Rule::RetryAmplification
        | Rule::CallCycle
        | Rule::UnknownReporterDependency
        | Rule::ProcessFloors => &[],
    }
}

/// The risks of one policy, each with its explanation; `outage` is the
/// shortest its forecast runs, the outage its retries should outlast.
fn policy_risks(p: &RetryPolicy, outage: Duration) -> Vec<(Rule, String)> {
    let mut risks = Vec::new();
    if p.max_retries == 0 {
        return risks;
    }
    let unjittered = p.jitter == Jitter::None || (p.jitter == Jitter::Proportional && p.jitter_factor == 0.0);
    if unjittered {
        risks.push((
            Rule::NoJitter,
            "delays have no randomness, so clients that failed together retry together, in synchronised \
             spikes (plain exponential backoff in a herd of 1000: p99 52 s); set `jitter: full` or `decorrelated`, or a \
             `jitterFactor` above 0"
                .to_string(),
        ));
    }
    let longest = longest_wait(p);
    if longest > LONG_WAIT {
        risks.push((
            Rule::LongMaxDelay,
            format!(
                "a client may sleep {} between attempts, looking alive while doing nothing (a \
                 zombie pod);  keep `maxDelay` at {} or less and let a failed pod be restarted",
                GoDuration(longest),
                GoDuration(LONG_WAIT)
            ),
        ));
    }
    if let Some(wait) = tiny_constant_wait(p) {
        risks.push((
            Rule::TinyConstantDelay,
            format!(
                "retrying every {} without growing the delay floods a recovering server (a 1 ms constant \
                 retry: millions of requests for 1000 clients); use `multiplier: 2` and an \
                 `initialDelay` of {} or more",
                GoDuration(wait),
                GoDuration(TINY_WAIT)
            ),
        ));
    }
    if !p.budget.enabled && !p.retry_throttling.enabled {
        risks.push((
            Rule::NoBudget,
            format!(
                "nothing caps retries as a share of traffic: in an outage every call is tried {} times, \
                 multiplying the load on the failing service; enable `budget` (Finagle's 20 % of requests) \
                 or `retryThrottling`",
                u64::from(p.max_retries) + 1
            ),
        ));
    }
    let span = retry_span(p);
    if span < outage && !p.gate.enabled {
        risks.push((
            Rule::ShortRetrySpan,
            format!(
                "{} spent within {} at most, so an outage of {} (the shortest its forecast \
                 runs) outlasts them: every call fails anyway, after {} requests where one would do; retry \
                 for longer than the outages you expect (a larger `maxDelay` or `maxRetries`, or `maxElapsed` \
                 past them), or not at all; `stormguard tune` finds settings",
                its_retries(p.max_retries),
                GoDuration(to_millis(span)),
                GoDuration(outage),
                u64::from(p.max_retries) + 1
            ),
        ));
    }
    risks
}

/// The longest a call can keep retrying: the longest waits of its retries
/// added up, or its `maxElapsed` if that ends it sooner.
pub fn retry_span(p: &RetryPolicy) -> Duration {
    let waits = Backoff::from_policy(p).longest_total(p.max_retries);
    p.max_elapsed.map_or(waits, |deadline| waits.min(deadline))
}

/// The longest single wait the policy can ask for.
fn longest_wait(p: &RetryPolicy) -> Duration {
    let schedule = p.delays.iter().copied().max().unwrap_or(p.max_delay);
    let stretched = match p.jitter {
        Jitter::Proportional => schedule.mul_f64(1.0 + p.jitter_factor),
        _ => schedule,
    };
    stretched.min(p.max_delay)
}

/// The wait, if the policy retries at a constant pace below [`TINY_WAIT`].
fn tiny_constant_wait(p: &RetryPolicy) -> Option<Duration> {
    let (constant, wait) = if p.delays.is_empty() {
        (p.multiplier <= 1.0, p.initial_delay.min(p.max_delay))
    } else {
        (true, p.delays.iter().copied().max().unwrap_or_default())
    };
    (constant && wait < TINY_WAIT).then_some(wait)
}

/// The risks only what the daemon sees of the fleet can show: `seen` holds,
/// for each service processes report calling, what they claim (how many,
/// and their first tries a second). Each service's budget is the one
/// `document` resolves for it.
pub fn live_risks(document: &PolicyDocument, seen: &[(String, Claims)]) -> Vec<Warning> {
    let mut warnings: Vec<Warning> = seen
        .iter()
        .filter_map(|(service, claims)| {
            let budget = document.resolve(service).policy.budget;
            Some(Warning {
                service: service.clone(),
                rule: Rule::ProcessFloors,
                message: process_floors(&budget, *claims)?,
            })
        })
        .collect();
    warnings.sort_by(|a, b| a.service.cmp(&b.service));
    warnings
}

/// Why a process-scoped `budget` never binds for the processes `claims`
/// describe, if it does not: their floors allow more than its ratio.
fn process_floors(budget: &BudgetPolicy, claims: Claims) -> Option<String> {
    let floor = f64::from(budget.min_retries_per_second);
    let floors = floor * claims.processes as f64;
    let ratio_allows = budget.retry_ratio * claims.requests_per_second;
    let binds = !budget.enabled || budget.scope == BudgetScope::Fleet || claims.processes < 2;
    if binds || floors <= ratio_allows {
        return None;
    }
    Some(format!(
        "the budget's floor of {} retries a second is each process's: the {} processes seen calling it may \
         retry {} a second in all whatever their traffic, while its ratio allows {} a second at the {} first \
         tries a second they send, so the budget never binds when the service fails; set `budget.scope: fleet` \
         to share one floor among them, or lower minRetriesPerSecond",
        budget.min_retries_per_second,
        claims.processes,
        round(floors),
        round(ratio_allows),
        round(claims.requests_per_second),
    ))
}

/// A figure for a message: whole above 10, one decimal below.
fn round(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// `reporters` entries for services neither `services` nor `callGraph` names.
fn unknown_reporter_dependencies(document: &PolicyDocument) -> Vec<Warning> {
    let known: BTreeSet<&str> = document
        .services
        .keys()
        .chain(document.call_graph.keys())
        .chain(document.call_graph.values().flatten())
        .map(String::as_str)
        .collect();
    let candidates: Vec<&str> = known.iter().copied().collect();
    document
        .reporters
        .dependencies()
        .filter(|dependency| !known.contains(dependency))
        .map(|dependency| {
            let hint = did_you_mean(dependency, &candidates)
                .map_or(String::new(), |near| format!(" (did you mean {near:?}?)"));
            Warning {
                service: dependency.to_string(),
                rule: Rule::UnknownReporterDependency,
                message: format!(
                    "reporters lists {dependency:?}, which neither services nor callGraph names{hint}; \
                     if it is a misspelling, the dependency it meant stays open to any caller"
                ),
            }
        })
        .collect()
}

/// Retry amplification along the call graph's chains, and cycles. Linear in
/// the graph's size: each service and each call is looked at once.
fn call_chain_risks(document: &PolicyDocument) -> Vec<Warning> {
    let graph = &document.call_graph;
    if graph.is_empty() {
        return Vec::new();
    }
    let attempts = |service: &str| u64::from(document.resolve(service).policy.max_retries) + 1;
    let calls = Calls::of(graph);
    let order = calls.topological();
    let mut warnings = Vec::new();
    if order.len() < calls.callees.len() {
        let ordered: BTreeSet<&str> = order.iter().copied().collect();
        let cyclic: Vec<&str> = calls
            .callees
            .keys()
            .copied()
            .filter(|n| !ordered.contains(n))
            .collect();
        warnings.push(Warning {
            service: cyclic[0].to_string(),
            rule: Rule::CallCycle,
            message: format!(
                "these services call each other in a cycle: {}; a retry can come back to the service that \
                 sent it and multiply without bound, and retry amplification is not computed for them",
                cyclic.join(", ")
            ),
        });
    }
    // The worst chain into each service, from its worst caller (none: the gateway).
    let mut worst: BTreeMap<&str, Chain> = BTreeMap::new();
    for &service in &order {
        let n = attempts(service);
        let chain = match calls.callers[service]
            .iter()
            .map(|caller| (caller, &worst[caller]))
            .max_by_key(|(_, c)| (c.product, c.layers))
        {
            None => {
                let n = if document.gateway_retries { n } else { 1 };
                Chain {
                    product: n,
                    layers: u32::from(n > 1),
                    from: None,
                    attempts: n,
                }
            }
            Some((caller, via)) => Chain {
                product: via.product.saturating_mul(n),
                layers: via.layers + u32::from(n > 1),
                from: Some(caller),
                attempts: n,
            },
        };
        if chain.layers >= 2 {
            warnings.push(Warning {
                service: service.to_string(),
                rule: Rule::RetryAmplification,
                message: format!(
                    "one user request can become {} attempts at {service} because {} layers retry: {} \
                     (three layers of three attempts: 27); retry at one layer only: `maxRetries: 0` for the inner \
                     calls, and `gatewayRetries: false` when the services retry",
                    chain.product,
                    chain.layers,
                    hops(&worst, service, &chain).join(", ")
                ),
            });
        }
        worst.insert(service, chain);
    }
    warnings
}

/// The worst chain of calls into a service.
struct Chain<'a> {
    /// Attempts at the service per user request.
    product: u64,
    /// Hops along the chain that retry.
    layers: u32,
    /// The caller the chain comes through; none for a service the gateway calls.
    from: Option<&'a str>,
    /// Attempts per call at this hop.
    attempts: u64,
}

/// The hops of `chain` into `service`, from the gateway: `a → b ×3`.
fn hops(worst: &BTreeMap<&str, Chain>, service: &str, chain: &Chain) -> Vec<String> {
    let mut hops = Vec::new();
    let (mut at, mut link) = (service, chain);
    loop {
        hops.push(format!(
            "{} → {at} ×{}",
            link.from.unwrap_or("gateway"),
            link.attempts
        ));
        let Some(from) = link.from else { break };
        (at, link) = (from, &worst[from]);
    }
    hops.reverse();
    hops
}

/// The call graph both ways: each service's callees and callers, sorted.
struct Calls<'a> {
    callees: BTreeMap<&'a str, Vec<&'a str>>,
    callers: BTreeMap<&'a str, Vec<&'a str>>,
}

impl<'a> Calls<'a> {
    fn of(graph: &'a BTreeMap<String, Vec<String>>) -> Self {
        let mut callees: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut callers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (caller, list) in graph {
            callees.entry(caller).or_default();
            callers.entry(caller).or_default();
            for callee in list {
                callees.entry(caller).or_default().push(callee);
                callees.entry(callee).or_default();
                callers.entry(callee).or_default().push(caller);
            }
        }
        for list in callees.values_mut() {
            list.sort_unstable();
        }
        Self { callees, callers }
    }

    /// The services in an order where every caller comes before its
    /// callees; services in a cycle, or behind one, are left out.
    fn topological(&self) -> Vec<&'a str> {
        let mut waiting: BTreeMap<&str, usize> = self.callers.iter().map(|(s, c)| (*s, c.len())).collect();
        let mut ready: Vec<&str> = waiting
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(s, _)| *s)
            .collect();
        let mut order = Vec::with_capacity(self.callees.len());
        while let Some(service) = ready.pop() {
            order.push(service);
            for callee in &self.callees[service] {
                let left = waiting.get_mut(callee).expect("every service is counted");
                *left -= 1;
                if *left == 0 {
                    ready.push(callee);
                }
            }
        }
        order
    }
}

/// Each service's policy against its forecast's herd, one entry per
/// outage, each distinct run computed once.
fn forecasts(
    document: &PolicyDocument,
    reshape: &dyn Fn(ForecastScenario) -> ForecastScenario,
) -> Vec<Forecast> {
    type Run = (RetryPolicy, u32, u32, FleetShape, Duration);
    let mut done: Vec<(Run, Summary)> = Vec::new();
    let services = std::iter::once((
        DEFAULTS.to_string(),
        document.defaults_policy(),
        document.forecast.defaults(),
    ))
    .chain(document.services.keys().map(|name| {
        (
            name.clone(),
            document.resolve(name).policy,
            document.forecast.resolve(name),
        )
    }))
    .map(|(service, policy, herd)| (service, policy, reshape(herd)));
    let mut out = Vec::new();
    for (service, policy, herd) in services {
        for &outage in &herd.outages {
            let run: Run = (policy.clone(), herd.clients, herd.capacity, herd.fleet, outage);
            let scenario = Scenario::forecast(&herd, outage);
            let summary = match done.iter().find(|(r, _)| *r == run) {
                Some((_, summary)) => summary.clone(),
                None if done.len() < MAX_FORECASTS => {
                    // A validated document's policies are valid: nothing to forecast otherwise.
                    let Ok(summary) = sim::forecast(&service, policy.clone(), &scenario) else {
                        continue;
                    };
                    done.push((run, summary.clone()));
                    summary
                }
                None => continue,
            };
            out.push(Forecast {
                explanation: explain(&service, &policy, &summary),
                service: service.clone(),
                clients: herd.clients,
                capacity: herd.capacity,
                outage_seconds: outage.as_secs_f64(),
                wasted: summary.wasted,
                p99_seconds: summary.p99_seconds,
                drain_seconds: summary.drain_seconds,
                succeeded: summary.succeeded,
                gave_up: summary.gave_up + summary.unfinished,
                paced: policy.gate.enabled,
                fleet: Fleet::from(&scenario),
            });
        }
    }
    out
}

/// What `summary` means for `service` under `policy`, and what to change.
fn explain(service: &str, policy: &RetryPolicy, summary: &Summary) -> String {
    let clients = summary.clients;
    let outage = format!("{}s", summary.outage_seconds);
    let per_call = summary.wasted as f64 / f64::from(clients.max(1));
    let tune = if service == DEFAULTS {
        "`stormguard tune`, with this file as `--policy` and a service that keeps the defaults as `--service`,".to_owned()
    } else {
        format!("`stormguard tune --service {service}`, with this file as `--policy`,")
    };
    let gave_up = summary.gave_up + summary.unfinished;
    if summary.succeeded == 0 && policy.max_retries == 0 {
        return format!(
            "every call fails: it does not retry, and a {outage} outage outlasts its one attempt."
        );
    }
    if summary.succeeded == 0 && !policy.gate.enabled {
        return format!(
            "every call fails: {} spent within {}, before a {outage} outage ends, and only add \
             load ({:.1} refused requests per call). To ride out outages this long, retry for longer than them, \
             or not at all; {tune} finds settings.",
            its_retries(policy.max_retries),
            GoDuration(to_millis(retry_span(policy))),
            per_call
        );
    }
    if gave_up > 0 {
        return format!(
            "serves {} of {clients} calls; {gave_up} give up, {}. {tune} finds settings that serve them.",
            summary.succeeded,
            why_given_up(summary)
        );
    }
    let p99 = summary.p99_seconds.unwrap_or_default();
    let mut text = format!(
        "serves every call, 99 % within {p99:.1}s of failing, with {per_call:.1} refused requests per call."
    );
    if per_call > 2.0 {
        text.push_str(&format!(
            " Most are retries into the outage or past the capacity; {tune} finds a policy that wastes less."
        ));
    }
    text
}

/// `d` to the nearest millisecond, as a person reads a span.
fn to_millis(d: Duration) -> Duration {
    Duration::from_millis((d.as_secs_f64() * 1000.0).round() as u64)
}

/// "its only retry is" or "its N retries are".
fn its_retries(n: u32) -> String {
    match n {
        1 => "its only retry is".to_owned(),
        n => format!("its {n} retries are"),
    }
}

/// Why most of the calls that gave up did.
fn why_given_up(s: &Summary) -> &'static str {
    [
        (s.gave_up_exhausted, "out of retries"),
        (s.gave_up_budget, "refused a retry by the retry budget"),
        (s.gave_up_circuit_open, "turned away by the open circuit breaker"),
        (s.gave_up_deadline, "past maxElapsed"),
        (
            s.gave_up_no_turn,
            "given no turn by the send gate before maxElapsed",
        ),
        (s.unfinished, "still retrying an hour on"),
    ]
    .into_iter()
    .max_by_key(|(count, _)| *count)
    .map_or("", |(_, why)| why)
}

#[cfg(test)]
mod tests;
