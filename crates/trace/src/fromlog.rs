//! Production logs in, sessions out (`vodkit workload from-log`): rebuild viewing
//! sessions from an access log, in the form `vodkit load` replays and `vodkit fileset
//! create` builds a stand-in file set for.
//!
//! A viewing session is the requests of one client (address + user agent, as `vodkit
//! trace` keys them) for one file, split where the client was silent for longer than the
//! idle limit (the thesis's inactivity rule, 5.1). Each becomes a [`Session`]: its requests
//! in the order the server received them, with their byte ranges (the logged `Range`, or
//! the bytes sent for an open-ended read), `pacing_s` = the start-to-start gap the log shows,
//! and a timeout of the gap to the client's next request (it was evidently satisfied by
//! then), at least [`MIN_TIMEOUT_S`]. Sessions are ordered by arrival and their `gap`s are
//! inter-arrival times scaled to mean 1, so `vodkit load --rate R` replays them as a Poisson
//! process at any rate; the log's own rate is in the summary (replay at it to reproduce the
//! log's load).
//!
//! Every file becomes a title with one unchunked rendition whose size is the highest byte
//! any request reached; its duration is taken from a nominal bit rate (the log does not
//! say). Unless identities are kept, paths are replaced by a keyed hash (HMAC-SHA-256 via
//! `ring`), so a file set and session list built from a production log name no title;
//! client addresses never leave the reader.

use std::collections::HashMap;

use serde::Serialize;
use vodkit_workload::model::{ByteRange, Catalog, Media, Rendition, Request, Session, Title};

use crate::record::{LogRequest, RequestKind};

/// Shortest timeout given to a rebuilt request.
pub const MIN_TIMEOUT_S: f64 = 5.0;

/// How sessions are rebuilt.
#[derive(Clone, Debug)]
pub struct FromLogOptions {
    /// A client silent for longer than this on a file starts a new session there.
    pub idle_s: f64,
    /// Bit rate assumed for catalog durations.
    pub bitrate_kbps: u32,
    /// Keep paths as logged instead of hashing them.
    pub keep_identities: bool,
    /// Key of the path hash; `None`: a random key that is not kept.
    pub key: Option<Vec<u8>>,
    /// Client class name written into every session.
    pub class: String,
}

impl Default for FromLogOptions {
    fn default() -> Self {
        FromLogOptions {
            idle_s: 60.0,
            bitrate_kbps: 1000,
            keep_identities: false,
            key: None,
            class: "default".into(),
        }
    }
}

/// One logged request, owned.
#[derive(Clone, Debug)]
struct Seen {
    recv_s: f64,
    done_s: f64,
    offset: u64,
    extent: u64,
    kind: RequestKind,
    bytes_sent: u64,
}

/// One session: a run of a viewer's requests, `lo..hi` of them, starting at `start`.
struct Piece {
    start: f64,
    viewer: u32,
    lo: u32,
    hi: u32,
}

impl Piece {
    fn new(start: f64, viewer: u32, lo: usize, hi: usize) -> Result<Piece, String> {
        let index = |i: usize| {
            u32::try_from(i)
                .map_err(|_| "more than 4,294,967,295 requests from one viewer".to_string())
        };
        Ok(Piece {
            start,
            viewer,
            lo: index(lo)?,
            hi: index(hi)?,
        })
    }
}

/// Seconds rounded to the microsecond: differences of logged times carry float noise
/// (`0.058000000000000052`) that would otherwise be written out digit by digit.
fn micros(s: f64) -> f64 {
    (s * 1e6).round() / 1e6
}

/// Collects a log's requests and rebuilds sessions from them.
#[derive(Default)]
pub struct SessionRebuilder {
    /// Requests by viewer, keyed by [`viewer_key`] (client and file in one allocation,
    /// made only for a viewer's first request; the hasher is a fast seeded one).
    by_viewer: HashMap<Box<[u8]>, Vec<Seen>, foldhash::fast::RandomState>,
    /// The key of the request being added, reused between requests.
    key: Vec<u8>,
}

/// A viewer's key: the client's length, the client, then the file (unambiguous for any
/// bytes in either).
fn viewer_key(key: &mut Vec<u8>, client: &str, file: &str) {
    key.clear();
    key.extend_from_slice(&(client.len() as u64).to_le_bytes());
    key.extend_from_slice(client.as_bytes());
    key.extend_from_slice(file.as_bytes());
}

/// The (client, file) of a [`viewer_key`].
fn viewer_parts(key: &[u8]) -> (&[u8], &[u8]) {
    let (len, rest) = key.split_at(8.min(key.len()));
    let len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8]));
    rest.split_at(usize::try_from(len).unwrap_or(usize::MAX).min(rest.len()))
}

/// What came out, with the figures a user checks.
#[derive(Clone, Debug, Serialize)]
pub struct FromLogSummary {
    pub requests: u64,
    pub sessions: u64,
    pub files: u64,
    /// Sessions per second in the log (first to last arrival).
    pub log_session_rate: f64,
    pub log_span_s: f64,
    pub idle_s: f64,
    pub bitrate_kbps: u32,
    /// `kept`, `hashed (key given)` or `hashed (random key, not kept)`.
    pub identities: String,
}

/// The rebuilt workload.
pub struct Rebuilt {
    /// The sessions in arrival order, made as they are consumed.
    pub sessions: SessionStream,
    pub catalog: Catalog,
    pub summary: FromLogSummary,
}

/// The rebuilt sessions in arrival order, each made when it is consumed: a large log's
/// session list is written out one line at a time instead of being held whole next to
/// the requests it is made from.
pub struct SessionStream {
    built: std::vec::IntoIter<Piece>,
    /// Each viewer's file and requests (in arrival order), which the pieces index into:
    /// a session is cut out of them when it is written, not copied beforehand.
    viewers: Vec<(String, Vec<Seen>)>,
    /// File name → (title id, output path with its leading `/`), hashed once per file.
    files: HashMap<String, (u32, String)>,
    next_id: u64,
    prev: f64,
    mean_gap: f64,
    class: String,
    bitrate_kbps: u32,
}

impl Iterator for SessionStream {
    type Item = Session;

    fn next(&mut self) -> Option<Session> {
        let piece = self.built.next()?;
        let start = piece.start;
        let (file, seen) = &self.viewers[piece.viewer as usize];
        let seen = &seen[piece.lo as usize..piece.hi as usize];
        let i = self.next_id;
        self.next_id += 1;
        let gap = if i == 0 {
            1.0
        } else {
            (start - self.prev) / self.mean_gap
        };
        self.prev = start;
        let (title, path) = self.files.get(file).cloned().unwrap_or_default();
        let requests = seen
            .iter()
            .enumerate()
            .map(|(j, s)| {
                let range = match s.kind {
                    RequestKind::Chunk => ByteRange::closed(s.offset, s.extent.max(1)),
                    RequestKind::Open => ByteRange::OpenEnded {
                        first: s.offset,
                        read: s.bytes_sent.max(s.extent).max(1),
                    },
                };
                let pacing_s = if j == 0 {
                    0.0
                } else {
                    s.recv_s - seen[j - 1].recv_s
                };
                let next = seen.get(j + 1).map(|n| n.recv_s - s.recv_s);
                let timeout_s = next
                    .unwrap_or(2.0 * (s.done_s - s.recv_s))
                    .max(MIN_TIMEOUT_S);
                Request {
                    pacing_s: micros(pacing_s.max(0.0)),
                    ..Request::new(path.clone(), Some(range), micros(timeout_s))
                }
            })
            .collect();
        Some(Session {
            id: i,
            gap: gap.max(0.0),
            start_s: None,
            class: self.class.clone(),
            title: Some(title),
            bitrate_kbps: Some(self.bitrate_kbps),
            requests,
            live: None,
            play: None,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.built.size_hint()
    }
}

impl SessionRebuilder {
    pub fn add(&mut self, r: &LogRequest<'_>) {
        let seen = Seen {
            recv_s: r.recv_s(),
            done_s: r.done_s,
            offset: r.offset,
            extent: r.extent,
            kind: r.kind,
            bytes_sent: r.bytes_sent,
        };
        viewer_key(&mut self.key, &r.session, r.file);
        match self.by_viewer.get_mut(self.key.as_slice()) {
            Some(list) => list.push(seen),
            None => {
                self.by_viewer
                    .insert(self.key.clone().into_boxed_slice(), vec![seen]);
            }
        }
    }

    /// Split, order and name everything (deterministic for a given log and key).
    pub fn finish(self, opt: &FromLogOptions) -> Result<Rebuilt, String> {
        let namer = Namer::new(opt)?;
        // Files: highest byte reached and request count, in name order.
        let mut files: HashMap<String, (u64, u64)> = HashMap::new();
        let mut by_viewer: Vec<(Box<[u8]>, Vec<Seen>)> = self.by_viewer.into_iter().collect();
        by_viewer.sort_by(|a, b| viewer_parts(&a.0).cmp(&viewer_parts(&b.0)));
        // Split each viewer's requests at idle gaps, in place: a piece is a range of them.
        let mut viewers: Vec<(String, Vec<Seen>)> = Vec::with_capacity(by_viewer.len());
        let mut built: Vec<Piece> = Vec::new();
        let mut requests = 0u64;
        for (key, mut seen) in by_viewer {
            let file = String::from_utf8_lossy(viewer_parts(&key).1).into_owned();
            seen.sort_by(|a, b| a.recv_s.total_cmp(&b.recv_s));
            let viewer = u32::try_from(viewers.len())
                .map_err(|_| "more than 4,294,967,295 viewers in one log".to_string())?;
            let mut lo = 0usize;
            let mut last_done = f64::NEG_INFINITY;
            // One lookup per viewer, not per request (the key is an owned name).
            let f = files.entry(file.clone()).or_default();
            for (i, s) in seen.iter().enumerate() {
                requests += 1;
                f.0 = f.0.max(s.offset + s.extent.max(s.bytes_sent));
                f.1 += 1;
                if i > lo && s.recv_s - last_done > opt.idle_s {
                    built.push(Piece::new(seen[lo].recv_s, viewer, lo, i)?);
                    lo = i;
                }
                last_done = last_done.max(s.done_s);
            }
            if lo < seen.len() {
                built.push(Piece::new(seen[lo].recv_s, viewer, lo, seen.len())?);
            }
            viewers.push((file, seen));
        }
        built.sort_by(|a, b| {
            a.start.total_cmp(&b.start).then_with(|| {
                viewers[a.viewer as usize]
                    .0
                    .cmp(&viewers[b.viewer as usize].0)
            })
        });
        let span = match (built.first(), built.last()) {
            (Some(a), Some(b)) => b.start - a.start,
            _ => 0.0,
        };
        let n = built.len();
        // Mean inter-arrival over the log; gaps are scaled to mean 1.
        let mean_gap = if n > 1 { span / (n - 1) as f64 } else { 1.0 };
        let mean_gap = if mean_gap > 0.0 { mean_gap } else { 1.0 };
        // Titles: ranked by requests, ids in name order.
        let mut names: Vec<&String> = files.keys().collect();
        names.sort();
        let ids: HashMap<&String, u32> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, i as u32))
            .collect();
        let mut by_count: Vec<&String> = names.clone();
        by_count.sort_by(|a, b| files[*b].1.cmp(&files[*a].1).then_with(|| a.cmp(b)));
        let ranks: HashMap<&String, u32> = by_count
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, i as u32 + 1))
            .collect();
        let bytes_per_s = f64::from(opt.bitrate_kbps.max(1)) * 1000.0 / 8.0;
        let titles = names
            .iter()
            .map(|name| {
                let size = files[*name].0.max(1);
                Title {
                    id: ids[name],
                    rank: ranks[name],
                    duration_s: size as f64 / bytes_per_s,
                    renditions: vec![Rendition::one_file(
                        opt.bitrate_kbps,
                        Media::Combined,
                        namer.path(name),
                        size,
                    )],
                }
            })
            .collect();
        let paths: HashMap<String, (u32, String)> = names
            .iter()
            .map(|n| ((*n).clone(), (ids[n], format!("/{}", namer.path(n)))))
            .collect();
        let summary = FromLogSummary {
            requests,
            sessions: n as u64,
            files: files.len() as u64,
            log_session_rate: if span > 0.0 {
                (n.max(1) - 1) as f64 / span
            } else {
                0.0
            },
            log_span_s: span,
            idle_s: opt.idle_s,
            bitrate_kbps: opt.bitrate_kbps,
            identities: namer.describe(),
        };
        Ok(Rebuilt {
            sessions: SessionStream {
                prev: built.first().map_or(0.0, |b| b.start),
                built: built.into_iter(),
                viewers,
                files: paths,
                next_id: 0,
                mean_gap,
                class: opt.class.clone(),
                bitrate_kbps: opt.bitrate_kbps,
            },
            catalog: Catalog {
                spec: "from-log".into(),
                seed: 0,
                titles,
            },
            summary,
        })
    }
}

/// Names files in the output: as logged, or by a keyed hash.
struct Namer {
    key: Option<ring::hmac::Key>,
    random: bool,
}

impl Namer {
    fn new(opt: &FromLogOptions) -> Result<Namer, String> {
        if opt.keep_identities {
            return Ok(Namer {
                key: None,
                random: false,
            });
        }
        let (bytes, random) = match &opt.key {
            Some(k) => (k.clone(), false),
            None => {
                let mut k = vec![0u8; 32];
                ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut k)
                    .map_err(|_| "no random key for hashing identities: pass --key".to_string())?;
                (k, true)
            }
        };
        Ok(Namer {
            key: Some(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes)),
            random,
        })
    }

    /// The file's path in the output (relative, no leading slash).
    fn path(&self, name: &str) -> String {
        match &self.key {
            None => name.to_string(),
            Some(k) => {
                let tag = ring::hmac::sign(k, name.as_bytes());
                let hex: String = tag.as_ref()[..12]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                format!("f/{hex}")
            }
        }
    }

    fn describe(&self) -> String {
        match (&self.key, self.random) {
            (None, _) => "kept".into(),
            (Some(_), false) => "hashed (key given)".into(),
            (Some(_), true) => {
                "hashed (random key, not kept: a second run names files differently)".into()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn req(
        client: &str,
        file: &'static str,
        recv: f64,
        offset: u64,
        len: u64,
    ) -> (String, LogRequest<'static>) {
        (
            client.to_string(),
            LogRequest {
                done_s: recv + 0.5,
                service_s: 0.5,
                session: Cow::Owned(client.to_string()),
                file,
                offset,
                extent: len,
                kind: RequestKind::Chunk,
                bytes_sent: len,
                conn: None,
            },
        )
    }

    fn rebuild(reqs: &[(String, LogRequest<'static>)], opt: &FromLogOptions) -> Rebuilt {
        let mut b = SessionRebuilder::default();
        for (_, r) in reqs {
            b.add(r);
        }
        b.finish(opt).unwrap()
    }

    #[test]
    fn sessions_are_split_by_client_file_and_idle_time() {
        let reqs = vec![
            req("a", "v1.mp4", 100.0, 0, 1000),
            req("a", "v1.mp4", 104.0, 1000, 1000),
            req("b", "v1.mp4", 101.0, 0, 500),
            // a comes back to v1 after 200 s: a new session.
            req("a", "v1.mp4", 304.0, 5000, 1000),
            req("a", "v2.mp4", 102.0, 0, 2000),
        ];
        let opt = FromLogOptions {
            keep_identities: true,
            ..Default::default()
        };
        let r = rebuild(&reqs, &opt);
        assert_eq!(r.sessions.size_hint(), (4, Some(4)));
        let sessions: Vec<Session> = r.sessions.collect();
        assert_eq!(r.summary.sessions, 4);
        assert_eq!(r.summary.requests, 5);
        assert_eq!(r.summary.files, 2);
        // In arrival order: a/v1 (100), b/v1 (101), a/v2 (102), a/v1 again (304).
        let starts: Vec<(&str, usize)> = sessions
            .iter()
            .map(|s| (s.requests[0].path.as_str(), s.requests.len()))
            .collect();
        assert_eq!(
            starts,
            vec![
                ("/v1.mp4", 2),
                ("/v1.mp4", 1),
                ("/v2.mp4", 1),
                ("/v1.mp4", 1)
            ]
        );
        let first = &sessions[0];
        assert_eq!(first.requests[1].pacing_s, 4.0);
        assert_eq!(first.requests[1].range, Some(ByteRange::closed(1000, 1000)));
        // Timeout: the gap to the next request, at least the minimum.
        assert_eq!(first.requests[0].timeout_s, MIN_TIMEOUT_S);
        // Gaps scaled to mean 1 over the log: arrivals 100, 101, 102, 304 (mean gap 68).
        let gaps: Vec<f64> = sessions.iter().map(|s| s.gap).collect();
        let ids: Vec<u64> = sessions.iter().map(|s| s.id).collect();
        assert_eq!(ids, [0, 1, 2, 3]);
        assert!((gaps[1] - 1.0 / 68.0).abs() < 1e-9, "{gaps:?}");
        assert!((gaps[3] - 202.0 / 68.0).abs() < 1e-9, "{gaps:?}");
        assert!((r.summary.log_session_rate - 3.0 / 204.0).abs() < 1e-12);
        // The catalog: v1 reached byte 6000, ranked first (4 requests against 1).
        let v1 = r
            .catalog
            .titles
            .iter()
            .find(|t| t.renditions[0].files[0].path == "v1.mp4")
            .unwrap();
        assert_eq!(v1.renditions[0].size_bytes, 6000);
        assert_eq!(v1.rank, 1);
        assert_eq!(r.summary.identities, "kept");
    }

    #[test]
    fn viewers_are_keyed_apart_and_times_are_written_without_float_noise() {
        // Client "ab" reading "c" and client "a" reading "bc" are different viewers.
        let reqs = vec![
            req("ab", "c", 100.0, 0, 10),
            req("ab", "c", 100.058, 10, 10),
            req("a", "bc", 100.5, 0, 10),
        ];
        let opt = FromLogOptions {
            keep_identities: true,
            ..Default::default()
        };
        let sessions: Vec<Session> = rebuild(&reqs, &opt).sessions.collect();
        assert_eq!(sessions.len(), 2);
        assert_eq!(sessions[0].requests[0].path, "/c");
        assert_eq!(sessions[1].requests[0].path, "/bc");
        // 100.058 - 100.0 is 0.05799999999999983 in binary; it is written as 0.058, and
        // the zero fields (first pacing, connection 0, no media time) not at all.
        let line = serde_json::to_string(&sessions[0]).unwrap();
        assert!(line.contains(r#""pacing_s":0.058,"#), "{line}");
        assert!(
            !line.contains("conn") && !line.contains("media_s"),
            "{line}"
        );
        assert_eq!(line.matches("pacing_s").count(), 1, "{line}");
        let back: Session = serde_json::from_str(&line).unwrap();
        assert_eq!(back.requests[0].pacing_s, 0.0);
        assert_eq!(back.requests[1].conn, 0);
    }

    #[test]
    fn identities_are_hashed_with_the_key_and_deterministic() {
        let reqs = vec![req("a", "secret/title.mp4", 1.0, 0, 10)];
        let keyed = |k: &str| FromLogOptions {
            key: Some(k.as_bytes().to_vec()),
            ..Default::default()
        };
        let mut a = rebuild(&reqs, &keyed("k1"));
        let mut b = rebuild(&reqs, &keyed("k1"));
        let mut c = rebuild(&reqs, &keyed("k2"));
        let path = |r: &mut Rebuilt| r.sessions.next().unwrap().requests[0].path.clone();
        let pa = path(&mut a);
        assert_eq!(pa, path(&mut b));
        assert_ne!(pa, path(&mut c));
        assert!(!pa.contains("secret"));
        assert!(pa.starts_with("/f/") && pa.len() == 3 + 24, "{pa}");
        assert_eq!(
            format!("/{}", a.catalog.titles[0].renditions[0].files[0].path),
            pa
        );
        assert_eq!(a.summary.identities, "hashed (key given)");
        let random = rebuild(&reqs, &FromLogOptions::default());
        assert!(random.summary.identities.starts_with("hashed (random key"));
    }
}
