//! `vodkit sys watch`: per-interval disk, CPU, memory and network figures (iostat-style),
//! as a live table or one JSON object per line.

use clap::Subcommand;
use std::io::Write;
use std::time::Duration;
use vodkit_disk::sys::{Sampler, SamplerConfig};

#[derive(Subcommand)]
pub enum SysCommand {
    /// Print metrics every interval until interrupted (or --count samples).
    Watch(WatchArgs),
}

#[derive(clap::Args)]
pub(crate) struct WatchArgs {
    /// Block device to report (repeatable, e.g. loop0); default: every active device.
    #[arg(long)]
    device: Vec<String>,
    /// Sampling interval.
    #[arg(long, default_value = "1s", value_name = super::flags::DURATION, value_parser = super::flags::duration)]
    interval: Duration,
    /// Stop after this many samples.
    #[arg(long)]
    count: Option<u64>,
    /// Also report this memory cgroup directory (e.g. a `vodkit run` budget).
    #[arg(long)]
    cgroup: Option<std::path::PathBuf>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(command: SysCommand) -> anyhow::Result<()> {
    match command {
        SysCommand::Watch(a) => watch(a),
    }
}

fn watch(a: WatchArgs) -> anyhow::Result<()> {
    let interval = a.interval;
    if interval < Duration::from_millis(10) {
        return Err(super::usage(format!(
            "--interval {}: must be at least 10ms",
            vodkit_units::format_duration(interval)
        )));
    }
    let devices: Vec<String> = a
        .device
        .iter()
        .map(|d| d.trim_start_matches("/dev/").to_string())
        .collect();
    let mut sampler = Sampler::new(SamplerConfig {
        devices,
        cgroup: a.cgroup.clone(),
    })
    .map_err(super::usage)?;
    let mut out = std::io::stdout().lock();
    let mut n = 0u64;
    while a.count.is_none_or(|c| n < c) {
        std::thread::sleep(interval);
        let s = sampler.sample();
        n += 1;
        if a.json {
            if writeln!(out, "{}", serde_json::to_string(&s)?).is_err() {
                return Ok(()); // the reader went away (e.g. `| head`)
            }
            continue;
        }
        let mb = |b: u64| b as f64 / 1_048_576.0;
        let cg = s.cgroup.map_or(String::new(), |c| {
            format!(
                "  cgroup {:.0}/{:.0} MiB",
                mb(c.usage_bytes),
                mb(c.cache_bytes)
            )
        });
        let mut text = format!(
            "t={:>6.1}s cpu usr {:>4.1}% sys {:>4.1}% wait {:>4.1}%  mem avail {:.0} MiB cache {:.0} MiB{cg}  net {:.1}/{:.1} MB/s lo {:.1}/{:.1} MB/s",
            s.t,
            s.cpu.user * 100.0,
            s.cpu.system * 100.0,
            s.cpu.iowait * 100.0,
            mb(s.memory.available),
            mb(s.memory.page_cache),
            s.net_rx_bytes_s / 1e6,
            s.net_tx_bytes_s / 1e6,
            s.lo_rx_bytes_s / 1e6,
            s.lo_tx_bytes_s / 1e6
        );
        for d in &s.disks {
            text += &format!(
                "\n  {:<10} r/s {:>7.1} rMB/s {:>7.2} avg {:>7.1} KiB  w/s {:>6.1} wMB/s {:>6.2}  ms/t {:>6.2} util {:>5.1}% qlen {:>5.2}",
                d.device,
                d.reads_per_s,
                d.read_mb_s,
                d.avg_read_kb,
                d.writes_per_s,
                d.write_mb_s,
                d.ms_per_transaction,
                d.utilization * 100.0,
                d.queue_len
            );
        }
        if writeln!(out, "{text}").is_err() {
            return Ok(()); // the reader went away (e.g. `| head`)
        }
    }
    Ok(())
}
