//! `vodkit bench`: capacity experiments with servers under test side by side.
//! Flags only; the work is in `vodkit_bench::runner`.

use std::path::PathBuf;
use std::time::Duration;
use vodkit_bench::runner::{self, BenchRequest, RunError, TestbedChoice};
use vodkit_bench::search::Criterion;

use super::flags;

#[derive(clap::Args)]
pub struct Args {
    /// Workload directory from `vodkit workload new` (sessions.jsonl, workload.json, …).
    #[arg(long, required_unless_present = "scenario")]
    workload: Option<PathBuf>,
    /// Existing file set to serve (default: create it from the workload).
    #[arg(long)]
    root: Option<PathBuf>,
    /// Servers under test, comma separated: vodkit[:IO[:POLICY]], nginx, apache,
    /// X+preload[:POLICY] (under the preload shim with its own daemon, default fixed:2MiB),
    /// nginx+readahead:KB[,maxsectors:KB], X+tls (HTTPS with a throwaway CA and
    /// certificate in the run directory), X+h2 (HTTP/2: vodkit, or nginx with +tls),
    /// url:http://127.0.0.1:PORT/, X+bin:PATH (vodkit from another build). Default vodkit:asap:auto,nginx; with --scenario it replaces
    /// every cell's servers.
    #[arg(long)]
    sut: Option<String>,
    /// Where the file set lives: plain (this machine's disk) or hdd:PRESET (emulated disk).
    #[arg(long, default_value = "plain")]
    testbed: TestbedChoice,
    /// Memory budget of each server, page cache included (e.g. 1GiB); `auto` or `off`
    /// (the default): no budget, each server sizes itself to the machine.
    #[arg(long, value_name = flags::MEMORY, value_parser = flags::memory)]
    memory: Option<vodkit_units::Memory>,
    /// CPU quota of each server in cores (e.g. 0.25; cpu cgroup, needs root): makes the
    /// server, not the machine it shares with the load generator, what gives out first.
    #[arg(long, value_name = "CORES")]
    server_cpus: Option<f64>,
    /// failure-free[:start=R,step=R,precision=R,max=R] or fixed-rates:R,R,… (sessions/s).
    #[arg(long)]
    search: Option<String>,
    /// strict (no timeouts), sessions:PERCENT% (e.g. sessions:0.3%), quality:PERCENT%
    /// (strict, and that share of the judged sessions — the probes when `--probe` is given —
    /// completed without a stall; e.g. quality:95%) or pace:SECONDS (strict, and 95% of the
    /// completed sessions ended at most that far behind their own pace; e.g. pace:2s).
    #[arg(long, default_value = "strict")]
    criterion: Criterion,
    /// Run N probe sessions of LEN in every point and report them apart (seed 004's
    /// probes), e.g. 20,30s; the quality criterion then judges the probes.
    #[arg(long, value_name = "N,LEN")]
    probe: Option<vodkit_load::probe::Probes>,
    /// Adaptive players (as `vodkit load --player`): every session plays its title, from a
    /// real media set the bench writes instead of the synthetic files.
    #[command(flatten)]
    players: super::load::PlayerArgs,
    /// The media set's packaging with --player: dash, dash-single, hls, hls-byterange or
    /// cmaf (both manifests).
    #[arg(long, default_value = "cmaf", requires = "player")]
    media: vodkit_media::package::MediaFormat,
    /// Repeat each search N times for a 95% confidence interval.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Longest load run per data point, e.g. 5m (default: the whole session list).
    #[arg(long = "duration", alias = "point-duration", value_name = flags::DURATION, value_parser = flags::duration)]
    point_duration: Option<Duration>,
    /// Before every point, play the session list's preceding window SPEED times faster
    /// (drive, load and prefetch clocks alike) so each point starts at steady state:
    /// SPEED[,fill=X] (X memory budgets of requested bytes at least), off, or auto (8,fill=3
    /// on an emulated drive with --memory and no --server-cpus).
    #[arg(long, value_name = "SPEED[,fill=X]|off")]
    fast_forward: Option<vodkit_bench::warmup::FastForwardChoice>,
    /// Run every point for its whole duration, even once its failure under the criterion
    /// is certain (by default such a point ends there, failed).
    #[arg(long)]
    no_early_stop: bool,
    /// Run a seed experiment by name (`--scenario list` shows them).
    #[arg(long)]
    scenario: Option<String>,
    /// With --scenario: run only these cells (comma-separated labels, e.g.
    /// `mem=256MiB,mem=1GiB`), each with the data-point length of the whole scenario.
    #[arg(long, requires = "scenario", value_delimiter = ',')]
    cells: Vec<String>,
    /// Directory for bench.json, report.md, report.html and per-run logs.
    #[arg(long, required_unless_present = "scenario")]
    out: Option<PathBuf>,
    #[command(flatten)]
    quiet: flags::Quiet,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let players = match args.players.config() {
        Some(c) => Some(runner::BenchPlayers::new(c, args.media).map_err(super::usage)?),
        None => None,
    };
    if let Some(name) = &args.scenario {
        if players.is_some() {
            return Err(super::usage(
                "--player: scenarios replay their workloads' byte ranges; use it with --workload",
            ));
        }
        return scenario(name, &args);
    }
    let (Some(workload), Some(out)) = (args.workload.clone(), args.out.clone()) else {
        return Err(super::usage("--workload and --out are required"));
    };
    let req = BenchRequest {
        workload: super::absolute(&workload),
        root: args.root.as_deref().map(super::absolute),
        suts: vodkit_bench::sut::parse_list(args.sut.as_deref().unwrap_or(DEFAULT_SUTS))
            .map_err(super::usage)?,
        testbed: args.testbed.clone(),
        memory: args.memory.and_then(vodkit_units::Memory::size),
        server_cpus: args.server_cpus,
        search: args.search.clone(),
        criterion: args.criterion,
        probes: args.probe,
        players,
        repeat: args.repeat,
        point_duration: args.point_duration,
        fast_forward: args.fast_forward.unwrap_or_default(),
        early_stop: !args.no_early_stop,
        out: super::absolute(&out),
        vodkit_exe: std::env::current_exe().ok(),
        progress: args.quiet.progress(),
    };
    // Input first (usage errors), then the output directory, so an unwritable --out fails
    // before any server runs rather than after the whole search.
    if let Err(RunError::Usage(m)) = runner::check_request(&req) {
        return Err(super::usage(m));
    }
    std::fs::create_dir_all(&req.out)
        .map_err(|e| anyhow::anyhow!("--out {}: {e}", req.out.display()))?;
    vodkit_bench::interrupt::install().map_err(|e| anyhow::anyhow!(e))?;
    match runner::run(&req) {
        Ok((_, table)) => {
            print!("{table}");
            vodkit_bench::interrupt::finished().map_err(|e| anyhow::anyhow!(e))
        }
        Err(RunError::Usage(m)) => Err(super::usage(m)),
        Err(RunError::Runtime(m)) => Err(anyhow::anyhow!(m)),
    }
}

/// The servers `vodkit bench --workload` compares when `--sut` is not given.
const DEFAULT_SUTS: &str = "vodkit:asap:auto,nginx";

/// `s` with every cell's servers replaced by the `--sut` list `list`, keeping the checks
/// whose servers are all in it.
fn with_servers(
    mut s: vodkit_bench::scenario::Scenario,
    list: &str,
) -> Result<vodkit_bench::scenario::Scenario, String> {
    let parsed = vodkit_bench::sut::parse_list(list).map_err(|e| e.to_string())?;
    // The scenario's tables hold names for the whole run; one small string per invocation.
    let names: Vec<&'static str> = parsed
        .iter()
        .map(|p| &*Box::leak(p.label.clone().into_boxed_str()))
        .collect();
    for c in &mut s.cells {
        c.suts = names.clone();
    }
    keep_runnable_checks(&mut s);
    Ok(s)
}

/// Keeps only the checks (and the sequential-read reference) whose servers all run: the
/// others would report every server or cell left out as "not measurable".
fn keep_runnable_checks(s: &mut vodkit_bench::scenario::Scenario) {
    let kept: Vec<String> = s
        .cells
        .iter()
        .flat_map(|c| {
            c.suts
                .iter()
                .map(move |x| vodkit_bench::scenario::qualified(c.label, x))
        })
        .collect();
    let runs = |n: &str| kept.iter().any(|k| k == n);
    s.checks.retain(|ch| ch.servers().iter().all(|n| runs(n)));
    // So is the sequential-read reference, whose server is in one cell.
    if s.sequential_reference.is_some_and(|(n, _)| !runs(n)) {
        s.sequential_reference = None;
    }
}

/// `s` restricted to the cells labelled `keep`, its time budget cut in proportion so each
/// data point lasts as long as in the whole scenario.
fn only_cells(
    mut s: vodkit_bench::scenario::Scenario,
    keep: &[String],
) -> Result<vodkit_bench::scenario::Scenario, String> {
    let labels: Vec<&str> = s.cells.iter().map(|c| c.label).collect();
    if let Some(bad) = keep.iter().find(|k| !labels.contains(&k.as_str())) {
        return Err(format!(
            "--cells: scenario {} has no cell `{bad}` (cells: {})",
            s.name,
            labels.join(", ")
        ));
    }
    let point = s.point_seconds();
    let runs = s.server_runs().max(1);
    s.cells.retain(|c| keep.iter().any(|k| k == c.label));
    keep_runnable_checks(&mut s);
    s.budget_s = s.budget_s * s.server_runs() / runs;
    debug_assert!(s.point_seconds() <= point.max(30));
    Ok(s)
}

fn scenario(name: &str, args: &Args) -> anyhow::Result<()> {
    if name == "list" {
        for s in vodkit_bench::scenario::all() {
            let minutes = s.server_runs()
                * vodkit_bench::scenario::POINTS_PER_SEARCH
                * (s.point_seconds() + vodkit_bench::scenario::OVERHEAD_S)
                / 60;
            println!("{:<14} mirrors {} (~{minutes} min)", s.name, s.mirrors);
            println!("{:<14} checks: {}", "", s.finding);
        }
        use vodkit_bench::validate as v;
        println!(
            "{:<14} mirrors {} (~{} min)",
            v::SCENARIO,
            v::MIRRORS,
            v::MINUTES
        );
        println!("{:<14} checks: {}", "", v::CHECKS);
        return Ok(());
    }
    if name == vodkit_bench::validate::SCENARIO {
        // The simulator against a real run, with `vodkit simulate --validate`'s defaults.
        if !args.cells.is_empty() {
            return Err(super::usage("--cells: the validate scenario has no cells"));
        }
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("bench-{name}")));
        let out = super::absolute(&out);
        let o = vodkit_bench::validate::RunOptions::new(out);
        let quiet = args.quiet.quiet;
        let text = vodkit_bench::validate::run_and_report(&o, &mut |line: &str| {
            if !quiet {
                eprintln!("{line}")
            }
        })
        .map_err(|e| anyhow::anyhow!(e))?;
        print!("{text}");
        return Ok(());
    }
    let mut s = vodkit_bench::scenario::find(name).map_err(super::usage)?;
    if !args.cells.is_empty() {
        s = only_cells(s, &args.cells).map_err(super::usage)?;
    }
    if let Some(list) = &args.sut {
        s = with_servers(s, list).map_err(super::usage)?;
    }
    if let Some(ff) = args.fast_forward {
        s.fast_forward = ff;
    }
    s.early_stop = !args.no_early_stop;
    s.repeat = args.repeat;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("bench-{}", s.name)));
    let out = super::absolute(&out);
    vodkit_bench::interrupt::install().map_err(|e| anyhow::anyhow!(e))?;
    match vodkit_bench::scenario_run::run(
        &s,
        &out,
        std::env::current_exe().ok(),
        args.quiet.progress(),
    ) {
        Ok(table) => {
            print!("{table}");
            vodkit_bench::interrupt::finished().map_err(|e| anyhow::anyhow!(e))
        }
        Err(RunError::Usage(m)) => Err(super::usage(m)),
        Err(RunError::Runtime(m)) => Err(anyhow::anyhow!(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::{only_cells, with_servers};

    #[test]
    fn a_sut_list_replaces_every_cells_servers_and_keeps_their_checks() {
        let s = vodkit_bench::scenario::find("memory").unwrap();
        let t = with_servers(s, "nginx,vodkit:asap:auto+bin:/tmp/old,vodkit:asap:auto").unwrap();
        for c in &t.cells {
            assert_eq!(
                c.suts,
                ["nginx", "vodkit:asap:auto+bin:/tmp/old", "vodkit:asap:auto"]
            );
        }
        assert!(!t.checks.is_empty());
        let s = vodkit_bench::scenario::find("memory").unwrap();
        let t = with_servers(s, "apache").unwrap();
        assert!(
            t.checks.is_empty(),
            "checks naming absent servers are dropped"
        );
        let s = vodkit_bench::scenario::find("memory").unwrap();
        let e = with_servers(s, "nginx+bogus").unwrap_err();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn only_cells_keeps_the_named_cells_and_the_point_length() {
        let s = vodkit_bench::scenario::find("memory").unwrap();
        let point = s.point_seconds();
        let keep = ["mem=256MiB".to_string(), "mem=4GiB".to_string()];
        let t = only_cells(s, &keep).unwrap();
        let labels: Vec<&str> = t.cells.iter().map(|c| c.label).collect();
        assert_eq!(labels, ["mem=256MiB", "mem=4GiB"]);
        assert_eq!(t.point_seconds(), point);
        let s = vodkit_bench::scenario::find("memory").unwrap();
        let e = only_cells(s, &["mem=3GiB".to_string()]).unwrap_err();
        assert!(e.contains("mem=3GiB") && e.contains("mem=1GiB"), "{e}");
    }

    #[test]
    fn only_the_cell_with_the_sequential_reference_keeps_it() {
        let s = || vodkit_bench::scenario::find("memory").unwrap();
        let (name, _) = s()
            .sequential_reference
            .expect("memory compares with a sequential read");
        assert!(name.starts_with("mem=4GiB "), "{name}");
        let small = only_cells(s(), &["mem=512MiB".to_string()]).unwrap();
        assert!(small.sequential_reference.is_none());
        let large = only_cells(s(), &["mem=4GiB".to_string()]).unwrap();
        assert_eq!(large.sequential_reference, s().sequential_reference);
    }

    #[test]
    fn only_cells_keeps_the_checks_of_the_cells_it_runs() {
        let s = vodkit_bench::scenario::find("matrix").unwrap();
        assert_eq!(s.checks.len(), 12);
        let t = only_cells(s, &["VUL".to_string(), "MUH".to_string()]).unwrap();
        let named: Vec<Vec<&str>> = t.checks.iter().map(|c| c.servers()).collect();
        assert_eq!(
            named,
            [
                ["VUL vodkit:asap:auto", "VUL nginx"],
                ["MUH vodkit:asap:auto", "MUH nginx"]
            ]
        );
    }
}
