//! `vodkit prefetchd`: the preload shim's daemon, to which the shim's library reports
//! page-cache misses (docs/preload.md).

use std::path::PathBuf;
use vodkit_prefetch::PolicySpec;
use vodkit_preload::daemon::{parse_mode, serve_until_signalled, DaemonConfig, FileRates};

/// How the daemon runs; shared with `vodkit preload`, which starts one when needed.
#[derive(clap::Args)]
pub struct DaemonArgs {
    /// Unix socket of the daemon (the library finds it through VODKIT_PREFETCHD_SOCKET).
    #[arg(long, default_value_os_t = vodkit_preload::default_socket())]
    pub socket: PathBuf,
    /// Prefetch policy: none, fixed:SIZE, sqrt:SIZE@KBPS, first-grow, auto, ...
    #[arg(long, default_value = PolicySpec::DEFAULT_TEXT, value_parser = super::serve::parse_policy)]
    pub prefetch: PolicySpec,
    /// One I/O worker per device instead of one for all devices.
    #[arg(long)]
    pub per_device: bool,
    /// The I/O modes of `vodkit serve --io`: asap (serialize and enlarge), serialized (no
    /// enlarging), prefetch (enlarge in the library, no serializing) or vanilla (record
    /// misses only); the older words both, serialize and track are accepted.
    #[arg(long, default_value = "asap")]
    pub mode: String,
    /// Bit rates of the served files for bit-rate-aware policies (auto, sqrt:, proportional:):
    /// a workload catalog.json, a JSON object {"path": kbps}, or `path kbps` lines.
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// The server's document root: the catalog's paths are relative to it (without it a
    /// file matches the catalog entry its path ends with), and `/admit` finds the file a
    /// URI names under it.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Admission for nginx's `auth_request` to the admin listener's `/admit`: `auto`
    /// refuses requests that would start a new stream when the device cannot take one
    /// (docs/preload.md); `rate:R` admits at most R new streams per second. Needs --root
    /// and --admin.
    #[arg(long, default_value = "off", value_name = "off|auto[:SECONDS]|rate:R")]
    pub admission: vodkit_prefetch::admission::AdmissionPolicy,
    #[command(flatten)]
    pub memory: super::flags::PrefetchMemory,
    /// The order queued reads are served in, as for `vodkit serve`: sweep (the default),
    /// deadline or fifo (asap and serialized modes).
    #[arg(long, value_name = "fifo|deadline|sweep")]
    pub io_order: Option<vodkit_prefetch::IoOrder>,
}

impl DaemonArgs {
    pub fn config(&self) -> anyhow::Result<DaemonConfig> {
        let mut config = config(
            &self.socket,
            self.prefetch.clone(),
            self.per_device,
            &self.mode,
        )?;
        if let Some(catalog) = &self.catalog {
            let map = vodkit_workload::bitrates::load(catalog)
                .map_err(|e| super::usage(format!("--catalog: {e}")))?;
            let map = vodkit_prefetch::BitrateMap::from_rates(map);
            let rates = FileRates::new(map, catalog, self.root.as_deref()).map_err(super::usage)?;
            config.bitrates = Some(rates);
        }
        let memory = self.memory.setting();
        config.memory = memory.config();
        config.admission = self.admission;
        config.root = self.root.clone();
        if let Some(order) = self
            .io_order
            .filter(|o| *o != vodkit_prefetch::IoOrder::Fifo && !config.mode.serializes())
        {
            return Err(super::usage(format!(
                "--io-order {order}: mode {} has no read queue to order; expected asap or serialized",
                config.mode
            )));
        }
        config.order = self.io_order.unwrap_or_default();
        if self.admission != vodkit_prefetch::admission::AdmissionPolicy::Off && self.root.is_none()
        {
            return Err(super::usage(
                "--admission needs --root (the document root /admit resolves URIs under)",
            ));
        }
        Ok(config)
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: DaemonArgs,
    /// Write metrics as JSON to this file every --interval and at exit.
    #[arg(long)]
    pub metrics: Option<PathBuf>,
    /// Admin listener for /metrics (Prometheus) and /stats (JSON); off unless given.
    #[arg(long)]
    pub admin: Option<std::net::SocketAddr>,
    /// How often to rewrite the metrics file.
    #[arg(long = "interval", alias = "metrics-interval", default_value = "1s", value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    pub metrics_interval: std::time::Duration,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = args.daemon.config()?;
    // A thread per connection: in huge pages each would cost up to 2 MiB.
    if let Err(e) = vodkit_prefetch::pages::small_pages_only() {
        eprintln!("prefetchd: cannot keep to small pages ({e}); each connection may cost 2 MiB");
    }
    if config.admission != vodkit_prefetch::admission::AdmissionPolicy::Off && args.admin.is_none()
    {
        return Err(super::usage(
            "--admission answers on the admin listener's /admit: give --admin ADDR",
        ));
    }
    eprintln!(
        "prefetchd: listening on {} (mode {}, policy {}, {}, {}); Ctrl-C stops",
        config.socket.display(),
        config.mode,
        config.policy,
        if config.per_device {
            "one worker per device"
        } else {
            "one worker"
        },
        rates_note(config.bitrates.as_ref())
    );
    let last = serve_until_signalled(
        config,
        args.metrics.as_deref(),
        args.metrics_interval,
        args.admin,
    )
    .map_err(|e| anyhow::anyhow!("prefetchd on {}: {e}", args.daemon.socket.display()))?;
    println!("{}", serde_json::to_string_pretty(&last)?);
    Ok(())
}

/// Where bit rates come from, for the start-up line.
fn rates_note(rates: Option<&FileRates>) -> String {
    match rates {
        None => "no bit rates".into(),
        Some(r) => format!(
            "bit rates of {} files from {}{}",
            r.len(),
            r.source().display(),
            r.root()
                .map(|d| format!(" under {}", d.display()))
                .unwrap_or_default()
        ),
    }
}

/// Build a daemon configuration from command-line values (shared with `vodkit preload`).
pub fn config(
    socket: &std::path::Path,
    prefetch: PolicySpec,
    per_device: bool,
    mode: &str,
) -> anyhow::Result<DaemonConfig> {
    let mut config = DaemonConfig::new(socket);
    config.policy = prefetch;
    config.mode = parse_mode(mode).map_err(|e| super::usage(format!("--{e}")))?;
    config.per_device = per_device;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        daemon: DaemonArgs,
    }

    fn config_of(argv: &[&str]) -> anyhow::Result<DaemonConfig> {
        let mut all = vec!["prefetchd", "--memory", "off"];
        all.extend_from_slice(argv);
        Cli::try_parse_from(all)?.daemon.config()
    }

    #[test]
    fn io_order_reaches_the_daemon_config() {
        use vodkit_prefetch::IoOrder;
        assert_eq!(config_of(&[]).unwrap().order, IoOrder::Sweep);
        assert_eq!(
            config_of(&["--io-order", "sweep"]).unwrap().order,
            IoOrder::Sweep
        );
        let e = config_of(&["--mode", "prefetch", "--io-order", "deadline"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--io-order deadline") && e.contains("prefetch"),
            "{e}"
        );
    }
}
