//! Starting a balancer as a supervised child: its configuration (with
//! [`BalancerSpec::run_dir`] set) written into the run directory, the program started in
//! the foreground, ready once a request through it to `probe_path` is answered.

use super::BalancerSpec;
use crate::launch::PeerError;
use crate::process::{find_program, ServerProcess, StartSpec};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use strum::{EnumString, IntoStaticStr, VariantNames};

/// Which balancer program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, IntoStaticStr, VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_balancer)]
pub enum Balancer {
    Haproxy,
    Nginx,
}

impl Balancer {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The complete configuration for `spec`.
    pub fn render(self, spec: &BalancerSpec) -> String {
        match self {
            Balancer::Haproxy => super::haproxy::render(spec),
            Balancer::Nginx => super::nginx::render(spec),
        }
    }
}

fn unknown_balancer(s: &str) -> String {
    vodkit_units::unknown_choice("balancer", s, Balancer::VARIANTS)
}

/// The HAProxy binary, if installed.
pub fn haproxy_program() -> Option<std::path::PathBuf> {
    find_program("haproxy")
}

/// Start `balancer` for `spec` (whose `listen` must be a loopback address the readiness
/// probe can reach) with its files in `run_dir`; ready once `probe_path` answers 2xx
/// through it.
pub fn start(
    balancer: Balancer,
    spec: &BalancerSpec,
    run_dir: &Path,
    probe_path: &str,
) -> Result<ServerProcess, PeerError> {
    let run_dir = std::path::absolute(run_dir).unwrap_or_else(|_| run_dir.to_path_buf());
    let spec = BalancerSpec {
        run_dir: Some(run_dir.clone()),
        ..spec.clone()
    };
    let (program, conf, is_error): (_, _, fn(&str) -> bool) = match balancer {
        Balancer::Haproxy => (
            haproxy_program().ok_or(PeerError::Missing("haproxy", "haproxy"))?,
            run_dir.join("haproxy.cfg"),
            super::haproxy::is_error_line,
        ),
        Balancer::Nginx => (
            crate::nginx_program().ok_or(PeerError::Missing("nginx", "nginx"))?,
            run_dir.join("nginx.conf"),
            crate::nginx::is_error_line,
        ),
    };
    std::fs::create_dir_all(&run_dir)
        .and_then(|_| std::fs::write(&conf, balancer.render(&spec)))
        .map_err(|source| PeerError::Config {
            what: balancer.as_str(),
            dir: run_dir.clone(),
            source,
        })?;
    let mut cmd = Command::new(program);
    match balancer {
        Balancer::Haproxy => {
            cmd.arg("-db").arg("-f").arg(&conf);
        }
        Balancer::Nginx => {
            cmd.arg("-p")
                .arg(&run_dir)
                .arg("-c")
                .arg(&conf)
                .args(["-e", "stderr"]);
        }
    }
    let name = match balancer {
        Balancer::Haproxy => "haproxy",
        Balancer::Nginx => "nginx-balancer",
    };
    Ok(ServerProcess::start(
        cmd,
        StartSpec {
            name,
            port: spec.listen.port(),
            run_dir: &run_dir,
            error_log: run_dir.join("error.log"),
            is_error,
            probe_path,
            timeout: Duration::from_secs(20),
        },
    )?)
}

/// Check a configuration with the program's own checker (`haproxy -c -f`, `nginx -t`):
/// `Ok` with its output when it accepts the file, `Err` with its output when not.
pub fn check(balancer: Balancer, conf: &Path, prefix: &Path) -> Result<String, String> {
    let mut cmd = match balancer {
        Balancer::Haproxy => {
            let mut c = Command::new(haproxy_program().ok_or("haproxy is not installed")?);
            c.arg("-c").arg("-f").arg(conf);
            c
        }
        Balancer::Nginx => {
            let mut c = Command::new(crate::nginx_program().ok_or("nginx is not installed")?);
            c.arg("-t").arg("-p").arg(prefix).arg("-c").arg(conf);
            c
        }
    };
    let out = cmd.output().map_err(|e| e.to_string())?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

/// One origin's line of HAProxy's `show stat`, from the stats socket a started balancer
/// has in its run directory ([`super::haproxy::stats_socket`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginStat {
    /// `o1`, `o2`, … ([`super::origin_name`]); live origins `l1`, `l2`, ….
    pub name: String,
    /// `UP`, `DOWN`, `DRAIN`, `MAINT`, possibly with a transition such as `UP 1/2`.
    pub status: String,
    /// Sessions sent to this origin so far (`stot`).
    pub sessions: u64,
    /// Response bytes from this origin so far (`bout`).
    pub bytes_out: u64,
}

/// The origins' lines of HAProxy's `show stat` over the stats socket at `sock` (the live
/// origins' too, when live paths have their own).
pub fn haproxy_stats(sock: &Path) -> std::io::Result<Vec<OriginStat>> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"show stat\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let header: Vec<&str> = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("# ")
        .split(',')
        .collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (Some(sv), Some(st), Some(stot), Some(bout)) =
        (col("svname"), col("status"), col("stot"), col("bout"))
    else {
        return Err(std::io::Error::other(format!(
            "HAProxy's show stat has no svname/status/stot/bout columns: {}",
            header.join(",")
        )));
    };
    Ok(text
        .lines()
        .filter(|l| l.starts_with("origins,") || l.starts_with("live,"))
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f.get(sv).is_some_and(|n| *n != "BACKEND"))
        .map(|f| OriginStat {
            name: f.get(sv).unwrap_or(&"").to_string(),
            status: f.get(st).unwrap_or(&"").to_string(),
            sessions: f.get(stot).and_then(|v| v.parse().ok()).unwrap_or(0),
            bytes_out: f.get(bout).and_then(|v| v.parse().ok()).unwrap_or(0),
        })
        .collect())
}
