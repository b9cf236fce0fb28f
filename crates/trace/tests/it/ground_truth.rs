//! Acceptance: on logs synthesized from the netflix-2014 model the analyzer recovers the
//! ground truth — every chain exactly (count, bytes, boundaries, request counts) and at
//! least 95% of the phase time classified as in the truth.

use std::collections::HashMap;
use std::path::Path;

use vodkit_trace::analyze::{analyze, AnalyzeOptions, ClosedSession, SessionSink};
use vodkit_trace::chain::read_chains_csv;
use vodkit_trace::files::FileTable;
use vodkit_trace::phase::{agreement, PhaseKind};
use vodkit_workload::netflix::{synth_log, NetflixSpec};

type Key = (String, String, u64, u64, u32);

#[derive(Default)]
struct Collect {
    chains: Vec<(Key, f64, f64)>,
    phases: HashMap<String, Vec<(PhaseKind, f64, f64)>>,
}

impl SessionSink for Collect {
    fn session(&mut self, s: &ClosedSession<'_>) -> std::io::Result<()> {
        let (name, phases) = (s.name, s.phases);
        for c in s.chains {
            let key = (
                name.to_string(),
                s.files.name(c.file).to_string(),
                c.start,
                c.bytes,
                c.requests,
            );
            self.chains.push((key, c.t0, c.t1));
        }
        self.phases.insert(
            name.to_string(),
            phases
                .iter()
                .map(|p| (p.kind, p.t_start, p.t_end))
                .collect(),
        );
        Ok(())
    }
}

/// `truth/phases.csv`: `session,phase,t_start,t_end`, the generator's labels read as the
/// analyzer's `PhaseKind` by name.
fn truth_phases(path: &Path) -> HashMap<String, Vec<(PhaseKind, f64, f64)>> {
    let mut out: HashMap<String, Vec<(PhaseKind, f64, f64)>> = HashMap::new();
    let mut rdr = csv::Reader::from_path(path).unwrap();
    for row in rdr.deserialize() {
        let (session, kind, t0, t1): (String, PhaseKind, f64, f64) = row.unwrap();
        out.entry(session).or_default().push((kind, t0, t1));
    }
    out
}

/// Synthesizes a netflix-2014 log at `scale` with `sets` and analyzes it: the directory
/// (with `truth/`), the generator's summary, the analysis and what the sink collected.
fn synthesize_and_analyze(
    seed: u64,
    scale: f64,
    sets: &[(&str, &str)],
) -> (
    tempfile::TempDir,
    vodkit_workload::netflix::SynthSummary,
    vodkit_trace::analyze::Analysis,
    Collect,
) {
    let dir = tempfile::tempdir().unwrap();
    let sets: Vec<(String, String)> = sets
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let spec = NetflixSpec::new(seed, scale, &sets).unwrap();
    let sum = synth_log(&spec, dir.path()).unwrap();
    let files = FileTable::from_csv(&dir.path().join("files.csv")).unwrap();
    let log = std::io::BufReader::new(std::fs::File::open(dir.path().join("log.csv")).unwrap());
    let mut got = Collect::default();
    let a = analyze(log, files, &AnalyzeOptions::default(), &mut got).unwrap();
    (dir, sum, a, got)
}

fn check(seed: u64, sets: &[(&str, &str)], time_tolerance: f64) {
    let (dir, sum, a, got) = synthesize_and_analyze(seed, 0.15, sets);
    assert_eq!(
        sum.ambiguous, 0,
        "the generator must not produce ambiguous adjacency"
    );
    assert!(sum.requests > 5_000, "{sum:?}");
    assert_eq!(a.read.bad_lines, 0, "{}", a.read.describe());
    assert_eq!(a.read.requests, sum.requests);
    assert_eq!(a.chains.chains, sum.chains);

    // Chains: the same multiset of (session, file, start, bytes, requests).
    let truth = read_chains_csv(&dir.path().join("truth/chains.csv")).unwrap();
    let mut want: Vec<(Key, f64, f64)> = truth
        .iter()
        .map(|c| {
            (
                (
                    c.session.clone(),
                    c.file.clone(),
                    c.start_offset,
                    c.bytes,
                    c.requests,
                ),
                c.t_start,
                c.t_end,
            )
        })
        .collect();
    let mut have = got.chains.clone();
    want.sort_by(|x, y| x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)));
    have.sort_by(|x, y| x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)));
    let want_keys: Vec<&Key> = want.iter().map(|w| &w.0).collect();
    let have_keys: Vec<&Key> = have.iter().map(|h| &h.0).collect();
    if want_keys != have_keys {
        let missing: Vec<_> = want_keys
            .iter()
            .filter(|k| !have_keys.contains(k))
            .take(5)
            .collect();
        let extra: Vec<_> = have_keys
            .iter()
            .filter(|k| !want_keys.contains(k))
            .take(5)
            .collect();
        panic!(
            "chains differ: truth {} analyzer {}; missing {missing:?}; extra {extra:?}",
            want_keys.len(),
            have_keys.len()
        );
    }
    for (w, h) in want.iter().zip(&have) {
        assert!(
            (w.1 - h.1).abs() <= time_tolerance && (w.2 - h.2).abs() <= time_tolerance,
            "{w:?} vs {h:?}"
        );
    }

    // Phases: at least 95% of the true phase time classified the same.
    let truth_ph = truth_phases(&dir.path().join("truth/phases.csv"));
    let (mut agree, mut total) = (0.0, 0.0);
    for (session, t) in &truth_ph {
        let found = got.phases.get(session).map(Vec::as_slice).unwrap_or(&[]);
        let (a, tt) = agreement(t, found);
        agree += a;
        total += tt;
    }
    let share = agree / total;
    println!(
        "seed {seed}: {} chains, phase agreement {:.2}%",
        want.len(),
        100.0 * share
    );
    assert!(total > 0.0);
    assert!(share >= 0.95, "phase agreement {:.2}% < 95%", 100.0 * share);
}

#[test]
fn synthesized_log_chains_and_phases_match_truth() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Slow]) {
        return;
    }
    check(11, &[], 0.002);
}

#[test]
fn one_second_timestamps_still_give_exact_chains() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Slow]) {
        return;
    }
    check(12, &[("ts_resolution", "1")], 1.001);
}

#[test]
fn open_ended_heavy_clients_match_truth() {
    check(
        13,
        &[
            ("open_video_share", "0.8"),
            ("open_audio_share", "0.9"),
            ("combined_share", "0.4"),
        ],
        0.002,
    );
}

/// Chain-length exponent c over 1–200 MB and the share of chains ≤ 1 MB of a synthesized
/// log at `scale`, with `sets`.
fn chain_shape(seed: u64, scale: f64, sets: &[(&str, &str)]) -> (f64, f64) {
    let (_dir, _, a, _) = synthesize_and_analyze(seed, scale, sets);
    let mid = a
        .chains
        .fit
        .segments
        .iter()
        .find(|s| s.lo == 1e6)
        .expect("a 1-200 MB segment");
    (mid.c, a.chains.chains_le_1mb_pct)
}

#[test]
fn netflix_model_has_the_thesis_chain_length_slope() {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Slow]) {
        return;
    }
    // Thesis 5.3.3: S(x) ∝ x^-0.54 between 1 and 200 MB; 5.3.1: 60% of chains ≤ 1 MB.
    let (c, short) = chain_shape(5, 0.5, &[]);
    println!("calibrated model: c = {c:.3}, {short:.1}% of chains <= 1 MB");
    assert!((0.45..=0.65).contains(&c), "exponent {c:.3}, thesis 0.54");
    assert!(
        (45.0..=68.0).contains(&short),
        "{short:.1}% <= 1 MB, thesis 60%"
    );
    // Without fetches from other servers the chains run as long as the stable phases and
    // the slope is far flatter (0.32 at scale 1): the calibration is what makes it.
    let (flat, _) = chain_shape(5, 0.5, &[("elsewhere_share", "0")]);
    println!("without other servers: c = {flat:.3}");
    assert!(flat < c - 0.1, "{flat:.3} vs {c:.3}");
}
