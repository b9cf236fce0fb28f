//! `vodkit simulate`: trace-driven evaluation of prefetch policies. Logic lives
//! in `vodkit_sim`; `--validate`'s real run is the bench's `validate` experiment
//! (`vodkit_bench::validate`). This module parses flags and wires files.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use vodkit_disk::model::Preset;
use vodkit_prefetch::PolicySpec;

use vodkit_sim::{report, Capacity, Family, FirstSizes, ModelConfig, Options, Trace};

use super::{flags, usage};
use std::time::Duration;

/// The policies compared when --prefetch is not given.
const POLICIES: &str = "fixed,proportional,sqrt,first-grow,first-grow-sr";

#[derive(clap::Args)]
pub struct Args {
    /// Chains of the trace (`vodkit trace chains` output, or a synthesized truth/chains.csv).
    #[arg(long, required_unless_present_any = ["validate", "replay"])]
    chains: Option<PathBuf>,
    /// File table: file,bitrate_kbps,media,size_bytes,drive.
    #[arg(long, required_unless_present_any = ["validate", "replay"])]
    files: Option<PathBuf>,
    /// Memory replay: play this workload directory's sessions through vodkit's memory
    /// manager on the --drive preset's positioning and transfer terms with a --memory
    /// budget, next to the capacity bound of the same terms (docs/simulate.md).
    #[arg(long, conflicts_with_all = ["chains", "files", "validate"])]
    replay: Option<PathBuf>,
    /// With --replay: the memory budget (default 1GiB; `auto`: this machine's, the cgroup's
    /// limit or total RAM).
    #[arg(long, requires = "replay", value_name = flags::MEMORY, value_parser = flags::memory)]
    memory: Option<vodkit_units::Memory>,
    /// With --replay: replay at these rates (sessions/s, comma-separated) instead of
    /// searching the highest rate the drive sustains.
    #[arg(long, requires = "replay", value_delimiter = ',', value_name = flags::SESSION_RATE, value_parser = flags::session_rate)]
    rate: Vec<f64>,
    /// Prefetch policies. The policies to compare (default
    /// fixed,proportional,sqrt,first-grow,first-grow-sr; also auto); with --replay the
    /// read sizes: `budget` (the default: as large as a stream's budget share), `oracle`
    /// (the share, never past where the viewer will stop: what early leavers cost) or a
    /// policy such as fixed:2MiB (still cut to the share; `auto` stays at its start).
    #[arg(long, alias = "policy")]
    prefetch: Option<String>,
    /// With --replay: override a memory-manager setting, KEY=VALUE (repeatable), e.g.
    /// interval_share=0.7, idle_factor=1.5, stream_ttl_s=20, read_headroom_bytes=0; keys
    /// are the fields of `MemoryConfig` (docs/simulate.md).
    #[arg(long = "memory-set", requires = "replay", value_name = "KEY=VALUE")]
    memory_set: Vec<String>,
    /// With --replay: what the memory manager keeps of consumed bytes — `followers`,
    /// `prefix` and an eviction order (greedy-dual, lru, fifo, sieve, s3-fifo) joined by
    /// `+` — or a comma-separated list of them, or `all`: each is replayed and the table
    /// compares them (docs/prefetch.md, "Retention"). Default: followers+greedy-dual.
    #[arg(long, requires = "replay", value_name = "LIST|all")]
    retention: Option<String>,
    /// With --replay: write the replay's request stream (at its first rate, with the first
    /// retention) as an object trace, csv time,obj_id,obj_size, which libCacheSim reads
    /// (scripts/libcachesim-miss-ratios).
    #[arg(long, requires = "replay", value_name = "FILE")]
    export_trace: Option<PathBuf>,
    /// With --replay: the read order of the server replayed, which prices a read's
    /// positioning: sweep (the default, as `vodkit serve`: a sweep orders the reads queued
    /// at once, see --utilization) or fifo/deadline (every read at an independent place).
    #[arg(long, requires = "replay", value_name = "fifo|deadline|sweep")]
    io_order: Option<vodkit_prefetch::IoOrder>,
    /// With --replay: the mean time a read may wait in the drive's queue at capacity. It
    /// caps how busy the drive may be (M/D/1: reads of S seconds allow 2W/(S + 2W)) and
    /// sets how many reads a sweep orders; `none`: no queueing (capacity at a full drive,
    /// a read of every session in progress waiting at once, the bound's sweep).
    #[arg(long, requires = "replay", value_name = flags::DURATION, default_value = "500ms", value_parser = queue_wait)]
    queue_wait: f64,
    /// Drive preset of the disk model for t_max and s_max (wd-red, hp-10k, hitachi-5k3000,
    /// seagate-7200).
    #[arg(long, conflicts_with_all = ["t_max", "s_max"])]
    drive: Option<Preset>,
    /// Maximum transfer rate, MB/s (MB = 2^20 bytes); needs --s-max.
    #[arg(long, requires = "s_max")]
    t_max: Option<f64>,
    /// Maximum seeks per second; needs --t-max.
    #[arg(long, requires = "t_max")]
    s_max: Option<f64>,
    /// Sizes to sweep: START:END:STEP or a list (SIZE,SIZE,...), e.g. 1MiB:16MiB:1MiB.
    #[arg(long, default_value = "1MiB:16MiB:1MiB")]
    sweep: String,
    /// Reference bit rate of the size parameter for the bit-rate-scaled policies.
    #[arg(long, default_value = "2000kbit/s", value_name = flags::BITRATE, value_parser = flags::bit_rate)]
    ref_bitrate: u64,
    /// The reference bit rate in kbit/s (older spelling of --ref-bitrate).
    #[arg(long, hide = true, conflicts_with = "ref_bitrate", value_parser = flags::kbps_as_bit_rate)]
    ref_kbps: Option<u64>,
    /// Accounting interval for disk utilization.
    #[arg(long, default_value = "60s", value_name = flags::DURATION, value_parser = flags::duration)]
    interval: Duration,
    /// How long a chain's buffer stays after the chain ends.
    #[arg(long, default_value = "40s", value_name = flags::DURATION, value_parser = flags::duration)]
    release_after: Duration,
    /// First-Grow's first sizes: `trace` (cost-benefit over the trace) or `table` (thesis
    /// Table 5.6).
    #[arg(long, default_value = "trace")]
    first_sizes: String,
    /// Survival probability P for First-Grow's growth factor.
    #[arg(long, default_value_t = 0.45)]
    survival: f64,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Output directory: sim.json, sim.csv, index.html (with --replay: replay.json).
    #[arg(long, required_unless_present = "replay")]
    out: Option<PathBuf>,
    /// Compare the model with a real run: a cut-down netflix-2014 workload served by
    /// `vodkit serve` from the emulated disk (--drive preset) and replayed by `vodkit load`;
    /// needs root and FUSE. --out is the working directory. (The bench's `validate`
    /// experiment: `vodkit bench --scenario validate` runs it with the defaults.)
    #[arg(long)]
    validate: bool,
    /// With --validate: the fixed policy the server runs and the model simulates.
    #[arg(long = "validate-prefetch", alias = "validate-policy", default_value = PolicySpec::DEFAULT_TEXT, requires = "validate", value_parser = super::serve::parse_policy)]
    validate_policy: PolicySpec,
    /// With --validate: sessions generated (arriving over about a minute).
    #[arg(long, default_value_t = 60, requires = "validate")]
    validate_sessions: u64,
    /// With --validate: seed of the workload.
    #[arg(long, default_value_t = 1, requires = "validate")]
    validate_seed: u64,
    /// With --validate: read_ahead_kb to set on the emulated device (`default`: leave the
    /// kernel's).
    #[arg(
        long = "validate-readahead-kb",
        alias = "validate-read-ahead-kb",
        default_value = "default",
        requires = "validate"
    )]
    validate_read_ahead_kb: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.validate {
        return validate(&args);
    }
    if let Some(dir) = &args.replay {
        return replay(&args, dir);
    }
    let Some(out) = &args.out else {
        return Err(usage("--out is required"));
    };
    let capacity = match (&args.drive, args.t_max, args.s_max) {
        (_, Some(t), Some(s)) => Capacity::given(t, s).map_err(usage)?,
        (Some(p), _, _) => Capacity::of_preset(*p),
        _ => Capacity::of_preset(Preset::Hitachi5k3000),
    };
    let mut model = ModelConfig::new(capacity);
    model.interval_s = args.interval.as_secs_f64();
    model.release_after_s = args.release_after.as_secs_f64();
    let first_sizes = match args.first_sizes.as_str() {
        "trace" => FirstSizes::Trace,
        "table" => FirstSizes::Table,
        other => {
            return Err(usage(format!(
                "--first-sizes {other}: expected trace or table"
            )))
        }
    };
    let opts = Options {
        model,
        families: Family::parse_list(args.prefetch.as_deref().unwrap_or(POLICIES))
            .map_err(usage)?,
        params: vodkit_sim::sweep::parse_sweep(&args.sweep).map_err(usage)?,
        ref_kbps: u32::try_from(args.ref_kbps.unwrap_or(args.ref_bitrate) / 1000)
            .unwrap_or(u32::MAX),
        first_sizes,
        survival_p: args.survival,
        threads: args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    let (Some(chains), Some(files)) = (&args.chains, &args.files) else {
        return Err(usage("--chains and --files are required"));
    };
    let trace = Trace::load(chains, files).map_err(usage)?;
    if trace.chains.is_empty() {
        return Err(usage(format!("{}: no chains", chains.display())));
    }
    let live = std::io::stderr().is_terminal();
    let progress = |done: usize, total: usize| {
        if live {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\rsimulating: {done}/{total} runs");
            if done == total {
                let _ = writeln!(e);
            }
        }
    };
    let rep = vodkit_sim::simulate(&trace, &opts, &progress).map_err(usage)?;
    report::write_all(out, &rep).map_err(|e| anyhow::anyhow!(e))?;
    print!("{}", report::summary_text(&rep));
    println!(
        "{} chains x {} runs at {:.2} M chain-policy evaluations/s -> {}",
        rep.chains,
        opts.families.len() * opts.params.len(),
        rep.chain_evals_per_s / 1e6,
        out.display()
    );
    Ok(())
}

/// `--replay DIR`: the bound and vodkit's memory manager replayed on the same terms.
fn replay(args: &Args, dir: &std::path::Path) -> anyhow::Result<()> {
    use vodkit_sim::replay::{self as rp, Prefetch, ReplayConfig, ReplayWorkload};
    let preset = args.drive.unwrap_or(Preset::WdRed);
    let memory = match args.memory {
        None => 1 << 30,
        Some(vodkit_units::Memory::Size(b)) => b,
        Some(vodkit_units::Memory::Auto) => vodkit_prefetch::budget::detect(None).0,
        Some(vodkit_units::Memory::Off) => {
            return Err(usage(
                "--memory off: a replay needs a budget; give auto or a size",
            ))
        }
    };
    let prefetch = match args.prefetch.as_deref().unwrap_or("budget") {
        "budget" => Prefetch::Budget,
        "oracle" => Prefetch::Oracle,
        p => Prefetch::Policy(
            super::serve::parse_policy(p).map_err(|e| usage(format!("--prefetch {p}: {e}")))?,
        ),
    };
    let load = vodkit_bench::adapters::WorkloadLoad::open(dir).map_err(usage)?;
    let catalog = vodkit_bench::prepare::catalog(dir).map_err(usage)?;
    let classes = load
        .meta
        .as_ref()
        .map(|m| m.client_classes.clone())
        .unwrap_or_default();
    let (bound, notes) = vodkit_bench::runner::capacity_bound(
        &vodkit_bench::runner::TestbedChoice::Hdd(preset),
        dir,
        &load,
        Some(memory),
    );
    let Some(bound) = bound else {
        return Err(usage(notes.join("; ")));
    };
    println!("{}", vodkit_bench::runner::bound_note(&bound));
    let fileset = vodkit_bench::prepare::fileset_bytes(&catalog);
    let image = vodkit_bench::system::HddTestbed::image_size_for(fileset).max(64 << 20);
    let disk = vodkit_bench::bound::testbed_terms(preset, fileset, image).map_err(usage)?;
    let w = ReplayWorkload::prepare(&catalog, &load.sessions, &classes).map_err(usage)?;
    let base = memory_config(memory, &args.memory_set)?;
    let specs = match &args.retention {
        Some(list) => vodkit_prefetch::memory::RetentionSpec::parse_list(list)
            .map_err(|e| usage(format!("--retention {list}: {e}")))?,
        None => vec![base.retention],
    };
    let mut results: Vec<rp::ReplayResult> = Vec::new();
    let mut first_cfg = None;
    for spec in &specs {
        let cfg = ReplayConfig {
            memory: vodkit_prefetch::memory::MemoryConfig {
                retention: *spec,
                ..base.clone()
            },
            disk,
            prefetch: prefetch.clone(),
            order: args.io_order.unwrap_or_default(),
            queue_wait_s: args.queue_wait,
        };
        let found: Vec<rp::ReplayResult> = if args.rate.is_empty() {
            match rp::capacity(&w, &cfg, bound.bound_rate / 2.0) {
                Some(r) => vec![r],
                None if specs.len() > 1 => {
                    println!("{spec}: no rate leaves the drive idle enough");
                    Vec::new()
                }
                None => return Err(usage("memory replay: no rate leaves the drive idle enough")),
            }
        } else {
            args.rate.iter().map(|&r| rp::replay(&w, &cfg, r)).collect()
        };
        for r in &found {
            println!(
                "{}: {} (utilization {:.2})",
                spec,
                vodkit_bench::runner::replay_note(r, bound.bound_rate, bound.hit_fraction),
                r.utilization
            );
        }
        if first_cfg.is_none() {
            first_cfg = found.first().map(|r| (cfg.clone(), r.rate));
        }
        results.extend(found);
    }
    if specs.len() > 1 {
        print!(
            "{}",
            retention_table(&results, memory, bound.bound_rate, bound.hit_fraction)
        );
    }
    if let (Some(path), Some((cfg, rate))) = (&args.export_trace, &first_cfg) {
        let mut reqs = Vec::new();
        rp::replay_traced(&w, cfg, *rate, &mut |r| {
            reqs.extend(rp::export::objects(&r));
        });
        rp::export::write_csv(path, &reqs).map_err(usage)?;
        println!(
            "request stream at {rate:.2} sessions/s ({} retention): {} object requests of {} blocks -> {}",
            cfg.memory.retention,
            reqs.len(),
            vodkit_units::human_size(rp::export::BLOCK_BYTES),
            path.display()
        );
    }
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out)?;
        let path = out.join("replay.json");
        let doc = serde_json::json!({ "bound": bound, "replays": results });
        std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
        println!("-> {}", path.display());
    }
    Ok(())
}

/// The retentions compared: capacity, share of bytes from memory, fraction of the
/// capacity bound and the mean bytes kept for followers and in the consumed-cache, one row
/// each (markdown).
fn retention_table(
    results: &[vodkit_sim::replay::ReplayResult],
    memory: u64,
    bound_rate: f64,
    bound_hits: f64,
) -> String {
    let mut t = format!(
        "\nretentions at {} (bound {:.2} sessions/s, {:.0}% of bytes from memory):\n\n\
         | retention | sessions/s | of the bound | bytes from memory | kept for followers | consumed-cache | mean read |\n\
         |---|---|---|---|---|---|---|\n",
        vodkit_units::human_size(memory),
        bound_rate,
        100.0 * bound_hits
    );
    for r in results {
        t.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.0}% | {} | {} | {} |\n",
            r.retention,
            r.rate,
            r.rate / bound_rate,
            100.0 * r.hit_fraction,
            vodkit_units::human_size(r.mean_kept_bytes as u64),
            vodkit_units::human_size(r.mean_cached_bytes as u64),
            vodkit_units::human_size(r.mean_read_bytes as u64)
        ));
    }
    t
}

/// The manager's defaults for `budget` with `KEY=VALUE` overrides of its fields.
fn memory_config(
    budget: u64,
    sets: &[String],
) -> anyhow::Result<vodkit_prefetch::memory::MemoryConfig> {
    let base = vodkit_prefetch::memory::MemoryConfig::for_budget(budget);
    let mut doc = serde_json::to_value(&base)?;
    for set in sets {
        let Some((key, value)) = set.split_once('=') else {
            return Err(usage(format!("--memory-set {set}: expected KEY=VALUE")));
        };
        let slot = doc.get_mut(key.trim()).ok_or_else(|| {
            let keys = base_keys(&base);
            usage(format!(
                "--memory-set {set}: unknown key `{key}`; expected one of {}",
                keys.join(", ")
            ))
        })?;
        let kind = if slot.is_boolean() {
            "true or false"
        } else {
            "a number"
        };
        let parsed: serde_json::Value = serde_json::from_str(value.trim())
            .map_err(|_| usage(format!("--memory-set {set}: `{value}` is not {kind}")))?;
        if parsed.is_boolean() != slot.is_boolean() || !(parsed.is_number() || parsed.is_boolean())
        {
            return Err(usage(format!(
                "--memory-set {set}: `{value}` is not {kind}"
            )));
        }
        *slot = parsed;
    }
    serde_json::from_value(doc).map_err(|e| usage(format!("--memory-set: {e}")))
}

fn base_keys(c: &vodkit_prefetch::memory::MemoryConfig) -> Vec<String> {
    match serde_json::to_value(c) {
        Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

fn validate(args: &Args) -> anyhow::Result<()> {
    if args.t_max.is_some() {
        return Err(usage(
            "--validate takes the drive from --drive, not --t-max/--s-max",
        ));
    }
    let Some(out) = &args.out else {
        return Err(usage("--validate needs --out (its working directory)"));
    };
    let mut o = vodkit_bench::validate::RunOptions::new(out);
    if let Some(d) = args.drive {
        o.preset = d;
    }
    if !matches!(args.validate_policy, PolicySpec::Fixed { .. }) {
        return Err(usage(format!(
            "--validate-policy {}: expected fixed:SIZE",
            args.validate_policy
        )));
    }
    o.policy = args.validate_policy.clone();
    if args.validate_sessions == 0 {
        return Err(usage("--validate-sessions: expected at least 1"));
    }
    o.sessions = args.validate_sessions;
    o.seed = args.validate_seed;
    o.read_ahead_kb = match args.validate_read_ahead_kb.as_str() {
        "default" => None,
        v => Some(v.parse().map_err(|_| {
            usage(format!(
                "--validate-read-ahead-kb {v}: expected KiB (a whole number) or default"
            ))
        })?),
    };
    let text = vodkit_bench::validate::run_and_report(&o, &mut |line: &str| eprintln!("{line}"))
        .map_err(|e| anyhow::anyhow!(e))?;
    print!("{text}");
    Ok(())
}

/// A duration, or `none` for no queueing.
fn queue_wait(text: &str) -> Result<f64, String> {
    if text == "none" {
        return Ok(f64::INFINITY);
    }
    vodkit_units::parse_seconds(text).map_err(|e| format!("{e}, or none"))
}

#[cfg(test)]
mod tests {
    use super::memory_config;

    fn set(s: &str) -> anyhow::Result<vodkit_prefetch::memory::MemoryConfig> {
        memory_config(1 << 30, &[s.to_string()])
    }

    #[test]
    fn memory_set_takes_numbers_and_switches_by_the_field_type() {
        assert_eq!(set("interval_share=0.25").unwrap().interval_share, 0.25);
        assert!(!set("survival_reads=false").unwrap().survival_reads);
        assert!(set("survival_reads=true").unwrap().survival_reads);
        let e = set("survival_reads=0").unwrap_err().to_string();
        assert!(e.contains("is not true or false"), "{e}");
        let e = set("interval_share=true").unwrap_err().to_string();
        assert!(e.contains("is not a number"), "{e}");
        let e = set("no_such_key=1").unwrap_err().to_string();
        assert!(e.contains("unknown key `no_such_key`"), "{e}");
    }
}
