//! Statistical tests with fixed seeds. Every tolerance is a multiple (4-5) of a standard
//! deviation computed from the distribution itself, never a tuned constant.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use vodkit_workload::dist::Zipf;
use vodkit_workload::generate::{Plan, Tally};
use vodkit_workload::spec::{self, Rounding};

fn plan(name: &str, sets: &[(&str, &str)], scale: f64) -> Plan {
    let sets: Vec<(String, String)> = sets
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let checked = spec::load(name, &sets, scale).unwrap();
    let seed = checked.spec.seed;
    Plan::new(checked, seed)
}

fn within(what: &str, got: f64, expected: f64, sd: f64, k: f64) {
    assert!(
        (got - expected).abs() <= k * sd,
        "{what}: got {got}, expected {expected} ± {k}×{sd}"
    );
}

#[test]
fn zipf_sampling_matches_rank_probabilities() {
    let z = Zipf::new(1000, 0.8);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let n = 200_000;
    let mut counts = vec![0u64; 1001];
    for _ in 0..n {
        counts[z.sample(&mut rng)] += 1;
    }
    let nf = n as f64;
    for k in (1..=20).chain([100, 500, 1000]) {
        let p = z.p(k);
        within(
            &format!("rank {k}"),
            counts[k] as f64,
            nf * p,
            (nf * p * (1.0 - p)).sqrt(),
            5.0,
        );
    }
    let tail: u64 = counts[501..].iter().sum();
    let p: f64 = (501..=1000).map(|k| z.p(k)).sum();
    within(
        "ranks 501-1000",
        tail as f64,
        nf * p,
        (nf * p * (1.0 - p)).sqrt(),
        5.0,
    );
}

#[test]
fn cdf_sampling_reproduces_every_cdf_point() {
    let c = spec::load("youtube-2011", &[], 1.0).unwrap();
    for cdf in [&c.durations, &c.watch] {
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        let n = 100_000;
        let xs: Vec<f64> = (0..n).map(|_| cdf.sample(&mut rng)).collect();
        for u in [0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95] {
            let x = cdf.quantile(u);
            if x >= cdf.quantile(1.0) {
                continue; // an atom at the maximum (sessions that watch everything)
            }
            let frac = xs.iter().filter(|&&v| v <= x).count() as f64 / n as f64;
            within(
                &format!("P(X <= {x})"),
                frac,
                u,
                (u * (1.0 - u) / n as f64).sqrt(),
                5.0,
            );
        }
    }
    // Linear interpolation between published points, from (0, 0) below the first.
    let d = &c.durations;
    assert!((d.quantile(0.018) - 15.0).abs() < 1e-9);
    assert!((d.quantile(0.009) - 7.5).abs() < 1e-9);
    assert!((d.quantile(0.5) - (215.0 + 13.0 * (0.5 - 0.494) / 0.05)).abs() < 1e-9);
}

#[test]
fn arrival_gaps_are_exponential_and_classes_follow_shares() {
    let p = plan(
        "youtube-2011",
        &[("catalog.collections.sd.sessions", "40000")],
        1.0,
    );
    let mut gaps = Vec::new();
    let mut class_counts = std::collections::HashMap::new();
    for g in p.sessions() {
        gaps.push(g.session.gap);
        *class_counts.entry(g.session.class.clone()).or_insert(0u64) += 1;
    }
    let n = gaps.len() as f64;
    let mean = gaps.iter().sum::<f64>() / n;
    within("mean gap", mean, 1.0, 1.0 / n.sqrt(), 5.0);
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n;
    // Var of the sample variance of Exp(1) is (mu4 - sigma^4)/n = (9 - 1)/n.
    within("gap variance", var, 1.0, (8.0 / n).sqrt(), 5.0);
    for t in [0.5f64, 1.0, 2.0] {
        let q = (-t).exp();
        let frac = gaps.iter().filter(|&&g| g > t).count() as f64 / n;
        within(
            &format!("P(gap > {t})"),
            frac,
            q,
            (q * (1.0 - q) / n).sqrt(),
            5.0,
        );
    }
    let meta = p.meta();
    let total: f64 = meta.client_classes.iter().map(|c| c.share).sum();
    assert!((total - 1.0).abs() < 1e-12);
    for c in &meta.client_classes {
        let got = class_counts.get(&c.name).copied().unwrap_or(0) as f64;
        within(
            &c.name,
            got,
            n * c.share,
            (n * c.share * (1.0 - c.share)).sqrt(),
            5.0,
        );
    }
}

/// P(a session of title `t` fetches at least `m` request units), from the watch CDF.
fn p_at_least(p: &Plan, t: usize, m: u64) -> f64 {
    if m <= 1 {
        return 1.0;
    }
    if m > p.title_units(t) {
        return 0.0;
    }
    let (ci, _) = p.title_probability(t);
    let (_, q, _) = p.collection_info(ci);
    let d = p.catalog.titles[t].duration_s;
    let threshold = match p.checked.spec.sessions.rounding {
        Rounding::Nearest => (m as f64 - 0.5) * q / d,
        Rounding::Up => (m as f64 - 1.0) * q / d,
    };
    1.0 - p.checked.watch.cdf(threshold)
}

struct Expected {
    unique_titles: (f64, f64),
    single_titles: (f64, f64),
    requests_per_session: (f64, f64),
    unique_chunks: (f64, f64),
    chunks_once: f64,
}

/// Expected Table 3.3 values given the generated catalog (mean, standard deviation).
fn expected(p: &Plan) -> Expected {
    let (n, _, _) = p.collection_info(0);
    let nf = n as f64;
    let mut e = Expected {
        unique_titles: (0.0, 0.0),
        single_titles: (0.0, 0.0),
        requests_per_session: (0.0, 0.0),
        unique_chunks: (0.0, 0.0),
        chunks_once: 0.0,
    };
    let (mut ek, mut ek2) = (0.0, 0.0);
    for t in 0..p.catalog.titles.len() {
        let (_, pt) = p.title_probability(t);
        let seen = 1.0 - (1.0 - pt).powf(nf);
        e.unique_titles.0 += seen;
        e.unique_titles.1 += seen * (1.0 - seen);
        let once = nf * pt * (1.0 - pt).powf(nf - 1.0);
        e.single_titles.0 += once;
        e.single_titles.1 += once * (1.0 - once);
        let mut mean_k = 0.0;
        let mut mean_k2 = 0.0;
        // The unique chunks of a title are 1..=M where M is the longest of its sessions:
        // P(M >= m) = 1 - (1 - p_t P(k >= m))^n gives E[M] and Var[M].
        let (mut em, mut em2) = (0.0, 0.0);
        for m in 1..=p.title_units(t) {
            let a = p_at_least(p, t, m);
            if a == 0.0 {
                break;
            }
            mean_k += a;
            mean_k2 += (2 * m - 1) as f64 * a;
            let chunk = pt * a;
            let seen = 1.0 - (1.0 - chunk).powf(nf);
            em += seen;
            em2 += (2 * m - 1) as f64 * seen;
            e.chunks_once += nf * chunk * (1.0 - chunk).powf(nf - 1.0);
        }
        e.unique_chunks.0 += em;
        e.unique_chunks.1 += em2 - em * em;
        ek += pt * mean_k;
        ek2 += pt * mean_k2;
    }
    e.requests_per_session = (ek, ((ek2 - ek * ek) / nf).sqrt());
    e.unique_titles.1 = e.unique_titles.1.sqrt();
    e.single_titles.1 = e.single_titles.1.sqrt();
    e.unique_chunks.1 = e.unique_chunks.1.sqrt();
    e
}

fn tally(p: &Plan) -> vodkit_workload::generate::Summary {
    let mut t = Tally::new(p);
    for g in p.sessions() {
        t.add(p, &g);
    }
    t.summary(p)
}

#[test]
fn generated_table_3_3_matches_analytic_expectations() {
    for request in ["512KiB", "2MiB"] {
        let p = plan("youtube-2011", &[("request", request)], 1.0);
        let s = tally(&p);
        let e = expected(&p);
        within(
            "unique titles",
            s.unique_titles as f64,
            e.unique_titles.0,
            e.unique_titles.1,
            5.0,
        );
        let single = s.single_session_titles_fraction * s.unique_titles as f64;
        within(
            "single-session titles",
            single,
            e.single_titles.0,
            e.single_titles.1,
            5.0,
        );
        within(
            "requests per session",
            s.mean_requests_per_session,
            e.requests_per_session.0,
            e.requests_per_session.1,
            5.0,
        );
        within(
            "unique chunks",
            s.unique_chunks_requested as f64,
            e.unique_chunks.0,
            e.unique_chunks.1.max(1.0),
            5.0,
        );
        // Chunks requested once come from the same per-title maxima; same spread.
        within(
            "chunks once",
            s.chunks_requested_once as f64,
            e.chunks_once,
            e.unique_chunks.1.max(1.0),
            5.0,
        );
        let (_, q, _) = p.collection_info(0);
        assert!((s.mean_session_duration_s - s.mean_requests_per_session * q).abs() < 1e-6);
        assert_eq!(
            s.total_chunks_requested as f64,
            (s.mean_requests_per_session * s.sessions as f64).round()
        );
    }
}

#[test]
fn default_seed_lands_on_thesis_table_3_3() {
    // Expected values over all catalog draws, with the spread that comes from drawing the
    // catalog (the most popular titles' durations dominate) plus session sampling.
    let p = plan("youtube-2011", &[], 1.0);
    let s = tally(&p);
    let n = s.sessions as f64;
    let z = Zipf::new(p.catalog.titles.len(), p.checked.spec.catalog.zipf_alpha);
    let d = &p.checked.durations;
    let clamp = |x: f64| x.clamp(5.0, 800.0);
    let steps = 4000;
    let mean_d = d.mean_of(steps, clamp);
    let sd_d = (d.mean_of(steps, |x| clamp(x).powi(2)) - mean_d * mean_d).sqrt();
    // Thesis: 3,366 unique titles, 67.5 % of them requested once.
    let unique: f64 = (1..=z.len()).map(|k| 1.0 - (1.0 - z.p(k)).powf(n)).sum();
    let unique_sd: f64 = (1..=z.len())
        .map(|k| {
            let q = 1.0 - (1.0 - z.p(k)).powf(n);
            q * (1.0 - q)
        })
        .sum::<f64>()
        .sqrt();
    within(
        "thesis unique titles vs expectation",
        3366.0,
        unique,
        unique_sd,
        4.0,
    );
    within(
        "generated unique titles vs thesis",
        s.unique_titles as f64,
        3366.0,
        unique_sd * 2.0,
        4.0,
    );
    within(
        "single-session fraction vs thesis",
        s.single_session_titles_fraction,
        0.675,
        4.0 * unique_sd / unique,
        1.0,
    );
    // Thesis: mean duration of requested titles 258.7 s.
    let dur_sd = sd_d / s.unique_titles as f64 * (s.unique_titles as f64).sqrt();
    within(
        "mean title duration vs thesis",
        s.mean_title_duration_s,
        258.7,
        dur_sd * 2.0,
        4.0,
    );
    within(
        "thesis mean title duration vs distribution",
        258.7,
        mean_d,
        dur_sd,
        4.0,
    );
    // Thesis: 146.3 s per session, 14.628 requests. Spread across catalogs: the title a
    // session picks has Zipf weight p_k, so Var(mean) ≈ Var(g(D)) Σ p_k² + Var(session)/n.
    let watch = &p.checked.watch;
    let g = |dur: f64| {
        watch.mean_of(400, |f| {
            (dur * f / 10.0).round().max(1.0).min((dur / 10.0).ceil())
        })
    };
    let g_mean = d.mean_of(400, |x| g(clamp(x)));
    let g_sd = (d.mean_of(400, |x| g(clamp(x)).powi(2)) - g_mean * g_mean).sqrt();
    let sum_p2: f64 = (3..=z.len()).map(|k| z.p(k).powi(2)).sum();
    let median = clamp(d.quantile(0.5));
    let expected_k = (z.p(1) + z.p(2)) * g(median) + (1.0 - z.p(1) - z.p(2)) * g_mean;
    let sd_k = (g_sd * g_sd * sum_p2 + 100.0 / n).sqrt();
    within(
        "thesis requests per session vs expectation",
        14.628,
        expected_k,
        sd_k,
        4.0,
    );
    within(
        "generated requests per session vs thesis",
        s.mean_requests_per_session,
        14.628,
        sd_k * 2.0,
        4.0,
    );
    within(
        "generated session time vs thesis",
        s.mean_session_duration_s,
        146.3,
        sd_k * 20.0,
        4.0,
    );
    // Chunk counts scale with requests per session: same relative spread.
    let rel = sd_k / expected_k;
    within(
        "total chunks vs thesis",
        s.total_chunks_requested as f64,
        105_323.0,
        105_323.0 * rel * 2.0,
        4.0,
    );
    within(
        "unique chunks vs thesis",
        s.unique_chunks_requested as f64,
        60_004.0,
        60_004.0 * rel * 2.0,
        4.0,
    );
    within(
        "chunks once vs thesis",
        s.chunks_requested_once as f64,
        44_478.0,
        44_478.0 * rel * 2.0,
        4.0,
    );
}
