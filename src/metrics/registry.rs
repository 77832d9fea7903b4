//! The daemon's one metrics registry: each component registers its
//! families in it when it is built, and `/metrics` is one encode of it.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus::{Encoder, TextEncoder};
use tokio::time::Instant;

/// A component some of whose families change with time alone: before each
/// scrape it drops the series of what has gone idle and sets the gauges it
/// computes from its state.
pub trait Refreshed: Send + Sync {
    /// Brings the component's families up to `now`.
    fn refresh(&self, now: Instant);
}

/// A component that keeps its families as a table of its own and writes
/// them straight in the text format at each scrape: the clients' report
/// counters, tens of thousands of series that built as protobuf messages
/// would allocate for every label of every series at every scrape.
pub trait Written: Send + Sync {
    /// Appends the component's families, as at `now`, to `out`.
    fn write(&self, now: Instant, out: &mut Vec<u8>);
}

/// Every family the daemon exports, whoever keeps it.
#[derive(Default)]
pub struct Registry {
    families: prometheus::Registry,
    refreshed: Mutex<Vec<Arc<dyn Refreshed>>>,
    written: Mutex<Vec<Arc<dyn Written>>>,
}

impl Registry {
    /// No family yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The registry that Prometheus-crate families register in.
    pub fn families(&self) -> &prometheus::Registry {
        &self.families
    }

    /// Has `component` refreshed before each scrape.
    pub fn refresh(&self, component: Arc<dyn Refreshed>) {
        self.refreshed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(component);
    }

    /// Has `component` write its table at each scrape.
    pub fn write(&self, component: Arc<dyn Written>) {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(component);
    }

    /// The text exposition of every family as at `now`.
    pub fn encode(&self, now: Instant) -> Vec<u8> {
        let refreshed = self
            .refreshed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for component in refreshed {
            component.refresh(now);
        }
        let mut out = Vec::with_capacity(64 * 1024);
        TextEncoder::new()
            .encode(&self.families.gather(), &mut out)
            .expect("encoding to a Vec cannot fail");
        let written = self
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for component in written {
            component.write(now, &mut out);
        }
        out
    }

    /// [`encode`](Self::encode) as a string, for tests.
    #[cfg(test)]
    pub fn text(&self, now: Instant) -> String {
        String::from_utf8(self.encode(now)).expect("the text format is UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::IntCounter;
    use std::sync::atomic::{AtomicU32, Ordering};

    struct Ticking(AtomicU32, IntCounter);

    impl Refreshed for Ticking {
        fn refresh(&self, _now: Instant) {
            self.0.fetch_add(1, Ordering::Relaxed);
            self.1.inc();
        }
    }

    struct Table;

    impl Written for Table {
        fn write(&self, _now: Instant, out: &mut Vec<u8>) {
            out.extend_from_slice(b"# TYPE table_rows gauge\ntable_rows 3\n");
        }
    }

    #[test]
    fn one_encode_refreshes_then_holds_every_family_once() {
        let registry = Registry::new();
        let counter = IntCounter::new("refreshes_total", "Refreshes.").unwrap();
        registry.families().register(Box::new(counter.clone())).unwrap();
        let ticking = Arc::new(Ticking(AtomicU32::new(0), counter));
        registry.refresh(ticking.clone());
        registry.write(Arc::new(Table));
        let text = registry.text(Instant::now());
        assert_eq!(ticking.0.load(Ordering::Relaxed), 1);
        assert!(
            text.contains("refreshes_total 1\n"),
            "refreshed before it is gathered: {text}"
        );
        assert!(text.ends_with("table_rows 3\n"));
        assert_eq!(text.matches("# TYPE").count(), 2);
    }
}
