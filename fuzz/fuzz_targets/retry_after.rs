//! Fuzz target: `stormguard::fuzzing::retry_after` (the body is shared with the corpus replay test).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| stormguard::fuzzing::retry_after(data));
