//! The risks of the call graph a file's `calls:` block states: retries
//! at several layers of a chain multiplying, and cycles.

use std::collections::{BTreeMap, BTreeSet};

use stormguard_core::policy::PolicyDocument;

use super::warning::{Rule, Warning};

/// Retry amplification along the call graph's chains, and cycles. Linear in
/// the graph's size: each service and each call is looked at once.
pub(super) fn call_chain_risks(document: &PolicyDocument) -> Vec<Warning> {
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
