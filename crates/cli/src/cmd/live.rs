//! `vodkit live push`: publish live streams to an origin (`vodkit serve --ingest`, nginx with
//! WebDAV) in real time, and report the source's own publish latency and failures.

use super::usage;
use std::path::PathBuf;
use std::time::Duration;
use vodkit_live::{LowLatency, Source, SourceConfig};

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Publish N live streams by HTTP PUT: segments, an HLS media playlist and a DASH MPD
    /// per stream under PREFIX/stream-K/ (docs/live.md).
    Push(PushArgs),
}

#[derive(clap::Args, Debug)]
pub(crate) struct PushArgs {
    /// The origin, http://HOST:PORT or https://HOST:PORT (loopback unless --allow-remote;
    /// https needs --ca or --insecure).
    #[arg(long)]
    target: String,
    #[command(flatten)]
    tls: super::tls::ClientTls,
    /// Streams published at once.
    #[arg(long, default_value_t = 1)]
    streams: u32,
    /// Bit rate of every stream, e.g. 800k, 3000kbit/s or 3Mbit/s.
    #[arg(long, default_value = "3000kbit/s", value_name = super::flags::BITRATE, value_parser = super::flags::bit_rate)]
    bitrate: u64,
    /// Segment duration [default: 2s]. With --title, the title's fragment duration, or with
    /// --low-latency a whole multiple of it (default: from one key frame to the next).
    #[arg(long, value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    segment: Option<Duration>,
    /// Segments in the playlists (the live window).
    #[arg(long, default_value_t = 6)]
    window: u32,
    /// Path prefix: stream K goes to PREFIX/stream-K/.
    #[arg(long, default_value = "/live/")]
    prefix: String,
    /// Bearer token sent with every PUT and DELETE (the origin's `vodkit serve
    /// --ingest-token`).
    #[arg(
        long = "ingest-token",
        alias = "token",
        value_name = "TOKEN",
        conflicts_with = "ingest_token_file"
    )]
    ingest_token: Option<String>,
    /// Read the token from this file (first line).
    #[arg(long = "ingest-token-file", alias = "token-file", value_name = "FILE")]
    ingest_token_file: Option<PathBuf>,
    /// Stop after this long and publish the final playlists (default: until Ctrl-C).
    #[arg(long, value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    duration: Option<Duration>,
    /// Seed of the synthetic segment bytes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Publish a real rendition in a loop instead of synthetic bytes: a packaged title's
    /// rendition (`MEDIA/tN/vKBPS/` or `MEDIA/tN/vKBPS.mp4` from `vodkit fileset create
    /// --media`) or any fragmented MP4 with one fragment duration; its bit rate and segment
    /// duration become the stream's.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["bitrate", "seed"])]
    title: Option<PathBuf>,
    /// Low-latency live: every segment is published in parts as they are produced (LL-HLS
    /// parts and preload hints, an LL-DASH MPD, each segment uploaded by one chunked PUT
    /// while it is produced); docs/live.md.
    #[arg(long)]
    low_latency: bool,
    /// Part duration with --low-latency, rounded so a segment holds a whole number of parts
    /// (with --title: the title's fragment duration).
    #[arg(long, default_value = "0.333s", value_name = super::flags::DURATION, value_parser = super::flags::duration, requires = "low_latency", conflicts_with = "title")]
    part: Duration,
    /// The clock named in the LL-DASH MPD (`UTCTiming`), or `none` [default: the target's
    /// /.vodkit/clock].
    #[arg(long, value_name = "URL|none", requires = "low_latency")]
    clock_url: Option<String>,
    /// Start with a full window already published (its segments dated in the past), so
    /// viewers can join at once.
    #[arg(long)]
    backfill: bool,
    /// Write the report as JSON to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Allow a target that is not a loopback address.
    #[arg(long)]
    allow_remote: bool,
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Push(a) => push(a),
    }
}

fn push(a: PushArgs) -> anyhow::Result<()> {
    let bps = a.bitrate;
    let token =
        super::flags::ingest_token(a.ingest_token.as_deref(), a.ingest_token_file.as_deref())?;
    let origin = vodkit_live::http::Origin::parse(&a.target).map_err(usage)?;
    if !a.allow_remote && !origin.addr.ip().is_loopback() {
        return Err(usage(format!(
            "--target {}: not a loopback address (add --allow-remote to publish elsewhere)",
            a.target
        )));
    }
    let mut c = SourceConfig::new(&a.target, a.streams, (bps / 1000).max(1) as u32);
    if origin.https {
        let Some(trust) = a.tls.trust() else {
            return Err(usage(format!(
                "--target {}: an https:// target needs --ca FILE or --insecure",
                a.target
            )));
        };
        let client =
            vodkit_load::TlsClient::new(trust, origin.name()).map_err(|e| usage(e.to_string()))?;
        c.tls = Some(vodkit_live::http::Tls::new(client.config(), origin.name()).map_err(usage)?);
    }
    c.segment_s = a.segment.map_or(2.0, |d| d.as_secs_f64());
    if a.low_latency {
        let mut ll = LowLatency::new(&a.target);
        ll.part_s = a.part.as_secs_f64();
        ll.clock_url = match a.clock_url.as_deref() {
            None => ll.clock_url,
            Some("none") => None,
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                Some(url.to_string())
            }
            Some(url) => {
                return Err(usage(format!(
                    "--clock-url {url}: expected an http:// or https:// URL, or none"
                )))
            }
        };
        c.low_latency = Some(ll);
    }
    if let Some(path) = &a.title {
        if a.segment.is_some() && !a.low_latency {
            return Err(usage(
                "--segment: with --title the segments are the title's fragments (or, with --low-latency, a whole multiple of them)".to_string(),
            ));
        }
        let what = path.display().to_string();
        let media = vodkit_media::rendition(path).map_err(|e| usage(format!("--title {e}")))?;
        let mut title =
            vodkit_live::LiveTitle::new(media, &what).map_err(|e| usage(format!("--title {e}")))?;
        if a.low_latency {
            title = title
                .in_parts(a.segment.map(|d| d.as_secs_f64()), &what)
                .map_err(|e| usage(format!("--title {e}")))?;
        }
        c = c.with_title(title);
    }
    c.window = a.window;
    c.prefix = a.prefix.clone();
    c.token = token;
    c.duration = a.duration;
    c.seed = a.seed;
    c.backfill = a.backfill;
    c.validate().map_err(usage)?;
    let mut what = match &c.title {
        Some(t) => format!(
            "{} ({} fragments of {} s, {} kbit/s, {})",
            a.title
                .as_deref()
                .unwrap_or(std::path::Path::new(""))
                .display(),
            t.fragments(),
            t.fragment_s(),
            t.bitrate_kbps(),
            t.codec()
        ),
        None => format!("{} kbit/s synthetic", c.bitrate_kbps),
    };
    if let (Some(k), Some(p)) = (c.parts(), c.part_s()) {
        what += &format!(
            ", low latency: {} s segments of {k} parts of {p:.3} s",
            c.segment_s
        );
    }
    let src = Source::start(c).map_err(anyhow::Error::msg)?;
    eprintln!(
        "vodkit live: publishing {} streams of {what} to {}{} (Ctrl-C ends them)",
        a.streams, a.target, a.prefix
    );
    wait_for_end(&src)?;
    let report = src.stop();
    eprint!("{}", report.summary());
    if let Some(out) = &a.out {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(out, text + "\n")
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", out.display()))?;
    }
    if report.published.failed_puts > 0 {
        anyhow::bail!("{} PUTs failed", report.published.failed_puts);
    }
    Ok(())
}

/// Block until every stream has reached its duration, or SIGINT/SIGTERM.
fn wait_for_end(src: &Source) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if src.finished() {
                        break;
                    }
                }
            }
        }
        Ok::<(), std::io::Error>(())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Live {
        #[command(subcommand)]
        command: Command,
    }

    fn parse(args: &str) -> Result<PushArgs, String> {
        let argv = format!("live push --target http://127.0.0.1:1 {args}");
        match Live::try_parse_from(argv.split_whitespace()) {
            Ok(Live {
                command: Command::Push(a),
            }) => Ok(a),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The one-line usage error `push` gives for `args` (it fails before publishing).
    fn refused(args: &str) -> String {
        let e = push(parse(args).unwrap()).unwrap_err();
        assert!(e.is::<super::super::UsageError>(), "{e}");
        let text = e.to_string();
        assert!(!text.contains('\n'), "{text}");
        text
    }

    #[test]
    fn low_latency_flags_parse_with_units() {
        let a = parse("--low-latency --part 250ms --clock-url none --segment 1s").unwrap();
        assert!(a.low_latency);
        assert_eq!(a.part, Duration::from_millis(250));
        assert_eq!(a.clock_url.as_deref(), Some("none"));
        assert_eq!(a.segment, Some(Duration::from_secs(1)));
        let a = parse("--low-latency").unwrap();
        assert_eq!(a.part, Duration::from_millis(333));
        assert_eq!(a.segment, None);
        // Part settings need low-latency mode; a title sets the part duration itself.
        assert!(parse("--part 0.5s").unwrap_err().contains("--low-latency"));
        assert!(parse("--clock-url none")
            .unwrap_err()
            .contains("--low-latency"));
        assert!(parse("--low-latency --title t.mp4 --part 0.5s")
            .unwrap_err()
            .contains("cannot be used with"));
    }

    #[test]
    fn bad_parts_are_one_line_usage_errors() {
        assert_eq!(
            refused("--low-latency --part 1.5s"),
            "--part: expected at most half the segment (1.000 s), got 1.5 s"
        );
        assert!(refused("--low-latency --part 10ms").starts_with("--part: expected at least"));
        assert!(refused("--low-latency --clock-url ftp://x").starts_with("--clock-url ftp://x"));
        assert!(refused("--title t.mp4 --segment 1s").starts_with("--segment: with --title"));
    }
}
