//! Policy families swept over a size parameter (thesis Figs. 5.22/5.23), run in parallel,
//! and the comparison with Fixed ("−42% memory at equal best utilization").

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr, VariantNames};
use vodkit_prefetch::policy::{AutoParams, FirstGrowParams};
use vodkit_prefetch::PolicySpec;

use crate::firstgrow::FirstGrowSetup;
use crate::model::{Reuse, RunResult, Scratch, Simulator};

/// A policy family; the sweep parameter means a different thing for each (thesis 5.6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(EnumString, IntoStaticStr, VariantNames)]
#[strum(serialize_all = "kebab-case", parse_err_ty = String, parse_err_fn = unknown_family)]
pub enum Family {
    /// The parameter is the one size.
    Fixed,
    /// The size at the reference bit rate, scaled in proportion to each file's rate.
    Proportional,
    /// The size at the reference bit rate, scaled by the square root of the rate ratio.
    #[strum(to_string = "sqrt", serialize = "square-root")]
    Sqrt,
    /// The maximum size.
    FirstGrow,
    /// The maximum size at the reference rate, scaled by the square-root rule.
    FirstGrowSr,
    /// The starting size at the reference rate; the policy adapts from there.
    Auto,
}

fn unknown_family(s: &str) -> String {
    vodkit_units::unknown_choice("policy", s, Family::VARIANTS)
}

impl Family {
    pub const ALL: [Family; 6] = [
        Family::Fixed,
        Family::Proportional,
        Family::Sqrt,
        Family::FirstGrow,
        Family::FirstGrowSr,
        Family::Auto,
    ];

    pub fn name(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Result<Family, String> {
        s.trim().parse()
    }

    /// Parses a comma-separated list (`fixed,sqrt,...`), keeping order, without repeats.
    pub fn parse_list(s: &str) -> Result<Vec<Family>, String> {
        let mut out = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let f = Family::parse(part)?;
            if !out.contains(&f) {
                out.push(f);
            }
        }
        if out.is_empty() {
            return Err("--policy: expected at least one policy".into());
        }
        Ok(out)
    }

    /// The policy for parameter `bytes`.
    pub fn spec(self, bytes: u64, ref_kbps: u32, fg: &FirstGrowSetup) -> PolicySpec {
        let first_grow = |sr: Option<u32>| {
            PolicySpec::FirstGrow(FirstGrowParams {
                first_open_at_zero: fg.open_at_zero.bytes,
                first_chunk_at_zero: fg.chunk_at_zero.bytes,
                first_other: fg.other.bytes,
                growth: fg.growth.factor,
                max_bytes: bytes,
                sr_ref_kbps: sr,
            })
        };
        match self {
            Family::Fixed => PolicySpec::Fixed { bytes },
            Family::Proportional => PolicySpec::Proportional { bytes, ref_kbps },
            Family::Sqrt => PolicySpec::Sqrt { bytes, ref_kbps },
            Family::FirstGrow => first_grow(None),
            Family::FirstGrowSr => first_grow(Some(ref_kbps)),
            Family::Auto => PolicySpec::Auto(AutoParams {
                start_bytes: bytes,
                ref_kbps,
                ..AutoParams::default()
            }),
        }
    }

    /// How often the simulator needs to ask this family's policy within a chain.
    pub fn reuse(self) -> Reuse {
        match self {
            Family::Fixed | Family::Proportional | Family::Sqrt => Reuse::PerChain,
            Family::FirstGrow | Family::FirstGrowSr => Reuse::OnceCapped,
            Family::Auto => Reuse::Never,
        }
    }

    /// Whether runs must follow global time order (the policy learns from observations).
    pub fn adapts(self) -> bool {
        self == Family::Auto
    }
}

/// One point of a sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub param_bytes: u64,
    pub spec: String,
    #[serde(flatten)]
    pub result: RunResult,
}

/// All points of one family.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    pub policy: Family,
    pub points: Vec<Point>,
}

/// Runs every family at every parameter on `threads` workers; `progress(done, total)` is
/// called after each run.
pub fn sweep(
    sim: &Simulator<'_>,
    families: &[Family],
    params: &[u64],
    ref_kbps: u32,
    fg: &FirstGrowSetup,
    threads: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Vec<Curve> {
    let jobs: Vec<(usize, usize)> = (0..families.len())
        .flat_map(|f| (0..params.len()).map(move |p| (f, p)))
        .collect();
    let results: Mutex<Vec<Option<Point>>> = Mutex::new(vec![None; jobs.len()]);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1).min(jobs.len().max(1)) {
            s.spawn(|| {
                let mut scratch = Scratch::default();
                loop {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(f, p)) = jobs.get(j) else { break };
                    let family = families[f];
                    let spec = family.spec(params[p], ref_kbps, fg);
                    let mut policy = spec.build();
                    let result = if family.adapts() {
                        sim.run_timed(policy.as_mut(), &mut scratch)
                    } else {
                        sim.run_with(policy.as_mut(), &mut scratch, family.reuse())
                    };
                    results.lock().expect("no panics while holding")[j] = Some(Point {
                        param_bytes: params[p],
                        spec: spec.to_string(),
                        result,
                    });
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, jobs.len());
                }
            });
        }
    });
    let mut all = results
        .into_inner()
        .expect("no panics while holding")
        .into_iter();
    families
        .iter()
        .map(|&policy| Curve {
            policy,
            points: (0..params.len())
                .map(|_| all.next().flatten().expect("every job ran"))
                .collect(),
        })
        .collect()
}

/// A policy compared with Fixed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub policy: Family,
    /// Lowest utilization over the sweep, and its parameter and memory.
    pub best_util: f64,
    pub best_param_bytes: u64,
    pub best_memory_bytes: u64,
    /// Memory needed to reach Fixed's best utilization, relative to Fixed's memory there
    /// (−0.42 = 42% less); `None` when the policy never gets that low.
    pub memory_change_at_equal_util: Option<f64>,
    /// Lowest utilization within Fixed's memory at its best point, relative to Fixed's best
    /// utilization; `None` when the policy always needs more memory.
    pub util_change_at_equal_memory: Option<f64>,
}

/// The point of a curve with the lowest utilization (first one on ties).
pub fn best_point(c: &Curve) -> Option<&Point> {
    c.points
        .iter()
        .min_by(|a, b| a.result.max_disk_util.total_cmp(&b.result.max_disk_util))
}

/// Lowest `y` over the curve where `x <= limit`, following the curve between sweep points
/// linearly (points in parameter order); `None` if it never gets to `limit`.
pub fn lowest_within(points: &[(f64, f64)], limit: f64) -> Option<f64> {
    let mut best: Option<f64> = None;
    let mut take = |y: f64| best = Some(best.map_or(y, |b: f64| b.min(y)));
    for (i, &(x, y)) in points.iter().enumerate() {
        if x <= limit {
            take(y);
        }
        if let Some(&(x2, y2)) = points.get(i + 1) {
            if (x - limit) * (x2 - limit) < 0.0 {
                let f = (limit - x) / (x2 - x);
                take(y + f * (y2 - y));
            }
        }
    }
    best
}

/// Compares every curve with the Fixed curve (if there is one).
pub fn compare_with_fixed(curves: &[Curve]) -> Vec<Comparison> {
    let fixed = curves
        .iter()
        .find(|c| c.policy == Family::Fixed)
        .and_then(best_point);
    curves
        .iter()
        .filter_map(|c| {
            let best = best_point(c)?;
            let (mem_change, util_change) = match fixed {
                Some(f) => {
                    let fu = f.result.max_disk_util;
                    let fm = f.result.max_memory_bytes as f64;
                    let um: Vec<(f64, f64)> = c
                        .points
                        .iter()
                        .map(|p| (p.result.max_disk_util, p.result.max_memory_bytes as f64))
                        .collect();
                    let mu: Vec<(f64, f64)> = um.iter().map(|&(u, m)| (m, u)).collect();
                    (
                        lowest_within(&um, fu * (1.0 + 1e-12))
                            .filter(|_| fm > 0.0)
                            .map(|m| m / fm - 1.0),
                        lowest_within(&mu, fm * (1.0 + 1e-12))
                            .filter(|_| fu > 0.0)
                            .map(|u| u / fu - 1.0),
                    )
                }
                None => (None, None),
            };
            Some(Comparison {
                policy: c.policy,
                best_util: best.result.max_disk_util,
                best_param_bytes: best.param_bytes,
                best_memory_bytes: best.result.max_memory_bytes,
                memory_change_at_equal_util: mem_change,
                util_change_at_equal_memory: util_change,
            })
        })
        .collect()
}

/// Parses `START:END:STEP` (sizes such as `1MiB:16MiB:1MiB`) or a comma list of sizes.
pub fn parse_sweep(s: &str) -> Result<Vec<u64>, String> {
    let size = |t: &str| -> Result<u64, String> {
        Ok(vodkit_units::parse_positive_size(t).map_err(|e| e.flag("sweep"))?)
    };
    let parts: Vec<&str> = s.split(':').collect();
    let out: Vec<u64> = match parts.as_slice() {
        [a, b, c] => {
            let (start, end, step) = (size(a)?, size(b)?, size(c)?);
            if end < start {
                return Err(format!("--sweep {s}: end is smaller than start"));
            }
            if (end - start) / step > 10_000 {
                return Err(format!("--sweep {s}: more than 10000 points"));
            }
            (0..=(end - start) / step)
                .map(|k| start + k * step)
                .collect()
        }
        [list] => list.split(',').map(size).collect::<Result<_, _>>()?,
        _ => {
            return Err(format!(
                "--sweep {s}: expected START:END:STEP or SIZE,SIZE,..."
            ))
        }
    };
    if out.is_empty() {
        return Err(format!("--sweep {s}: no sizes"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_ranges_and_lists() {
        let m = 1u64 << 20;
        assert_eq!(
            parse_sweep("1MiB:4MiB:1MiB").unwrap(),
            vec![m, 2 * m, 3 * m, 4 * m]
        );
        assert_eq!(parse_sweep("2MiB,512KiB").unwrap(), vec![2 * m, m / 2]);
        assert!(parse_sweep("4MiB:1MiB:1MiB")
            .unwrap_err()
            .contains("smaller"));
        assert!(parse_sweep("1MiB:x:1MiB").unwrap_err().contains("'x'"));
        assert!(parse_sweep("0").is_err());
    }

    #[test]
    fn lowest_within_interpolates_at_the_crossing() {
        // Utilization falls from 0.8 to 0.4 while memory rises from 10 to 30.
        let curve = [(0.8, 10.0), (0.4, 30.0)];
        assert_eq!(lowest_within(&curve, 0.6), Some(20.0));
        assert_eq!(lowest_within(&curve, 0.3), None);
        assert_eq!(lowest_within(&curve, 0.9), Some(10.0));
    }

    #[test]
    fn family_names_round_trip_and_square_root_is_sqrt() {
        for f in Family::ALL {
            assert_eq!(Family::parse(f.name()), Ok(f));
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("\"{}\"", f.name()));
        }
        assert_eq!(Family::parse(" square-root "), Ok(Family::Sqrt));
        assert_eq!(Family::FirstGrowSr.name(), "first-grow-sr");
        assert_eq!(
            Family::parse("lru").unwrap_err(),
            "policy `lru`: expected fixed, proportional, sqrt, first-grow, first-grow-sr or auto"
        );
    }

    #[test]
    fn families_parse_and_build_their_specs() {
        let fg = FirstGrowSetup::table();
        let l = Family::parse_list("fixed,sqrt,first-grow-sr,sqrt").unwrap();
        assert_eq!(l, vec![Family::Fixed, Family::Sqrt, Family::FirstGrowSr]);
        assert!(Family::parse_list("fixed,bogus")
            .unwrap_err()
            .contains("bogus"));
        let s = Family::FirstGrowSr.spec(16 << 20, 2000, &fg).to_string();
        assert!(
            s.starts_with("first-grow-sr:max=16777216,growth=3.35"),
            "{s}"
        );
        assert!(s.ends_with("ref=2000"), "{s}");
        assert_eq!(
            Family::Sqrt.spec(1000, 2000, &fg).to_string(),
            "sqrt:1000@2000"
        );
        assert!(Family::Auto
            .spec(1 << 20, 2000, &fg)
            .to_string()
            .starts_with("auto:start=1048576@2000"));
    }
}
