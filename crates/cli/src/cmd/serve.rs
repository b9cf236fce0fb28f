//! `vodkit serve`: flags for the HTTP/1.1 video origin in `vodkit-server`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::flags;
use super::usage;
use vodkit_prefetch::PolicySpec;
use vodkit_server::io::MemorySetting;
use vodkit_server::{IoMode, IoSettings, ServerConfig};

#[derive(clap::Args)]
pub struct Args {
    /// Directory whose files are served.
    #[arg(long)]
    root: PathBuf,
    /// HTTP listen address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// How cache misses are read: vanilla, serialized, prefetch, asap (asynchronous
    /// serialized aggressive prefetching, the default) or direct (asap with O_DIRECT reads
    /// into a buffer pool within the --memory budget, sent with writev; no page cache).
    #[arg(long, default_value = "asap")]
    io: String,
    /// The order a device's reads are served in (serializing --io modes): sweep (by place
    /// on the device, one sweep per round, deadlines permitting; the default), deadline
    /// (the client that runs dry first) or fifo (arrival). See docs/prefetch.md.
    #[arg(long, value_name = "fifo|deadline|sweep")]
    io_order: Option<vodkit_server::IoOrder>,
    /// Prefetch policy, e.g. none, fixed:2MiB, sqrt:4MiB@419, auto (the default).
    #[arg(long, value_parser = parse_policy)]
    prefetch: Option<PolicySpec>,
    #[command(flatten)]
    memory: flags::PrefetchMemory,
    /// catalog.json (or a path-to-kbps map) giving each file's bit rate.
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Device queue override, e.g. `8:17=media` or `sdb=media` (repeatable).
    #[arg(long = "device", value_name = "OVERRIDE")]
    devices: Vec<String>,
    /// Kernel readahead on top of the prefetch policy's reads: off (the prefetching --io
    /// modes mark files POSIX_FADV_RANDOM before enlarged reads), or on.
    #[arg(long, default_value = "off", value_parser = parse_on_off, value_name = "on|off", action = clap::ArgAction::Set)]
    kernel_readahead: bool,
    /// Prefetches of files at least 8 viewers read at once read as large page-cache folios
    /// (2 MiB, cheaper to sendfile) and end on folio boundaries: on (when transparent huge
    /// pages are not `never`; experimental, docs/server.md), or off (4 KiB pages, the
    /// policy's exact sizes).
    #[arg(long, default_value = "off", value_parser = parse_on_off, value_name = "on|off", action = clap::ArgAction::Set)]
    large_folios: bool,
    /// A read of a partly resident range reads its short resident runs again, so the drive
    /// sees one read instead of one per missing piece: on (the default; runs shorter than
    /// half the positioning the device has shown, in bytes it transfers meanwhile), or off
    /// (every resident page skipped).
    #[arg(long, default_value = "on", value_parser = parse_on_off, value_name = "on|off", action = clap::ArgAction::Set)]
    reread_resident: bool,
    /// Interval of the prefetch statistics log line (shown with VODKIT_LOG=info); 0 = off.
    #[arg(long = "interval", alias = "stats-every", default_value = "10s", value_name = flags::DURATION, value_parser = flags::duration)]
    stats_every: Duration,
    /// Append one line per response to this file (format in docs/server.md).
    #[arg(long)]
    access_log: Option<PathBuf>,
    /// Access log line format: tsv (default) or jsonl (one JSON object per line).
    #[arg(long, default_value = "tsv")]
    access_log_format: vodkit_server::access_log::AccessLogFormat,
    /// Admin listener for /metrics and /stats (off unless given).
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// Close keep-alive connections idle this long.
    #[arg(long, default_value = "120s", value_name = flags::DURATION, value_parser = flags::duration)]
    idle_timeout: Duration,
    /// A request head must be complete this long after its first byte.
    #[arg(long, default_value = "10s", value_name = flags::DURATION, value_parser = flags::duration)]
    header_timeout: Duration,
    /// Close a connection after this many requests (default: unlimited).
    #[arg(long)]
    max_requests: Option<u64>,
    /// Minimum body send rate once --send-grace has passed, e.g. 1KiB/s.
    #[arg(long, default_value = "1KiB/s", value_name = flags::DATA_RATE, value_parser = flags::byte_rate)]
    min_send_rate: u64,
    /// How long a response may take before the minimum send rate applies.
    #[arg(long, default_value = "30s", value_name = flags::DURATION, value_parser = flags::duration)]
    send_grace: Duration,
    /// Simultaneous connections; more get 503.
    #[arg(long, default_value_t = 16384)]
    max_connections: usize,
    /// Listen queue length: connections the kernel completes before the server accepts
    /// them (capped by net.core.somaxconn). nginx asks for 511; see docs/server.md.
    #[arg(long, default_value_t = vodkit_server::DEFAULT_BACKLOG, value_parser = clap::value_parser!(u32).range(1..=65535))]
    backlog: u32,
    /// Served files kept open between requests (0: open every file per request). See
    /// docs/server.md "Open-file cache".
    #[arg(long, default_value_t = vodkit_server::open_files::DEFAULT_ENTRIES)]
    open_file_cache: usize,
    /// How long a kept-open file is trusted before one fstatat checks that its name still
    /// leads to the same unchanged file (0: at every request; nginx's open_file_cache_valid
    /// is 60s). A replaced or rewritten file is served within this time.
    #[arg(long, default_value = "1s", value_name = flags::DURATION, value_parser = flags::duration)]
    open_file_cache_valid: Duration,
    /// Admission of new streams (a request at offset 0, or not adjacent to an open stream
    /// of its session): off, auto[:SECONDS] (refuse with 503 + Retry-After while the disk's
    /// reads wait more than 1 s, or SECONDS, in its queue at p90; continuations are never
    /// refused) or rate:R (at most R new streams per second). See docs/server.md
    /// "Admission control"
    #[arg(long, default_value = "off", value_name = "off|auto[:SECONDS]|rate:R")]
    admission: vodkit_server::admission::AdmissionPolicy,
    /// Be a live origin: accept `PUT`/`DELETE` of segments and playlists under this path
    /// prefix (e.g. /live/) with `Authorization: Bearer TOKEN`, keep each stream's window
    /// in memory and serve it. See docs/server.md "Live origin".
    #[arg(long, value_name = "PREFIX")]
    ingest: Option<String>,
    /// The publisher's bearer token (needed with --ingest).
    #[arg(
        long,
        value_name = "TOKEN",
        requires = "ingest",
        conflicts_with = "ingest_token_file"
    )]
    ingest_token: Option<String>,
    /// Read the token from this file (first line), so it stays out of argv.
    #[arg(long, value_name = "FILE", requires = "ingest")]
    ingest_token_file: Option<PathBuf>,
    /// Segments kept per live stream.
    #[arg(long, default_value_t = 30, requires = "ingest")]
    ingest_window: usize,
    /// Bytes of live objects in memory over all streams, playlists, init segments and
    /// bodies being uploaded included (past it the oldest segments are spilled to
    /// --ingest-spill, or dropped without it; what only fits by evicting a playlist or an
    /// init segment is refused with 507). Default 512MiB, or a quarter of the memory cgroup's
    /// limit the server runs under when that is less (the prefetch manager's automatic budget
    /// then leaves that room).
    #[arg(long, requires = "ingest", value_name = flags::SIZE, value_parser = flags::size)]
    ingest_max_bytes: Option<u64>,
    /// A writable directory for live segments past --ingest-max-bytes: written to
    /// unlinked files there and served through the page cache, so no segment still in a
    /// window is dropped while memory is full (as a disk-backed origin keeps them).
    #[arg(long, value_name = "DIR", requires = "ingest")]
    ingest_spill: Option<PathBuf>,
    /// Bytes of live segments kept in the spill directory (the oldest dropped past it).
    #[arg(long, default_value = "8GiB", requires = "ingest_spill", value_name = flags::SIZE, value_parser = flags::size)]
    ingest_spill_max: u64,
    /// Largest object a publisher may PUT (413 above).
    #[arg(long, default_value = "64MiB", requires = "ingest", value_name = flags::SIZE, value_parser = flags::size)]
    ingest_max_object: u64,
    /// A live stream without a PUT for this long is dropped.
    #[arg(long, default_value = "60s", value_name = flags::DURATION, value_parser = flags::duration, requires = "ingest")]
    ingest_ttl: Duration,
    /// Longest a GET waits for a live segment not published yet (then 404).
    #[arg(long, default_value = "6s", value_name = flags::DURATION, value_parser = flags::duration, requires = "ingest")]
    ingest_hold: Duration,
    /// Names (segments, playlists, init segments) one live stream may hold; past it the
    /// stream's oldest segments go, and a PUT of another name is refused with 507.
    #[arg(long, default_value_t = 256, requires = "ingest", value_parser = clap::value_parser!(u64).range(1..))]
    ingest_max_objects: u64,
    /// Live streams held at once (a PUT starting another is refused with 507).
    #[arg(long, default_value_t = 1024, requires = "ingest", value_parser = clap::value_parser!(u64).range(1..))]
    ingest_max_streams: u64,
    /// Longest a PUT's body may take to arrive, whole (408 past it, as a stalled one).
    #[arg(long, default_value = "60s", value_name = flags::DURATION, value_parser = flags::duration, requires = "ingest")]
    ingest_body_timeout: Duration,
    /// Longest an LL-HLS blocking playlist reload (`_HLS_msn`, `_HLS_part`) is held
    /// waiting for its segment or part (then 503); default: three times the target
    /// duration the playlist announces.
    #[arg(long, value_name = flags::DURATION, value_parser = flags::duration, requires = "ingest")]
    ingest_block_timeout: Option<Duration>,
    /// Cross-origin access for browser players: `*`, or a comma-separated list of origins
    /// (echoed with `Vary: Origin`). Preflights allow the headers the player asks for (e.g.
    /// CMCD) and are cacheable for a day; `Timing-Allow-Origin` is sent too.
    #[arg(long, value_name = "*|ORIGIN[,ORIGIN…]")]
    cors: Option<vodkit_server::web::Cors>,
    /// `Cache-Control` for VoD manifests (.mpd, .m3u8); empty sends none. Live ones get
    /// --live-playlist-max-age.
    #[arg(long, default_value = "public, max-age=86400", value_name = "VALUE")]
    cache_control_manifest: String,
    /// `max-age` of live playlists (published by --ingest, or files that are an HLS media
    /// playlist without #EXT-X-ENDLIST or a dynamic MPD): auto (half the target segment
    /// duration they announce, at least 1s) or a duration.
    #[arg(long, default_value = "auto", value_name = "auto|DURATION", value_parser = flags::auto_or_duration)]
    live_playlist_max_age: flags::AutoDuration,
    /// `Cache-Control` for media files (video, audio, segments); empty sends none.
    #[arg(long, default_value = "public, max-age=86400", value_name = "VALUE")]
    cache_control_media: String,
    /// `Cache-Control` for every other file; empty (the default) sends none.
    #[arg(long, default_value = "", value_name = "VALUE")]
    cache_control_other: String,
    /// Never gzip text files (by default manifests, subtitles and pages up to 1 MiB are
    /// gzipped for clients that accept it).
    #[arg(long)]
    no_gzip: bool,
    /// Follow symlinks that lead outside --root.
    #[arg(long)]
    allow_outside_symlinks: bool,
    /// Longest wait for in-flight responses after SIGTERM.
    #[arg(long, default_value = "30s", value_name = flags::DURATION, value_parser = flags::duration)]
    drain_timeout: Duration,
    /// Event loops, each a thread accepting from the one listening socket (default: one per
    /// CPU the server may run on, at most its cgroup CPU quota rounded up).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Serve only requests with a valid expiring URL signature made with the secret in this
    /// file (one line): nginx's `secure_link` MD5 form (`?md5=…&expires=…`) or the HMAC-SHA-256
    /// form (`?hmac=…&expires=…`). Bad or missing: 403; expired: 410. Manifests served to a
    /// signed request carry the signature to their segments. See docs/server.md "Signed URLs".
    #[arg(long, value_name = "SECRETFILE")]
    secure_link: Option<PathBuf>,
    /// Check signatures only on paths under this prefix (default: every path).
    #[arg(
        long,
        default_value = "/",
        value_name = "PREFIX",
        requires = "secure_link"
    )]
    secure_link_prefix: String,
    #[command(flatten)]
    tls: super::tls::ServeTls,
    /// Offer HTTP/2 on the TLS listener: ALPN `h2`, falling back to `http/1.1` for clients
    /// that do not offer it. Same files, ranges, validators, caching, CORS, signed URLs,
    /// live origin and access log as HTTP/1.1 (logged as HTTP/2.0); bodies go out as DATA
    /// frames within the client's flow-control windows (no sendfile). See docs/server.md
    /// "HTTP/2".
    #[arg(long, requires = "tls_cert")]
    http2: bool,
    /// Accept cleartext HTTP/2 by prior knowledge (h2c) beside HTTP/1.1: a connection that
    /// opens with the HTTP/2 preface speaks HTTP/2. No `Upgrade: h2c`.
    #[arg(long, conflicts_with = "tls_cert")]
    h2c: bool,
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: requests one connection may have in flight.
    #[arg(long, default_value_t = vodkit_server::H2Settings::default().max_streams, value_name = "N")]
    h2_max_streams: u32,
}

/// A `--prefetch` value: the one place `vodkit serve` turns policy text into a policy.
pub(crate) fn parse_policy(s: &str) -> Result<PolicySpec, String> {
    s.parse()
        .map_err(|e: vodkit_prefetch::SpecError| e.to_string())
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("`{s}`: expected on or off")),
    }
}

/// The server configuration the flags describe; input errors are usage errors.
fn config(args: Args) -> anyhow::Result<ServerConfig> {
    let mode: IoMode = args
        .io
        .parse()
        .map_err(|e| super::usage(format!("--io: {e}")))?;
    if let Some(order) = args
        .io_order
        .filter(|o| *o != vodkit_server::IoOrder::Fifo && !mode.serializes())
    {
        return Err(super::usage(format!(
            "--io-order {order}: --io {mode} reads on a thread pool, which has no device queue to order; expected --io serialized, asap or direct"
        )));
    }
    if !args.root.is_dir() {
        return Err(super::usage(format!(
            "--root {}: not a directory",
            args.root.display()
        )));
    }
    let mut config = ServerConfig::new(&args.root);
    config.listen = args.listen;
    config.admin = args.admin;
    let memory: MemorySetting = args.memory.setting();
    let bitrates = match &args.catalog {
        Some(path) => vodkit_workload::bitrates::load(path)
            .map_err(|e| super::usage(format!("--catalog: {e}")))?,
        None => Default::default(),
    };
    config.io = IoSettings {
        mode,
        memory,
        prefetch: args
            .prefetch
            .unwrap_or_else(vodkit_server::io::default_policy),
        bitrates: vodkit_prefetch::BitrateMap::from_rates(bitrates),
        devices: args.devices,
        stats_every: (!args.stats_every.is_zero()).then_some(args.stats_every),
        kernel_readahead: args.kernel_readahead,
        large_folios: args.large_folios,
        reread_resident_runs: args.reread_resident,
        order: args.io_order.unwrap_or_default(),
    };
    config.access_log = args.access_log;
    config.access_log_format = args.access_log_format;
    config.idle_timeout = args.idle_timeout;
    config.header_timeout = args.header_timeout;
    config.max_requests_per_connection = args.max_requests;
    config.min_send_rate = args.min_send_rate;
    config.send_grace = args.send_grace;
    config.max_connections = args.max_connections;
    config.backlog = args.backlog;
    config.open_file_cache = args.open_file_cache;
    config.open_file_valid = args.open_file_cache_valid;
    config.admission = args.admission;
    if let Some(prefix) = &args.ingest {
        if !prefix.starts_with('/') || prefix == "/" {
            return Err(usage(format!(
                "--ingest `{prefix}`: expected a path prefix such as /live/ (not the whole site)"
            )));
        }
        let token = flags::ingest_token(
            args.ingest_token.as_deref(),
            args.ingest_token_file.as_deref(),
        )?
        .ok_or_else(|| usage("--ingest needs --ingest-token or --ingest-token-file"))?;
        if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(usage(
                "--ingest-token: expected a non-empty token without spaces",
            ));
        }
        let mut ingest = vodkit_server::live::IngestConfig::new(prefix, &token);
        ingest.window = args.ingest_window.max(1);
        // Under a memory cgroup, live objects and the manager's automatic budget share its
        // limit instead of each assuming all of it.
        let limit = match vodkit_prefetch::budget::detect(None) {
            (l, vodkit_prefetch::budget::BudgetSource::Cgroup) => Some(l),
            _ => None,
        };
        match (args.ingest_max_bytes, limit) {
            (Some(b), _) => ingest.max_bytes = b,
            (None, Some(l)) => {
                ingest.fit_to_limit(l);
                if config.io.memory == MemorySetting::Auto {
                    config.io.memory = MemorySetting::Budget(l.saturating_sub(ingest.max_bytes));
                }
                tracing::info!(
                    "live objects take up to {} of the memory cgroup's limit {} (--ingest-max-bytes sets it); an automatic --memory budget gets the rest",
                    vodkit_units::human_size(ingest.max_bytes),
                    vodkit_units::human_size(l)
                );
            }
            (None, None) => {}
        }
        ingest.max_object = args.ingest_max_object;
        ingest.ttl = args.ingest_ttl;
        ingest.hold = args.ingest_hold;
        ingest.max_objects = args.ingest_max_objects as usize;
        ingest.max_streams = args.ingest_max_streams as usize;
        ingest.body_timeout = args.ingest_body_timeout;
        ingest.block_timeout = args.ingest_block_timeout;
        ingest.playlist_max_age = args.live_playlist_max_age.0;
        if let Some(dir) = &args.ingest_spill {
            let spill = vodkit_server::live::SpillConfig {
                dir: dir.clone(),
                max_bytes: args.ingest_spill_max,
            };
            spill
                .check()
                .map_err(|e| usage(format!("--ingest-spill {e}")))?;
            ingest.spill = Some(spill);
        }
        config.ingest = Some(ingest);
    }
    config.cors = args.cors;
    config.cache = vodkit_server::web::CachePolicy {
        manifest: header_value(args.cache_control_manifest, "--cache-control-manifest")?,
        media: header_value(args.cache_control_media, "--cache-control-media")?,
        other: header_value(args.cache_control_other, "--cache-control-other")?,
        live_max_age: args.live_playlist_max_age.0,
    };
    config.gzip = !args.no_gzip;
    config.allow_outside_symlinks = args.allow_outside_symlinks;
    config.drain_timeout = args.drain_timeout;
    config.worker_threads = args.threads;
    config.tls = args.tls.settings();
    if args.http2 || args.h2c {
        if args.h2_max_streams == 0 {
            return Err(usage("--h2-max-streams 0: expected at least 1"));
        }
        config.http2 = Some(vodkit_server::H2Settings {
            max_streams: args.h2_max_streams,
            ..Default::default()
        });
    }
    if let Some(file) = &args.secure_link {
        if !args.secure_link_prefix.starts_with('/') {
            return Err(usage(format!(
                "--secure-link-prefix `{}`: expected a path starting with /",
                args.secure_link_prefix
            )));
        }
        let secret = vodkit_securelink::Secret::from_file(file)
            .map_err(|e| usage(format!("--secure-link {e}")))?;
        config.secure_link = Some(vodkit_server::SecureLink {
            secret,
            prefix: args.secure_link_prefix.clone(),
        });
    }
    Ok(config)
}

/// A header value from the command line: printable ASCII only, so it cannot split the
/// response head.
fn header_value(v: String, flag: &str) -> anyhow::Result<String> {
    if v.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        Ok(v.trim().to_string())
    } else {
        anyhow::bail!(
            "{flag}: `{}` has characters a header value cannot hold (printable ASCII only)",
            v.escape_debug()
        )
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = config(args)?;
    if let Err(e) = vodkit_prefetch::pages::small_pages_only() {
        eprintln!("vodkit serve: cannot keep to small pages ({e})");
    }
    let scheme = super::tls::announce(&config);
    if config.http2.is_some() {
        eprintln!(
            "vodkit serve: HTTP/2 {}",
            if config.tls.is_some() {
                "offered by ALPN (h2, falling back to http/1.1)"
            } else {
                "by prior knowledge (h2c) beside HTTP/1.1"
            }
        );
    }
    vodkit_server::run_until_signal(config, |http, admin| {
        eprintln!("vodkit serve: listening on {scheme}://{http}");
        if let Some(a) = admin {
            eprintln!("vodkit serve: admin on http://{a} (/metrics, /stats)");
        }
    })
    .map_err(|e| {
        // Bad --catalog/--device values surface as InvalidInput: exit 2.
        if e.kind() == std::io::ErrorKind::InvalidInput {
            super::usage(e)
        } else {
            anyhow::Error::new(e).context("vodkit serve")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(extra: &[&str]) -> Result<Args, clap::Error> {
        let root = std::env::temp_dir();
        let mut argv = vec!["serve", "--root", root.to_str().unwrap()];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn live_caching_and_ingest_limit_flags_reach_the_server_config() {
        let c = config(parse(&[]).unwrap()).unwrap();
        assert_eq!(c.cache.live_max_age, None);
        assert_eq!(c.cache.manifest, "public, max-age=86400");
        let argv = [
            "--ingest",
            "/live/",
            "--ingest-token",
            "t",
            "--live-playlist-max-age",
            "3s",
            "--ingest-max-objects",
            "9",
            "--ingest-max-streams",
            "7",
            "--ingest-body-timeout",
            "5s",
            "--ingest-block-timeout",
            "1500ms",
        ];
        let c = config(parse(&argv).unwrap()).unwrap();
        let i = c.ingest.unwrap();
        assert_eq!(c.cache.live_max_age, Some(Duration::from_secs(3)));
        assert_eq!(i.playlist_max_age, Some(Duration::from_secs(3)));
        assert_eq!((i.max_objects, i.max_streams), (9, 7));
        assert_eq!(i.body_timeout, Duration::from_secs(5));
        assert_eq!(i.block_timeout, Some(Duration::from_millis(1500)));
        assert!(parse(&["--ingest", "/l/", "--ingest-max-streams", "0"]).is_err());
    }

    #[test]
    fn http2_flags_reach_the_server_config() {
        assert!(config(parse(&[]).unwrap()).unwrap().http2.is_none());
        let c = config(parse(&["--h2c", "--h2-max-streams", "32"]).unwrap()).unwrap();
        assert_eq!(c.http2.unwrap().max_streams, 32);
        let tls = ["--tls-cert", "c.pem", "--tls-key", "k.pem"];
        let c = config(parse(&[&tls[..], &["--http2"]].concat()).unwrap()).unwrap();
        assert!(c.http2.is_some() && c.tls.is_some());
        // --http2 is for the TLS listener, --h2c for the plaintext one.
        assert!(parse(&["--http2"]).is_err());
        assert!(parse(&[&tls[..], &["--h2c"]].concat()).is_err());
        assert!(config(parse(&["--h2c", "--h2-max-streams", "0"]).unwrap()).is_err());
    }

    #[test]
    fn large_folios_flag_reaches_the_server_config() {
        assert!(!config(parse(&[]).unwrap()).unwrap().io.large_folios);
        let on = config(parse(&["--large-folios", "on"]).unwrap()).unwrap();
        assert!(on.io.large_folios);
        assert!(
            vodkit_server::io::engine_config(&on.io)
                .unwrap()
                .large_folios
        );
    }

    #[test]
    fn reread_resident_flag_reaches_the_engine_config() {
        let default = config(parse(&[]).unwrap()).unwrap();
        assert!(
            vodkit_server::io::engine_config(&default.io)
                .unwrap()
                .reread_resident_runs
        );
        let off = config(parse(&["--reread-resident", "off"]).unwrap()).unwrap();
        assert!(
            !vodkit_server::io::engine_config(&off.io)
                .unwrap()
                .reread_resident_runs
        );
    }

    #[test]
    fn io_order_flag_reaches_the_engine_config() {
        use vodkit_server::IoOrder;
        assert_eq!(
            config(parse(&[]).unwrap()).unwrap().io.order,
            IoOrder::Sweep
        );
        // The default applies where there is a queue; a thread pool keeps its own order.
        assert!(config(parse(&["--io", "prefetch"]).unwrap()).is_ok());
        assert!(config(parse(&["--io", "prefetch", "--io-order", "sweep"]).unwrap()).is_err());
        let sweep = config(parse(&["--io-order", "sweep"]).unwrap()).unwrap();
        assert_eq!(
            vodkit_server::io::engine_config(&sweep.io).unwrap().order,
            IoOrder::Sweep
        );
        let e = parse(&["--io-order", "scan"]).err().unwrap().to_string();
        assert!(e.contains("expected fifo, deadline or sweep"), "{e}");
        let e = config(parse(&["--io", "prefetch", "--io-order", "deadline"]).unwrap())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("--io-order deadline") && e.contains("serialized"),
            "{e}"
        );
    }

    #[test]
    fn kernel_readahead_flag_reaches_the_server_config() {
        let default = config(parse(&[]).unwrap()).unwrap();
        assert!(!default.io.kernel_readahead);
        let off = config(parse(&["--io", "asap", "--kernel-readahead", "off"]).unwrap()).unwrap();
        assert!(!off.io.kernel_readahead);
        assert!(
            config(parse(&["--kernel-readahead", "on"]).unwrap())
                .unwrap()
                .io
                .kernel_readahead
        );
        let e = parse(&["--kernel-readahead", "maybe"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("expected on or off"), "{e}");
    }

    #[test]
    fn catalog_bit_rates_reach_the_server_config_and_a_missing_one_is_a_usage_error() {
        let dir = tempfile::tempdir().unwrap();
        let rates = dir.path().join("rates.txt");
        std::fs::write(&rates, "v/a.mp4 1200\n").unwrap();
        let c = config(parse(&["--catalog", rates.to_str().unwrap()]).unwrap()).unwrap();
        assert_eq!(c.io.bitrates.get("/v/a.mp4"), Some(1200));
        let missing = dir.path().join("missing.json");
        let e = config(parse(&["--catalog", missing.to_str().unwrap()]).unwrap()).unwrap_err();
        assert!(e.is::<super::super::UsageError>(), "{e}");
        assert!(e.to_string().contains("missing.json"), "{e}");
    }
}
