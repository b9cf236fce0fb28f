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
    let scale: f64 = args.get(1).map_or(Ok(4.0), |s| s.parse()).map_err(|e| format!("{e}"))?;
    let threads: usize = args.get(2).map_or(Ok(2), |s| s.parse()).map_err(|e| format!("{e}"))?;
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
    let one = vodkit_sim::simulate(&trace, &opts, &|_, _| {})?.chain_evals_per_s;
    opts.threads = threads;
    let many = vodkit_sim::simulate(&trace, &opts, &|_, _| {})?.chain_evals_per_s;
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
    println!("full model, 1 thread:       {:>8.2} M chain-policy evaluations/s", one / 1e6);
    println!(
        "full model, {threads} threads:      {:>8.2} M/s  (x{:.2} of 1 thread)",
        many / 1e6,
        many / one
    );
    println!(
        "policy calls only, 1 thread:{:>8.2} M/s  (accounting costs x{:.2}) [{sink}]",
        bare / 1e6,
        bare / one
    );
    Ok(())
}
