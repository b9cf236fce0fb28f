//! Exact checks of the model on hand-built chains against hand-computed utilization and
//! memory (t_max = 100 MiB/s, s_max = 40 seeks/s, 60 s intervals, 40 s release).

use vodkit_prefetch::{ChainKind, PolicySpec};
use vodkit_sim::{Capacity, ModelConfig, Reuse, RunResult, Scratch, SimChain, Simulator, Trace};

const MIB: u64 = 1 << 20;

fn chain(drive: u32, bytes: u64, t0: f64, t1: f64) -> SimChain {
    SimChain {
        file: drive,
        drive,
        offset: 0,
        bytes,
        t_start: t0,
        t_end: t1,
        kind: ChainKind::Other,
        bitrate_kbps: Some(2000),
        file_size: u64::MAX,
    }
}

fn trace(chains: Vec<SimChain>, drives: usize) -> Trace {
    Trace {
        chains,
        files: (0..drives).map(|d| format!("f{d}")).collect(),
        drives: (0..drives).map(|d| format!("d{d}")).collect(),
    }
}

fn cfg() -> ModelConfig {
    ModelConfig::new(Capacity::given(100.0, 40.0).unwrap())
}

/// Utilization of an interval with `mib` MiB transferred and `seeks` seeks.
fn util(mib: f64, seeks: f64) -> f64 {
    (mib / 100.0 + seeks / 40.0) / 60.0
}

fn run_both(t: &Trace, spec: &str) -> RunResult {
    let sim = Simulator::new(t, cfg()).unwrap();
    let spec: PolicySpec = spec.parse().unwrap();
    let mut s = Scratch::default();
    let a = sim.run(spec.build().as_mut(), &mut s);
    let b = sim.run_timed(spec.build().as_mut(), &mut s);
    assert_eq!(a, b, "chain-by-chain and time-ordered runs disagree");
    let reuse = if spec.to_string().starts_with("first-grow") {
        Reuse::OnceCapped
    } else {
        Reuse::PerChain
    };
    let c = sim.run_with(spec.build().as_mut(), &mut s, reuse);
    assert_eq!(a, c, "{reuse:?} disagrees with asking at every read");
    a
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

/// The busiest interval's utilization is that of `mib` MiB and `seeks` seeks.
#[track_caller]
fn assert_util(r: &RunResult, mib: f64, seeks: f64) {
    assert!(close(r.max_disk_util, util(mib, seeks)), "{r:?}");
}

/// Chain A: 10 MiB from 0 to 100 s on drive 0.
fn chain_a() -> SimChain {
    chain(0, 10 * MIB, 0.0, 100.0)
}

/// Chain A alone on one drive, run under `policy`.
fn a_alone(policy: &str) -> RunResult {
    run_both(&trace(vec![chain_a()], 1), policy)
}

/// Chain A and chain B (2 MiB from 50 to 70 s) on drive `b_drive` (0 or 1).
fn a_and_b(b_drive: u32) -> Trace {
    trace(
        vec![chain_a(), chain(b_drive, 2 * MIB, 50.0, 70.0)],
        b_drive as usize + 1,
    )
}

#[test]
fn single_chain() {
    // 10 MiB over 100 s with 4 MiB prefetches: reads at 0 s, 40 s (4 MiB progressed) and
    // 80 s (8 MiB), the last one 2 MiB past the end. Interval 0 gets 8 MiB + 2 seeks,
    // interval 1 gets 4 MiB + 1 seek. One 4 MiB buffer from 0 s to 140 s.
    let r = a_alone("fixed:4MiB");
    assert_eq!(r.prefetches, 3);
    assert_eq!(r.disk_bytes, 12 * MIB);
    assert_eq!(r.wasted_bytes, 2 * MIB);
    assert_util(&r, 8.0, 2.0);
    assert_eq!((r.busiest_drive, r.busiest_interval), (0, 0));
    assert_eq!(r.max_memory_bytes, 4 * MIB);
    assert!(r.feasible);
}

#[test]
fn two_overlapping_chains_on_one_drive() {
    // A: as in `single_chain`. B: 2 MiB from 50 s to 70 s, one 4 MiB read at 50 s.
    // Interval 0: 12 MiB + 3 seeks. Buffers: A 0–140 s, B 50–110 s => 8 MiB peak at 50 s.
    let t = a_and_b(0);
    let r = run_both(&t, "fixed:4MiB");
    assert_util(&r, 12.0, 3.0);
    assert_eq!(r.max_memory_bytes, 8 * MIB);
    assert!(close(r.memory_peak_s, 50.0));
    assert_eq!(r.wasted_bytes, 2 * MIB + 2 * MIB);
}

#[test]
fn buffer_freed_and_allocated_at_the_same_moment_do_not_add_up() {
    // A ends at 20 s, its buffer goes at 60 s, exactly when B starts.
    let t = trace(vec![chain(0, MIB, 0.0, 20.0), chain(0, MIB, 60.0, 70.0)], 1);
    let r = run_both(&t, "fixed:4MiB");
    assert_eq!(r.max_memory_bytes, 4 * MIB);
    // One read per interval.
    assert_util(&r, 4.0, 1.0);
}

#[test]
fn chain_shorter_than_the_prefetch_size() {
    // 1 MiB chain, 4 MiB prefetch: one read, 3 MiB wasted, a 4 MiB buffer.
    let t = trace(vec![chain(0, MIB, 10.0, 15.0)], 1);
    let r = run_both(&t, "fixed:4MiB");
    assert_eq!(r.prefetches, 1);
    assert_eq!(r.wasted_bytes, 3 * MIB);
    assert_util(&r, 4.0, 1.0);
    assert_eq!(r.max_memory_bytes, 4 * MIB);
    // At the end of its file the read is clipped: no waste beyond the file.
    let mut c = chain(0, MIB, 10.0, 15.0);
    c.offset = 9 * MIB;
    c.file_size = 10 * MIB + MIB / 2;
    let r = run_both(&trace(vec![c], 1), "fixed:4MiB");
    assert_eq!(r.disk_bytes, MIB + MIB / 2);
    assert_eq!(r.max_memory_bytes, MIB + MIB / 2);
}

#[test]
fn chains_on_different_drives() {
    // The same two chains as the overlap test, but B on drive 1: drive 0 keeps
    // 8 MiB + 2 seeks in interval 0 and is the busiest; memory still adds up.
    let t = a_and_b(1);
    let r = run_both(&t, "fixed:4MiB");
    assert_util(&r, 8.0, 2.0);
    assert_eq!(r.busiest_drive, 0);
    assert_eq!(r.max_memory_bytes, 8 * MIB);
    // Make drive 1 the busy one: a 30 MiB chain inside interval 0.
    let t = trace(vec![chain_a(), chain(1, 30 * MIB, 0.0, 30.0)], 2);
    let r = run_both(&t, "fixed:4MiB");
    // 8 reads of 4 MiB = 32 MiB, 8 seeks, all before 30 s.
    assert_util(&r, 32.0, 8.0);
    assert_eq!((r.busiest_drive, r.busiest_interval), (1, 0));
}

#[test]
fn first_grow_buffer_grows_with_the_reads() {
    // First 1 MiB, growth 2, max 4 MiB over a 10 MiB chain from 0 to 100 s: reads of 1 MiB
    // at 0 s, 2 MiB at 10 s, 4 MiB (6 capped) at 30 s, 4 MiB at 70 s; 11 MiB read.
    let r = a_alone("first-grow:max=4MiB,growth=2,other=1MiB");
    assert_eq!(r.prefetches, 4);
    assert_eq!(r.disk_bytes, 11 * MIB);
    assert_util(&r, 7.0, 3.0);
    assert_eq!(r.max_memory_bytes, 4 * MIB);
}

#[test]
fn overload_is_infeasible() {
    // 3 GiB in 10 s on a 100 MiB/s drive: 30 s of transfer in a 60 s interval plus
    // seeks; twice that on one drive is over 100%.
    let t = trace(
        vec![chain(0, 3 << 30, 0.0, 10.0), chain(0, 3 << 30, 0.0, 10.0)],
        1,
    );
    let r = run_both(&t, "fixed:16MiB");
    assert!(!r.feasible);
    assert_util(&r, 6144.0, 384.0);
}

#[test]
fn square_root_rule_scales_by_bit_rate() {
    // 8000 kbps is 4x the 2000 kbps reference: sqrt gives 2x the size, proportional 4x.
    let mut c = chain(0, 64 * MIB, 0.0, 600.0);
    c.bitrate_kbps = Some(8000);
    let t = trace(vec![c], 1);
    assert_eq!(run_both(&t, "sqrt:2MiB@2000").max_memory_bytes, 4 * MIB);
    assert_eq!(
        run_both(&t, "proportional:2MiB@2000").max_memory_bytes,
        8 * MIB
    );
}

#[test]
fn reads_on_interval_boundaries_belong_to_the_later_interval() {
    // 2 MiB reads of a 6 MiB chain from 0 to 180 s: reads at 0, 60 and 120 s, one per
    // interval, so no interval holds more than one read.
    let t = trace(vec![chain(0, 6 * MIB, 0.0, 180.0)], 1);
    let r = run_both(&t, vodkit_prefetch::PolicySpec::DEFAULT_TEXT);
    assert_eq!(r.prefetches, 3);
    assert_util(&r, 2.0, 1.0);
}

#[test]
fn auto_runs_in_time_order_and_holds_its_size_under_light_load() {
    // Far below auto's 60% busy threshold the policy keeps its start size, so the
    // time-ordered run equals Fixed at that size (2000 kbps = the reference rate).
    let t = a_and_b(0);
    let sim = Simulator::new(&t, cfg()).unwrap();
    let mut s = Scratch::default();
    let auto: PolicySpec = "auto:start=4MiB@2000".parse().unwrap();
    let a = sim.run_timed(auto.build().as_mut(), &mut s);
    assert_eq!(a, run_both(&t, "fixed:4MiB"));
}
