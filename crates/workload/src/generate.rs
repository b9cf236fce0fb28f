//! Turning a checked spec into a workload: the catalog, the sessions in arrival order, the
//! warm-up list and the Table 3.3 summary, written to `catalog.json`, `sessions.jsonl`,
//! `workload.json`, `warmup.jsonl` and `summary.json`.
//!
//! Titles get ids in creation (on-disk placement) order; collections are intermixed at
//! random and popularity ranks are a random permutation within each collection, so
//! popularity is independent of placement. Sessions are generated and written one at a
//! time, so a million of them need little memory.

use crate::dist::{rng, Categorical, Stream, Zipf};
use crate::layout::{pieces, title_files};
use crate::model::{
    Catalog, ClientClass, LiveView, Measurement, Media, PlaySpec, Rendition, Request, Session,
    Title, WorkloadMeta,
};
use crate::spec::{Assignment, Checked, CollectionSpec, LiveStreams, Rounding};
use crate::units::SizeOrTime;
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// Statistics of a generated workload (thesis Table 3.3), written as `summary.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub sessions: u64,
    pub titles: u64,
    pub unique_titles: u64,
    pub single_session_titles_fraction: f64,
    pub mean_title_duration_s: f64,
    pub mean_title_bytes: f64,
    pub mean_session_duration_s: f64,
    pub mean_requests_per_session: f64,
    pub unique_chunks_requested: u64,
    pub total_chunks_requested: u64,
    pub chunks_requested_once: u64,
    /// Of `sessions`, live viewers (they request no title or chunk); omitted when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub live_sessions: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Summary {
    /// The printed form: one `key value` row per field, in Table 3.3 order.
    pub fn table(&self, heading: &str) -> String {
        let mut rows: Vec<(&str, String)> = vec![
            ("sessions", self.sessions.to_string()),
            ("titles", self.titles.to_string()),
            ("unique_titles", self.unique_titles.to_string()),
            (
                "single_session_titles_fraction",
                format!("{:.3}", self.single_session_titles_fraction),
            ),
            (
                "mean_title_duration_s",
                format!("{:.1}", self.mean_title_duration_s),
            ),
            ("mean_title_bytes", format!("{:.0}", self.mean_title_bytes)),
            (
                "mean_session_duration_s",
                format!("{:.1}", self.mean_session_duration_s),
            ),
            (
                "mean_requests_per_session",
                format!("{:.3}", self.mean_requests_per_session),
            ),
            (
                "unique_chunks_requested",
                self.unique_chunks_requested.to_string(),
            ),
            (
                "total_chunks_requested",
                self.total_chunks_requested.to_string(),
            ),
            (
                "chunks_requested_once",
                self.chunks_requested_once.to_string(),
            ),
        ];
        if self.live_sessions > 0 {
            rows.push(("live_sessions", self.live_sessions.to_string()));
        }
        let mut s = format!("{heading}\n");
        for (k, v) in rows {
            s.push_str(&format!("  {k:<32} {v:>12}\n"));
        }
        s
    }
}

/// Per-collection constants derived from the spec.
#[derive(Clone, Debug)]
struct CollectionPlan {
    spec: CollectionSpec,
    /// Content bytes per second.
    bytes_per_s: f64,
    /// Bytes per client request.
    request_bytes: u64,
    /// Content seconds per client request (the pacing interval).
    request_s: f64,
    /// Title indices (into the catalog) by rank - 1.
    by_rank: Vec<usize>,
    zipf: Zipf,
}

/// A generated catalog with what session generation needs to know about it.
pub struct Plan {
    pub checked: Checked,
    pub seed: u64,
    pub catalog: Catalog,
    collections: Vec<CollectionPlan>,
    /// Collection index of every title (by catalog index).
    title_collection: Vec<usize>,
}

impl Plan {
    /// Draw the catalog. Uses only the placement, duration and rank streams.
    pub fn new(checked: Checked, seed: u64) -> Plan {
        let spec = &checked.spec;
        let cat = &spec.catalog;
        let segment_s = cat.segment.0;
        let mut title_collection: Vec<usize> = Vec::new();
        for (ci, c) in cat.collections.iter().enumerate() {
            title_collection.extend(std::iter::repeat_n(ci, c.titles as usize));
        }
        title_collection.shuffle(&mut rng(seed, Stream::Placement));

        let mut dur_rng = rng(seed, Stream::Durations);
        let max = cat.max_duration.map_or(f64::INFINITY, |m| m.0);
        let clamp = |d: f64| d.max(cat.min_duration.0).min(max);
        let mut durations: Vec<f64> = title_collection
            .iter()
            .map(|_| round_ms(clamp(checked.durations.sample(&mut dur_rng))))
            .collect();
        let median = round_ms(clamp(checked.durations.quantile(0.5)));

        let mut rank_rng = rng(seed, Stream::Ranks);
        let mut collections = Vec::new();
        let mut ranks = vec![0u32; title_collection.len()];
        for (ci, c) in cat.collections.iter().enumerate() {
            let mut by_rank: Vec<usize> = (0..title_collection.len())
                .filter(|&t| title_collection[t] == ci)
                .collect();
            by_rank.shuffle(&mut rank_rng);
            for (r, &t) in by_rank.iter().enumerate() {
                ranks[t] = r as u32 + 1;
                if r < cat.median_duration_titles as usize {
                    durations[t] = median;
                }
            }
            let segment_bytes = c
                .segment_bytes
                .map_or(c.bitrate_kbps as f64 * 1000.0 / 8.0 * segment_s, |s| {
                    s.0 as f64
                });
            let bytes_per_s = segment_bytes / segment_s;
            let (request_bytes, request_s) = match spec.sessions.request {
                SizeOrTime::Size(n) => (n, n as f64 / bytes_per_s),
                SizeOrTime::Time(t) => {
                    let n = ((t * bytes_per_s).round() as u64).max(1);
                    (n, n as f64 / bytes_per_s)
                }
            };
            collections.push(CollectionPlan {
                spec: c.clone(),
                bytes_per_s,
                request_bytes,
                request_s,
                zipf: Zipf::new(by_rank.len(), cat.zipf_alpha),
                by_rank,
            });
        }

        let pad = cat.pad_to.0;
        let titles = title_collection
            .iter()
            .enumerate()
            .map(|(t, &ci)| {
                let col = &collections[ci];
                let id = t as u32 + 1;
                let content = (durations[t] * col.bytes_per_s).round().max(1.0) as u64;
                let disk = content.div_ceil(pad) * pad;
                let stem = format!("{}-{id:06}", col.spec.name);
                let mut renditions = vec![Rendition {
                    bitrate_kbps: col.spec.bitrate_kbps,
                    media: Media::Combined,
                    size_bytes: content,
                    layout: checked.layout,
                    files: title_files(&stem, checked.layout, disk),
                }];
                // The ladder's other rungs: the same content at their own rates.
                let mut ladder = col.spec.ladder_kbps.clone();
                ladder.sort_unstable();
                for kbps in ladder {
                    let scale = f64::from(kbps) / f64::from(col.spec.bitrate_kbps);
                    let bytes = (content as f64 * scale).round().max(1.0) as u64;
                    renditions.push(Rendition {
                        bitrate_kbps: kbps,
                        media: Media::Combined,
                        size_bytes: bytes,
                        layout: checked.layout,
                        files: title_files(
                            &format!("{stem}-{kbps}k"),
                            checked.layout,
                            bytes.div_ceil(pad) * pad,
                        ),
                    });
                }
                Title {
                    id,
                    rank: ranks[t],
                    duration_s: durations[t],
                    renditions,
                }
            })
            .collect();
        let catalog = Catalog {
            spec: spec.name.clone(),
            seed,
            titles,
        };
        Plan {
            checked,
            seed,
            catalog,
            collections,
            title_collection,
        }
    }

    /// `workload.json`: client classes (shares normalised) and measurement settings.
    pub fn meta(&self) -> WorkloadMeta {
        let spec = &self.checked.spec;
        let total: f64 = spec.clients.iter().map(|c| c.share).sum();
        let m = &spec.measurement;
        WorkloadMeta {
            spec: spec.name.clone(),
            seed: self.seed,
            client_classes: spec
                .clients
                .iter()
                .map(|c| ClientClass {
                    name: c.name.clone(),
                    bandwidth_bps: c.bandwidth.0,
                    one_way_delay_s: c.delay.0,
                    share: c.share / total,
                })
                .collect(),
            measurement: Measurement {
                warmup_chunks: m.warmup_chunks,
                ramp_up_sessions: m.ramp_up_sessions,
                ramp_down_sessions: m.ramp_down_sessions,
                ramp_up_requests: m.ramp_up_requests,
                ramp_down_requests: m.ramp_down_requests,
                startup_buffer_s: m.startup_buffer.map(|b| b.0),
            },
        }
    }

    /// Probability that a session of collection `ci` watches the title at catalog index `t`.
    pub fn title_probability(&self, t: usize) -> (usize, f64) {
        let ci = self.title_collection[t];
        let rank = self.catalog.titles[t].rank as usize;
        (ci, self.collections[ci].zipf.p(rank))
    }

    /// Sessions per collection, and content seconds / bytes per request of a collection.
    pub fn collection_info(&self, ci: usize) -> (u64, f64, u64) {
        let c = &self.collections[ci];
        (c.spec.sessions, c.request_s, c.request_bytes)
    }

    pub fn collection_count(&self) -> usize {
        self.collections.len()
    }

    /// Client-request units of title `t` (its content bytes over the request size, rounded up).
    pub fn title_units(&self, t: usize) -> u64 {
        let col = &self.collections[self.title_collection[t]];
        self.catalog.titles[t].renditions[0]
            .size_bytes
            .div_ceil(col.request_bytes)
    }

    /// Number of client requests a session watching `fraction` of title `t` makes.
    pub fn requests_for(&self, t: usize, fraction: f64) -> u64 {
        let col = &self.collections[self.title_collection[t]];
        let title = &self.catalog.titles[t];
        let units = title.renditions[0].size_bytes.div_ceil(col.request_bytes);
        let watched = title.duration_s * fraction / col.request_s;
        let k = match self.checked.spec.sessions.rounding {
            Rounding::Nearest => watched.round(),
            Rounding::Up => (watched - 1e-9).ceil(),
        };
        (k.max(1.0) as u64).min(units)
    }

    /// Iterate over the sessions in arrival order.
    pub fn sessions(&self) -> SessionIter<'_> {
        let mut mix: Vec<usize> = Vec::new();
        for (ci, c) in self.collections.iter().enumerate() {
            mix.extend(std::iter::repeat_n(ci, c.spec.sessions as usize));
        }
        mix.shuffle(&mut rng(self.seed, Stream::SessionMix));
        // Classes too slow for a collection's bit rate are left out of its draw. One draw
        // per session either way, so a collection every class can play gets the same
        // classes as before; a collection without sessions may have no class fast enough.
        let clients = &self.checked.spec.clients;
        let all: Vec<f64> = clients.iter().map(|c| c.share).collect();
        let class_picks = self
            .collections
            .iter()
            .map(|c| {
                Categorical::new(&crate::spec::class_shares(clients, c.spec.bitrate_kbps))
                    .or_else(|| Categorical::new(&all))
                    .expect("validated shares")
            })
            .collect();
        SessionIter {
            plan: self,
            mix,
            next: 0,
            popularity: rng(self.seed, Stream::Popularity),
            watch: rng(self.seed, Stream::Watch),
            arrivals: rng(self.seed, Stream::Arrivals),
            classes: rng(self.seed, Stream::Classes),
            class_picks,
            live: rng(self.seed, Stream::Live),
            live_viewers: 0,
            assigned: vec![0; self.collections.len()],
        }
    }

    /// Requests fetching client-request unit `j` of title `t` (`pacing` on the first).
    fn unit_requests(&self, t: usize, j: u64, pacing: f64, out: &mut Vec<Request>) {
        let col = &self.collections[self.title_collection[t]];
        let r = &self.catalog.titles[t].renditions[0];
        let start = j * col.request_bytes;
        let timeout = self.checked.spec.sessions.timeout.0;
        for (k, p) in pieces(r, start, start + col.request_bytes)
            .into_iter()
            .enumerate()
        {
            out.push(Request {
                path: p.path,
                range: p.range,
                pacing_s: if k == 0 { pacing } else { 0.0 },
                timeout_s: timeout,
                conn: 0,
                media_s: p.content_bytes as f64 / col.bytes_per_s,
            });
        }
    }
}

fn round_ms(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A generated session with the facts the summary needs.
pub struct Generated {
    pub session: Session,
    /// Catalog index of the title.
    pub title_index: usize,
    /// Client-request units fetched (0..units).
    pub units: u64,
    /// Content seconds covered by those units.
    pub content_s: f64,
}

pub struct SessionIter<'a> {
    plan: &'a Plan,
    mix: Vec<usize>,
    next: usize,
    popularity: ChaCha8Rng,
    watch: ChaCha8Rng,
    arrivals: ChaCha8Rng,
    classes: ChaCha8Rng,
    /// Client class distribution by collection (classes too slow for its bit rate left out).
    class_picks: Vec<Categorical>,
    live: ChaCha8Rng,
    /// Live viewers generated so far (the next one's stream under `per-viewer`).
    live_viewers: u32,
    /// Sessions assigned per collection so far (`round-robin` assignment).
    assigned: Vec<u64>,
}

impl Iterator for SessionIter<'_> {
    type Item = Generated;

    fn next(&mut self) -> Option<Generated> {
        let ci = *self.mix.get(self.next)?;
        let id = self.next as u64;
        self.next += 1;
        let plan = self.plan;
        let col = &plan.collections[ci];
        // One draw per session whether or not the spec has live viewers, so a `[live]`
        // section changes which sessions are live and nothing else.
        let u: f64 = self.live.random();
        let live = plan.checked.spec.live.as_ref().filter(|l| u < l.share);
        let t = match plan.checked.spec.catalog.assignment {
            // A live viewer takes no title (nor a turn of the round-robin).
            _ if live.is_some() => col.by_rank[0],
            Assignment::Zipf => col.by_rank[col.zipf.sample(&mut self.popularity) - 1],
            Assignment::RoundRobin => {
                let k = self.assigned[ci];
                self.assigned[ci] += 1;
                col.by_rank[(k % col.by_rank.len() as u64) as usize]
            }
        };
        let fraction = plan.checked.watch.sample(&mut self.watch);
        let gap: f64 = Exp1.sample(&mut self.arrivals);
        let class = &plan.checked.spec.clients[self.class_picks[ci].sample(&mut self.classes)].name;
        let units = plan.requests_for(t, fraction);
        let sessions = &plan.checked.spec.sessions;
        let mut requests = Vec::with_capacity(units as usize);
        for j in 0..units {
            let paced = sessions.pacing && j >= sessions.prebuffer_requests as u64;
            plan.unit_requests(t, j, if paced { col.request_s } else { 0.0 }, &mut requests);
        }
        let title = &plan.catalog.titles[t];
        if let Some(live) = live {
            let stream = match live.streams {
                LiveStreams::One => 0,
                LiveStreams::PerViewer => self.live_viewers,
            };
            self.live_viewers += 1;
            return Some(Generated {
                session: Session {
                    id,
                    gap,
                    start_s: None,
                    class: class.clone(),
                    title: None,
                    bitrate_kbps: Some(col.spec.bitrate_kbps),
                    requests: Vec::new(),
                    live: Some(LiveView {
                        stream,
                        watch_s: live.watch.0,
                    }),
                    play: None,
                },
                title_index: t,
                units: 0,
                content_s: live.watch.0,
            });
        }
        Some(Generated {
            session: Session {
                id,
                gap,
                start_s: None,
                class: class.clone(),
                title: Some(title.id),
                bitrate_kbps: Some(col.spec.bitrate_kbps),
                requests,
                live: None,
                play: sessions.play.then(|| PlaySpec {
                    watch_s: Some(round_ms(fraction * title.duration_s).max(0.001)),
                    ..PlaySpec::default()
                }),
            },
            title_index: t,
            units,
            content_s: units as f64 * col.request_s,
        })
    }
}

/// Accumulates Table 3.3 statistics and chunk popularity while sessions stream past.
pub struct Tally {
    sessions_per_title: Vec<u32>,
    /// Per title, requests per client-request unit (allocated on first use).
    unit_counts: Vec<Vec<u32>>,
    sessions: u64,
    /// Of `sessions`, live viewers (no title, no chunks).
    live_sessions: u64,
    units: u64,
    content_s: f64,
}

impl Tally {
    pub fn new(plan: &Plan) -> Tally {
        let n = plan.catalog.titles.len();
        Tally {
            sessions_per_title: vec![0; n],
            unit_counts: vec![Vec::new(); n],
            sessions: 0,
            live_sessions: 0,
            units: 0,
            content_s: 0.0,
        }
    }

    pub fn add(&mut self, plan: &Plan, g: &Generated) {
        if g.session.live.is_some() {
            self.live_sessions += 1;
            self.sessions += 1;
            self.content_s += g.content_s;
            return;
        }
        let t = g.title_index;
        self.sessions += 1;
        self.sessions_per_title[t] += 1;
        self.units += g.units;
        self.content_s += g.content_s;
        let counts = &mut self.unit_counts[t];
        if counts.is_empty() {
            let col = &plan.collections[plan.title_collection[t]];
            let n = plan.catalog.titles[t].renditions[0]
                .size_bytes
                .div_ceil(col.request_bytes);
            *counts = vec![0; n as usize];
        }
        for c in &mut counts[..g.units as usize] {
            *c += 1;
        }
    }

    pub fn summary(&self, plan: &Plan) -> Summary {
        let n = self.sessions.max(1) as f64;
        let mut unique = 0u64;
        let mut single = 0u64;
        let (mut dur, mut bytes) = (0.0, 0.0);
        for (t, &c) in self.sessions_per_title.iter().enumerate() {
            if c > 0 {
                unique += 1;
                single += u64::from(c == 1);
                let title = &plan.catalog.titles[t];
                dur += title.duration_s;
                bytes += title.renditions[0].size_bytes as f64;
            }
        }
        let mut unique_chunks = 0;
        let mut once = 0;
        for counts in &self.unit_counts {
            for &c in counts {
                unique_chunks += u64::from(c > 0);
                once += u64::from(c == 1);
            }
        }
        let u = unique.max(1) as f64;
        Summary {
            sessions: self.sessions,
            titles: plan.catalog.titles.len() as u64,
            unique_titles: unique,
            single_session_titles_fraction: single as f64 / u,
            mean_title_duration_s: dur / u,
            mean_title_bytes: bytes / u,
            mean_session_duration_s: self.content_s / n,
            mean_requests_per_session: self.units as f64 / n,
            unique_chunks_requested: unique_chunks,
            total_chunks_requested: self.units,
            chunks_requested_once: once,
            live_sessions: self.live_sessions,
        }
    }

    /// Requests for the `n` most requested chunks (ties: more popular title, earlier chunk).
    pub fn warmup(&self, plan: &Plan, n: u64) -> Vec<Request> {
        let mut chunks: Vec<(u32, u32, u32, usize)> = Vec::new();
        for (t, counts) in self.unit_counts.iter().enumerate() {
            let rank = plan.catalog.titles[t].rank;
            for (j, &c) in counts.iter().enumerate() {
                if c > 0 {
                    chunks.push((c, rank, j as u32, t));
                }
            }
        }
        chunks.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then(a.1.cmp(&b.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.cmp(&b.3))
        });
        let mut out = Vec::new();
        for &(_, _, j, t) in chunks.iter().take(n as usize) {
            plan.unit_requests(t, j as u64, 0.0, &mut out);
        }
        out
    }
}

/// Generate the workload of `plan` into directory `out`. Returns the summary.
pub fn write_workload(plan: &Plan, out: &Path) -> std::io::Result<Summary> {
    std::fs::create_dir_all(out)?;
    let mut w = BufWriter::new(File::create(out.join(crate::fileset::CATALOG))?);
    serde_json::to_writer_pretty(&mut w, &plan.catalog)?;
    w.write_all(b"\n")?;
    w.flush()?;

    let mut w = BufWriter::new(File::create(out.join(crate::dir::META))?);
    serde_json::to_writer_pretty(&mut w, &plan.meta())?;
    w.write_all(b"\n")?;
    w.flush()?;

    let mut tally = Tally::new(plan);
    let mut w = BufWriter::with_capacity(1 << 20, File::create(out.join(crate::dir::SESSIONS))?);
    for g in plan.sessions() {
        serde_json::to_writer(&mut w, &g.session)?;
        w.write_all(b"\n")?;
        tally.add(plan, &g);
    }
    w.flush()?;

    let mut w = BufWriter::new(File::create(out.join(crate::dir::WARMUP))?);
    for r in tally.warmup(plan, plan.checked.spec.measurement.warmup_chunks) {
        serde_json::to_writer(&mut w, &r)?;
        w.write_all(b"\n")?;
    }
    w.flush()?;

    let summary = tally.summary(plan);
    let mut w = BufWriter::new(File::create(out.join(crate::dir::SUMMARY))?);
    serde_json::to_writer_pretty(&mut w, &summary)?;
    w.write_all(b"\n")?;
    w.flush()?;
    Ok(summary)
}
