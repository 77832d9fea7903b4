//! Fleet pacing, the client's side: while a dependency's send gate is on,
//! ask the daemon about every 100 ms for this process's share of the rate
//! the whole fleet may send it, and pace at that share for the lease. A
//! gate that only watches (under `overloadWhen: most-refused`, after a
//! refusal from a dependency that accepts) asks too, with what it heard:
//! the daemon judges from the whole fleet's answers whether they are a
//! capacity's, and if so the grant says `pace` and the gate turns on.
//! While a fleet-scoped breaker is open, the same ask reports it: the
//! daemon answers with the fleet breaker's word (a trial slot, or close).
//! A daemon that cannot be reached, or refuses, changes nothing: the gate
//! paces by its own rate once the last lease ends, and the breaker decides
//! its trials alone.

use std::sync::Weak;
use std::time::Duration;

use stormguard_core::fleet::{Grant, ASK_EVERY, ASK_TIMEOUT};
use stormguard_core::guard::Guard;
use stormguard_core::wire::{PaceAsk, PaceGrant};
use tokio::time::Instant;

use super::Inner;

/// The bounds on the ask interval a daemon may set.
const FASTEST: Duration = Duration::from_millis(20);
const SLOWEST: Duration = Duration::from_secs(1);

/// Asks for every tracked dependency whose gate is on or watching, or whose
/// fleet-scoped breaker is open, every `askEveryMs`
/// from the start of one round of asks to the next, or as soon as a round
/// that took longer is done (as the simulator's processes do).
pub(super) async fn pace_loop(inner: Weak<Inner>) {
    let mut every = ASK_EVERY;
    let mut round = Instant::now();
    // Whether the daemon said it reads classes; an ask it refuses (an older
    // replica, mid-rollout) clears it.
    let mut classes = false;
    loop {
        tokio::time::sleep_until(round + every).await;
        round = Instant::now();
        let Some(inner) = inner.upgrade() else { return };
        for (service, guard) in paced(&inner) {
            let grant = ask(&inner, &service, &guard, classes).await;
            classes = grant.is_some_and(|grant| grant.classes);
            if let Some(grant) = grant {
                every = Duration::from_millis(grant.ask_every_ms).clamp(FASTEST, SLOWEST);
            }
        }
    }
}

/// The tracked dependencies that ask the daemon now: their gate is on or
/// watching, or their fleet-scoped breaker is open.
fn paced(inner: &Inner) -> Vec<(String, Guard)> {
    let now = Instant::now();
    let services = inner.services.lock().unwrap_or_else(|e| e.into_inner());
    services
        .iter()
        .filter_map(|(service, counts)| {
            let guard = counts.guard.as_ref()?;
            let gate = guard.gate().is_some_and(|gate| gate.asks_fleet_at(now));
            let breaker = guard.breaker().is_some_and(|breaker| breaker.asks_fleet_at(now));
            (gate || breaker).then(|| (service.clone(), guard.clone()))
        })
        .collect()
}

/// One ask for `service`, with its calls' classes if the daemon reads
/// them (`classes`); hands the answer to its guard: the gate's lease, and
/// the fleet breaker's word.
async fn ask(inner: &Inner, service: &str, guard: &Guard, classes: bool) -> Option<PaceGrant> {
    let asked = guard.fleet_ask_at(Instant::now())?;
    let tally = asked.tally.unwrap_or_default();
    let (demand, shed) = match classes {
        true => PaceAsk::classes_of(&tally),
        false => Default::default(),
    };
    let body = PaceAsk {
        service: service.into(),
        instance: inner.config.instance.as_str().into(),
        sent: tally.sent,
        accepted: tally.accepted,
        overloaded: tally.overloaded,
        timed_out: tally.timed_out,
        waiting: tally.waiting,
        shed,
        demand,
        watching: tally.watching,
        gate_off: asked.tally.is_none(),
        breaker: asked.breaker.map(Into::into),
    };
    let request = inner
        .connection
        .http()
        .post(format!("{}/v1/pace", inner.config.daemon))
        .json(&body)
        .timeout(ASK_TIMEOUT);
    let asked = inner.token.authorize(request).send().await;
    let grant = match asked {
        Ok(response) if response.status().is_success() => response.json::<PaceGrant>().await.ok(),
        Ok(response) => {
            tracing::debug!(
                status = response.status().as_u16(),
                service,
                "stormguard: the daemon gave no pace; the gate paces alone"
            );
            None
        }
        Err(error) => {
            tracing::debug!(%error, service, "stormguard: the daemon could not be asked for a pace; the gate paces alone");
            None
        }
    };
    inner.stats().pace_asks += 1;
    let Some(grant) = grant else {
        inner.stats().pace_failures += 1;
        return None;
    };
    let share = Grant {
        rate: grant.rate,
        lease: Duration::from_millis(grant.lease_ms).min(Duration::from_secs(60)),
        pace: grant.pace,
    };
    guard.heard_at(share, grant.breaker.map(Into::into), Instant::now());
    Some(grant)
}
