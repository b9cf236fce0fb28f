//! Fuzz the session-log parsers: any input either parses or yields an error, never a
//! panic; whatever parses can be written back and parses again to as many sessions (the
//! check the stable-toolchain test `tests/it/logfmt_no_panic.rs` runs too).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/it/logfmt_round_trip.rs"]
mod logfmt_round_trip;

fuzz_target!(|data: &[u8]| logfmt_round_trip::check(data));
