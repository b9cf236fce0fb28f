//! The fast-forward brings a point to steady state: on the emulated disk with a small memory
//! budget, nginx's judged window has two halves that agree within 10% in disk MB/s and
//! within 10 points in the share of bytes served from memory, and the page cache is full
//! when the window starts. Needs root, FUSE, the loop driver and nginx; elsewhere it says
//! why and does nothing, except under `CI`, where that is a failure.

use vodkit_bench::report;
use vodkit_bench::runner::{self, BenchRequest};
use vodkit_bench::warmup::{FastForward, FastForwardChoice, DISK_TOLERANCE, SHARE_TOLERANCE};

/// The budget: small, so that the history fills it several times over in seconds.
const BUDGET: u64 = 64 << 20;
/// The offered load (MB/s): modest, so a loaded two-core machine keeps up with it, and
/// eight times that during the history.
const OFFERED_MB_S: f64 = 3.0;
/// Points run before the test gives up on a machine whose page cache others keep dropping.
const ATTEMPTS: u32 = 4;

#[test]
fn a_fast_forwarded_point_is_at_steady_state_on_the_emulated_disk() {
    // Titles of 20-40 s; the chunks the session list asks for (it is repeated to cover the
    // history and the point) are more than the budget holds, so the disk stays in play.
    let Some(t) = crate::on_emulated_disk(20, 40, 0.01) else {
        return;
    };
    let load = vodkit_bench::adapters::WorkloadLoad::open(&t.workload).unwrap();
    let rate = runner::rate_guess(&load, OFFERED_MB_S);
    let longest = load
        .sessions
        .iter()
        .map(vodkit_load::warm::nominal_length)
        .fold(0.0, f64::max);
    // Judged for steadiness, not for capacity. The point is long enough that each half of
    // the judged window (from the point it settled, a quarter in) holds tens of seconds of
    // sessions.
    let search = format!("fixed-rates:{rate:.3}");
    let mut req = BenchRequest {
        memory: Some(BUDGET),
        fast_forward: FastForwardChoice::On(FastForward::DEFAULT),
        // Its halves are judged: the point runs its whole window whatever its verdict.
        early_stop: false,
        ..crate::bench_request(
            &t.workload,
            "nginx",
            "hdd:wd-red",
            search,
            100,
            t.dir.path(),
        )
    };
    // Other processes on a shared machine may drop the page cache (`drop_caches`, as every
    // bench point and disk test does) while the point runs. The bench counts and reports
    // that; such a point says nothing about the fast-forward, so it is run again, and a
    // machine that never leaves a point alone cannot judge it (a failure under `CI`).
    let mut rep = None;
    for attempt in 1..=ATTEMPTS {
        req.out = t.dir.path().join(format!("out-{attempt}"));
        let (r, _) = runner::run(&req).unwrap();
        let drops = r.server("nginx").unwrap().points[0]
            .metrics
            .outside_cache_drops
            .unwrap_or(0);
        if drops == 0 {
            rep = Some(r);
            break;
        }
        eprintln!(
            "attempt {attempt}: another process dropped the page cache {drops} time(s) during the point"
        );
    }
    let Some(rep) = rep else {
        assert!(
            std::env::var_os("CI").is_none(),
            "another process dropped the page cache during every one of {ATTEMPTS} points"
        );
        eprintln!(
            "SKIPPED: another process dropped the page cache during every one of {ATTEMPTS} points"
        );
        return;
    };
    assert!(report::check(&rep).is_empty(), "{:?}", report::check(&rep));
    let s = rep.server("nginx").unwrap();
    assert_eq!(s.status, report::MEASURED, "{:?}", s.reason);
    let p = &s.points[0].metrics;
    let history = p.fast_forward.as_ref().expect("a history was played");
    let st = p.steadiness.expect("the judged window's halves");
    eprintln!(
        "rate {rate:.3}/s; history {:.0} s in {:.0} s ({:.0} MB, {:?} of it asked); halves {}; device {:?}; notes {:?}",
        history.window_s,
        history.wall_s,
        history.delivered_mb,
        history.delivered_fraction,
        st.describe(),
        p.device,
        p.notes
    );
    assert!(!history.server_clock, "nginx has no prefetch clock");
    assert!(
        history.window_s >= 2.0 * longest - 1e-6,
        "two longest sessions ({longest:.0} s) at least"
    );
    // The page cache was filled by the history: the judged window starts warm.
    let start = st.page_cache_bytes[0].expect("the budget cgroup's page cache");
    assert!(start >= BUDGET / 2, "page cache {start} at the start");
    let [a, b] = st.halves;
    let (sa, sb) = (a.memory_share().unwrap(), b.memory_share().unwrap());
    assert!(
        (sa - sb).abs() <= SHARE_TOLERANCE,
        "memory share {sa:.3} → {sb:.3}"
    );
    assert!(
        (a.disk_mb_s - b.disk_mb_s).abs() <= DISK_TOLERANCE * a.disk_mb_s.max(b.disk_mb_s),
        "disk {:.2} → {:.2} MB/s",
        a.disk_mb_s,
        b.disk_mb_s
    );
    assert!(st.steady);
    // The drive's own counters were read over the window.
    let d = p.device.expect("the emulated drive's counters");
    assert!(d.positionings_per_s > 0.0 && d.busy_fraction > 0.0, "{d:?}");
}
