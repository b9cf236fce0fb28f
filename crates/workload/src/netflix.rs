//! The Netflix-like (DASH) workload model of thesis 5.5: multi-bitrate catalogs and
//! sessions made of transient, stable and inactive phases, with ground truth for the
//! trace analyzer.
//!
//! [`new_workload`] writes the files `vodkit load` replays; [`synth_log`] writes a
//! Netflix-style access log, its file table and the true chains and phases of every
//! session, without any server. Both are deterministic for a seed.

pub mod catalog;
pub mod session;
pub mod truth;

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};

use crate::content::splitmix64;
use crate::model::{
    ByteRange, Catalog, ClientClass, Measurement, Media, Rendition, Request, Session, Title,
    WorkloadMeta,
};
use crate::order::MinEntry;
use catalog::{NfCatalog, ServerRole};
pub use session::SynthSession;
use session::{SessionParams, CLIENT_CLASSES};

/// Name of the built-in spec.
pub const SPEC_NAME: &str = "netflix-2014";

/// Session arrivals per second at scale 1.
pub const ARRIVALS_PER_SCALE: f64 = 0.4;

/// All parameters of the spec after `--scale` and `--set` are applied.
#[derive(Clone, Debug)]
pub struct NetflixSpec {
    pub seed: u64,
    pub titles: u32,
    pub sessions: u64,
    pub role: ServerRole,
    pub zipf_alpha: f64,
    pub drives: u16,
    /// Session arrivals per second (Poisson).
    pub arrival_rate: f64,
    /// Resolution of `ts_end` in synthesized logs, seconds (0.001 or 1).
    pub ts_resolution_s: f64,
    pub session: SessionParams,
}

impl NetflixSpec {
    /// The spec at `scale` (multiplies titles, sessions and the arrival rate) with
    /// `key=value` overrides.
    pub fn new(seed: u64, scale: f64, sets: &[(String, String)]) -> Result<Self, String> {
        crate::model::positive("--scale", scale)?;
        let mut s = NetflixSpec {
            seed,
            titles: ((1000.0 * scale).round() as u32).max(1),
            sessions: ((1000.0 * scale).round() as u64).max(1),
            role: ServerRole::Catalog,
            zipf_alpha: 0.8,
            drives: 36,
            // Calibrated so that the Fixed policy's best peak utilization on the thesis's
            // 36-drive catalog server is about its 57% (seeds 1-3 at scale 4: 57.9, 65.4 and
            // 59.8%; §5.6.3).
            arrival_rate: ARRIVALS_PER_SCALE * scale,
            ts_resolution_s: 0.001,
            session: SessionParams::default(),
        };
        for (k, v) in sets {
            s.set(k, v)?;
        }
        Ok(s)
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        fn num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
            v.parse()
                .map_err(|_| format!("--set {key}={v}: expected a number"))
        }
        fn share(key: &str, v: &str) -> Result<f64, String> {
            let x: f64 = num(key, v)?;
            if (0.0..=1.0).contains(&x) {
                Ok(x)
            } else {
                Err(format!("--set {key}={v}: expected a share between 0 and 1"))
            }
        }
        match key {
            "titles" => self.titles = num::<u32>(key, value)?.max(1),
            "sessions" => self.sessions = num::<u64>(key, value)?.max(1),
            "role" => {
                self.role = match value {
                    "catalog" => ServerRole::Catalog,
                    "flash" => ServerRole::Flash,
                    _ => return Err(format!("--set role={value}: expected catalog or flash")),
                }
            }
            "zipf_alpha" => self.zipf_alpha = num(key, value)?,
            "drives" => self.drives = num::<u16>(key, value)?.max(1),
            "arrival_rate" => {
                let r: f64 = num(key, value)?;
                if !(r > 0.0 && r.is_finite()) {
                    return Err(format!("--set arrival_rate={value}: expected sessions/s > 0"));
                }
                self.arrival_rate = r;
            }
            "ts_resolution" => {
                let r: f64 = num(key, value)?;
                if !(r > 0.0 && r <= 60.0) {
                    return Err(format!("--set ts_resolution={value}: expected seconds in (0, 60]"));
                }
                self.ts_resolution_s = r;
            }
            "event_mean_s" => {
                let m: f64 = num(key, value)?;
                if m < 1.0 || !m.is_finite() {
                    return Err(format!("--set event_mean_s={value}: expected seconds >= 1"));
                }
                self.session.event_mean_s = m;
            }
            "short_share" => self.session.short_share = share(key, value)?,
            "combined_share" => self.session.combined_share = share(key, value)?,
            "open_video_share" => self.session.open_video_share = share(key, value)?,
            "open_audio_share" => self.session.open_audio_share = share(key, value)?,
            "open_combined_share" => self.session.open_combined_share = share(key, value)?,
            "elsewhere_share" => self.session.elsewhere_share = share(key, value)?,
            "elsewhere_max" => self.session.elsewhere_max = share(key, value)?,
            "elsewhere_exponent" => {
                let c: f64 = num(key, value)?;
                if !(c > 0.0 && c <= 10.0) {
                    return Err(format!("--set elsewhere_exponent={value}: expected a number in (0, 10]"));
                }
                self.session.elsewhere_exponent = c;
            }
            "elsewhere_min_s" => {
                let m: f64 = num(key, value)?;
                if !(m >= 0.0 && m.is_finite()) {
                    return Err(format!("--set elsewhere_min_s={value}: expected seconds >= 0"));
                }
                self.session.elsewhere_min_s = m;
            }
            _ => {
                return Err(format!(
                    "--set {key}: unknown key for {SPEC_NAME} (titles, sessions, role, zipf_alpha, \
                     drives, arrival_rate, ts_resolution, event_mean_s, short_share, combined_share, \
                     open_video_share, open_audio_share, open_combined_share, elsewhere_share, \
                     elsewhere_max, elsewhere_exponent, elsewhere_min_s)"
                ))
            }
        }
        Ok(())
    }

    /// Build the catalog (deterministic for the seed).
    pub fn catalog(&self) -> NfCatalog {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        catalog::build(
            &mut rng,
            self.titles,
            self.role,
            self.zipf_alpha,
            self.drives,
        )
    }

    /// Generate every session in arrival order.
    pub fn sessions<'a>(&'a self, cat: &'a NfCatalog) -> impl Iterator<Item = SynthSession> + 'a {
        let mut arrivals = ChaCha8Rng::seed_from_u64(splitmix64(self.seed ^ 0xa771_7a15));
        let gap = Exp::new(self.arrival_rate).expect("positive rate");
        let mut t = 0.0;
        (0..self.sessions).map(move |i| {
            t += gap.sample(&mut arrivals);
            let id = i + 1;
            let mut rng = ChaCha8Rng::seed_from_u64(splitmix64(self.seed.wrapping_mul(31) ^ id));
            session::generate(cat, &self.session, id, t, &mut rng)
        })
    }
}

/// Generate the `netflix-2014` workload (thesis Table 5.5) into `out`: `catalog.json`,
/// `sessions.jsonl`, `workload.json` (and `files.csv` for `vodkit trace`). `sets` are the
/// `--set key=value` overrides. Returns the printable summary.
pub fn new_workload(
    seed: u64,
    scale: f64,
    sets: &[(String, String)],
    out: &Path,
) -> Result<String, String> {
    let spec = NetflixSpec::new(seed, scale, sets)?;
    let cat = spec.catalog();
    let io = |what: &str, e: std::io::Error| format!("{}: {what}: {e}", out.display());
    std::fs::create_dir_all(out).map_err(|e| io("create directory", e))?;
    write_json(
        &out.join(crate::fileset::CATALOG),
        &to_model_catalog(&spec, &cat),
    )?;
    write_json(&out.join(crate::dir::META), &workload_meta(&spec))?;
    write_file_table(&out.join("files.csv"), &cat)?;
    let path = out.join(crate::dir::SESSIONS);
    let mut w = create(&path)?;
    let mut requests = 0usize;
    let mut last_start = 0.0;
    for s in spec.sessions(&cat) {
        requests += s.requests.len();
        let line = to_model_session(&cat, &s, s.start_s - last_start);
        last_start = s.start_s;
        let text = serde_json::to_string(&line).map_err(|e| e.to_string())?;
        writeln!(w, "{text}").map_err(|e| io("write sessions.jsonl", e))?;
    }
    w.flush().map_err(|e| io("write sessions.jsonl", e))?;
    Ok(format!(
        "{SPEC_NAME}: {} titles, {} files, {} sessions, {requests} requests -> {}",
        cat.titles.len(),
        cat.files.len(),
        spec.sessions,
        out.display()
    ))
}

/// What [`synth_log`] wrote.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SynthSummary {
    pub sessions: u64,
    pub requests: u64,
    pub chains: u64,
    pub files: usize,
    /// Requests whose chain membership is within the analyzer's timing tolerance.
    pub ambiguous: u64,
    pub log_span_s: f64,
}

/// Write a Netflix-style log (`log.csv`), its file table (`files.csv`) and the ground truth
/// (`truth/chains.csv`, `truth/phases.csv`) for the spec into `out`.
pub fn synth_log(spec: &NetflixSpec, out: &Path) -> Result<SynthSummary, String> {
    let cat = spec.catalog();
    let io = |what: &str, e: std::io::Error| format!("{}: {what}: {e}", out.display());
    std::fs::create_dir_all(out.join("truth")).map_err(|e| io("create directory", e))?;
    write_file_table(&out.join("files.csv"), &cat)?;
    let mut log = create(&out.join("log.csv"))?;
    writeln!(
        log,
        "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type"
    )
    .map_err(|e| io("write log.csv", e))?;
    let mut chains = create(&out.join("truth/chains.csv"))?;
    writeln!(
        chains,
        "session,file,start_offset,bytes,requests,t_start,t_end,kind,media,bitrate_kbps,drive"
    )
    .map_err(|e| io("write truth/chains.csv", e))?;
    let mut phases = create(&out.join("truth/phases.csv"))?;
    writeln!(phases, "session,phase,t_start,t_end").map_err(|e| io("write truth/phases.csv", e))?;

    let mut sum = SynthSummary {
        files: cat.files.len(),
        ..Default::default()
    };
    let mut pending: BinaryHeap<MinEntry<(f64, u64), LogLine>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut line = String::new();
    for s in spec.sessions(&cat) {
        // Everything completing before this session's arrival is final: later sessions
        // only add requests received after it.
        while pending.peek().is_some_and(|p| p.value.ts <= s.start_s) {
            let p = pending.pop().expect("peeked").value;
            format_log_line(&mut line, &cat, &p);
            log.write_all(line.as_bytes())
                .map_err(|e| io("write log.csv", e))?;
            sum.log_span_s = sum.log_span_s.max(p.ts);
        }
        sum.sessions += 1;
        sum.requests += s.requests.len() as u64;
        sum.chains += s.runs.len() as u64;
        sum.ambiguous += u64::from(s.ambiguous);
        let device = CLIENT_CLASSES[s.class].3;
        for r in &s.requests {
            let ts = quantize(r.done_s, spec.ts_resolution_s);
            seq += 1;
            pending.push(MinEntry::new(
                (ts, seq),
                LogLine {
                    ts,
                    service: r.done_s - r.recv_s,
                    session: s.id,
                    file: r.file as u32,
                    offset: r.offset,
                    len: r.len,
                    open: r.open_ended,
                    device,
                },
            ));
        }
        for run in &s.runs {
            let f = &cat.files[run.file];
            writeln!(
                chains,
                "{},{},{},{},{},{:.3},{:.3},{},{},{},d{:02}",
                s.id,
                f.name,
                run.start,
                run.end - run.start,
                run.requests,
                run.t_start,
                run.t_end,
                if run.open { "open" } else { "chunk" },
                media_name(f.media),
                f.bitrate_kbps,
                f.drive
            )
            .map_err(|e| io("write truth/chains.csv", e))?;
        }
        for p in &s.phases {
            writeln!(
                phases,
                "{},{},{:.3},{:.3}",
                s.id, p.kind, p.t_start, p.t_end
            )
            .map_err(|e| io("write truth/phases.csv", e))?;
        }
    }
    while let Some(MinEntry { value: p, .. }) = pending.pop() {
        format_log_line(&mut line, &cat, &p);
        log.write_all(line.as_bytes())
            .map_err(|e| io("write log.csv", e))?;
        sum.log_span_s = sum.log_span_s.max(p.ts);
    }
    for (w, name) in [
        (&mut log, "log.csv"),
        (&mut chains, "truth/chains.csv"),
        (&mut phases, "truth/phases.csv"),
    ] {
        w.flush().map_err(|e| io(&format!("write {name}"), e))?;
    }
    Ok(sum)
}

fn quantize(t: f64, res: f64) -> f64 {
    if res >= 1.0 {
        (t / res).floor() * res
    } else {
        t
    }
}

/// A log line waiting for its turn (the log is ordered by completion time).
struct LogLine {
    ts: f64,
    service: f64,
    session: u64,
    file: u32,
    offset: u64,
    len: u64,
    open: bool,
    device: &'static str,
}

fn format_log_line(buf: &mut String, cat: &NfCatalog, p: &LogLine) {
    use std::fmt::Write as _;
    buf.clear();
    let f = &cat.files[p.file as usize];
    let length = if p.open {
        String::new()
    } else {
        p.len.to_string()
    };
    let _ = writeln!(
        buf,
        "{:.3},{:.3},{},{},{},{},{},{},{}",
        p.ts,
        p.service,
        p.session,
        f.name,
        p.offset,
        length,
        u8::from(p.open),
        p.len,
        p.device
    );
}

pub fn media_name(m: Media) -> &'static str {
    match m {
        Media::Audio => "audio",
        Media::Video => "video",
        Media::Combined => "combined",
    }
}

fn create(path: &Path) -> Result<BufWriter<File>, String> {
    File::create(path)
        .map(|f| BufWriter::with_capacity(1 << 20, f))
        .map_err(|e| format!("{}: create: {e}", path.display()))
}

fn write_json<T: serde::Serialize>(path: &Path, v: &T) -> Result<(), String> {
    let mut w = create(path)?;
    serde_json::to_writer_pretty(&mut w, v).map_err(|e| format!("{}: {e}", path.display()))?;
    writeln!(w)
        .and_then(|_| w.flush())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The file table the trace tools read: `file,bitrate_kbps,media,size_bytes,drive`.
pub fn write_file_table(path: &Path, cat: &NfCatalog) -> Result<(), String> {
    let mut w = create(path)?;
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    writeln!(w, "file,bitrate_kbps,media,size_bytes,drive").map_err(err)?;
    for f in &cat.files {
        writeln!(
            w,
            "{},{},{},{},d{:02}",
            f.name,
            f.bitrate_kbps,
            media_name(f.media),
            f.size_bytes(),
            f.drive
        )
        .map_err(err)?;
    }
    w.flush().map_err(err)
}

fn to_model_catalog(spec: &NetflixSpec, cat: &NfCatalog) -> Catalog {
    let titles = cat
        .titles
        .iter()
        .map(|t| Title {
            id: t.id,
            rank: t.rank,
            duration_s: t.duration_s,
            renditions: t
                .audio
                .iter()
                .chain(&t.video)
                .chain(&t.combined)
                .map(|&i| {
                    let f = &cat.files[i];
                    Rendition::one_file(f.bitrate_kbps, f.media, f.name.clone(), f.size_bytes())
                })
                .collect(),
        })
        .collect();
    Catalog {
        spec: SPEC_NAME.to_string(),
        seed: spec.seed,
        titles,
    }
}

fn workload_meta(spec: &NetflixSpec) -> WorkloadMeta {
    let client_classes = CLIENT_CLASSES
        .iter()
        .map(|&(name, kbps, share, _)| ClientClass {
            name: name.to_string(),
            bandwidth_bps: (kbps * 1000.0) as u64,
            one_way_delay_s: 0.025,
            share,
        })
        .collect();
    WorkloadMeta {
        spec: SPEC_NAME.to_string(),
        seed: spec.seed,
        client_classes,
        measurement: Measurement::default(),
    }
}

/// Turn a synthetic session into a `sessions.jsonl` line: requests in the order they are
/// sent, start-to-start pacing, open-ended ones reading exactly what the client read.
fn to_model_session(cat: &NfCatalog, s: &SynthSession, gap: f64) -> Session {
    let mut reqs: Vec<&truth::SynthRequest> = s.requests.iter().collect();
    reqs.sort_by(|a, b| a.recv_s.total_cmp(&b.recv_s));
    let mut prev = s.start_s;
    let requests = reqs
        .iter()
        .map(|r| {
            let pacing = (r.recv_s - prev).max(0.0);
            prev = r.recv_s;
            let range = if r.open_ended {
                ByteRange::OpenEnded {
                    first: r.offset,
                    read: r.len,
                }
            } else {
                ByteRange::Closed {
                    first: r.offset,
                    last: r.end() - 1,
                }
            };
            Request {
                path: format!("/{}", cat.files[r.file].name),
                range: Some(range),
                pacing_s: (pacing * 1000.0).round() / 1000.0,
                timeout_s: 30.0
                    + if r.open_ended {
                        r.done_s - r.recv_s
                    } else {
                        0.0
                    },
                conn: r.conn,
                media_s: r.media_s,
            }
        })
        .collect();
    Session {
        id: s.id,
        gap,
        start_s: Some((s.start_s * 1000.0).round() / 1000.0),
        class: CLIENT_CLASSES[s.class].0.to_string(),
        title: Some(cat.titles[s.title].id),
        bitrate_kbps: Some(s.stable_kbps),
        requests,
        live: None,
        play: Some(s.play.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_deterministic_and_unambiguous() {
        let spec = NetflixSpec::new(7, 0.05, &[]).unwrap();
        let cat = spec.catalog();
        let a: Vec<_> = spec
            .sessions(&cat)
            .map(|s| (s.requests.len(), s.runs.len(), s.ambiguous))
            .collect();
        let b: Vec<_> = spec
            .sessions(&cat)
            .map(|s| (s.requests.len(), s.runs.len(), s.ambiguous))
            .collect();
        assert_eq!(a, b);
        assert_eq!(a.len(), 50);
        let amb: u32 = a.iter().map(|x| x.2).sum();
        assert_eq!(amb, 0, "generator produced ambiguous adjacency");
        assert!(a.iter().map(|x| x.0).sum::<usize>() > 500);
    }

    #[test]
    fn sessions_describe_their_viewing_for_a_player() {
        let spec = NetflixSpec::new(11, 0.2, &[]).unwrap();
        let cat = spec.catalog();
        let mut conns = std::collections::BTreeSet::new();
        let (mut seeks, mut later_starts) = (0, 0);
        for s in spec.sessions(&cat) {
            let p = &s.play;
            p.check().unwrap();
            let duration = cat.titles[s.title].duration_s;
            assert!(p.start_s < duration, "{p:?}");
            later_starts += usize::from(p.start_s > 0.0);
            // Skips become seeks into the title, each after some playback.
            for j in &p.seeks {
                assert!(j.to_s < duration && j.after_s > 0.0, "{p:?}");
            }
            seeks += p.seeks.len();
            let c = p.connections.unwrap();
            assert!((1..=6).contains(&c), "{p:?}");
            conns.insert(c);
            let b = p.buffer_target_s.unwrap();
            assert!((60.0..=240.0).contains(&b), "{p:?}");
            // The model is written out with it.
            let line = to_model_session(&cat, &s, 1.0);
            assert_eq!(line.play.as_ref(), Some(p));
        }
        // The thesis's mix of parallel connections, later starts and skips all occur.
        assert!(conns.len() >= 3, "{conns:?}");
        assert!(later_starts > 0 && seeks > 0, "{later_starts} {seeks}");
    }

    #[test]
    fn bad_sets_are_rejected() {
        assert!(NetflixSpec::new(1, 1.0, &[("role".into(), "x".into())]).is_err());
        assert!(NetflixSpec::new(1, 1.0, &[("nope".into(), "1".into())]).is_err());
        assert!(NetflixSpec::new(1, 0.0, &[]).is_err());
        assert!(NetflixSpec::new(1, 1.0, &[("short_share".into(), "2".into())]).is_err());
    }

    #[test]
    fn workload_files_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let msg = new_workload(3, 0.01, &[], dir.path()).unwrap();
        assert!(msg.contains("10 sessions"), "{msg}");
        let text = std::fs::read_to_string(dir.path().join("sessions.jsonl")).unwrap();
        let sessions: Vec<Session> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(sessions.len(), 10);
        for s in &sessions {
            assert!(!s.requests.is_empty());
            assert!(s
                .requests
                .iter()
                .all(|r| r.pacing_s >= 0.0 && r.path.starts_with("/nf/")));
        }
        let cat: Catalog = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("catalog.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(cat.titles.len(), 10);
    }
}
