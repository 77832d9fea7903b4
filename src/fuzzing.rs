//! The bodies of the fuzz targets (`fuzz/`), here so that the fuzzers and
//! the ordinary test that replays their corpus (`tests/fuzz_corpus.rs`) run
//! the very same code. Each must never panic, whatever the bytes.

use std::time::{Duration, SystemTime};

use stormguard_core::policy::{parse_duration, GoDuration};
use stormguard_core::retry::parse_retry_after;

use crate::reports::decode_body;
use stormguard_toolkit::policy::{load_bytes, LoadLimits};

/// Bytes → a policy or its errors; every error names a file, and a loaded
/// policy resolves for any service.
pub fn policy_loader(data: &[u8]) {
    match load_bytes("fuzz.yaml", data, LoadLimits::default()) {
        Ok(document) => {
            let _ = document.resolve("payment-service");
            for name in document.services.keys() {
                let _ = document.resolve(name);
            }
        }
        Err(errors) => assert!(!errors.is_empty() && errors.iter().all(|e| e.file == "fuzz.yaml")),
    }
}

/// Text → a Go duration; what parses formats back to a duration that parses the same.
pub fn duration(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = parse_duration(text) {
        let shown = GoDuration(d).to_string();
        assert_eq!(
            parse_duration(&shown).ok(),
            Some(d),
            "{text:?} → {d:?} → {shown:?}"
        );
    }
}

/// Text → a `Retry-After` wait, never negative and never past the end of time.
pub fn retry_after(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
    let _ = parse_retry_after(text, now);
}

/// Bytes → reports to count and reports refused, or an error naming a path.
pub fn report(data: &[u8]) {
    match decode_body(data) {
        Ok(decoded) => {
            let items = decoded.reports.len() + decoded.rejected.len();
            assert!(items <= stormguard_core::wire::MAX_BATCH);
            assert!(decoded.rejected.iter().all(|r| !r.path.is_empty()));
        }
        Err(error) => assert!(!error.path.is_empty()),
    }
}
