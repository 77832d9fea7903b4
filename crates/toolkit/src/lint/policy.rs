//! The risks one policy carries by itself, whatever the fleet: delays
//! without jitter, waits so long or so short they harm, no budget, retries
//! spent before an outage ends.

use std::time::Duration;

use stormguard_core::backoff::Backoff;
use stormguard_core::policy::{Criticality, GoDuration, Jitter, RetryPolicy};

use super::warning::Rule;
use super::words::{its_retries, to_millis};

/// A single wait longer than this looks, from outside, like a hung pod (a zombie).
pub const LONG_WAIT: Duration = Duration::from_secs(120);
/// Constant waits shorter than this flood a recovering server (a 1 ms constant retry does).
pub const TINY_WAIT: Duration = Duration::from_millis(100);

/// The keys whose value decides a rule: a service is warned only if it sets one.
pub(super) fn keys_of(rule: Rule) -> &'static [&'static str] {
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
        Rule::CriticalByDefault => &["gate.criticality"],
        Rule::WaitBoundsInverted => &[
            "gate.maxWait.critical",
            "gate.maxWait.default",
            "gate.maxWait.sheddable",
        ],
        Rule::RetryAmplification
        | Rule::CallCycle
        | Rule::UnknownReporterDependency
        | Rule::ProcessFloors => &[],
    }
}

/// The risks of one policy, each with its explanation; `outage` is the
/// shortest its forecast runs, the outage its retries should outlast.
pub(super) fn policy_risks(p: &RetryPolicy, outage: Duration) -> Vec<(Rule, String)> {
    let mut risks = class_risks(p);
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

/// The risks of a send gate's classes: a default that makes every call
/// critical, and wait bounds that let a more critical call wait less.
fn class_risks(p: &RetryPolicy) -> Vec<(Rule, String)> {
    let mut risks = Vec::new();
    if !p.gate.enabled {
        return risks;
    }
    if p.gate.criticality == Criticality::Critical {
        risks.push((
            Rule::CriticalByDefault,
            "every call that names no class is critical: when the service cannot take them all, nothing is \
             shed before them, and the calls shed are ones it exists to answer (and page); keep \
             `gate.criticality: default` and name the critical calls where they are made"
                .to_string(),
        ));
    }
    let waits = Criticality::ALL.map(|class| p.gate.max_wait.of(class));
    let inverted = Criticality::ALL
        .iter()
        .zip(&waits)
        .zip(Criticality::ALL.iter().zip(&waits).skip(1))
        .find(|((_, more), (_, less))| more < less);
    if let Some(((critical, more), (less_critical, less))) = inverted {
        risks.push((
            Rule::WaitBoundsInverted,
            format!(
                "{critical} calls may wait for a turn {} and {less_critical} ones {}: served first, the \
                 {critical} ones are shed first when the line is long; give `gate.maxWait.{critical}` at \
                 least `gate.maxWait.{less_critical}`",
                GoDuration(*more),
                GoDuration(*less)
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
