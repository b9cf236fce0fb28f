//! How the server gets file bytes into memory before sendfile: the `--io` modes, backed
//! by the prefetch engine (`vodkit-prefetch`), plus the chain and bit-rate context the
//! prefetch policies need.
//!
//! For each window of a response the engine checks residency (`cachestat`/`mincore`);
//! a hit is sent at once from the event loop, a miss is read by the engine (thread pool
//! or one FIFO worker per device, request-sized or prefetch-sized, by mode) and then
//! sent from the page cache. If the pages are gone again by then, the send runs on the
//! blocking pool, so the event loop never waits for the disk.
//!
//! `--io direct` has no page cache in the path: the engine reads misses with `O_DIRECT`
//! into its buffer pool ([`vodkit_prefetch::direct`]) and a window is sent from the pool's
//! chunks with `sendmsg` (a `writev` that raises no SIGPIPE).

use std::fs::File;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vodkit_prefetch::memory::StreamId;
use vodkit_prefetch::{
    Begin, BitrateMap, ChainTracker, Engine, EngineConfig, FileFacts, PolicySpec, ReadRequest,
    Slice,
};
pub use vodkit_prefetch::{IoMode, IoOrder};

use crate::range::ByteRange;

/// I/O settings from the command line.
#[derive(Debug, Clone)]
pub struct IoSettings {
    pub mode: IoMode,
    /// Prefetch policy (parsed from `--prefetch` by the caller). Only `prefetch` and `asap`
    /// enlarge reads.
    pub prefetch: PolicySpec,
    /// Each file's bit rate (paths relative to the root; the CLI reads them from
    /// `--catalog`); files not in it get the policy default.
    pub bitrates: BitrateMap,
    /// Device queue overrides such as `8:17=media` or `sdb=media`.
    pub devices: Vec<String>,
    /// Interval of the engine's statistics log line (through `tracing` at info level).
    pub stats_every: Option<Duration>,
    /// Let the kernel's readahead add its reads to the policy's (the default). `false`:
    /// the prefetching modes (`prefetch`, `asap`) mark files `POSIX_FADV_RANDOM` before
    /// their enlarged reads, so the policy alone decides how much is read.
    pub kernel_readahead: bool,
    /// Prefetches of popular files read as large page-cache folios, ending on folio
    /// boundaries ([`EngineConfig::large_folios`]). `false` (the default): 4 KiB pages, the
    /// policy's exact sizes.
    pub large_folios: bool,
    /// Partly resident read ranges read their short resident runs again so the drive sees
    /// one read ([`EngineConfig::reread_resident_runs`], the default); `false`: buffered
    /// reads skip every resident page.
    pub reread_resident_runs: bool,
    /// The prefetch-aware memory manager (`vodkit_prefetch::memory`).
    pub memory: MemorySetting,
    /// The order a device's worker serves queued reads in (`--io-order`; serializing modes).
    pub order: IoOrder,
}

pub use vodkit_prefetch::budget::MemorySetting;

impl Default for IoSettings {
    fn default() -> Self {
        IoSettings {
            mode: IoMode::Asap,
            prefetch: default_policy(),
            bitrates: BitrateMap::default(),
            devices: Vec::new(),
            stats_every: Some(Duration::from_secs(10)),
            kernel_readahead: EngineConfig::default().kernel_readahead,
            large_folios: EngineConfig::default().large_folios,
            reread_resident_runs: EngineConfig::default().reread_resident_runs,
            memory: MemorySetting::Auto,
            order: IoOrder::default(),
        }
    }
}

/// The server's default prefetch policy (with `--io asap`, the default mode): `auto`.
pub fn default_policy() -> PolicySpec {
    PolicySpec::Auto(vodkit_prefetch::policy::AutoParams::default())
}

/// The engine configuration for `settings`; errors name the flag at fault.
pub fn engine_config(settings: &IoSettings) -> Result<EngineConfig, String> {
    let mut cfg = EngineConfig {
        mode: settings.mode,
        kernel_readahead: settings.kernel_readahead,
        large_folios: settings.large_folios,
        reread_resident_runs: settings.reread_resident_runs,
        order: settings.order,
        policy: settings.prefetch.clone(),
        ..EngineConfig::default()
    };
    for d in &settings.devices {
        cfg.devices
            .add_override(d)
            .map_err(|e| format!("device override {d:?}: {e}"))?;
    }
    cfg.memory = settings.memory.config();
    Ok(cfg)
}

/// Largest piece of a response made resident in one engine call. Longer ranges (whole
/// files, open-ended requests) advance window by window, which the chain tracker sees as
/// one growing chain, the way a sendfile loop meets misses as it goes.
pub const WINDOW: u64 = 2 << 20;

/// Who is asking, for chain tracking and the policy.
#[derive(Debug, Clone, Copy)]
pub struct Requester {
    /// Hash of the session id when present, otherwise of the client IP.
    pub client: u64,
    /// Hash of the session id when present, otherwise of the connection: the memory
    /// manager's stream key (one viewer's requests on one connection).
    pub stream: u64,
    /// The request's range was open-ended (`a-` or no Range header).
    pub open_ended: bool,
}

impl Requester {
    pub fn new(session: Option<&str>, ip: std::net::IpAddr, conn: u64, open_ended: bool) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        match session {
            Some(s) => s.hash(&mut h),
            None => ip.hash(&mut h),
        }
        let client = h.finish();
        let stream = match session {
            Some(_) => client,
            None => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (ip, conn).hash(&mut h);
                h.finish()
            }
        };
        Requester {
            client,
            stream,
            open_ended,
        }
    }
}

/// The engine could not deliver `window` (a read error in its larger prefetch, a full
/// buffer pool): read the window alone with buffered `pread`s on the blocking pool, so
/// its pages are cached for the `sendfile` that follows, or so the caller learns before
/// sending anything that the disk cannot read it.
async fn read_alone(file: &Arc<File>, window: ByteRange, stream: Option<StreamId>) -> Prepared {
    use std::os::unix::fs::FileExt as _;
    let f = file.clone();
    let len = window.len();
    let read = tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; len.min(WINDOW) as usize];
        let mut at = window.first;
        while at <= window.last {
            let n = ((window.last + 1 - at) as usize).min(buf.len());
            f.read_exact_at(&mut buf[..n], at)?;
            at += n as u64;
        }
        Ok::<(), std::io::Error>(())
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    Prepared {
        from_memory: 0,
        from_disk: len,
        send_blocking: true,
        stream,
        slices: None,
        // A file shorter than its plan is not a disk error: the send reports it.
        read_error: match read {
            Err(e) if e.kind() != std::io::ErrorKind::UnexpectedEof => Some(Arc::new(e)),
            _ => None,
        },
    }
}

/// What the engine did for one window before it is sent.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    /// Bytes of the window that were already in memory.
    pub from_memory: u64,
    /// Bytes of the window that had to come from the disk.
    pub from_disk: u64,
    /// Whether sendfile may still block on the disk and must run on the thread pool.
    pub send_blocking: bool,
    /// The memory manager's stream; report the window sent with [`DiskIo::sent`].
    pub stream: Option<StreamId>,
    /// `--io direct`: the window's bytes in the engine's buffer pool, in order (send them
    /// with [`crate::body::send_slices`]); `None`: send from the file with sendfile.
    pub slices: Option<Vec<Slice>>,
    /// The window could not be read from the disk, even alone: send none of it.
    pub read_error: Option<Arc<std::io::Error>>,
}

/// The server's disk path: the engine plus chain and bit-rate context.
#[derive(Debug)]
pub struct DiskIo {
    mode: IoMode,
    engine: Arc<Engine>,
    chains: Mutex<ChainTracker>,
    bitrates: BitrateMap,
}

impl DiskIo {
    /// Build the engine; errors name the flag or file at fault.
    pub fn new(settings: &IoSettings, root: &Path) -> Result<DiskIo, String> {
        let cfg = engine_config(settings)?;
        match &cfg.memory {
            Some(m) => tracing::info!(
                "memory manager on: budget {} ({}), reserve {}",
                bytesize::ByteSize(m.budget_bytes),
                settings.memory.source().name(),
                bytesize::ByteSize(m.reserve_bytes)
            ),
            None if settings.mode == IoMode::Direct => tracing::info!(
                "--io direct keeps the memory manager on (its budget bounds the buffer pool)"
            ),
            None => tracing::info!("memory manager off"),
        }
        let bitrates = settings.bitrates.clone().with_root(root);
        let engine = Arc::new(Engine::new(cfg));
        if let Some(every) = settings.stats_every {
            engine.spawn_logger(every);
        }
        Ok(DiskIo {
            mode: settings.mode,
            engine,
            chains: Mutex::new(ChainTracker::default()),
            bitrates,
        })
    }

    pub fn mode(&self) -> IoMode {
        self.mode
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Make `window` of `file` resident through the engine and say how to send it.
    pub async fn prepare(
        &self,
        file: &Arc<File>,
        url_path: &str,
        facts: FileFacts,
        who: Requester,
        window: ByteRange,
    ) -> Prepared {
        let (offset, len) = (window.first, window.len());
        let bitrate = self.bitrates.get(url_path);
        let chain = {
            let now = self.engine.now_s();
            let mut chains = self.chains.lock().unwrap_or_else(|p| p.into_inner());
            Some(chains.request(who.client, facts.id(), offset, len, who.open_ended, now))
        };
        let req = ReadRequest {
            offset,
            len,
            bitrate_kbps: bitrate,
            chain,
            client: Some(who.stream),
            file: Some(facts),
        };
        if self.mode == IoMode::Direct {
            return self.prepare_direct(file, req).await;
        }
        let outcome = match self.engine.begin(file, &req) {
            Ok(Begin::Ready(o)) => {
                return Prepared {
                    from_memory: o.from_memory,
                    from_disk: o.from_disk,
                    send_blocking: false,
                    stream: o.stream,
                    slices: None,
                    read_error: None,
                }
            }
            Ok(Begin::Pending(p)) => p.wait().await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(o) => {
                // The read finished; if memory pressure already took pages back, let the
                // kernel re-read them on the blocking pool rather than on the event loop.
                let resident = self
                    .engine
                    .probe(file, offset, len)
                    .map(|r| r.is_complete())
                    .unwrap_or(false);
                Prepared {
                    from_memory: o.from_memory,
                    from_disk: o.from_disk,
                    send_blocking: !resident,
                    stream: o.stream,
                    slices: None,
                    read_error: None,
                }
            }
            Err(e) => {
                tracing::debug!("prefetch engine failed, reading the window alone: {e}");
                read_alone(file, window, None).await
            }
        }
    }

    /// `--io direct`: the window from the engine's buffer pool (read with `O_DIRECT` on the
    /// device's worker when missing). Should the engine fail (the pool full for too long,
    /// the file shorter than planned), the window goes out with sendfile from the blocking
    /// pool, as an engine failure does in the other modes.
    async fn prepare_direct(&self, file: &Arc<File>, req: ReadRequest) -> Prepared {
        let window = ByteRange {
            first: req.offset,
            last: req.offset + req.len - 1,
        };
        let len = req.len;
        match self.engine.fetch_direct(file, req).await {
            Ok(d) if d.slices.iter().map(Slice::len).sum::<usize>() as u64 == len => Prepared {
                from_memory: d.outcome.from_memory,
                from_disk: d.outcome.from_disk,
                send_blocking: false,
                stream: d.outcome.stream,
                slices: Some(d.slices),
                read_error: None,
            },
            Ok(d) => {
                tracing::debug!(
                    "direct read covered {} of {len} bytes (file truncated?); sending with sendfile",
                    d.outcome.requested
                );
                read_alone(file, window, d.outcome.stream).await
            }
            Err(e) => {
                tracing::debug!("direct read failed, reading the window alone: {e}");
                read_alone(file, window, None).await
            }
        }
    }

    /// `None` when a request of `who` at `offset` of `file_id` continues one of its open
    /// chains; otherwise it starts a new stream, and this is the load of the device it
    /// would add to (for [`crate::admission`]).
    pub fn new_stream(
        &self,
        who: Requester,
        file_id: u64,
        file: &File,
        offset: u64,
    ) -> Option<crate::admission::DeviceLoad> {
        let now = self.engine.now_s();
        let open_chains = {
            let chains = self.chains.lock().unwrap_or_else(|p| p.into_inner());
            if offset > 0 && chains.continues(who.client, file_id, offset, now) {
                return None;
            }
            chains.len() as u64
        };
        let streams = self
            .engine
            .memory()
            .map_or(open_chains, |m| m.weighted_streams);
        Some(crate::admission::DeviceLoad {
            streams,
            ..self.engine.device_load(file)
        })
    }

    /// The name of the device `file` lies on (for read-error counts and log lines).
    pub fn device_of(&self, file: &File) -> Arc<str> {
        self.engine.device_of(file)
    }

    /// `window` was handed to the socket: the memory manager may release what lies before
    /// it (it keeps a lag for bytes a `sendfile` still holds).
    pub fn sent(&self, prep: &Prepared, window: ByteRange) {
        self.engine.consumed(prep.stream, window.last + 1);
    }

    /// The connection whose requests carried stream key `stream` ([`Requester::stream`])
    /// closed: its streams stop taking a share of the memory budget.
    pub fn closed(&self, stream: u64) {
        self.engine.closed(stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_readahead_setting_reaches_the_engine_config() {
        let default = IoSettings::default();
        assert!(
            !default.kernel_readahead,
            "by default the policy alone decides what prefetching modes read"
        );
        assert!(!engine_config(&default).unwrap().kernel_readahead);
        let on = IoSettings {
            mode: IoMode::Asap,
            prefetch: PolicySpec::Fixed { bytes: 4 << 20 },
            kernel_readahead: true,
            ..IoSettings::default()
        };
        let cfg = engine_config(&on).unwrap();
        assert!(cfg.kernel_readahead);
        assert_eq!(cfg.mode, IoMode::Asap);
        assert_eq!(cfg.policy, PolicySpec::Fixed { bytes: 4 << 20 });
    }

    #[test]
    fn the_default_policy_is_auto() {
        assert_eq!(
            default_policy().to_string(),
            "auto".parse::<PolicySpec>().unwrap().to_string()
        );
        assert_eq!(IoSettings::default().prefetch, default_policy());
    }
}
