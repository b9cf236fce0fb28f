//! Compares the I/O modes side by side on cold files: N viewers each read their own file
//! sequentially in fixed-size requests through the engine, as fast as the engine allows.
//! Prints throughput per mode and its ratio to `vanilla` in the same run.
//!
//! ```text
//! cargo run -p vodkit-prefetch --example modes -- [DIR] [VIEWERS] [FILE_MIB] [POLICY]
//! ```
//! Defaults: a temporary directory under the target dir, 16 viewers, 32 MiB files,
//! `fixed:2MiB`, 512 KiB requests. Files are written once and dropped from the page cache
//! (`POSIX_FADV_DONTNEED`) before each mode. `asap-nora` is `asap` with the kernel's own
//! readahead turned off for the files (`kernel_readahead: false`).

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use vodkit_prefetch::residency::drop_cached;
use vodkit_prefetch::{Engine, EngineConfig, IoMode, PolicySpec, ReadRequest};

const MIB: u64 = 1 << 20;
const REQUEST: u64 = 512 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args.first().map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/modes-bench")
    });
    let viewers: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(16);
    let file_mib: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(32);
    let policy: PolicySpec = match args
        .get(3)
        .map(|s| s.parse())
        .unwrap_or(Ok(PolicySpec::Fixed { bytes: 2 * MIB }))
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    std::fs::create_dir_all(&dir).expect("creating the bench directory");
    let files: Vec<Arc<File>> = (0..viewers)
        .map(|i| Arc::new(make_file(&dir.join(format!("v{i}.bin")), file_mib * MIB)))
        .collect();
    println!(
        "{viewers} viewers x {file_mib} MiB, {} KiB requests, policy {policy}, dir {}",
        REQUEST / 1024,
        dir.display()
    );
    let mut vanilla = None;
    let runs = [
        (IoMode::Vanilla, true),
        (IoMode::Serialized, true),
        (IoMode::Prefetch, true),
        (IoMode::Asap, true),
        (IoMode::Asap, false),
    ];
    for (mode, kernel_readahead) in runs {
        for f in &files {
            drop_cached(f, 0, 0).expect("dropping cached pages");
        }
        let engine = Arc::new(Engine::new(EngineConfig {
            mode,
            policy: policy.clone(),
            kernel_readahead,
            ..Default::default()
        }));
        let t0 = Instant::now();
        let threads: Vec<_> = files
            .iter()
            .cloned()
            .map(|f| {
                let e = engine.clone();
                std::thread::spawn(move || view(&e, &f))
            })
            .collect();
        let bytes: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        let secs = t0.elapsed().as_secs_f64();
        let mbps = bytes as f64 / 1e6 / secs;
        let base = *vanilla.get_or_insert(mbps);
        let s = engine.stats();
        let label = if kernel_readahead {
            mode.name().to_string()
        } else {
            format!("{mode}-nora")
        };
        println!(
            "{:<14} {:>8.1} MB/s  x{:.2} vs vanilla  reads {:>6}  disk {:>7.1} MB  {:>6.2} ms/128K",
            label,
            mbps,
            mbps / base,
            s.reads,
            s.disk_bytes as f64 / 1e6,
            s.disk_ms_per_128k
        );
    }
}

fn make_file(path: &std::path::Path, size: u64) -> File {
    let ok = std::fs::metadata(path)
        .map(|m| m.len() == size)
        .unwrap_or(false);
    if !ok {
        let mut f = File::create(path).expect("creating a bench file");
        let block = vec![0x5au8; MIB as usize];
        for _ in 0..size / MIB {
            f.write_all(&block).expect("writing a bench file");
        }
        f.sync_all().expect("syncing a bench file");
    }
    File::open(path).expect("opening a bench file")
}

/// Reads the whole file in `REQUEST`-sized requests; returns the bytes requested.
fn view(engine: &Engine, file: &Arc<File>) -> u64 {
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut offset = 0;
    while offset < size {
        let req = ReadRequest {
            offset,
            len: REQUEST,
            ..Default::default()
        };
        engine
            .ensure_resident_blocking(file, req)
            .expect("engine read");
        offset += REQUEST;
    }
    size
}
