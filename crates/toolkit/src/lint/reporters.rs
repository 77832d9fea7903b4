//! `reporters` entries that name a service the file names nowhere else.

use std::collections::BTreeSet;

use stormguard_core::policy::{did_you_mean, PolicyDocument};

use super::warning::{Rule, Warning};

/// `reporters` entries for services neither `services` nor `callGraph` names.
pub(super) fn unknown_reporter_dependencies(document: &PolicyDocument) -> Vec<Warning> {
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
