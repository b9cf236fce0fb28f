//! Sharded load: several load hosts (or Kubernetes pods) each run a deterministic part of
//! one run, at the times the single-host run would have used, and `vodkit load merge` puts
//! the parts back together and refuses parts that do not belong together.
//!
//! Shard `I` of `N` (0-based, like a Kubernetes Indexed Job's `JOB_COMPLETION_INDEX`) runs
//! the sessions whose position in the log is `I` modulo `N`. The arrival schedule is
//! computed over the whole log first, so every session starts when it would have in a
//! single-process run; `--start-at` makes the shards' clocks start at the same wall time.

use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One part of a sharded run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// Parse `I/N` with `0 <= I < N`.
    pub fn parse(text: &str) -> Result<Shard, String> {
        let bad = || format!("shard `{text}`: expected I/N with 0 <= I < N (e.g. 0/4)");
        let (i, n) = text.trim().split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Whether the session at `position` in the log belongs to this shard.
    pub fn owns(self, position: usize) -> bool {
        position % self.count as usize == self.index as usize
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Parse `--start-at`: RFC 3339 (`2026-11-24T10:00:00Z`) or Unix seconds (`1795000000`,
/// fractions allowed).
pub fn parse_start_at(text: &str) -> Result<SystemTime, String> {
    let t = text.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(UNIX_EPOCH + Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_rfc3339_weak(t).map_err(|_| {
        format!("start time `{text}`: expected RFC 3339 (2026-11-24T10:00:00Z) or Unix seconds")
    })
}

/// Seconds since the Unix epoch.
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Check that sharded results belong to one run and that none is missing or repeated.
/// `parts` are (shard, identity) per input, identity being whatever must agree (target,
/// log, rate, start time). Unsharded inputs (`None`) may only be merged with each other.
pub fn check_complete(parts: &[(Option<Shard>, String)]) -> Result<(), String> {
    let sharded = parts.iter().filter(|(s, _)| s.is_some()).count();
    if sharded == 0 {
        return Ok(());
    }
    if sharded != parts.len() {
        let i = parts.iter().position(|(s, _)| s.is_none()).unwrap_or(0);
        return Err(format!(
            "input {} is not a shard, the others are: merge the shards of one run only",
            i + 1
        ));
    }
    let (Some(first), id) = &parts[0] else {
        return Ok(());
    };
    let mut seen = vec![0u32; first.count as usize];
    for (k, (shard, other)) in parts.iter().enumerate() {
        let Some(s) = shard else { continue };
        if s.count != first.count {
            return Err(format!(
                "input {} is shard {s} but input 1 is shard {first}: different runs",
                k + 1
            ));
        }
        if other != id {
            return Err(format!(
                "input {} (shard {s}) belongs to a different run: {other} vs {id}",
                k + 1
            ));
        }
        seen[s.index as usize] += 1;
    }
    let list = |want: u32| -> Vec<String> {
        seen.iter()
            .enumerate()
            .filter(|(_, &n)| if want == 0 { n == 0 } else { n > 1 })
            .map(|(i, _)| format!("{i}/{}", first.count))
            .collect()
    };
    let (missing, repeated) = (list(0), list(2));
    if !repeated.is_empty() {
        return Err(format!("shard given twice: {}", repeated.join(", ")));
    }
    if !missing.is_empty() {
        return Err(format!("missing shard(s): {}", missing.join(", ")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_partition_the_log() {
        let s = Shard::parse("1/3").unwrap();
        assert_eq!(s.to_string(), "1/3");
        let owned: Vec<usize> = (0..9).filter(|&i| s.owns(i)).collect();
        assert_eq!(owned, vec![1, 4, 7]);
        // Every session in exactly one shard.
        for i in 0..100 {
            let owners = (0..3)
                .filter(|&k| Shard { index: k, count: 3 }.owns(i))
                .count();
            assert_eq!(owners, 1);
        }
        for bad in ["3/3", "1", "a/2", "0/0", "-1/2", ""] {
            assert!(
                Shard::parse(bad).unwrap_err().contains("expected I/N"),
                "{bad}"
            );
        }
    }

    #[test]
    fn start_times_parse_both_ways() {
        let a = parse_start_at("2026-11-24T10:00:00Z").unwrap();
        let b = parse_start_at("1795514400").unwrap();
        assert_eq!(unix_seconds(a), 1795514400.0);
        assert_eq!(a, b);
        assert_eq!(unix_seconds(parse_start_at("10.5").unwrap()), 10.5);
        assert!(parse_start_at("tomorrow").unwrap_err().contains("RFC 3339"));
        assert!(parse_start_at("-5").is_err());
    }

    #[test]
    fn merges_refuse_missing_repeated_and_foreign_shards() {
        let sh = |i, n| Some(Shard { index: i, count: n });
        let id = || "run A".to_string();
        assert!(check_complete(&[(None, id()), (None, id())]).is_ok());
        assert!(check_complete(&[(sh(0, 2), id()), (sh(1, 2), id())]).is_ok());
        let e = check_complete(&[(sh(0, 3), id()), (sh(2, 3), id())]).unwrap_err();
        assert_eq!(e, "missing shard(s): 1/3");
        let e = check_complete(&[(sh(0, 2), id()), (sh(0, 2), id())]).unwrap_err();
        assert!(e.contains("given twice: 0/2"), "{e}");
        let e = check_complete(&[(sh(0, 2), id()), (sh(1, 3), id())]).unwrap_err();
        assert!(e.contains("different runs"), "{e}");
        let e = check_complete(&[(sh(0, 2), id()), (sh(1, 2), "run B".into())]).unwrap_err();
        assert!(
            e.contains("input 2 (shard 1/2) belongs to a different run"),
            "{e}"
        );
        let e = check_complete(&[(sh(0, 2), id()), (None, id())]).unwrap_err();
        assert!(e.contains("input 2 is not a shard"), "{e}");
    }
}
