//! `vodkit hdd`: bring an emulated hard disk up and down, show and tune it, inject faults,
//! benchmark it, and print the drive presets. The work is done in `vodkit_disk`.

use super::flags;
use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;
use vodkit_disk::devbench::{self, BenchOptions};
use vodkit_disk::model::{preset, Preset, Queueing, Rotation, PRESET_NAMES};
use vodkit_disk::testbed::{self, daemon, queue, system, Config, Control, Placement, QueueTuning};

#[derive(Subcommand)]
pub enum HddCommand {
    /// Create (or reuse) an image, serve it with the drive model, attach, format, mount.
    Up(UpArgs),
    /// Unmount, detach and stop a device (also cleans up after a crashed server).
    Down(MountArg),
    /// Show running devices: preset, loop device, queue settings, counters.
    Status(StatusArgs),
    /// Change queue settings and fault injection of a running device.
    Tune(TuneArgs),
    /// Read benchmarks on a running device, beside the preset's figures.
    Bench(BenchArgs),
    /// Print the drive presets and what the model derives from them.
    Presets(JsonArg),
    /// Print the average device address of files (where a file set sits on the platter).
    Locate(LocateArgs),
    /// Write back and drop the page cache, dentries and inodes (needs root).
    DropCaches,
    /// Internal: the background server started by `up`.
    #[command(hide = true)]
    Daemon(DaemonArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum RotationArg {
    Average,
    Random,
}

#[derive(Clone, Copy, ValueEnum)]
enum QueueingArg {
    Fifo,
    Sptf,
}

#[derive(Clone, Copy, ValueEnum)]
enum PlacementArg {
    Platter,
    Start,
}

#[derive(clap::Args)]
pub(crate) struct UpArgs {
    /// Drive preset: wd-red, hp-10k, hitachi-5k3000, seagate-7200.
    #[arg(long, default_value = "wd-red")]
    preset: Preset,
    /// Image size (e.g. 4GiB); the image stands for the whole platter.
    #[arg(long, value_name = flags::SIZE, value_parser = flags::positive_size)]
    size: u64,
    /// Sparse backing file on the real disk.
    #[arg(long)]
    image: PathBuf,
    /// Where to mount the ext4 file system.
    #[arg(long)]
    mount: PathBuf,
    /// Rotational latency after a seek: half a turn, or seeded random.
    #[arg(long, value_enum, default_value = "average")]
    rotation: RotationArg,
    /// Seed for random rotation and fault rates.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Order in which queued reads are served: arrival order, or shortest positioning
    /// time first among the queued ones (a drive with command queueing).
    #[arg(long, value_enum, default_value = "fifo")]
    queueing: QueueingArg,
    /// On-drive read-ahead segment size (e.g. 2MiB); off by default.
    #[arg(long, value_name = flags::SIZE, value_parser = flags::size)]
    drive_readahead: Option<u64>,
    /// Where the image lies on the platter: `platter` — it stands for the whole platter
    /// (every zone, full-stroke seeks); `start` — it is the drive's first SIZE bytes, like
    /// a partition at the outer edge (short seeks, outer-zone rate).
    #[arg(long, value_enum, default_value = "platter")]
    placement: PlacementArg,
    /// Cache segments with --drive-readahead: segments the head left are kept for their
    /// streams (a real drive's segmented cache); 1 keeps only the current one.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    drive_segments: u16,
    /// Delay writes by the model too (off: populating files is fast).
    #[arg(long)]
    model_writes: bool,
    /// Host turnaround (e.g. 100us, at most 10ms): how long after a read completes the
    /// next request it causes reaches the drive, time in which the drive idles and reads
    /// ahead. 0 (default): at once.
    #[arg(long, default_value = "0s", value_name = flags::DURATION, value_parser = host_gap)]
    host_gap: std::time::Duration,
    /// Run mkfs.ext4 even if the image already holds a file system.
    #[arg(long)]
    reformat: bool,
    #[command(flatten)]
    queue: QueueArgs,
    /// Directory for device state.
    #[arg(long, default_value = testbed::DEFAULT_STATE_ROOT)]
    state_dir: PathBuf,
}

/// Queue settings; at `up` each one not given gets what Linux gives a real rotational disk
/// of the preset on the running kernel (docs/disk.md, "Block-queue defaults").
#[derive(clap::Args, Default)]
struct QueueArgs {
    /// Loop queue readahead in KiB, the device's read_ahead_kb (default at `up`: a real
    /// rotational disk's).
    #[arg(long = "readahead-kb", alias = "read-ahead-kb")]
    read_ahead_kb: Option<u64>,
    /// Loop queue max_sectors_kb (default at `up`: a real rotational disk's, capped at
    /// the loop device's max_hw_sectors_kb).
    #[arg(long)]
    max_sectors_kb: Option<u64>,
    /// Loop queue I/O scheduler: none, mq-deadline, bfq, ... as offered (default at `up`:
    /// mq-deadline, like a real single-queue rotational disk).
    #[arg(long)]
    scheduler: Option<String>,
}

impl QueueArgs {
    fn tuning(&self) -> QueueTuning {
        QueueTuning {
            read_ahead_kb: self.read_ahead_kb,
            max_sectors_kb: self.max_sectors_kb,
            scheduler: self.scheduler.clone(),
            rotational: None,
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct MountArg {
    /// Mount point of the device.
    #[arg(long)]
    mount: PathBuf,
    #[arg(long, default_value = testbed::DEFAULT_STATE_ROOT)]
    state_dir: PathBuf,
}

#[derive(clap::Args)]
pub(crate) struct JsonArg {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    /// Only this device.
    #[arg(long)]
    mount: Option<PathBuf>,
    #[arg(long)]
    json: bool,
    #[arg(long, default_value = testbed::DEFAULT_STATE_ROOT)]
    state_dir: PathBuf,
}

#[derive(clap::Args)]
pub(crate) struct TuneArgs {
    #[command(flatten)]
    target: MountArg,
    #[command(flatten)]
    queue: QueueArgs,
    /// Fail reads of a sector range START-END (512-byte sectors, end exclusive); repeatable.
    #[arg(long = "eio-sectors")]
    eio_sectors: Vec<String>,
    /// Fail reads of everything a file occupies on the device; repeatable.
    #[arg(long = "eio-file")]
    eio_file: Vec<PathBuf>,
    /// Fail this fraction of all reads (0..1).
    #[arg(long)]
    eio_rate: Option<f64>,
    /// Remove all fault injection (applied before the other fault options).
    #[arg(long)]
    eio_clear: bool,
}

#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    target: MountArg,
    /// Bytes read sequentially at each end.
    #[arg(long, default_value = "64MiB", value_name = flags::SIZE, value_parser = flags::size)]
    sequential: u64,
    /// Number of random 2 MiB reads.
    #[arg(long, default_value_t = 40)]
    random_2m: u32,
    /// Number of random 128 KiB reads.
    #[arg(long, default_value_t = 80)]
    random_128k: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(crate) struct LocateArgs {
    /// Files (or directories, whose files are all counted).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

#[derive(clap::Args)]
pub(crate) struct DaemonArgs {
    /// Device configuration as JSON.
    #[arg(long)]
    config: String,
}

pub fn run(command: HddCommand) -> anyhow::Result<()> {
    match command {
        HddCommand::Up(a) => up(a),
        HddCommand::Down(a) => down(a),
        HddCommand::Status(a) => status(a),
        HddCommand::Tune(a) => tune(a),
        HddCommand::Bench(a) => bench(a),
        HddCommand::Presets(a) => presets(a),
        HddCommand::Locate(a) => locate(a),
        HddCommand::DropCaches => system::drop_caches().map_err(testbed_err),
        HddCommand::Daemon(a) => {
            let cfg: Config = serde_json::from_str(&a.config).map_err(super::usage)?;
            daemon::serve(&cfg).map_err(testbed_err)
        }
    }
}

/// Input mistakes exit 2, everything else 1.
fn testbed_err(e: testbed::Error) -> anyhow::Error {
    match e {
        testbed::Error::Input(_) => super::usage(e),
        other => anyhow::Error::new(other),
    }
}

fn absolute(p: &std::path::Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("{}", p.display()))
}

fn up(a: UpArgs) -> anyhow::Result<()> {
    let size = a.size;
    let mut cfg = Config::new(a.preset, size, absolute(&a.image)?, absolute(&a.mount)?);
    cfg.drive.rotation = match a.rotation {
        RotationArg::Average => Rotation::Average,
        RotationArg::Random => Rotation::Random { seed: a.seed },
    };
    cfg.drive.queueing = match a.queueing {
        QueueingArg::Fifo => Queueing::Fifo,
        QueueingArg::Sptf => Queueing::Sptf { depth: 32 },
    };
    if let Some(ra) = a.drive_readahead {
        cfg.drive.readahead_bytes = ra;
    }
    cfg.drive.segments = usize::from(a.drive_segments);
    cfg.placement = match a.placement {
        PlacementArg::Platter => Placement::Platter,
        PlacementArg::Start => Placement::Start,
    };
    cfg.faults.seed = a.seed;
    cfg.model_writes = a.model_writes;
    cfg.host_gap_us = a.host_gap.as_micros() as u64;
    cfg.reformat = a.reformat;
    cfg.tuning = a.queue.tuning();
    cfg.state_root = absolute(&a.state_dir)?;
    let exe = std::env::current_exe().context("cannot find the vodkit executable")?;
    let json = serde_json::to_string(&cfg)?;
    let args = vec![
        "hdd".to_string(),
        "daemon".to_string(),
        "--config".to_string(),
        json,
    ];
    let st = daemon::spawn(&exe, &args, &cfg, Duration::from_secs(600)).map_err(testbed_err)?;
    println!(
        "{} up: {} {} on /dev/{} (direct I/O {}), ext4 at {}, server pid {}",
        st.image.display(),
        st.preset,
        vodkit_units::human_size(st.size),
        st.loop_device,
        if st.direct_io { "on" } else { "off" },
        st.mount.display(),
        st.pid
    );
    match &st.queue {
        Some(applied) => println!("{}", applied.line()),
        None => println!(
            "{}",
            queue_line(&queue::read(&st.loop_device).map_err(testbed_err)?)
        ),
    }
    Ok(())
}

fn queue_line(q: &queue::QueueSettings) -> String {
    format!(
        "queue {}: read_ahead_kb={} max_sectors_kb={} (hw {}) scheduler={} [{}] rotational={}",
        q.device,
        q.read_ahead_kb,
        q.max_sectors_kb,
        q.max_hw_sectors_kb,
        q.scheduler,
        q.schedulers.join(" "),
        u8::from(q.rotational)
    )
}

fn down(a: MountArg) -> anyhow::Result<()> {
    let mount = absolute(&a.mount)?;
    let done = testbed::down(&absolute(&a.state_dir)?, &mount).map_err(testbed_err)?;
    if done.is_empty() {
        println!("nothing to tear down at {}", mount.display());
    }
    for step in done {
        println!("{step}");
    }
    Ok(())
}

fn running(target: &MountArg) -> anyhow::Result<testbed::State> {
    let mount = absolute(&target.mount)?;
    testbed::load_state(&absolute(&target.state_dir)?, &mount)
        .ok_or_else(|| super::usage(format!("no emulated disk is up at {}", mount.display())))
}

fn status(a: StatusArgs) -> anyhow::Result<()> {
    let root = absolute(&a.state_dir)?;
    let mut states = testbed::list_states(&root);
    if let Some(m) = &a.mount {
        let m = absolute(m)?;
        states.retain(|s| s.mount == m);
    }
    let mut out = Vec::new();
    for st in &states {
        let alive = testbed::pid_alive(st.pid);
        let q = queue::read(&st.loop_device).ok();
        let c = if alive {
            testbed::counters(st).ok()
        } else {
            None
        };
        if a.json {
            out.push(serde_json::json!({"state": st, "alive": alive, "queue": q, "counters": c}));
            continue;
        }
        println!(
            "{}: {} {} image {} on /dev/{} pid {} {}",
            st.mount.display(),
            st.preset,
            vodkit_units::human_size(st.size),
            st.image.display(),
            st.loop_device,
            st.pid,
            if alive {
                "running"
            } else {
                "DEAD (run `vodkit hdd down`)"
            }
        );
        if let Some(q) = q {
            println!("  {}", queue_line(&q));
        }
        if let Some(applied) = &st.queue {
            println!("  at up: {}", applied.line());
        }
        if let Some(c) = c {
            println!(
                "  reads {} ({:.1} MiB, {} seeks), writes {} ({:.1} MiB), busy {:.1}s, injected errors {}, fault ranges {:?} rate {}",
                c.reads,
                c.read_bytes as f64 / 1048576.0,
                c.seeks,
                c.writes,
                c.write_bytes as f64 / 1048576.0,
                c.busy_secs,
                c.injected_errors,
                c.faults.ranges,
                c.faults.rate
            );
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else if states.is_empty() {
        println!("no emulated disks are up");
    }
    Ok(())
}

fn parse_sectors(text: &str) -> anyhow::Result<Control> {
    let bad = || {
        super::usage(format!(
            "--eio-sectors {text}: expected START-END in 512-byte sectors"
        ))
    };
    let (s, e) = text.split_once('-').ok_or_else(bad)?;
    let (s, e): (u64, u64) = (
        s.trim().parse().map_err(|_| bad())?,
        e.trim().parse().map_err(|_| bad())?,
    );
    Control::range(s, e).map_err(|_| bad())
}

fn tune(a: TuneArgs) -> anyhow::Result<()> {
    let mut commands = Vec::new();
    if a.eio_clear {
        commands.push(Control::EioClear);
    }
    for r in &a.eio_sectors {
        commands.push(parse_sectors(r)?);
    }
    for f in &a.eio_file {
        let extents = testbed::file_extents(f)
            .map_err(|e| super::usage(format!("--eio-file {}: {e}", f.display())))?;
        if extents.is_empty() {
            return Err(super::usage(format!(
                "--eio-file {}: the file has no data blocks",
                f.display()
            )));
        }
        for x in extents {
            let range = Control::range(x.physical / 512, (x.physical + x.length).div_ceil(512))
                .map_err(|e| anyhow::anyhow!("--eio-file {}: {e}", f.display()))?;
            commands.push(range);
        }
    }
    if let Some(p) = a.eio_rate {
        if !(0.0..=1.0).contains(&p) {
            return Err(super::usage(format!(
                "--eio-rate {p}: expected a fraction between 0 and 1"
            )));
        }
        commands.push(Control::rate(p, None).map_err(super::usage)?);
    }
    // Input is checked above before the device is looked up, so bad flags are usage errors
    // whether or not a device is up.
    let st = running(&a.target)?;
    for c in commands {
        testbed::control(&st, c).map_err(testbed_err)?;
        println!("{c}");
    }
    let q = queue::apply(&st.loop_device, &a.queue.tuning()).map_err(testbed_err)?;
    println!("{}", queue_line(&q));
    Ok(())
}

fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let st = running(&a.target)?;
    let spec = st.preset.spec();
    let opts = BenchOptions {
        sequential_bytes: a.sequential,
        random_2m_reads: a.random_2m,
        random_128k_reads: a.random_128k,
        seed: a.seed,
        ..BenchOptions::default()
    };
    let dev = PathBuf::from("/dev").join(&st.loop_device);
    let report = devbench::run(&dev, st.size, &spec, &opts)
        .with_context(|| format!("reading {}", dev.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{} ({}), direct reads of {}",
        st.mount.display(),
        st.preset,
        dev.display()
    );
    println!(
        "{:<18} {:>9} {:>10} {:>9} {:>10} {:>10}",
        "test", "MB/s", "ms/read", "model", "published", "deviation"
    );
    for r in &report.rows {
        let published = r
            .published_mb_s
            .map_or("-".to_string(), |p| format!("{p:.1}"));
        println!(
            "{:<18} {:>9.1} {:>10.2} {:>9.1} {:>10} {:>+9.1}%",
            r.test,
            r.mb_s,
            r.ms_per_read,
            r.model_mb_s,
            published,
            r.deviation() * 100.0
        );
    }
    println!("(MB = MiB; deviation is against the published figure, or the model where none is published)");
    Ok(())
}

fn presets(a: JsonArg) -> anyhow::Result<()> {
    let specs: Vec<_> = PRESET_NAMES.iter().filter_map(|n| preset(n)).collect();
    if a.json {
        let out: Vec<_> = specs
            .iter()
            .map(|s| serde_json::json!({"spec": s, "derived": devbench::model_table(s)}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    for s in &specs {
        println!(
            "{} — {} ({} bytes, {} rpm)",
            s.name, s.model, s.capacity_bytes, s.rpm
        );
        for (what, model, published) in devbench::model_table(s) {
            let p = published.map_or(String::new(), |p| format!("   published {p:.1}"));
            println!("  {what:<26} {model:>8.1}{p}");
        }
    }
    Ok(())
}

fn locate(a: LocateArgs) -> anyhow::Result<()> {
    let mut files = Vec::new();
    for p in &a.paths {
        collect_files(p, &mut files).with_context(|| format!("{}", p.display()))?;
    }
    let (mut weighted, mut bytes) = (0f64, 0u64);
    for f in &files {
        let extents =
            testbed::file_extents(f).map_err(|e| super::usage(format!("{}: {e}", f.display())))?;
        for x in extents {
            weighted += (x.physical as f64 + x.length as f64 / 2.0) * x.length as f64;
            bytes += x.length;
        }
    }
    if bytes == 0 {
        return Err(super::usage("no file data found in the given paths"));
    }
    let mean = weighted / bytes as f64;
    println!(
        "{} files, {} bytes, mean device offset {:.0} (sector {:.0})",
        files.len(),
        bytes,
        mean,
        mean / 512.0
    );
    Ok(())
}

fn collect_files(p: &std::path::Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if p.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(p)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .collect();
        entries.sort();
        for e in entries {
            collect_files(&e, out)?;
        }
    } else {
        out.push(p.to_path_buf());
    }
    Ok(())
}

/// `--host-gap`: a duration up to the emulator's 10 ms turnaround window.
fn host_gap(v: &str) -> Result<std::time::Duration, vodkit_units::UnitError> {
    let d = flags::duration(v)?;
    if d > std::time::Duration::from_millis(10) {
        return Err(
            vodkit_units::UnitError::new(vodkit_units::Quantity::Duration, v)
                .because("at most 10ms"),
        );
    }
    Ok(d)
}
