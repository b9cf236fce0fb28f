//! Any bytes, read as any log format, must be analyzed without panicking: bad lines are
//! counted, never fatal; the parallel reader finds exactly what one thread finds.
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
        // One parsing thread and two (the parallel reader) must agree on everything.
        let mut first = None;
        for threads in [1, 2] {
            let opts = AnalyzeOptions {
                format,
                threads,
                ..Default::default()
            };
            let a = analyze(data, FileTable::default(), &opts, &mut NoSink)
                .expect("in-memory input cannot fail");
            assert!(a.read.bad_examples.len() as u64 <= a.read.bad_lines);
            match &first {
                None => first = Some(a.read),
                Some(one) => assert_eq!(one, &a.read),
            }
        }
    }
});
