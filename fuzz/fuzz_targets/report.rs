//! Fuzz target: `stormguard::fuzzing::report` (the body is shared with the corpus replay test).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| stormguard::fuzzing::report(data));
