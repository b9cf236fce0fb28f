//! A peer web server under test: nginx or Apache (started by `vodkit-peers`, with the
//! config the bench uses) serving a fresh temporary root on a free loopback port; stopped
//! when dropped.

use std::path::{Path, PathBuf};

use vodkit_peers::{PeerSetup, ServerProcess, StartPeer};

use crate::need::{needs, Need};

/// A running peer serving `root()`.
pub struct Peer {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub server: ServerProcess,
}

impl Peer {
    /// Starts `peer` (`"nginx"` or `"apache2"`, one worker) after `fill` has written the
    /// files under the root; it is ready once `probe` (a path such as `/a.mp4`) serves.
    /// `None` when the peer is missing or this is the fast tier (see [`needs`]).
    pub fn start(peer: &str, probe: &str, fill: impl FnOnce(&Path)) -> Option<Peer> {
        Self::start_configured(peer, probe, "", fill)
    }

    /// [`Peer::start`] with `server_extra` added to its server configuration (nginx
    /// directives such as [`vodkit_peers::nginx::secure_link_directives`]).
    pub fn start_configured(
        peer: &str,
        probe: &str,
        server_extra: &str,
        fill: impl FnOnce(&Path),
    ) -> Option<Peer> {
        let start: StartPeer = match peer {
            "nginx" => vodkit_peers::start_nginx,
            "apache2" => vodkit_peers::start_apache,
            other => panic!("no peer called {other}: expected nginx or apache2"),
        };
        if !needs(&[Need::Peer(peer)]) {
            return None;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).expect("the peer's root");
        fill(&root);
        let run = dir.path().join("run");
        let setup = PeerSetup {
            server_extra: Some(server_extra).filter(|e| !e.is_empty()),
            ..PeerSetup::new(&root, &run, probe, 1)
        };
        let server =
            start(&setup, &vodkit_peers::no_wrap).unwrap_or_else(|e| panic!("{peer} starts: {e}"));
        Some(Peer {
            port: server.port,
            dir,
            server,
        })
    }

    /// The directory it serves.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}
