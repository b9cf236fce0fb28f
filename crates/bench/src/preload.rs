//! The prefetch daemon of a `+preload` server: `vodkit prefetchd` as a child under the
//! server's memory budget, with the preload library from `vodkit-preload` put into the
//! server's command ([`PreloadKit`], [`PreloadDaemon`]).

use crate::child::{
    memory_arg, set_clock_rate, vodkit_error_line, CommandWrap, ENV_VODKIT, EXITED_DURING_RUN,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use vodkit_peers::process::{free_port, http_get, ServerProcess, StartSpec};
use vodkit_prefetch::budget::MemorySetting;
use vodkit_prefetch::PolicySpec;

/// What `+preload` servers need: the vodkit executable, whose `vodkit prefetchd` is each
/// server's own prefetch daemon, and the preload library (`vodkit-preload`).
#[derive(Debug, Clone)]
pub struct PreloadKit {
    exe: PathBuf,
    /// catalog.json and the file-set root, so bit-rate-aware policies see each file's
    /// rate as `vodkit serve --catalog` does.
    catalog: Option<(PathBuf, PathBuf)>,
}

impl PreloadKit {
    /// Find the vodkit executable: `exe` when given (the CLI passes its own), else `$VODKIT`,
    /// else this program when it is vodkit itself. `Err` is the reason `+preload` servers
    /// are skipped.
    pub fn locate(exe: Option<&Path>) -> Result<PreloadKit, String> {
        let this = std::env::current_exe()
            .ok()
            .filter(|p| p.file_name().is_some_and(|n| n == "vodkit"));
        let exe = exe
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os(ENV_VODKIT).map(PathBuf::from))
            .or(this)
            .ok_or_else(|| {
                format!(
                    "+preload runs its prefetch daemon as `vodkit prefetchd`, and no vodkit executable is known here (run `vodkit bench`, or set {ENV_VODKIT}=/path/to/vodkit); skipped"
                )
            })?;
        if !exe.is_file() {
            return Err(format!(
                "+preload: the vodkit executable {} does not exist; skipped",
                exe.display()
            ));
        }
        vodkit_preload::library::path()
            .map_err(|e| format!("+preload: cannot write the preload shim's library: {e}"))?;
        Ok(PreloadKit { exe, catalog: None })
    }

    /// Give the daemons `--catalog catalog --root root` (the workload's catalog.json and
    /// the directory its file set is written under).
    pub fn with_catalog(mut self, catalog: PathBuf, root: PathBuf) -> PreloadKit {
        self.catalog = Some((catalog, root));
        self
    }

    /// The vodkit executable the daemons run from.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// Start `vodkit prefetchd` with `policy` for one server run: its socket in the temp
    /// directory (short, and reachable by servers that drop privileges), its admin listener
    /// on a free loopback port (readiness and metrics), its metrics file and logs in
    /// `run_dir`, inside the memory budget when one is given.
    pub fn start_daemon(
        &self,
        policy: &PolicySpec,
        run_dir: &Path,
        budget: Option<&CommandWrap>,
    ) -> Result<PreloadDaemon, String> {
        self.start_daemon_from(None, policy, None, None, run_dir, budget)
    }

    /// [`PreloadKit::start_daemon`] with the daemon's `--memory` and `--io-order` (`None`:
    /// their defaults), from another vodkit build (`+bin:PATH`; `None`: the kit's own
    /// executable).
    pub fn start_daemon_from(
        &self,
        exe: Option<&Path>,
        policy: &PolicySpec,
        memory: Option<MemorySetting>,
        order: Option<vodkit_prefetch::IoOrder>,
        run_dir: &Path,
        budget: Option<&CommandWrap>,
    ) -> Result<PreloadDaemon, String> {
        static STARTS: AtomicU32 = AtomicU32::new(0);
        let n = STARTS.fetch_add(1, Ordering::SeqCst);
        let socket =
            std::env::temp_dir().join(format!("vodkit-bench-{}-{n}.sock", std::process::id()));
        let port = free_port().map_err(|e| format!("prefetchd: {e}"))?;
        let mut cmd = self.daemon_command(&socket, policy, memory, port, run_dir);
        if let Some(exe) = exe {
            // Same argv, another program.
            let mut other = Command::new(exe);
            other.args(cmd.get_args());
            cmd = other;
        }
        if let Some(o) = order {
            cmd.arg("--io-order").arg(o.name());
        }
        let cmd = match budget {
            Some(b) => b(cmd)?,
            None => cmd,
        };
        let process = ServerProcess::start(
            cmd,
            StartSpec {
                name: DAEMON,
                port,
                run_dir,
                // Logs go to stderr; stdout gets the final counters as JSON.
                error_log: run_dir.join(format!("{DAEMON}.stdout")),
                is_error: vodkit_error_line,
                probe_path: "/stats",
                timeout: Duration::from_secs(20),
            },
        )
        .map_err(|e| e.to_string())?;
        let library = vodkit_preload::Preload::attach(&socket).map_err(|e| e.to_string())?;
        Ok(PreloadDaemon {
            process,
            library,
            run_dir: run_dir.to_path_buf(),
        })
    }

    /// The `vodkit prefetchd` command line for one run.
    fn daemon_command(
        &self,
        socket: &Path,
        policy: &PolicySpec,
        memory: Option<MemorySetting>,
        port: u16,
        run_dir: &Path,
    ) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("prefetchd")
            .arg("--socket")
            .arg(socket)
            .arg("--prefetch")
            .arg(policy.to_string())
            .args(["--admin", &format!("127.0.0.1:{port}")])
            .arg("--metrics")
            .arg(run_dir.join(DAEMON_METRICS));
        if let Some(m) = memory {
            cmd.args(["--memory", &memory_arg(m)]);
        }
        if let Some((catalog, root)) = &self.catalog {
            cmd.arg("--catalog").arg(catalog).arg("--root").arg(root);
        }
        cmd
    }
}

const DAEMON: &str = "prefetchd";
/// The daemon's counters as JSON (rewritten every second and at exit).
pub const DAEMON_METRICS: &str = "prefetchd-metrics.json";
/// The daemon's Prometheus metrics, scraped just before it is stopped.
pub const DAEMON_PROMETHEUS: &str = "prefetchd.prom";

/// A `vodkit prefetchd` serving one `+preload` server run.
pub struct PreloadDaemon {
    process: ServerProcess,
    library: vodkit_preload::Preload,
    run_dir: PathBuf,
}

impl PreloadDaemon {
    /// Preload the library into `cmd`, reporting to this daemon.
    pub fn apply(&self, mut cmd: Command) -> Command {
        self.library.apply(&mut cmd);
        cmd
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Run the daemon's engine clock `rate` times faster than real time.
    pub fn set_clock_rate(&self, rate: f64) -> Result<(), String> {
        set_clock_rate(self.process.port, rate)
    }

    /// Scrape its metrics into the run directory, stop it and return the lines that say
    /// its run was not clean: error log lines, an exit during the run (the server then
    /// went on without prefetching), an unclean exit.
    pub fn stop(mut self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Ok(Some(status)) = self.process.exited() {
            lines.push(format!(
                "{DAEMON}: {EXITED_DURING_RUN} ({status}); the server went on without prefetching: {}",
                self.process.diagnostics()
            ));
        } else if let Ok((200, body)) = http_get(self.process.port, "/metrics") {
            let _ = std::fs::write(self.run_dir.join(DAEMON_PROMETHEUS), body);
        }
        match self.process.stop_with_status(Duration::from_secs(10)) {
            Ok((status, errors)) => {
                if !status.success() && lines.is_empty() {
                    lines.push(format!("{DAEMON}: stopped uncleanly ({status})"));
                }
                lines.extend(errors.into_iter().map(|l| format!("{DAEMON}: {l}")));
            }
            Err(e) => lines.push(format!("{DAEMON}: stopping: {e}")),
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child::built_vodkit;

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn daemons_get_the_catalog_and_root_when_the_bench_knows_them() {
        let kit = PreloadKit {
            exe: PathBuf::from("/x/vodkit"),
            catalog: None,
        };
        let sock = Path::new("/tmp/s.sock");
        let plain =
            args(&kit.daemon_command(sock, &"auto".parse().unwrap(), None, 9, Path::new("/run")));
        assert!(!plain.iter().any(|a| a == "--catalog"), "{plain:?}");
        let kit = kit.with_catalog("/w/catalog.json".into(), "/mnt/files".into());
        let cmd = kit.daemon_command(sock, &"auto".parse().unwrap(), None, 9, Path::new("/run"));
        assert_eq!(cmd.get_program(), "/x/vodkit");
        let with = args(&cmd);
        assert_eq!(
            with[plain.len()..],
            ["--catalog", "/w/catalog.json", "--root", "/mnt/files"]
        );
        assert_eq!(with[..plain.len()], plain[..]);
        let off = args(&kit.daemon_command(
            sock,
            &"auto".parse().unwrap(),
            Some(MemorySetting::Off),
            9,
            Path::new("/run"),
        ));
        assert_eq!(off[0], "prefetchd", "flags follow the subcommand");
        let at = off
            .iter()
            .position(|a| a == "--memory")
            .expect("--memory passed");
        assert_eq!(off[at + 1], "off");
        assert_eq!(memory_arg(MemorySetting::Budget(1 << 30)), "1073741824");
    }

    #[test]
    fn a_missing_catalog_stops_the_daemon_with_one_line_naming_it() {
        let Some(exe) = built_vodkit() else {
            return vodkit_testkit::skip("no vodkit executable (`cargo build -p vodkit` first)");
        };
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-catalog.json");
        let kit = PreloadKit::locate(Some(&exe))
            .unwrap()
            .with_catalog(missing, dir.path().to_path_buf());
        let e = kit
            .start_daemon(&"auto".parse().unwrap(), dir.path(), None)
            .err()
            .expect("a missing catalog must not start");
        assert!(e.contains("no-such-catalog.json"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
