//! Any bytes, read as any log format, must be analyzed without panicking: bad lines are
//! counted, never fatal; the parallel reader and the partitioned analysis find exactly what
//! one thread finds.
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
        // One thread, two and three (the parallel reader, the partitioned analysis) must
        // agree on everything.
        let mut first = None;
        for threads in [1, 2, 3] {
            let opts = AnalyzeOptions {
                format,
                threads,
                ..Default::default()
            };
            let a = analyze(data, FileTable::default(), &opts, &mut NoSink)
                .expect("in-memory input cannot fail");
            assert!(a.read.bad_examples.len() as u64 <= a.read.bad_lines);
            let found = format!(
                "{:?}",
                (
                    &a.chains,
                    &a.phases,
                    &a.sessions,
                    a.open_at_end,
                    a.reopened,
                    a.long_service,
                    a.peak_open_sessions,
                    a.peak_open_bytes,
                )
            );
            match &first {
                None => first = Some((a.read, found)),
                Some((one, was)) => {
                    assert_eq!(one, &a.read);
                    assert_eq!(was, &found);
                }
            }
        }
    }
});
