//! One synthetic DASH viewing session (thesis 5.2-5.5): a first transient phase probing
//! lower bit rates, stable phases that fill the playout buffer and then pace, and user or
//! rate-adaptation events (pause, skip, bit-rate change, stop) that lead to inactive and
//! successor transient phases. Requests are chunk or open-ended, possibly split over
//! parallel connections, and every one is recorded in the session's ground truth.

use std::collections::HashSet;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, LogNormal};

use super::catalog::{NfCatalog, SEGMENT_S};
use super::truth::{RunBook, SynthRequest, TruthPhase, TruthPhaseKind, TruthRun};
use crate::model::{PlaySpec, Seek};

/// Bytes an open-ended client reads from offset 0 to get a segment table (thesis 5.3.2).
pub const OPEN_HEADER_READ: u64 = 786_432;

/// Longest quiet time between request clusters in pacing mode (the thesis saw pacing gaps
/// of up to 32 s); keeps every gap inside a chain well under the 40 s chain window.
const MAX_PACING_WAIT_S: f64 = 20.0;
/// A successor transient stops probing after this long, so a stable chain it interrupts
/// continues within the chain window.
const MAX_SUCCESSOR_PROBING_S: f64 = 12.0;

/// The audio track asks for more data at least this often while playing...
const AUDIO_CADENCE_S: f64 = 10.0;
/// ...checked at least this often.
const AUDIO_STEP_S: f64 = 5.0;

/// What an event during playback is: pause, skip, otherwise a bit-rate change.
const PAUSE_SHARE: f64 = 0.3;
const SKIP_SHARE: f64 = 0.2;

/// Smallest forward and backward skips, in segments.
const MIN_SKIP_FORWARD_SEGS: u32 = 15;
const MIN_SKIP_BACK_SEGS: u32 = 200;

/// Per-file parallel connection mix, 1..=6 (thesis Table 5.3).
pub const PARALLEL_MIX: [f64; 6] = [0.419, 0.180, 0.330, 0.060, 0.008, 0.003];

/// Client network classes: name, receive bandwidth (kbit/s), share, device label.
pub const CLIENT_CLASSES: [(&str, f64, f64, &str); 4] = [
    ("mobile", 2_500.0, 0.15, "mobile"),
    ("dsl", 6_000.0, 0.30, "pc"),
    ("cable", 14_000.0, 0.35, "tv"),
    ("fiber", 40_000.0, 0.20, "console"),
];

/// Tunables of the session model (`--set` keys in docs/trace.md).
#[derive(Clone, Debug)]
pub struct SessionParams {
    /// Mean wall time between user or adaptation events during playback (s).
    pub event_mean_s: f64,
    /// Share of sessions that end within their first 40 s.
    pub short_share: f64,
    /// Share of sessions using combined (audio+video) files.
    pub combined_share: f64,
    /// Share of separate-file clients requesting video open-ended.
    pub open_video_share: f64,
    pub open_audio_share: f64,
    pub open_combined_share: f64,
    /// Share of sessions whose client also fetches video from other servers of the
    /// cluster during stable phases (the log is one server's): each such fetch leaves a
    /// gap in this server's view of the file, so the chain ends there.
    pub elsewhere_share: f64,
    /// Largest per-request chance that such a client fetches the next segment elsewhere.
    pub elsewhere_max: f64,
    /// Spread of that chance over sessions: it is `elsewhere_max × U^(1/exponent)` for a
    /// uniform U (density ∝ h^(exponent−1)), so the runs it cuts are a mixture of
    /// geometric lengths whose survival function falls as a power law; the smaller the
    /// exponent, the more clients switch only rarely. Together with the rest of the model,
    /// the defaults give the thesis's chain-length exponent of about 0.54 between 1 and
    /// 200 MB (docs/trace.md "netflix-2014 against the thesis").
    pub elsewhere_exponent: f64,
    /// Seconds a client stays with this server (since the stable phase began or since its
    /// last fetch elsewhere) before it may fetch elsewhere again.
    pub elsewhere_min_s: f64,
}

impl Default for SessionParams {
    fn default() -> Self {
        SessionParams {
            event_mean_s: 480.0,
            short_share: 0.30,
            combined_share: 0.15,
            open_video_share: 0.15,
            open_audio_share: 0.40,
            open_combined_share: 0.40,
            elsewhere_share: 0.6,
            elsewhere_max: 0.3,
            elsewhere_exponent: 0.3,
            elsewhere_min_s: 40.0,
        }
    }
}

/// A generated session with its requests and ground truth.
#[derive(Debug)]
pub struct SynthSession {
    pub id: u64,
    pub start_s: f64,
    pub title: usize,
    pub class: usize,
    /// Bit rate of the first stable phase.
    pub stable_kbps: u32,
    /// Requests in the order the client issued them.
    pub requests: Vec<SynthRequest>,
    pub runs: Vec<TruthRun>,
    pub phases: Vec<TruthPhase>,
    pub ambiguous: u32,
    /// The same viewing for an adaptive player (`play` in `sessions.jsonl`): start
    /// position, media watched, skips as seeks, and the profile's connections and buffer
    /// target. Pauses are not carried over.
    pub play: PlaySpec,
}

struct Profile {
    class: usize,
    video_open: bool,
    audio_open: bool,
    conns: u32,
    seg_per_req: u32,
    bw_bps: f64,
    rtt: f64,
    buffer_target_s: f64,
    pace_segs: u32,
}

struct Stream {
    file: usize,
    start: u64,
    end: u64,
    recv: f64,
    done: f64,
    conn: u32,
    media_s: f64,
    reopen_at: f64,
}

struct Audio {
    file: usize,
    next_seg: u32,
    /// When the audio track last asked for data.
    last_fetch: f64,
    stream: Option<Stream>,
    header: bool,
}

enum Outcome {
    End,
    Pause,
    Skip,
    Rate,
}

struct Player<'a> {
    cat: &'a NfCatalog,
    p: &'a SessionParams,
    prof: Profile,
    rng: &'a mut ChaCha8Rng,
    start_abs: f64,
    t: f64,
    watched: f64,
    watch_total: f64,
    playing: bool,
    play_pos: f64,
    ladder: Vec<usize>,
    rate: usize,
    cur: usize,
    v_seg: u32,
    stream: Option<Stream>,
    audio: Option<Audio>,
    headers: HashSet<usize>,
    book: RunBook,
    reqs: Vec<SynthRequest>,
    in_stable: bool,
    /// Request indices issued in each transient phase.
    transients: Vec<Vec<usize>>,
    pause_from: Option<f64>,
    inactive: Vec<TruthPhase>,
    last_done: f64,
    /// Where playback started, the skips made so far as seeks, and the media watched when
    /// playback last (re)started.
    start_pos: f64,
    seeks: Vec<Seek>,
    watched_at_restart: f64,
    /// Chance that a stable-phase video fetch takes its first segment from another server.
    elsewhere: f64,
    /// When the current stable run on this server began (phase start or last fetch
    /// elsewhere).
    run_since: f64,
}

fn draw_index(rng: &mut ChaCha8Rng, weights: &[f64]) -> usize {
    let total: f64 = weights.iter().sum();
    let mut x = rng.random::<f64>() * total;
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    weights.len() - 1
}

fn draw_profile(rng: &mut ChaCha8Rng, combined: bool, p: &SessionParams) -> Profile {
    let shares: Vec<f64> = CLIENT_CLASSES.iter().map(|c| c.2).collect();
    let class = draw_index(rng, &shares);
    let video_open = rng.random::<f64>()
        < if combined {
            p.open_combined_share
        } else {
            p.open_video_share
        };
    let conns = if video_open {
        1
    } else {
        draw_index(rng, &PARALLEL_MIX) as u32 + 1
    };
    Profile {
        class,
        video_open,
        audio_open: rng.random::<f64>() < p.open_audio_share,
        conns,
        seg_per_req: if rng.random::<f64>() < 0.5 { 1 } else { 2 },
        bw_bps: CLIENT_CLASSES[class].1 * 1000.0 * rng.random_range(0.6..1.4),
        rtt: rng.random_range(0.02..0.12),
        buffer_target_s: rng.random_range(60.0..240.0),
        pace_segs: rng.random_range(4..=10),
    }
}

impl Player<'_> {
    fn abs(&self) -> f64 {
        self.start_abs + self.t
    }

    fn segments(&self) -> u32 {
        self.cat.files[self.cur].segments
    }

    /// Let wall time pass; playback advances only while there is content buffered.
    /// Audio keeps its own cadence, in steps of at most `AUDIO_STEP_S`.
    fn wait(&mut self, dt: f64) {
        let mut left = dt.max(0.0);
        loop {
            let step = if self.audio.is_some() {
                left.min(AUDIO_STEP_S)
            } else {
                left
            };
            self.t += step;
            if self.playing {
                let avail = f64::from(self.v_seg) * SEGMENT_S - self.play_pos;
                let played = step.min(avail.max(0.0));
                self.play_pos += played;
                self.watched += played;
            }
            left -= step;
            if self.audio.as_ref().is_some_and(|a| a.header) {
                let now = self.abs();
                self.sync_audio(now);
            }
            if left <= 0.0 {
                break;
            }
        }
    }

    fn push(&mut self, r: SynthRequest) {
        if let Some(from) = self.pause_from.take() {
            self.inactive.push(TruthPhase {
                kind: TruthPhaseKind::Inactive,
                t_start: from,
                t_end: r.recv_s,
            });
        }
        self.last_done = self.last_done.max(r.done_s);
        let run = self.book.add(&r);
        if self.in_stable && r.file == self.cur {
            self.book.runs[run].stable = true;
        }
        if !self.in_stable {
            if let Some(tr) = self.transients.last_mut() {
                tr.push(self.reqs.len());
            }
        }
        self.reqs.push(r);
    }

    fn close_stream(s: Stream) -> SynthRequest {
        SynthRequest {
            file: s.file,
            offset: s.start,
            len: s.end - s.start,
            open_ended: true,
            recv_s: s.recv,
            done_s: s.done,
            conn: s.conn,
            media_s: s.media_s,
        }
    }

    fn close_video(&mut self) {
        if let Some(s) = self.stream.take() {
            let r = Self::close_stream(s);
            self.push(r);
        }
    }

    fn close_audio(&mut self) {
        if let Some(s) = self.audio.as_mut().and_then(|a| a.stream.take()) {
            let r = Self::close_stream(s);
            self.push(r);
        }
    }

    /// One sequential chunk request on connection `conn`; advances the clock.
    fn chunk(&mut self, file: usize, offset: u64, len: u64, conn: u32, media_s: f64) {
        let recv = self.abs() + self.prof.rtt / 2.0;
        let xfer = len as f64 * 8.0 / self.prof.bw_bps;
        let done = recv + xfer;
        self.push(SynthRequest {
            file,
            offset,
            len,
            open_ended: false,
            recv_s: recv,
            done_s: done,
            conn,
            media_s,
        });
        self.wait(self.prof.rtt + xfer);
    }

    /// Fetch the segment table of `file` (chunk or open-ended per the client's style).
    fn header(&mut self, file: usize, open: bool) {
        if !self.headers.insert(file) {
            return;
        }
        let cat = self.cat;
        let f = &cat.files[file];
        if open {
            let len = OPEN_HEADER_READ.min(f.size_bytes());
            let recv = self.abs() + self.prof.rtt / 2.0;
            let xfer = len as f64 * 8.0 / self.prof.bw_bps;
            self.push(SynthRequest {
                file,
                offset: 0,
                len,
                open_ended: true,
                recv_s: recv,
                done_s: recv + xfer,
                conn: 0,
                media_s: 0.0,
            });
            self.wait(self.prof.rtt + xfer);
        } else {
            let len = f.header_bytes;
            self.chunk(file, 0, len, 0, 0.0);
        }
    }

    /// First segment an open-ended client may start at without re-reading its header bytes.
    fn open_floor(&self, file: usize, seg: u32) -> u32 {
        let f = &self.cat.files[file];
        let mut s = seg;
        while s < f.segments
            && f.segment_offset(s) < OPEN_HEADER_READ
            && self.headers.contains(&file)
        {
            s += 1;
        }
        s
    }

    /// The next segment comes from another server of the cluster: the client spends the
    /// transfer time, this server sees a gap in the file (its chain ends there).
    fn fetch_elsewhere(&mut self) {
        self.close_video();
        let f = &self.cat.files[self.cur];
        let len = f.segment_offset(self.v_seg + 1) - f.segment_offset(self.v_seg);
        self.wait(self.prof.rtt + len as f64 * 8.0 / self.prof.bw_bps);
        self.v_seg += 1;
    }

    /// Download `n` video segments of the current file starting at `v_seg`.
    fn fetch(&mut self, n: u32) {
        let mut n = n.min(self.segments().saturating_sub(self.v_seg));
        if n == 0 {
            return;
        }
        if self.in_stable
            && self.elsewhere > 0.0
            && self.t - self.run_since >= self.p.elsewhere_min_s
            && self.rng.random::<f64>() < self.elsewhere
        {
            self.fetch_elsewhere();
            self.run_since = self.t;
            n -= 1;
            if n == 0 {
                return;
            }
        }
        let issued = self.abs();
        let file = self.cur;
        let cat = self.cat;
        let f = &cat.files[file];
        let a = f.segment_offset(self.v_seg);
        let b = f.segment_offset(self.v_seg + n);
        let media_s = f64::from(n) * SEGMENT_S;
        if self.prof.video_open {
            if let Some(s) = &self.stream {
                if s.file != file || s.end != a || self.t + self.start_abs > s.reopen_at {
                    self.close_video();
                }
            }
            if self.stream.is_none() {
                let reopen = Exp::new(1.0 / 600.0).expect("rate").sample(self.rng);
                let recv = self.abs() + self.prof.rtt / 2.0;
                self.stream = Some(Stream {
                    file,
                    start: a,
                    end: a,
                    recv,
                    done: recv,
                    conn: 0,
                    media_s: 0.0,
                    reopen_at: recv + reopen,
                });
                self.wait(self.prof.rtt);
            }
            let xfer = (b - a) as f64 * 8.0 / self.prof.bw_bps;
            self.wait(xfer);
            let now = self.abs();
            let s = self.stream.as_mut().expect("stream just opened");
            s.end = b;
            s.done = now;
            s.media_s += media_s;
        } else if self.prof.conns == 1 {
            let mut seg = self.v_seg;
            while seg < self.v_seg + n {
                let k = self.prof.seg_per_req.min(self.v_seg + n - seg);
                let (o0, o1) = (f.segment_offset(seg), f.segment_offset(seg + k));
                self.chunk(file, o0, o1 - o0, 0, f64::from(k) * SEGMENT_S);
                seg += k;
            }
        } else {
            for seg in self.v_seg..self.v_seg + n {
                self.parallel_segment(file, seg);
            }
        }
        self.v_seg += n;
        self.sync_audio(issued);
    }

    /// One segment split into parts fetched at once over the client's parallel connections.
    fn parallel_segment(&mut self, file: usize, seg: u32) {
        let cat = self.cat;
        let f = &cat.files[file];
        let (o0, o1) = (f.segment_offset(seg), f.segment_offset(seg + 1));
        let parts = u64::from(self.prof.conns);
        let part = (o1 - o0).div_ceil(parts);
        let t0 = self.abs() + self.prof.rtt / 2.0;
        let mut last = t0;
        let mut off = o0;
        let mut conn = 0;
        while off < o1 {
            let len = part.min(o1 - off);
            let recv = t0 + self.rng.random_range(0.0..0.004);
            let xfer = len as f64 * 8.0 * parts as f64 / self.prof.bw_bps;
            let done = recv + xfer * self.rng.random_range(0.7..1.3);
            last = last.max(done);
            self.push(SynthRequest {
                file,
                offset: off,
                len,
                open_ended: false,
                recv_s: recv,
                done_s: done,
                conn,
                media_s: SEGMENT_S * len as f64 / (o1 - o0) as f64,
            });
            off += len;
            conn += 1;
        }
        let dt = last + self.prof.rtt / 2.0 - self.abs();
        self.wait(dt);
    }

    /// Keep the audio track a little ahead of the video download position.
    fn sync_audio(&mut self, issued: f64) {
        let Some(audio) = self.audio.as_mut() else {
            return;
        };
        let file = audio.file;
        let cat = self.cat;
        let f = &cat.files[file];
        let want = (self.v_seg + 2).min(f.segments);
        let stale = issued - audio.last_fetch >= AUDIO_CADENCE_S
            && audio.next_seg < (self.v_seg + 150).min(f.segments);
        if audio.next_seg >= want && !stale {
            return;
        }
        audio.last_fetch = issued;
        let open = self.prof.audio_open;
        let conn = self.prof.conns;
        if !audio.header {
            audio.header = true;
            let recv = issued + 0.01;
            let len = if open {
                OPEN_HEADER_READ.min(f.size_bytes())
            } else {
                f.header_bytes
            };
            let r = SynthRequest {
                file,
                offset: 0,
                len,
                open_ended: open,
                recv_s: recv,
                done_s: recv + 0.05 + len as f64 * 8.0 / self.prof.bw_bps,
                conn,
                media_s: 0.0,
            };
            self.push(r);
            let audio = self.audio.as_mut().expect("audio");
            if open {
                while audio.next_seg < f.segments
                    && f.segment_offset(audio.next_seg) < OPEN_HEADER_READ
                {
                    audio.next_seg += 1;
                }
            }
            if audio.next_seg >= f.segments {
                return;
            }
        }
        let audio = self.audio.as_mut().expect("audio");
        let seg = audio.next_seg;
        let end = (seg + 5).max(want).min(f.segments);
        let (a, b) = (f.segment_offset(seg), f.segment_offset(end));
        let media_s = f64::from(end - seg) * SEGMENT_S;
        audio.next_seg = end;
        let recv = issued + 0.02;
        let done = recv + 0.05 + (b - a) as f64 * 8.0 / self.prof.bw_bps;
        if open {
            if let Some(s) = &audio.stream {
                if s.end != a {
                    let s = audio.stream.take().expect("stream");
                    let r = Self::close_stream(s);
                    self.push(r);
                }
            }
            let audio = self.audio.as_mut().expect("audio");
            match audio.stream.as_mut() {
                Some(s) => {
                    s.end = b;
                    s.done = s.done.max(done);
                    s.media_s += media_s;
                }
                None => {
                    audio.stream = Some(Stream {
                        file,
                        start: a,
                        end: b,
                        recv,
                        done,
                        conn,
                        media_s,
                        reopen_at: f64::INFINITY,
                    })
                }
            }
        } else {
            self.push(SynthRequest {
                file,
                offset: a,
                len: b - a,
                open_ended: false,
                recv_s: recv,
                done_s: done,
                conn,
                media_s,
            });
        }
    }

    /// A transient phase at the current position, ending with `cur` set to `target`.
    fn transient(&mut self, first: bool, target: usize, previous: Option<usize>) {
        self.in_stable = false;
        self.transients.push(Vec::new());
        let pos = self.v_seg;
        let mut probes: Vec<usize> = Vec::new();
        if first {
            if target > 0 && self.rng.random::<f64>() > 0.01 {
                probes.push(0);
                for i in 1..target {
                    if self.rng.random::<f64>() < 0.55 && probes.len() < 6 {
                        probes.push(i);
                    }
                }
            }
        } else {
            let lo = target.saturating_sub(2);
            let hi = (target + 2).min(self.ladder.len() - 1);
            for i in lo..=hi {
                if i != target && Some(i) != previous && self.rng.random::<f64>() < 0.5 {
                    probes.push(i);
                }
            }
            if target > 2 && Some(0) != previous && self.rng.random::<f64>() < 0.15 {
                probes.insert(0, 0);
            }
        }
        let open = self.prof.video_open;
        let began = self.t;
        for &i in &probes {
            if !first && self.t - began > MAX_SUCCESSOR_PROBING_S {
                break;
            }
            let file = self.ladder[i];
            self.header(file, open);
            self.cur = file;
            self.v_seg = if open {
                self.open_floor(file, pos)
            } else {
                pos
            };
            let k = self.rng.random_range(1..=if first { 3 } else { 2 });
            self.fetch(k);
            self.close_video();
            let pause = self.rng.random_range(0.0..1.5);
            self.wait(pause);
        }
        let file = self.ladder[target];
        self.header(file, open);
        self.rate = target;
        self.cur = file;
        self.v_seg = if open {
            self.open_floor(file, pos)
        } else {
            pos
        };
    }

    /// A stable phase at `cur`: fill the playout buffer, then pace, until an event.
    fn stable(&mut self) -> Outcome {
        self.in_stable = true;
        self.run_since = self.t;
        self.playing = true;
        let mean = self.p.event_mean_s;
        let next_event = self.t + Exp::new(1.0 / mean).expect("rate").sample(self.rng);
        loop {
            if self.watched >= self.watch_total {
                return Outcome::End;
            }
            if self.v_seg >= self.segments() {
                return Outcome::End;
            }
            if self.t >= next_event {
                let u: f64 = self.rng.random();
                return if u < PAUSE_SHARE {
                    Outcome::Pause
                } else if u < PAUSE_SHARE + SKIP_SHARE {
                    Outcome::Skip
                } else {
                    Outcome::Rate
                };
            }
            let buffer = f64::from(self.v_seg) * SEGMENT_S - self.play_pos;
            let target = self.prof.buffer_target_s;
            if buffer < target {
                let n = if self.prof.conns == 1 && !self.prof.video_open {
                    self.prof.seg_per_req
                } else {
                    1
                };
                self.fetch(n);
            } else {
                let refill = f64::from(self.prof.pace_segs) * SEGMENT_S;
                let dt = (buffer - (target - refill))
                    .min(MAX_PACING_WAIT_S)
                    .min(next_event - self.t)
                    .max(0.01);
                let dt = dt.min(self.watch_total - self.watched + 0.01);
                self.wait(dt);
            }
        }
    }

    fn pause(&mut self) {
        self.close_video();
        self.close_audio();
        let gap = LogNormal::new(150f64.ln(), 1.0)
            .expect("lognormal")
            .sample(self.rng);
        let gap = gap.clamp(55.0, 2400.0);
        let quiet_from = self.last_done.max(self.abs());
        self.pause_from = Some(quiet_from);
        self.t = quiet_from - self.start_abs + gap;
    }

    /// Jump to a new position: forward by at least 15 segments, or back by at least 200
    /// (so the refill cannot run into the chain just left while it is still fresh).
    /// Returns false when the title offers no such position.
    fn skip(&mut self) -> bool {
        // Close the streams first so their runs are in the book for the check below.
        self.close_video();
        self.close_audio();
        let n = self.segments();
        let now = self.v_seg;
        let now_abs = self.abs();
        let cat = self.cat;
        let recent: Vec<(usize, u64)> = self
            .book
            .runs
            .iter()
            .filter(|r| now_abs - r.t_end < 300.0)
            .map(|r| (r.file, r.start))
            .collect();
        // A target just below where a recent chain starts would refill into that start.
        let clear = |to: u32| {
            recent.iter().all(|&(file, start)| {
                let f = &cat.files[file];
                !(f.segment_offset(to) < start
                    && start <= f.segment_offset(to + MIN_SKIP_BACK_SEGS))
            })
        };
        let ok = |to: u32| {
            (to >= now + MIN_SKIP_FORWARD_SEGS || to + MIN_SKIP_BACK_SEGS <= now) && clear(to)
        };
        let mut target = None;
        for _ in 0..8 {
            let to = self.rng.random_range(0..n.max(1));
            if ok(to) {
                target = Some(to);
                break;
            }
        }
        let Some(to) = target else {
            return false;
        };
        self.note_seek(f64::from(to) * SEGMENT_S);
        self.v_seg = to;
        self.play_pos = f64::from(to) * SEGMENT_S;
        if let Some(a) = self.audio.as_mut() {
            a.next_seg = to;
        }
        // The playout buffer is flushed and refilled from the new position.
        let settle = self.rng.random_range(0.5..3.0);
        self.wait(settle);
        true
    }

    /// Record a skip to `to_s` as a player's seek; one made before anything was watched
    /// since the last (re)start moves that start instead.
    fn note_seek(&mut self, to_s: f64) {
        let after_s = ms(self.watched - self.watched_at_restart);
        if after_s > 0.0 {
            self.seeks.push(Seek { after_s, to_s });
        } else if let Some(last) = self.seeks.last_mut() {
            last.to_s = to_s;
        } else {
            self.start_pos = to_s;
        }
        self.watched_at_restart = self.watched;
    }

    fn new_rate(&mut self) -> usize {
        let u: f64 = self.rng.random();
        let top = self.ladder.len() - 1;
        if u < 0.29 {
            (self.rate + 1).min(top)
        } else if u < 0.46 {
            self.rate.saturating_sub(1)
        } else {
            self.rate
        }
    }
}

/// The bit rate a client settles on: the highest rung under 60% of its bandwidth, sometimes
/// one lower.
fn stable_rung(cat: &NfCatalog, ladder: &[usize], bw_bps: f64, rng: &mut ChaCha8Rng) -> usize {
    let limit = bw_bps * 0.6 / 1000.0;
    let mut best = 0;
    for (i, &f) in ladder.iter().enumerate() {
        if f64::from(cat.files[f].bitrate_kbps) <= limit {
            best = i;
        }
    }
    if best > 0 && rng.random::<f64>() < 0.25 {
        best - 1
    } else {
        best
    }
}

/// Generate session `id`, arriving at `start_s`, from its own random stream.
pub fn generate(
    cat: &NfCatalog,
    p: &SessionParams,
    id: u64,
    start_s: f64,
    rng: &mut ChaCha8Rng,
) -> SynthSession {
    let title_idx = cat.draw_title(rng);
    let title = &cat.titles[title_idx];
    let combined = rng.random::<f64>() < p.combined_share;
    let prof = draw_profile(rng, combined, p);
    let ladder: Vec<usize> = if combined {
        title.combined.clone()
    } else {
        title.video.clone()
    };
    let audio_file = if combined {
        None
    } else {
        let pick = if rng.random::<f64>() < 0.75 { 96 } else { 192 };
        title
            .audio
            .iter()
            .copied()
            .find(|&f| cat.files[f].bitrate_kbps == pick)
            .or(title.audio.first().copied())
    };
    let segments = cat.files[ladder[0]].segments;
    let duration = title.duration_s;
    let u: f64 = rng.random();
    let start_seg = if u < 0.36 {
        0
    } else if u < 0.60 {
        (rng.random_range(0.0..0.05) * f64::from(segments)) as u32
    } else {
        (rng.random_range(0.05..0.97) * f64::from(segments)) as u32
    };
    let remaining = duration - f64::from(start_seg) * SEGMENT_S;
    let watch_total = if rng.random::<f64>() < p.short_share {
        rng.random_range(3.0..30.0)
    } else if rng.random::<f64>() < 0.3 {
        remaining
    } else {
        (remaining * rng.random::<f64>().powf(1.6)).max(45.0)
    };
    let rate = stable_rung(cat, &ladder, prof.bw_bps, rng);
    let elsewhere = if p.elsewhere_share > 0.0 && rng.random::<f64>() < p.elsewhere_share {
        let u: f64 = rng.random();
        p.elsewhere_max * u.powf(1.0 / p.elsewhere_exponent.max(0.01))
    } else {
        0.0
    };
    let class = prof.class;
    let mut player = Player {
        cat,
        p,
        prof,
        rng,
        start_abs: start_s,
        t: 0.0,
        watched: 0.0,
        watch_total,
        playing: false,
        play_pos: f64::from(start_seg) * SEGMENT_S,
        ladder,
        rate,
        cur: 0,
        v_seg: start_seg,
        stream: None,
        audio: audio_file.map(|file| Audio {
            file,
            next_seg: start_seg,
            last_fetch: f64::NEG_INFINITY,
            stream: None,
            header: false,
        }),
        headers: HashSet::new(),
        book: RunBook::default(),
        reqs: Vec::new(),
        in_stable: false,
        transients: Vec::new(),
        pause_from: None,
        inactive: Vec::new(),
        last_done: start_s,
        start_pos: f64::from(start_seg) * SEGMENT_S,
        seeks: Vec::new(),
        watched_at_restart: 0.0,
        elsewhere,
        run_since: 0.0,
    };
    player.cur = player.ladder[rate];
    let stable_kbps = cat.files[player.cur].bitrate_kbps;
    player.transient(true, rate, None);
    loop {
        match player.stable() {
            Outcome::End => break,
            Outcome::Pause => {
                player.pause();
                if player.rng.random::<f64>() < 0.5 {
                    let prev = player.rate;
                    player.transient(false, prev, Some(prev));
                }
            }
            Outcome::Skip if player.skip() => {
                let prev = player.rate;
                let next = player.new_rate();
                player.transient(false, next, Some(prev));
            }
            Outcome::Rate | Outcome::Skip => {
                player.close_video();
                let prev = player.rate;
                let next = player.new_rate();
                let pos = player.v_seg;
                player.transient(false, next, Some(prev));
                if next == prev {
                    player.v_seg = pos;
                }
            }
        }
    }
    player.close_video();
    player.close_audio();
    finish(player, id, start_s, title_idx, class, stable_kbps)
}

fn finish(
    player: Player<'_>,
    id: u64,
    start_s: f64,
    title: usize,
    class: usize,
    stable_kbps: u32,
) -> SynthSession {
    let cat = player.cat;
    let book = player.book;
    let is_audio = |f: usize| cat.files[f].media == crate::model::Media::Audio;
    // A run belongs to a stable phase if any of its requests was issued during one.
    let stable_runs: Vec<&TruthRun> = book
        .runs
        .iter()
        .filter(|r| r.stable && !is_audio(r.file))
        .collect();
    let mut phases: Vec<TruthPhase> = stable_runs
        .iter()
        .map(|r| TruthPhase {
            kind: TruthPhaseKind::Stable,
            t_start: r.t_start,
            t_end: r.t_end,
        })
        .collect();
    for tr in &player.transients {
        let mut span: Option<(f64, f64)> = None;
        for &i in tr {
            let r = &player.reqs[i];
            if is_audio(r.file) {
                continue;
            }
            let in_stable_run = stable_runs
                .iter()
                .any(|s| s.file == r.file && s.start <= r.offset && r.end() <= s.end);
            if in_stable_run {
                continue;
            }
            span = Some(match span {
                None => (r.recv_s, r.done_s),
                Some((a, b)) => (a.min(r.recv_s), b.max(r.done_s)),
            });
        }
        if let Some((a, b)) = span {
            phases.push(TruthPhase {
                kind: TruthPhaseKind::Transient,
                t_start: a,
                t_end: b,
            });
        }
    }
    phases.extend(player.inactive.iter().copied());
    let watched = ms(player.watched);
    let play = PlaySpec {
        start_s: player.start_pos,
        watch_s: (watched > 0.0).then_some(watched),
        seeks: player.seeks,
        connections: Some(player.prof.conns),
        buffer_target_s: Some(ms(player.prof.buffer_target_s)),
    };
    phases.sort_by(|a, b| a.t_start.total_cmp(&b.t_start));
    SynthSession {
        id,
        start_s,
        title,
        class,
        stable_kbps,
        requests: player.reqs,
        runs: book.runs,
        phases,
        ambiguous: book.ambiguous,
        play,
    }
}

/// Seconds rounded to the millisecond.
fn ms(s: f64) -> f64 {
    (s * 1000.0).round() / 1000.0
}
