//! Any bytes, read as any log format, must be analyzed without panicking: bad lines are
//! counted, never fatal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vodkit_trace::analyze::{analyze, AnalyzeOptions, NoSink};
use vodkit_trace::{FileTable, LogFormat};

fuzz_target!(|data: &[u8]| {
    for format in [
        LogFormat::Auto,
        LogFormat::Netflix,
        LogFormat::Nginx,
        LogFormat::Vodkit,
        LogFormat::Combined,
        LogFormat::Common,
        LogFormat::Json,
    ] {
        let opts = AnalyzeOptions {
            format,
            ..Default::default()
        };
        let a = analyze(data, FileTable::default(), &opts, &mut NoSink)
            .expect("in-memory input cannot fail");
        assert!(a.read.bad_examples.len() as u64 <= a.read.bad_lines);
    }
});
