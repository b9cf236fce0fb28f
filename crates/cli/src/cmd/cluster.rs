//! `vodkit cluster`: a cluster of origins behind a real load balancer. `haproxy-config`
//! and `nginx-config` print a complete balancer configuration (routing by title, whole
//! path, round robin or least connections); `agent` is the health agent HAProxy's
//! `agent-check` asks, judging its origin by fetching a real segment. The rules live in
//! `vodkit_peers::cluster`.

use std::net::TcpListener;
use std::time::Duration;

use vodkit_peers::cluster::agent::{serve, ProbeSpec, Verdict};
use vodkit_peers::cluster::{parse_listen, parse_origins, BalancerSpec, Route};

use super::usage;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Print a complete HAProxy configuration (2.6 or later) for a cluster of origins.
    HaproxyConfig(ConfigArgs),
    /// Print a complete nginx configuration (an `upstream` of the origins) for a cluster.
    NginxConfig(ConfigArgs),
    /// Serve HAProxy's agent-check for one origin: fetch a real segment on every check and
    /// answer `up ready`, `drain` (answered too slowly) or `down #why` (could not deliver).
    Agent(AgentArgs),
}

/// The flags both balancer recipes share.
#[derive(clap::Args)]
pub(crate) struct ConfigArgs {
    /// The origins, comma separated: HOST:PORT,… (addresses or DNS names, e.g. a
    /// StatefulSet's origin-0.origin:8080).
    #[arg(long, value_name = "HOST:PORT,…")]
    origins: String,
    /// How a request picks its origin. `title`: a consistent hash of the path up to the
    /// title (`/t3/v800/seg-7.m4s` and `/t3/manifest.mpd` → t3; `/chunk-512k/sd-000042-0003.dat`
    /// → sd-000042; the first path component after an optional full/, chunk-*/, nf/ or
    /// live/, without a chunk index and .dat), so a title's segments and an MP4's ranges
    /// land on one origin and an origin leaving moves only its own titles. `uri`: a
    /// consistent hash of the whole path. `roundrobin`, `leastconn`: no affinity.
    #[arg(long, default_value = "title", value_name = "title|uri|roundrobin|leastconn", value_parser = parse_route)]
    route: Route,
    /// The address viewers connect to.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "IP:PORT")]
    listen: String,
    /// HAProxy: ask each origin's health agent (`vodkit cluster agent`) on this port of the
    /// origin's host. nginx has no active checks: an origin failing requests is left out
    /// for the check interval (passive checks) either way.
    #[arg(long, value_name = "PORT")]
    agent_port: Option<u16>,
    /// How often each origin is checked (and, for nginx, how long a failed origin is left
    /// out).
    #[arg(long, default_value = "2s", value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    check_interval: Duration,
    /// HAProxy threads or nginx worker processes (default: one per core).
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// HAProxy with --route title or uri: consistent hashing with bounded loads
    /// (`hash-balance-factor`): a request whose origin has more than PERCENT % of the mean
    /// load in flight goes to the next origin on the ring (100–1000; nginx has no such
    /// bound). With --route title a viewer (`X-Session-Id`) then stays on the origin its
    /// first request for the title went to.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(100..=1000))]
    bounded: Option<u32>,
    /// Live and on-demand apart: paths under --live-prefix go only to these origins
    /// (HOST:PORT,…, none of them in --origins), routed the same way; everything else to
    /// --origins.
    #[arg(long, value_name = "HOST:PORT,…")]
    live_origins: Option<String>,
    /// The live path prefix, with --live-origins.
    #[arg(
        long,
        default_value = "/live/",
        value_name = "PREFIX",
        requires = "live_origins"
    )]
    live_prefix: String,
}

#[derive(clap::Args)]
pub(crate) struct AgentArgs {
    /// The address HAProxy's agent-check connects to (the --agent-port of the config).
    #[arg(long, default_value = "127.0.0.1:9100", value_name = "IP:PORT")]
    listen: String,
    /// The origin this agent judges.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "HOST:PORT")]
    origin: String,
    /// A real segment of the origin's library to fetch on every check, e.g.
    /// /t0/v800/seg-1.m4s.
    #[arg(long, value_name = "PATH")]
    probe: String,
    /// Fetch only the first SIZE bytes of --probe (one segment of a title stored as a
    /// single file, e.g. 512KiB of /full/sd-000001.dat); default: the whole file.
    #[arg(long, value_name = super::flags::SIZE, value_parser = super::flags::positive_size)]
    probe_bytes: Option<u64>,
    /// The media time the probed segment holds.
    #[arg(long, default_value = "4s", value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    segment_duration: Duration,
    /// Drain the origin when its first byte takes longer than this.
    #[arg(long, default_value = "1s", value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    max_ttfb: Duration,
    /// Drain the origin when the segment arrives less than this many times faster than it
    /// plays (1: just in time for a viewer).
    #[arg(long, default_value_t = 2.0, value_name = "X")]
    min_speed: f64,
}

fn parse_route(s: &str) -> Result<Route, String> {
    s.parse()
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::HaproxyConfig(a) => {
            print!("{}", vodkit_peers::cluster::haproxy::render(&spec(&a)?));
            Ok(())
        }
        Command::NginxConfig(a) => {
            if a.bounded.is_some() {
                return Err(usage(
                    "--bounded: nginx's `hash … consistent` has no bounded loads (HAProxy only)",
                ));
            }
            print!("{}", vodkit_peers::cluster::nginx::render(&spec(&a)?));
            Ok(())
        }
        Command::Agent(a) => agent(a),
    }
}

fn spec(a: &ConfigArgs) -> anyhow::Result<BalancerSpec> {
    let origins = parse_origins(&a.origins).map_err(|e| usage(format!("--origins: {e}")))?;
    let listen = parse_listen(&a.listen).map_err(|e| usage(format!("--listen: {e}")))?;
    if a.check_interval < Duration::from_millis(100) {
        return Err(usage("--check-interval: expected at least 100ms"));
    }
    if a.workers == Some(0) {
        return Err(usage("--workers: expected at least 1"));
    }
    let mut spec = BalancerSpec::new(origins, a.route, listen);
    spec.agent_port = a.agent_port.filter(|&p| p > 0);
    if a.agent_port == Some(0) {
        return Err(usage("--agent-port: expected a port from 1 to 65535"));
    }
    spec.check_interval_s = a.check_interval.as_secs_f64();
    spec.workers = a.workers;
    if a.bounded.is_some() && !matches!(a.route, Route::Title | Route::Uri) {
        return Err(usage(
            "--bounded: bounded loads need a hashed route (--route title or uri)",
        ));
    }
    spec.balance_factor = a.bounded;
    if let Some(list) = &a.live_origins {
        let live = parse_origins(list).map_err(|e| usage(format!("--live-origins: {e}")))?;
        spec.split_live(&a.live_prefix, live)
            .map_err(|e| usage(format!("--live-origins: {e}")))?;
    }
    Ok(spec)
}

fn agent(a: AgentArgs) -> anyhow::Result<()> {
    let listen = parse_listen(&a.listen).map_err(|e| usage(format!("--listen: {e}")))?;
    let origin = a
        .origin
        .parse()
        .map_err(|e| usage(format!("--origin: {e}")))?;
    if !a.probe.starts_with('/') || a.probe.contains(char::is_whitespace) {
        return Err(usage(format!(
            "--probe `{}`: expected a path such as /t0/v800/seg-1.m4s",
            a.probe
        )));
    }
    if !(a.min_speed.is_finite() && a.min_speed > 0.0) {
        return Err(usage("--min-speed: expected a number above 0"));
    }
    if a.segment_duration.is_zero() || a.max_ttfb.is_zero() {
        return Err(usage(
            "--segment-duration and --max-ttfb: expected durations above 0",
        ));
    }
    let spec = ProbeSpec {
        origin,
        path: a.probe,
        range_bytes: a.probe_bytes,
        segment_s: a.segment_duration.as_secs_f64(),
        max_ttfb_s: a.max_ttfb.as_secs_f64(),
        min_speed: a.min_speed,
    };
    let listener =
        TcpListener::bind(listen).map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    eprintln!(
        "vodkit cluster agent: answering on {listen} for {} (probe {})",
        spec.origin, spec.path
    );
    serve(listener, &spec, &|v| match v {
        Verdict::Drain(why) => eprintln!("vodkit cluster agent: drain: {why}"),
        Verdict::Down(why) => eprintln!("vodkit cluster agent: down: {why}"),
        Verdict::Up => {}
    })?;
    Ok(())
}
