//! The launcher the bench uses: nginx and Apache as child processes with generated
//! configs, `url:` servers as they are, vodkit through a [`VodkitStarter`] supplied by the
//! caller; memory budget and preload shim applied as command wrappers when available.

use crate::experiment::{Launcher, Running, StartError};
use crate::peers::{self, PeerError, PeerSetup};
use crate::process::ServerProcess;
use crate::readahead;
use crate::sut::{Base, IoMode, Sut};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Rewrites a server command (e.g. to run it in a memory cgroup or under the preload shim).
pub type CommandWrap = Box<dyn Fn(Command) -> Result<Command, String>>;

/// Starts the vodkit server for a `vodkit:IO:POLICY` entry.
pub trait VodkitStarter {
    fn start(
        &mut self,
        io: IoMode,
        policy: &str,
        root: &Path,
        run_dir: &Path,
        budget: Option<&CommandWrap>,
    ) -> Result<Box<dyn Running>, StartError>;
}

/// Launches every kind of server under test on this machine.
pub struct LocalLauncher {
    pub root: PathBuf,
    /// Each start gets a fresh numbered directory under this one.
    pub run_base: PathBuf,
    /// A file of the set, requested to check readiness.
    pub probe_path: String,
    pub workers: usize,
    pub budget: Option<CommandWrap>,
    /// `Err(reason)` while the preload shim is not available.
    pub preload: Result<CommandWrap, String>,
    /// `Err(reason)` while the vodkit server is not available.
    pub vodkit: Result<Box<dyn VodkitStarter>, String>,
    starts: u32,
}

impl LocalLauncher {
    pub fn new(root: PathBuf, run_base: PathBuf, probe_path: String) -> LocalLauncher {
        LocalLauncher {
            root,
            run_base,
            probe_path,
            workers: peers::cores(),
            budget: None,
            preload: Err("no preload shim configured for this run".into()),
            vodkit: Err("no vodkit server configured for this run".into()),
            starts: 0,
        }
    }

    fn next_run_dir(&mut self, sut: &Sut) -> PathBuf {
        self.starts += 1;
        let safe: String = sut
            .label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.run_base.join(format!("{:03}-{safe}", self.starts))
    }
}

struct PeerRunning {
    process: ServerProcess,
    readahead: Option<readahead::Applied>,
}

impl Running for PeerRunning {
    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.process.port)
    }
    fn stop(self: Box<Self>) -> Result<Vec<String>, String> {
        let this = *self;
        let lines = this
            .process
            .stop(Duration::from_secs(15))
            .map_err(|e| e.to_string())?;
        if let Some(ra) = this.readahead {
            ra.restore()?;
        }
        Ok(lines)
    }
}

struct External(String);

impl Running for External {
    fn base_url(&self) -> String {
        self.0.trim_end_matches('/').to_string()
    }
    fn stop(self: Box<Self>) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
}

fn peer_error(e: PeerError) -> StartError {
    match e {
        PeerError::Missing(..) => StartError::Unavailable(e.to_string()),
        other => StartError::Failed(other.to_string()),
    }
}

impl Launcher for LocalLauncher {
    fn available(&self, sut: &Sut) -> Result<(), String> {
        match &sut.base {
            Base::Nginx if peers::nginx_program().is_none() => {
                return Err(
                    "nginx is not installed (Debian: apt-get install nginx); skipped".into(),
                )
            }
            Base::Apache if peers::apache_program().is_none() => {
                return Err(
                    "apache2 is not installed (Debian: apt-get install apache2); skipped".into(),
                )
            }
            Base::Vodkit { .. } => {
                if let Err(why) = &self.vodkit {
                    return Err(why.clone());
                }
            }
            _ => {}
        }
        if sut.preload {
            if let Err(why) = &self.preload {
                return Err(why.clone());
            }
        }
        if sut.readahead.is_some() {
            readahead::queue_dir(&self.root)?;
        }
        Ok(())
    }

    fn start(&mut self, sut: &Sut) -> Result<Box<dyn Running>, StartError> {
        let run_dir = self.next_run_dir(sut);
        std::fs::create_dir_all(&run_dir)
            .map_err(|e| StartError::Failed(format!("creating {}: {e}", run_dir.display())))?;
        let ra = match &sut.readahead {
            Some(r) => Some(readahead::apply(&self.root, r).map_err(StartError::Failed)?),
            None => None,
        };
        let setup = PeerSetup {
            root: &self.root,
            run_dir: &run_dir,
            probe_path: &self.probe_path,
            workers: self.workers,
        };
        let preload = if sut.preload {
            self.preload.as_ref().ok()
        } else {
            None
        };
        let budget = self.budget.as_ref();
        let wrap = |cmd: Command| -> Result<Command, String> {
            let cmd = match preload {
                Some(p) => p(cmd)?,
                None => cmd,
            };
            match budget {
                Some(b) => b(cmd),
                None => Ok(cmd),
            }
        };
        let process = match &sut.base {
            Base::Nginx => peers::start_nginx(&setup, &wrap).map_err(peer_error)?,
            Base::Apache => peers::start_apache(&setup, &wrap).map_err(peer_error)?,
            Base::Url { url } => return Ok(Box::new(External(url.clone()))),
            Base::Vodkit { io, policy } => {
                let starter = self
                    .vodkit
                    .as_mut()
                    .map_err(|why| StartError::Unavailable(why.clone()))?;
                return starter.start(*io, policy, &self.root, &run_dir, self.budget.as_ref());
            }
        };
        Ok(Box::new(PeerRunning {
            process,
            readahead: ra,
        }))
    }
}
