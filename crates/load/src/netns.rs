//! Kernel link shaping: one network namespace per bandwidth-limited client class, joined to
//! the root namespace by a veth pair. The namespace side carries a pool of client
//! addresses; the root side's egress (server to viewer) has one htb leaf per address at the
//! class's bandwidth, found through a u32 hash on the destination address. Each session
//! leases an address for its lifetime, so each session gets its own link, as in the
//! user-space emulation. Sessions open their sockets inside the namespace (a helper thread
//! that has joined it creates and binds them; a socket keeps its namespace for life) and
//! reach the server at the veth's root-side address.
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
use std::sync::{Arc, Mutex};

/// Prefix of every namespace this module creates: `vodkit-load-<pid>-<n>`.
pub const NETNS_PREFIX: &str = "vodkit-load-";

/// Namespace/address slots per process (runs in one process take turns through them).
const SLOTS: usize = 64;
/// Client addresses (and htb leaves) per class: `.2` to `.254` of its /24.
pub const POOL: usize = 253;
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
    /// First client address of the pool (`.2` of the class's /24).
    first_client: Ipv4Addr,
    /// Sessions holding each pool address.
    leases: Mutex<Vec<u32>>,
    requests: Mutex<mpsc::Sender<SocketRequest>>,
}

/// A session's client address (and so its htb leaf); given back on drop.
#[derive(Debug)]
pub struct Lease {
    route: Arc<Route>,
    slot: usize,
}

impl Lease {
    pub fn addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.route.first_client) + self.slot as u32)
    }

    pub fn route(&self) -> &Route {
        &self.route
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut leases = self.route.leases.lock().unwrap_or_else(|p| p.into_inner());
        leases[self.slot] = leases[self.slot].saturating_sub(1);
    }
}

impl Route {
    /// Lease the least used client address. Up to [`POOL`] concurrent sessions each get
    /// their own; beyond that, sessions share leaves (and their bandwidth).
    pub fn lease(route: &Arc<Route>) -> Lease {
        let mut leases = route.leases.lock().unwrap_or_else(|p| p.into_inner());
        let slot = (0..leases.len()).min_by_key(|&i| leases[i]).unwrap_or(0);
        leases[slot] += 1;
        Lease {
            route: route.clone(),
            slot,
        }
    }

    /// A fresh, unconnected non-blocking TCP socket inside the class's namespace, bound to
    /// `local` (any port) when given.
    pub async fn socket(&self, local: Option<Ipv4Addr>) -> io::Result<tokio::net::TcpSocket> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send((local, tx))
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
    pub bandwidth_bps: u64,
    pub route: Arc<Route>,
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
        let (host_addr, first_client) = addresses(pid, k);
        let in_use = Command::new("ip")
            .args(["-4", "-o", "addr", "show", "to", &format!("{host_addr}/24")])
            .output()
            .map_err(|e| format!("cannot run ip: {e}"))?;
        if !in_use.stdout.is_empty() {
            return Err(format!(
                "addresses {host_addr}/24 are already in use (another `--link kernel` run?)"
            ));
        }
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
            cmd(&format!("addr add {host_addr}/24 dev {host_if}")),
            // One MSS per packet: htb charges a whole GSO super-packet (up to 64 KiB) at
            // once, which leaves the leaf in debt and delays the next response by up to
            // 64 KiB at the link rate.
            cmd(&format!(
                "link set {host_if} gso_max_segs 1 gso_max_size 1500"
            )),
            cmd(&format!("link set {host_if} up")),
            cmd(&format!("-n {netns} addr add {first_client}/24 dev vk0")),
            cmd(&format!("-n {netns} link set vk0 up")),
            cmd(&format!("-n {netns} link set lo up")),
        ];
        for step in &steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            ip(&args).map_err(undo)?;
        }
        let pool: String = (1..POOL)
            .map(|i| {
                let a = Ipv4Addr::from(u32::from(first_client) + i as u32);
                format!("addr add {a}/24 dev vk0\n")
            })
            .collect();
        batch("ip", &["-n", &netns, "-batch", "-"], &pool).map_err(undo)?;
        batch(
            "tc",
            &["-batch", "-"],
            &shaping(&host_if, host_addr, bandwidth_bps),
        )
        .map_err(undo)?;
        let requests = socket_helper(&netns).map_err(undo)?;
        Ok(ClassLink {
            class: class.to_string(),
            netns,
            host_if,
            host_addr,
            bandwidth_bps,
            route: Arc::new(Route {
                addr: SocketAddr::V4(SocketAddrV4::new(host_addr, port)),
                first_client,
                leases: Mutex::new(vec![0; POOL]),
                requests: Mutex::new(requests),
            }),
        })
    }

    /// The route of a kernel-shaped class.
    pub fn route(&self, class: &str) -> Option<Arc<Route>> {
        self.classes
            .iter()
            .find(|c| c.class == class)
            .map(|c| c.route.clone())
    }

    /// One line saying which classes are shaped in the kernel and how; `sessions` counts
    /// each class's sessions.
    pub fn describe(&self, sessions: &HashMap<&str, usize>) -> String {
        let parts: Vec<String> = self
            .classes
            .iter()
            .map(|c| {
                format!(
                    "{} at {:.3} Mbit/s per session, {} sessions (namespace {}, server reached at {})",
                    c.class,
                    c.bandwidth_bps as f64 / 1e6,
                    sessions.get(c.class.as_str()).copied().unwrap_or(0),
                    c.netns,
                    c.route.addr
                )
            })
            .collect();
        format!(
            "kernel shaping (htb, one leaf per session, {POOL} per class) in use for: {}; one-way delay stays in user space",
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

/// The veth addresses (root side `.1`, first client `.2`) of slot `k` of process `pid`:
/// /24s carved from 10.213.0.0/16, 4 pid slots (pid mod 4) of 64 classes each. A server can bind the root-side address before it exists
/// with `IP_FREEBIND` (or `net.ipv4.ip_nonlocal_bind = 1`).
pub fn addresses(pid: u32, k: usize) -> (Ipv4Addr, Ipv4Addr) {
    let subnet = ((pid % 4) * SLOTS as u32 + (k % SLOTS) as u32) << 8;
    let base = u32::from(Ipv4Addr::new(10, 213, 0, 0)) + subnet;
    (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
}

/// htb on the root side of the pair (server-to-viewer traffic leaves there): a leaf per
/// client address at `bandwidth_bps`, chosen by a u32 hash table on the destination
/// address's last byte; anything else (ARP aside, nothing) goes to a default leaf.
fn shaping(dev: &str, host: Ipv4Addr, bandwidth_bps: u64) -> String {
    let rate = format!("rate {bandwidth_bps}bit ceil {bandwidth_bps}bit");
    let burst = (bandwidth_bps / 8 / 100).max(3_200);
    let burst = format!("burst {burst}b cburst {burst}b");
    let net = Ipv4Addr::from(u32::from(host) & !0xff);
    let mut out = format!(
        "qdisc add dev {dev} root handle 1: htb default 1\n\
         class add dev {dev} parent 1: classid 1:1 htb {rate} {burst}\n\
         filter add dev {dev} parent 1: prio 1 handle 2: protocol ip u32 divisor 256\n\
         filter add dev {dev} parent 1: prio 1 protocol ip u32 ht 800:: match ip dst {net}/24 hashkey mask 0x000000ff at 16 link 2:\n"
    );
    for last in 2..2 + POOL as u32 {
        let addr = Ipv4Addr::from(u32::from(net) + last);
        out += &format!(
            "class add dev {dev} parent 1: classid 1:{last:x} htb {rate} {burst}\n\
             filter add dev {dev} parent 1: prio 1 protocol ip u32 ht 2:{last:x}: match ip dst {addr}/32 flowid 1:{last:x}\n"
        );
    }
    out
}

/// Run `tool args` with `input` on stdin (`-batch -`).
fn batch(tool: &str, args: &[&str], input: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new(tool)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {tool}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| format!("cannot feed {tool}: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{tool}: {e}"))?;
    outcome(tool, args, &out)
}

/// `Ok` when the tool succeeded, else one line with the command and its stderr.
fn outcome(tool: &str, args: &[&str], out: &std::process::Output) -> Result<(), String> {
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
    outcome(tool, args, &out)
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

type SocketRequest = (
    Option<Ipv4Addr>,
    tokio::sync::oneshot::Sender<io::Result<OwnedFd>>,
);

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
            for (local, reply) in rx {
                let _ = reply.send(new_tcp_socket(local));
            }
        })
        .map_err(|e| format!("cannot start the namespace helper thread: {e}"))?;
    ready_rx
        .recv()
        .map_err(|_| "the namespace helper thread died".to_string())??;
    Ok(tx)
}

fn new_tcp_socket(local: Option<Ipv4Addr>) -> io::Result<OwnedFd> {
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
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if let Some(addr) = local {
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(addr).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: `sa` is a valid sockaddr_in of the length given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const libc::sockaddr_in as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_get_distinct_private_subnets_and_short_interface_names() {
        let mut hosts = std::collections::HashSet::new();
        for pid in [1u32, 2, 3, 4_194_304] {
            for k in [0, 1, SLOTS - 1] {
                let (host, client) = addresses(pid, k);
                assert_eq!(u32::from(client), u32::from(host) + 1);
                assert_eq!(host.octets()[..2], [10, 213]);
                assert_eq!(host.octets()[3], 1, "{host} must be .1 of its /24");
                assert!(hosts.insert(host), "two slots share {host}");
                // Linux interface names are at most 15 bytes.
                assert!(format!("vkl{}h{k}", pid % 10_000_000).len() <= 15);
            }
        }
    }

    #[test]
    fn shaping_has_a_leaf_and_a_filter_per_pool_address() {
        let text = shaping("vk", Ipv4Addr::new(10, 213, 7, 1), 8_000_000);
        assert_eq!(text.matches("htb rate 8000000bit").count(), POOL + 1);
        assert!(text.contains("ht 2:fe: match ip dst 10.213.7.254/32 flowid 1:fe"));
        assert!(text.contains("ht 2:2: match ip dst 10.213.7.2/32 flowid 1:2"));
        assert!(!text.contains("10.213.7.255"));
    }
}
