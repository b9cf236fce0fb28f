//! Cutting a `netflix-2014` workload down to a validation run: every session keeps its
//! first minutes and its requests below a byte offset, and the catalog keeps only the
//! files those requests touch, each cut to the bytes requested plus a margin, so the file
//! set fits a small emulated disk while the sessions keep the model's request pattern.

use std::collections::HashMap;

use vodkit_workload::model::{ByteRange, Catalog, Request, Session};

/// How far sessions and files are cut.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShrinkLimits {
    /// A session keeps the requests it sends within this many seconds of its start.
    pub session_s: f64,
    /// ... and only while every request ends at or below this byte of its file; the first
    /// request past it ends the session (a later one would not continue a chain).
    pub max_end: u64,
    /// Bytes kept in each file past the last byte requested, so prefetches past a chain's
    /// end are not clipped by an artificial end of file.
    pub margin: u64,
}

/// End offset (exclusive) of a request's range in its file; a request without a range
/// is treated as the whole file and has no known end.
fn request_end(r: &Request) -> Option<u64> {
    match r.range? {
        ByteRange::Closed { last, .. } => Some(last + 1),
        ByteRange::OpenEnded { first, read } => Some(first + read),
    }
}

/// Each session cut to `limits`, sessions left without requests dropped, start times
/// moved so the first session starts at `first_start_s`.
pub fn shrink_sessions(
    sessions: &[Session],
    limits: &ShrinkLimits,
    first_start_s: f64,
) -> Vec<Session> {
    let mut out: Vec<Session> = Vec::new();
    for s in sessions {
        let mut elapsed = 0.0;
        let mut kept = Vec::new();
        for r in &s.requests {
            elapsed += r.pacing_s;
            let fits = request_end(r).is_some_and(|e| e <= limits.max_end);
            if elapsed > limits.session_s || !fits {
                break;
            }
            kept.push(r.clone());
        }
        if kept.is_empty() {
            continue;
        }
        out.push(Session {
            requests: kept,
            ..s.clone()
        });
    }
    let origin = out
        .iter()
        .filter_map(|s| s.start_s)
        .fold(f64::INFINITY, f64::min);
    if origin.is_finite() {
        for s in &mut out {
            if let Some(t) = s.start_s.as_mut() {
                *t = ((*t - origin + first_start_s) * 1000.0).round() / 1000.0;
            }
        }
    }
    out
}

/// The catalog reduced to the files `sessions` request, each file cut to its last byte
/// requested plus `margin` (never grown past its real size). Titles left without files
/// are dropped.
pub fn shrink_catalog(catalog: &Catalog, sessions: &[Session], margin: u64) -> Catalog {
    let mut needed: HashMap<&str, u64> = HashMap::new();
    for r in sessions.iter().flat_map(|s| &s.requests) {
        let end = request_end(r).unwrap_or(u64::MAX);
        let e = needed.entry(r.path.trim_start_matches('/')).or_insert(0);
        *e = (*e).max(end);
    }
    let mut out = Catalog {
        spec: catalog.spec.clone(),
        seed: catalog.seed,
        titles: Vec::new(),
    };
    for t in &catalog.titles {
        let mut title = t.clone();
        title.renditions.retain_mut(|r| {
            r.files.retain_mut(|f| match needed.get(f.path.as_str()) {
                Some(&end) => {
                    f.size_bytes = f.size_bytes.min(end.saturating_add(margin));
                    true
                }
                None => false,
            });
            r.size_bytes = r.files.iter().map(|f| f.size_bytes).sum();
            !r.files.is_empty()
        });
        if !title.renditions.is_empty() {
            out.titles.push(title);
        }
    }
    out
}

/// Bytes of all files in a catalog.
pub fn catalog_bytes(catalog: &Catalog) -> u64 {
    catalog
        .titles
        .iter()
        .flat_map(|t| &t.renditions)
        .flat_map(|r| &r.files)
        .map(|f| f.size_bytes)
        .sum()
}

/// Prefetched bytes that are in memory and not yet requested: what the engine's ledger
/// has recorded as read ahead, less what was since used, found evicted, expired unused or
/// read again.
pub fn outstanding_prefetch(t: &vodkit_prefetch::ledger::LedgerTotals) -> u64 {
    t.prefetched_bytes
        .saturating_sub(t.used_bytes + t.evicted_bytes + t.wasted_bytes + t.superseded_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vodkit_workload::model::{Media, Rendition, Title};

    fn req(path: &str, pacing_s: f64, range: ByteRange) -> Request {
        Request {
            pacing_s,
            ..Request::new(path, Some(range), 30.0)
        }
    }

    fn session(id: u64, start: f64, requests: Vec<Request>) -> Session {
        Session {
            id,
            gap: 1.0,
            start_s: Some(start),
            class: "dsl".into(),
            title: None,
            bitrate_kbps: None,
            requests,
            live: None,
            play: None,
        }
    }

    fn closed(first: u64, last: u64) -> ByteRange {
        ByteRange::Closed { first, last }
    }

    #[test]
    fn sessions_keep_their_first_minutes_below_the_offset_limit() {
        let limits = ShrinkLimits {
            session_s: 60.0,
            max_end: 1000,
            margin: 100,
        };
        let sessions = vec![
            session(
                1,
                50.0,
                vec![
                    req("/a", 0.0, closed(0, 99)),
                    req("/a", 30.0, closed(100, 199)),
                    // 70 s after the start: cut, and so is everything after it.
                    req("/a", 40.0, closed(200, 299)),
                    req("/a", 1.0, closed(300, 399)),
                ],
            ),
            session(
                2,
                80.0,
                vec![
                    req(
                        "/b",
                        0.0,
                        ByteRange::OpenEnded {
                            first: 0,
                            read: 600,
                        },
                    ),
                    // Ends past byte 1000: the session stops here.
                    req("/b", 5.0, closed(600, 1200)),
                    req("/b", 5.0, closed(0, 9)),
                ],
            ),
            // Its first request is already past the offset limit: dropped.
            session(3, 20.0, vec![req("/c", 0.0, closed(5000, 5999))]),
        ];
        let out = shrink_sessions(&sessions, &limits, 1.0);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].requests.len(), 2);
        assert_eq!(out[1].requests.len(), 1);
        // Starts move so the earliest kept session starts at 1 s.
        assert_eq!(out[0].start_s, Some(1.0));
        assert_eq!(out[1].start_s, Some(31.0));

        let file =
            |path: &str, size: u64| Rendition::one_file(500, Media::Video, path.into(), size);
        let catalog = Catalog {
            spec: "netflix-2014".into(),
            seed: 1,
            titles: vec![
                Title {
                    id: 1,
                    rank: 1,
                    duration_s: 10.0,
                    renditions: vec![file("a", 10_000), file("b", 650)],
                },
                Title {
                    id: 2,
                    rank: 2,
                    duration_s: 10.0,
                    renditions: vec![file("c", 10_000)],
                },
            ],
        };
        let small = shrink_catalog(&catalog, &out, 100);
        assert_eq!(small.titles.len(), 1);
        let sizes: Vec<(String, u64)> = small.titles[0]
            .renditions
            .iter()
            .map(|r| (r.files[0].path.clone(), r.size_bytes))
            .collect();
        // a: last byte requested 199 -> 200 + 100; b: 600 + 100 capped at its real 650.
        assert_eq!(sizes, vec![("a".into(), 300), ("b".into(), 650)]);
        assert_eq!(catalog_bytes(&small), 950);
    }

    #[test]
    fn outstanding_prefetch_is_what_is_left_of_the_recorded_bytes() {
        let t = vodkit_prefetch::ledger::LedgerTotals {
            prefetched_bytes: 10_000,
            used_bytes: 4_000,
            evicted_bytes: 1_000,
            wasted_bytes: 2_000,
            superseded_bytes: 500,
            ..Default::default()
        };
        assert_eq!(outstanding_prefetch(&t), 2_500);
        let over = vodkit_prefetch::ledger::LedgerTotals {
            used_bytes: 20_000,
            ..t
        };
        assert_eq!(outstanding_prefetch(&over), 0);
    }
}
