//! Throughput of the simulator in chain-policy evaluations per second (one chain run
//! through one policy at one parameter, with all accounting), on a synthesized
//! `netflix-2014` trace: the full five-policy, 16-size sweep on 1 and on N threads, and
//! beside it the bare policy calls of the same schedules without accounting.
//!
//! `cargo run --release -p vodkit-sim --example bench -- [DIR] [SCALE] [THREADS]`

use std::path::PathBuf;
use std::time::Instant;

use vodkit_prefetch::PolicySpec;
use vodkit_sim::model::for_each_prefetch;
use vodkit_sim::{Capacity, Family, FirstSizes, ModelConfig, Options, Trace};
use vodkit_workload::netflix::{synth_log, NetflixSpec};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().map_or("/tmp/vodkit-sim-bench", String::as_str));
    let scale: f64 = args
        .get(1)
        .map_or(Ok(4.0), |s| s.parse())
        .map_err(|e| format!("{e}"))?;
    let threads: usize = args
        .get(2)
        .map_or(Ok(2), |s| s.parse())
        .map_err(|e| format!("{e}"))?;
    let chains = dir.join("truth/chains.csv");
    if !chains.exists() {
        let spec = NetflixSpec::new(1, scale, &[])?;
        let t = Instant::now();
        let s = synth_log(&spec, &dir)?;
        eprintln!(
            "synthesized netflix-2014 x{scale}: {} chains in {:.1} s -> {}",
            s.chains,
            t.elapsed().as_secs_f64(),
            dir.display()
        );
    }
    let trace = Trace::load(&chains, &dir.join("files.csv"))?;
    let mut opts = Options {
        model: ModelConfig::new(Capacity::from_preset("hitachi-5k3000")?),
        families: Family::parse_list("fixed,proportional,sqrt,first-grow,first-grow-sr")?,
        params: vodkit_sim::sweep::parse_sweep("1MiB:16MiB:1MiB")?,
        ref_kbps: 2000,
        first_sizes: FirstSizes::Trace,
        survival_p: 0.45,
        threads: 1,
    };
    let runs = opts.families.len() * opts.params.len();
    println!(
        "trace: {} chains, {} drives; sweep: {runs} runs",
        trace.chains.len(),
        trace.drives.len()
    );
    let evals = (trace.chains.len() * runs) as f64;
    let cpu0 = cpu_seconds();
    let one = vodkit_sim::simulate(&trace, &opts, &|_, _| {})?.chain_evals_per_s;
    let cpu1 = cpu_seconds();
    opts.threads = threads;
    let many = vodkit_sim::simulate(&trace, &opts, &|_, _| {})?.chain_evals_per_s;
    let cpu2 = cpu_seconds();
    // Peer: the same schedules with nothing but the policy calls.
    let fg = vodkit_sim::FirstGrowSetup::table();
    let t = Instant::now();
    let mut sink = 0u64;
    for f in &opts.families {
        for &p in &opts.params {
            let spec: PolicySpec = f.spec(p, 2000, &fg);
            let mut policy = spec.build();
            for c in &trace.chains {
                sink = sink.wrapping_add(for_each_prefetch(c, policy.as_mut(), |_, _| {}));
            }
        }
    }
    let bare = (trace.chains.len() * runs) as f64 / t.elapsed().as_secs_f64();
    println!(
        "full model, 1 thread:       {:>8.2} M chain-policy evaluations/s wall, {:.2} M per CPU-second",
        one / 1e6,
        evals / (cpu1 - cpu0).max(1e-9) / 1e6
    );
    println!(
        "full model, {threads} threads:      {:>8.2} M/s wall (x{:.2} of 1 thread), {:.2} M per CPU-second",
        many / 1e6,
        many / one,
        evals / (cpu2 - cpu1).max(1e-9) / 1e6
    );
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average during the run: {}", l.trim());
    }
    println!(
        "policy calls only, 1 thread:{:>8.2} M/s  (accounting costs x{:.2}) [{sink}]",
        bare / 1e6,
        bare / one
    );
    Ok(())
}

/// User plus system CPU seconds of this process (all threads), from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may contain spaces) start at state (field 3).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15, i.e. indices 11 and 12 after the name.
    (ticks(11) + ticks(12)) / 100.0
}
