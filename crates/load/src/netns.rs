//! Kernel link shaping: one network namespace per bandwidth-limited client class, joined to
//! the root namespace by a veth pair whose root-side egress (server to viewer) carries an
//! htb class at the class's bandwidth. Sessions of the class open their sockets inside the
//! namespace (a helper thread that has joined it creates them; a socket keeps its
//! namespace for life) and reach the server at the veth's root-side address.
//!
//! This kernel has tbf and htb but no netem, so one-way delay stays in user space. The
//! namespaces are deleted when [`KernelLinks`] is dropped: at the end of a run, on Ctrl-C
//! (which ends the run) and on error or panic (unwinding). Namespaces left by a process
//! that was killed outright are removed by the next kernel-mode run.

use crate::link::Link;
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;

/// Prefix of every namespace this module creates: `vodkit-load-<pid>-<n>`.
pub const NETNS_PREFIX: &str = "vodkit-load-";

/// Namespace/address slots per process (runs in one process take turns through them).
const SLOTS: usize = 64;
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

/// The slot the next shaped class of this process will get (see [`addresses`]).
pub fn next_slot() -> usize {
    NEXT_SLOT.load(Ordering::Relaxed) % SLOTS
}

/// How client links are emulated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinkMode {
    /// Token bucket on reads and delays, all in the load generator.
    #[default]
    User,
    /// Bandwidth shaped by htb in network namespaces; delay still in user space.
    Kernel,
}

/// The way a kernel-shaped class reaches the server.
#[derive(Debug)]
pub struct Route {
    /// The server under test as seen from the class's namespace.
    pub addr: SocketAddr,
    requests: Mutex<mpsc::Sender<tokio::sync::oneshot::Sender<io::Result<OwnedFd>>>>,
}

impl Route {
    /// A fresh, unconnected non-blocking TCP socket inside the class's namespace.
    pub async fn socket(&self) -> io::Result<tokio::net::TcpSocket> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(tx)
            .map_err(|_| io::Error::other("namespace socket helper has stopped"))?;
        let fd = rx
            .await
            .map_err(|_| io::Error::other("namespace socket helper has stopped"))??;
        // SAFETY: the helper created this descriptor as a TCP socket and gave it up.
        let std_stream = unsafe { std::net::TcpStream::from_raw_fd(fd_into_raw(fd)) };
        Ok(tokio::net::TcpSocket::from_std_stream(std_stream))
    }
}

fn fd_into_raw(fd: OwnedFd) -> i32 {
    use std::os::fd::IntoRawFd;
    fd.into_raw_fd()
}

/// One shaped class.
#[derive(Debug)]
pub struct ClassLink {
    pub class: String,
    pub netns: String,
    pub host_if: String,
    pub host_addr: Ipv4Addr,
    pub client_addr: Ipv4Addr,
    pub bandwidth_bps: u64,
    pub route: std::sync::Arc<Route>,
}

/// The namespaces of a run; dropping it deletes them.
#[derive(Debug, Default)]
pub struct KernelLinks {
    pub classes: Vec<ClassLink>,
}

impl KernelLinks {
    /// Why kernel shaping cannot be used here, if it cannot (one line).
    pub fn unavailable() -> Option<String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Some("--link kernel needs root (network namespaces and tc)".into());
        }
        for tool in ["ip", "tc"] {
            let found = Command::new(tool)
                .arg("-V")
                .output()
                .is_ok_and(|o| o.status.success());
            if !found {
                return Some(format!(
                    "--link kernel needs `{tool}` from iproute2, which was not found"
                ));
            }
        }
        None
    }

    /// Create a namespace, veth pair and htb shaping for every class with a bandwidth
    /// limit. The server is reached at the root-side veth address on `port`.
    pub fn create(links: &HashMap<String, Link>, port: u16) -> Result<KernelLinks, String> {
        if let Some(why) = Self::unavailable() {
            return Err(why);
        }
        remove_stale();
        let pid = std::process::id();
        let mut names: Vec<&String> = links
            .iter()
            .filter(|(_, l)| l.bandwidth_bps > 0)
            .map(|(n, _)| n)
            .collect();
        names.sort();
        if names.len() > SLOTS {
            return Err(format!(
                "--link kernel shapes at most {SLOTS} client classes, the workload has {}",
                names.len()
            ));
        }
        let mut made = KernelLinks::default();
        for name in names {
            let k = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % SLOTS;
            let class = made.add(pid, k, name, links[name].bandwidth_bps, port)?;
            made.classes.push(class);
        }
        Ok(made)
    }

    fn add(
        &self,
        pid: u32,
        k: usize,
        class: &str,
        bandwidth_bps: u64,
        port: u16,
    ) -> Result<ClassLink, String> {
        let netns = format!("{NETNS_PREFIX}{pid}-{k}");
        if std::path::Path::new(&format!("/run/netns/{netns}")).exists() {
            return Err(format!(
                "namespace {netns} already exists (another run in this process?)"
            ));
        }
        let host_if = format!("vkl{}h{k}", pid % 10_000_000);
        let (host_addr, client_addr) = addresses(pid, k);
        ip(&["netns", "add", &netns])?;
        // From here on a failure still deletes the namespace: the caller drops `self`
        // only for classes already pushed, so clean up this one on error.
        let undo = |e: String| {
            let _ = ip(&["netns", "del", &netns]);
            e
        };
        let steps: Vec<Vec<String>> = vec![
            cmd(&format!(
                "link add {host_if} type veth peer name vk0 netns {netns}"
            )),
            cmd(&format!("addr add {host_addr}/30 dev {host_if}")),
            cmd(&format!("link set {host_if} up")),
            cmd(&format!("-n {netns} addr add {client_addr}/30 dev vk0")),
            cmd(&format!("-n {netns} link set vk0 up")),
            cmd(&format!("-n {netns} link set lo up")),
        ];
        for step in &steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            ip(&args).map_err(undo)?;
        }
        // Server-to-viewer traffic leaves the root side of the pair: shape it there.
        let rate = format!("{bandwidth_bps}bit");
        let burst = format!("{}b", (bandwidth_bps / 8 / 100).max(3_200));
        let tc_steps = [
            cmd(&format!("qdisc add dev {host_if} root handle 1: htb default 10")),
            cmd(&format!(
                "class add dev {host_if} parent 1: classid 1:10 htb rate {rate} ceil {rate} burst {burst} cburst {burst}"
            )),
        ];
        for step in &tc_steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            run("tc", &args).map_err(undo)?;
        }
        let requests = socket_helper(&netns).map_err(undo)?;
        Ok(ClassLink {
            class: class.to_string(),
            netns,
            host_if,
            host_addr,
            client_addr,
            bandwidth_bps,
            route: std::sync::Arc::new(Route {
                addr: SocketAddr::V4(SocketAddrV4::new(host_addr, port)),
                requests: Mutex::new(requests),
            }),
        })
    }

    /// The route of a kernel-shaped class.
    pub fn route(&self, class: &str) -> Option<std::sync::Arc<Route>> {
        self.classes
            .iter()
            .find(|c| c.class == class)
            .map(|c| c.route.clone())
    }

    /// One line saying which classes are shaped in the kernel and how; `sessions` counts
    /// the sessions of each class that will share its link.
    pub fn describe(&self, sessions: &HashMap<&str, usize>) -> String {
        let parts: Vec<String> = self
            .classes
            .iter()
            .map(|c| {
                format!(
                    "{} at {:.3} Mbit/s shared by {} sessions (namespace {}, server reached at {})",
                    c.class,
                    c.bandwidth_bps as f64 / 1e6,
                    sessions.get(c.class.as_str()).copied().unwrap_or(0),
                    c.netns,
                    c.route.addr
                )
            })
            .collect();
        format!(
            "kernel shaping (htb, one link per class shared by its sessions) in use for: {}; one-way delay stays in user space",
            parts.join(", ")
        )
    }
}

impl Drop for KernelLinks {
    fn drop(&mut self) {
        for c in &self.classes {
            if let Err(e) = ip(&["netns", "del", &c.netns]) {
                tracing::warn!("cannot delete namespace {}: {e}", c.netns);
            }
            // Deleting the namespace destroys the pair once its last socket is gone;
            // delete the root side now so nothing lingers.
            let _ = ip(&["link", "del", &c.host_if]);
        }
    }
}

/// The veth addresses (root side, namespace side) of slot `k` of process `pid`: /30s carved from 10.213.0.0/16, 256 pid
/// slots of 64 classes each. A server can bind the root-side address before it exists
/// with `IP_FREEBIND` (or `net.ipv4.ip_nonlocal_bind = 1`).
pub fn addresses(pid: u32, k: usize) -> (Ipv4Addr, Ipv4Addr) {
    let subnet = ((pid % 256) * 64 + k as u32) * 4;
    let base = u32::from(Ipv4Addr::new(10, 213, 0, 0)) + subnet;
    (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
}

fn cmd(line: &str) -> Vec<String> {
    line.split_whitespace().map(String::from).collect()
}

fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn run(tool: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(tool)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {tool}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "`{tool} {}` failed: {}",
        args.join(" "),
        err.trim().replace('\n', "; ")
    ))
}

/// Namespaces named by this module whose process no longer exists.
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(NETNS_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

type SocketRequest = tokio::sync::oneshot::Sender<io::Result<OwnedFd>>;

/// A thread that joins `netns` and creates TCP sockets there on request. It ends when
/// the last sender is dropped.
fn socket_helper(netns: &str) -> Result<mpsc::Sender<SocketRequest>, String> {
    let path = format!("/run/netns/{netns}");
    let ns = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    let (tx, rx) = mpsc::channel::<SocketRequest>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let name = netns.to_string();
    std::thread::Builder::new()
        .name("vodkit-netns".into())
        .spawn(move || {
            // SAFETY: setns on this thread only; `ns` is an open namespace file.
            let joined = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            drop(ns);
            if joined != 0 {
                let e = io::Error::last_os_error();
                let _ = ready_tx.send(Err(format!("cannot join namespace {name}: {e}")));
                return;
            }
            let _ = ready_tx.send(Ok(()));
            for reply in rx {
                let _ = reply.send(new_tcp_socket());
            }
        })
        .map_err(|e| format!("cannot start the namespace helper thread: {e}"))?;
    ready_rx
        .recv()
        .map_err(|_| "the namespace helper thread died".to_string())??;
    Ok(tx)
}

fn new_tcp_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked before being owned.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_get_distinct_private_pairs_and_short_interface_names() {
        let mut seen = std::collections::HashSet::new();
        for pid in [1u32, 255, 256, 4_194_304] {
            for k in [0, 1, SLOTS - 1] {
                let (host, client) = addresses(pid, k);
                assert_eq!(u32::from(client), u32::from(host) + 1);
                assert_eq!(host.octets()[..2], [10, 213]);
                assert_eq!(
                    u32::from(host) % 4,
                    1,
                    "{host} must be the first host of a /30"
                );
                seen.insert((pid % 256, k, host));
                // Linux interface names are at most 15 bytes.
                assert!(format!("vkl{}h{k}", pid % 10_000_000).len() <= 15);
            }
        }
        let hosts: std::collections::HashSet<_> = seen.iter().map(|s| s.2).collect();
        assert_eq!(hosts.len(), seen.len(), "two slots share an address");
    }
}
