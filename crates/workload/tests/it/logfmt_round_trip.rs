//! The property both the session-log fuzz target (`crates/workload/fuzz`) and the
//! stable-toolchain test check on any input: the parsers never panic, and whatever parses
//! can be written back and parses again to as many sessions.

use vodkit_workload::logfmt::{self, LogFormat};

/// Detect and parse `bytes` as every format; write back and re-parse whatever parsed.
pub fn check(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let _ = LogFormat::detect(&text);
    for f in LogFormat::ALL {
        if let Ok(sessions) = logfmt::parse(&text, f, "fuzz") {
            let mut out = Vec::new();
            if logfmt::write(&sessions, f, &mut out).is_ok() {
                let written = String::from_utf8(out).expect("written logs are UTF-8");
                let again = logfmt::parse(&written, f, "again").expect("written logs parse");
                assert_eq!(again.len(), sessions.len(), "{f} {text:?}");
            }
        }
    }
}
