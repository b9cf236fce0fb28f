//! Fuzz spec parsing: arbitrary TOML text never panics the spec reader.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vodkit_workload::spec;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = spec::parse(&text, "fuzz.toml", &[], 1.0);
});
