//! Fuzz the client's reading of a response head: any bytes from a server must end in a
//! classification (incomplete, body plan, or failure), never a panic.
//! Run: `cd crates/load/fuzz && cargo +nightly fuzz run response_head`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vodkit_load::http::{classify_head, Ask};
use vodkit_workload::model::ByteRange;

fuzz_target!(|data: &[u8]| {
    let ranges = [
        None,
        Some(ByteRange::Closed { first: 0, last: 99 }),
        Some(ByteRange::OpenEnded {
            first: 10,
            read: 50,
        }),
    ];
    for range in ranges {
        let ask = Ask {
            path: "/v/a.dat",
            range,
            host: "127.0.0.1:1",
            session_id: 1,
            verify: false,
            sign: None,
        };
        let _ = classify_head(data, &ask);
    }
});
