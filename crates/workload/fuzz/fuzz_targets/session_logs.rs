//! Fuzz the session-log parsers: any input either parses or yields an error, never a
//! panic; whatever parses can be written back and parses again to as many sessions.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vodkit_workload::logfmt::{self, LogFormat};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = LogFormat::detect(&text);
    for format in LogFormat::ALL {
        if let Ok(sessions) = logfmt::parse(&text, format, "fuzz") {
            let mut out = Vec::new();
            if logfmt::write(&sessions, format, &mut out).is_ok() {
                let again = logfmt::parse(&String::from_utf8(out).unwrap(), format, "again")
                    .expect("written logs parse");
                assert_eq!(again.len(), sessions.len());
            }
        }
    }
});
