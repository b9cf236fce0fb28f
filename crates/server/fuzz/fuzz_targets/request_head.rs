//! Fuzz the request-head parser and everything that interprets its fields: range
//! parsing and resolution, target decoding, and precondition evaluation. None may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vodkit_server::range::{parse_range, resolve};
use vodkit_server::request::{parse_head, HeadLimits, Parsed};
use vodkit_server::target::relative_path;
use vodkit_server::validators::{evaluate, if_range_holds, Validators};

fuzz_target!(|data: &[u8]| {
    let limits = HeadLimits { max_request_line: 512, max_head_bytes: 2048, max_headers: 16 };
    let Ok(Parsed::Complete(req, used)) = parse_head(data, &limits) else { return };
    assert!(used <= data.len());
    let _ = relative_path(&req.target);
    let v = Validators::from_metadata(1000, 1_700_000_000);
    if let Some(specs) = req.range.as_deref().and_then(parse_range) {
        for len in [0u64, 1, 1000, u64::MAX] {
            let _ = resolve(&specs, len, 16);
        }
    }
    if let Some(ir) = req.if_range.as_deref() {
        let _ = if_range_holds(ir, &v);
    }
    let _ = evaluate(&req.conditions(), &v);
});
