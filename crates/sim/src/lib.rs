//! `vodkit simulate`: predicts disk utilization and prefetch memory of a prefetch policy
//! from the chains of a real workload, with the server's own policy code and disk model.
//!
//! - [`input`]: chains and files of a trace (`chains.csv`, `files.csv`);
//! - [`model`]: the resource model of thesis 5.6.2 (prefetch schedule per chain, disk
//!   utilization per drive and interval, prefetch memory over time);
//! - [`firstgrow`]: First-Grow's first sizes and growth from the trace (5.6.1, 5.3.3);
//! - [`sweep`]: policy families over a size parameter, in parallel, compared with Fixed;
//! - [`replay`]: a workload's sessions played through the server's memory manager on a
//!   drive's positioning and transfer terms (hits, disk time, capacity);
//! - [`report`]: `sim.json`, `sim.csv`, `index.html` and the text summary;
//! - [`validate`]: the model against a measured run's device counters and memory (the
//!   measured run itself is `vodkit_bench::validate`, behind `vodkit simulate --validate`).
//!
//! See `docs/simulate.md`.

pub mod firstgrow;
pub mod input;
pub mod model;
pub mod replay;
pub mod report;
pub mod sweep;
pub mod validate;

pub use firstgrow::FirstGrowSetup;
pub use input::{SimChain, Trace};
pub use model::{Capacity, ModelConfig, Reuse, RunResult, Scratch, Simulator};
pub use sweep::{Comparison, Curve, Family, Point};

use serde::{Deserialize, Serialize};

/// Where First-Grow's first sizes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FirstSizes {
    /// Cost-benefit analysis over the trace, Table 5.6 where a category is too small.
    Trace,
    /// Thesis Table 5.6 as is.
    Table,
}

/// Everything a simulation needs besides the trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub model: ModelConfig,
    pub families: Vec<Family>,
    pub params: Vec<u64>,
    pub ref_kbps: u32,
    pub first_sizes: FirstSizes,
    /// Survival probability for First-Grow's growth factor (thesis: 0.45).
    pub survival_p: f64,
    pub threads: usize,
}

/// The complete outcome, as written to `sim.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    pub chains: usize,
    pub drives: usize,
    pub files: usize,
    pub trace_span_s: f64,
    pub capacity: Capacity,
    pub interval_s: f64,
    pub release_after_s: f64,
    pub ref_kbps: u32,
    pub first_grow: FirstGrowSetup,
    pub policies: Vec<Curve>,
    pub summary: Vec<Comparison>,
    /// Chain-policy evaluations per second of wall time in this run.
    pub chain_evals_per_s: f64,
}

/// Runs the sweep over `trace`; `progress(done, total)` after each run.
pub fn simulate(
    trace: &Trace,
    opts: &Options,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<SimReport, String> {
    if !(opts.survival_p > 0.0 && opts.survival_p < 1.0) {
        return Err(format!(
            "--survival must be a probability between 0 and 1, got {}",
            opts.survival_p
        ));
    }
    if opts.ref_kbps == 0 {
        return Err("--ref-kbps must be positive".into());
    }
    let sim = Simulator::new(trace, opts.model)?;
    let fg = match opts.first_sizes {
        FirstSizes::Trace => {
            FirstGrowSetup::from_trace(trace, &opts.model.capacity, opts.survival_p)
        }
        FirstSizes::Table => FirstGrowSetup::table(),
    };
    let start = std::time::Instant::now();
    let curves = sweep::sweep(
        &sim,
        &opts.families,
        &opts.params,
        opts.ref_kbps,
        &fg,
        opts.threads,
        progress,
    );
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let evals = (trace.chains.len() * opts.families.len() * opts.params.len()) as f64;
    Ok(SimReport {
        chains: trace.chains.len(),
        drives: trace.drives.len(),
        files: trace.files.len(),
        trace_span_s: trace.end_s() - trace.origin_s(),
        capacity: opts.model.capacity,
        interval_s: opts.model.interval_s,
        release_after_s: opts.model.release_after_s,
        ref_kbps: opts.ref_kbps,
        first_grow: fg,
        summary: sweep::compare_with_fixed(&curves),
        policies: curves,
        chain_evals_per_s: evals / secs,
    })
}
