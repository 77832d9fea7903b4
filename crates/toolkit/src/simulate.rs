//! `stormguard simulate`: run strategies (or a service's policy from a
//! policy file) through the herd simulator and print what happened.

use std::path::{Path, PathBuf};
use std::time::Duration;

use stormguard_core::policy::{ForecastScenario, PolicyDocument, RetryPolicy};

use crate::policy::load_file;
use crate::policy::LoadLimits;
use crate::sim::{self, Modifiers, Named, Scenario, Strategy, Summary};

/// What to simulate and how to show it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The world the strategies are tried in.
    pub scenario: Scenario,
    /// Named strategies; none means all of them with `compare`, else full
    /// jitter unless a policy is given.
    pub strategies: Vec<Named>,
    /// A service's policy from a policy file, simulated beside (or instead of) the named ones.
    pub policy: Option<(PathBuf, String)>,
    /// The library's modifiers, applied to every strategy.
    pub modifiers: Modifiers,
    /// One table for all runs instead of a histogram each.
    pub compare: bool,
    /// JSON instead of text.
    pub json: bool,
    /// Where to draw the histograms as SVG.
    pub svg: Option<PathBuf>,
}

/// Why a simulation or a service's policy cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// The policy file is invalid or unreadable: every error in it.
    #[error("{}\nthe policy file is invalid", .0.iter().map(|e| format!("error: {e}")).collect::<Vec<_>>().join("\n"))]
    Policy(Vec<crate::policy::Diagnostic>),
    /// `--service` is not a service name.
    #[error("--service: {0}")]
    Service(#[from] stormguard_core::policy::InvalidServiceName),
    /// The service's resolved policy cannot run.
    #[error("--service {service}: {source}")]
    Invalid {
        /// The service.
        service: String,
        /// What is wrong with its policy.
        source: stormguard_core::policy::InvalidPolicy,
    },
    /// The histograms cannot be written.
    #[error("cannot write {}: {source}", path.display())]
    Svg {
        /// The file.
        path: PathBuf,
        /// What writing said.
        source: std::io::Error,
    },
}

/// Runs `request`; the text to print, or an error naming what is wrong.
pub fn simulate(request: &Request) -> Result<String, SimulateError> {
    let strategies = strategies(request)?;
    let summaries: Vec<Summary> = strategies
        .iter()
        .map(|strategy| Summary::of(&sim::run(&request.scenario, strategy)))
        .collect();
    if let Some(path) = &request.svg {
        std::fs::write(path, sim::small_multiples(&summaries)).map_err(|source| SimulateError::Svg {
            path: path.clone(),
            source,
        })?;
    }
    Ok(as_text(request, &summaries))
}

fn strategies(request: &Request) -> Result<Vec<Strategy>, SimulateError> {
    let mut named = request.strategies.clone();
    if named.is_empty() {
        if request.compare {
            named = Named::ALL.to_vec();
        } else if request.policy.is_none() {
            named = vec![Named::FullJitter];
        }
    }
    let mut strategies = Vec::new();
    for modifiers in variants(request) {
        strategies.extend(named.iter().map(|n| Strategy::named(*n, modifiers)));
        if let Some((path, service)) = &request.policy {
            strategies.push(service_strategy(path, service, modifiers)?);
        }
    }
    Ok(strategies)
}

/// The modifiers to run each strategy with: as given; or, when comparing
/// with `--gate` or `--fleet`, each strategy without them and with each,
/// side by side.
fn variants(request: &Request) -> Vec<Modifiers> {
    let given = request.modifiers;
    if !request.compare || !(given.gate || given.fleet) {
        return vec![given];
    }
    let plain = Modifiers {
        gate: false,
        fleet: false,
        ..given
    };
    let mut out = vec![plain];
    if given.gate {
        out.push(Modifiers { gate: true, ..plain });
    }
    if given.fleet {
        out.push(Modifiers { fleet: true, ..plain });
    }
    out
}

/// The strategy of `service` in the file at `path`, as its fleet runs it.
fn service_strategy(path: &Path, service: &str, modifiers: Modifiers) -> Result<Strategy, SimulateError> {
    let (label, policy) = resolve(&load(path)?.0, service)?;
    sim::deployed(&label, policy, modifiers).map_err(|source| SimulateError::Invalid {
        service: service.to_string(),
        source,
    })
}

/// A service's policy from a policy file, with its forecast.
#[derive(Debug, Clone)]
pub struct ServicePolicy {
    /// The resolved policy.
    pub policy: RetryPolicy,
    /// The herd and the fleet the file's `forecast:` block states for the
    /// service, the defaults filling in what it does not.
    pub herd: ForecastScenario,
    /// The outages the block states for the service, if it states any.
    pub outages: Option<Vec<Duration>>,
}

/// The resolved policy of `service` in the file at `path`, with its
/// forecast; or an error naming what is wrong (every error of an invalid file).
pub fn resolved_policy(path: &Path, service: &str) -> Result<ServicePolicy, SimulateError> {
    let (document, _) = load(path)?;
    let (_, policy) = resolve(&document, service)?;
    Ok(ServicePolicy {
        policy,
        herd: document.forecast.resolve(service),
        outages: document.forecast.stated_outages(service),
    })
}

fn load(path: &Path) -> Result<(PolicyDocument, crate::policy::ContentHash), SimulateError> {
    load_file(path, LoadLimits::default()).map_err(SimulateError::Policy)
}

/// The resolved policy of `service`, with a label saying whether it is the service's own.
fn resolve(document: &PolicyDocument, service: &str) -> Result<(String, RetryPolicy), SimulateError> {
    stormguard_core::policy::check_service_name(service)?;
    let resolved = document.resolve(service);
    let label = match resolved.source {
        stormguard_core::policy::PolicySource::Override => service.to_string(),
        stormguard_core::policy::PolicySource::Defaults => format!("{service} (defaults)"),
    };
    Ok((label, resolved.policy))
}

fn as_text(request: &Request, summaries: &[Summary]) -> String {
    if request.json {
        // One object for one run; an array for several, or with --compare.
        let json = match summaries {
            [one] if !request.compare => serde_json::to_string_pretty(one),
            all => serde_json::to_string_pretty(all),
        };
        return json.expect("summaries are plain data") + "\n";
    }
    let s = &request.scenario;
    // One run states the fleet as it ran; a comparison, the world they share.
    let shape = match summaries {
        [one] => one.fleet.shape.clone(),
        _ => s.shape(),
    };
    let mut out = format!("scenario: {shape}; {}; seed {}\n\n", s.settings(), s.seed);
    if request.compare {
        out.push_str(&sim::table(summaries));
    } else {
        for summary in summaries {
            out.push_str(&sim::histogram(summary));
            out.push('\n');
            out.push_str(&sim::summary(summary));
        }
    }
    out
}
