//! Kernel link shaping (`LinkMode::Kernel`): a class limited to 8 Mbit/s downloads through
//! htb in its own network namespace, two of its sessions at once each at that rate (±15%)
//! with the one-way delay still added in user space, an unlimited class is not slowed,
//! and the namespaces are gone when the run ends. Needs root and iproute2; without them
//! the test prints why and fails under `CI`.

use crate::common;

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::FromRawFd;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vodkit_load::netns::{addresses, next_slot, KernelLinks, NETNS_PREFIX};
use vodkit_load::{CancellationToken, LinkMode, LoadConfig, Target};
use vodkit_workload::model::{Request, Session};

const BODY: usize = 2_000_000;
const LIMIT_BPS: u64 = 8_000_000;

/// A listener on `addr` that may not exist yet (`IP_FREEBIND`).
fn bind_freely(addr: SocketAddrV4) -> TcpListener {
    // SAFETY: plain socket calls on a descriptor we own; results are checked.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let one: libc::c_int = 1;
        let r = libc::setsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_FREEBIND,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as u32,
        );
        assert_eq!(r, 0, "IP_FREEBIND");
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*addr.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let r = libc::bind(
            fd,
            &sa as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        );
        assert_eq!(r, 0, "bind {addr}: {}", std::io::Error::last_os_error());
        assert_eq!(libc::listen(fd, 64), 0);
        TcpListener::from_raw_fd(fd)
    }
}

/// Answer every request on `listener` with a `BODY`-byte 200; note each peer address.
fn serve(listener: TcpListener, peers: Arc<Mutex<Vec<Ipv4Addr>>>) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            if let Ok(std::net::SocketAddr::V4(a)) = stream.peer_addr() {
                peers.lock().unwrap().push(*a.ip());
            }
            std::thread::spawn(move || {
                while common::read_head(&mut stream) {
                    let mut reply =
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n").into_bytes();
                    reply.resize(reply.len() + BODY, b'v');
                    if stream.write_all(&reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
}

fn session(id: u64, class: &str) -> Session {
    Session::new(id, 0.001, class, vec![Request::new("/f", None, 20.0)])
}

fn namespaces_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(&format!("{NETNS_PREFIX}{pid}-")))
        .map(String::from)
        .collect()
}

/// Whether the test cannot run here (it said why); under `CI` a missing facility fails.
fn cannot_run() -> bool {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Netns]) {
        return true;
    }
    let Some(why) = KernelLinks::unavailable() else {
        return false;
    };
    vodkit_testkit::skip(format_args!("kernel shaping cannot run: {why}"));
    true
}

fn slow_config(port: u16) -> LoadConfig {
    let target = Target::parse(&format!("http://127.0.0.1:{port}"), false).unwrap();
    let sessions = vec![session(1, "slow"), session(2, "slow"), session(3, "fast")];
    let mut config = LoadConfig::new(target, sessions, 100.0);
    config.link_mode = LinkMode::Kernel;
    common::link(&mut config, "slow", LIMIT_BPS, Duration::from_millis(50));
    config
}

#[test]
fn server_on_loopback_only_is_refused_in_one_line_and_namespaces_are_removed() {
    if cannot_run() {
        return;
    }
    // The tests take turns (with every test making namespaces): the shaped test must know
    // its slot before the run starts.
    let _turn = vodkit_testkit::turn(vodkit_testkit::turn::NETNS);
    let loopback = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = loopback.local_addr().unwrap().port();
    serve(loopback, Arc::new(Mutex::new(Vec::new())));
    let e = vodkit_load::run(slow_config(port), CancellationToken::new())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not reachable") && e.contains(&format!("0.0.0.0:{port}")),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    assert_eq!(namespaces_of(std::process::id()), Vec::<String>::new());
}

#[test]
fn kernel_shaped_class_downloads_at_its_rate_and_namespaces_are_removed() {
    if cannot_run() {
        return;
    }
    // The tests take turns (with every test making namespaces): the shaped test must know
    // its slot before the run starts.
    let _turn = vodkit_testkit::turn(vodkit_testkit::turn::NETNS);
    let pid = std::process::id();
    let loopback = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = loopback.local_addr().unwrap().port();
    // The class "slow" is the only limited class: it takes the next slot.
    let slot = next_slot();
    let (host_addr, first_client) = addresses(pid, slot);
    let veth = bind_freely(SocketAddrV4::new(host_addr, port));
    let peers = Arc::new(Mutex::new(Vec::new()));
    serve(loopback, peers.clone());
    serve(veth, peers.clone());

    let run =
        vodkit_load::run(slow_config(port), CancellationToken::new()).expect("the run starts");
    assert_eq!(run.results.run.link_emulation, "kernel");

    let by_session = |id: u64| {
        let s = run.sessions.iter().find(|s| s.session.id == id).unwrap();
        let class = &s.session.class;
        let r = &s.requests[0];
        assert!(r.completed(), "{class}: {:?}", r.failure);
        assert_eq!(r.bytes, BODY as u64);
        // Both one-way delays are in the time to first byte and in the time to last
        // byte, so their difference is the transfer alone.
        let ttfb = r.ttfb.unwrap();
        (r.bytes as f64 * 8.0 / (r.ttlb.unwrap() - ttfb), ttfb)
    };
    let (fast, fast_ttfb) = by_session(3);
    assert!(fast_ttfb < 0.1, "unlimited class delayed: {fast_ttfb} s");
    // Two sessions of the class download at the same time, each on its own link.
    for id in [1, 2] {
        let (slow, slow_ttfb) = by_session(id);
        // netem is absent: the class's delay must still be emulated in user space.
        assert!(
            slow_ttfb >= 0.1,
            "two 50 ms one-way delays missing from the first byte: {slow_ttfb} s"
        );
        eprintln!(
            "slow session {id}: {:.3} Mbit/s (limit {:.3}); unlimited session: {:.1} Mbit/s",
            slow / 1e6,
            LIMIT_BPS as f64 / 1e6,
            fast / 1e6
        );
        let ratio = slow / LIMIT_BPS as f64;
        assert!(
            (0.85..=1.15).contains(&ratio),
            "shaped session {id} ran at {:.3} Mbit/s, {ratio:.3} x the 8 Mbit/s limit",
            slow / 1e6
        );
    }
    let starts: Vec<f64> = run
        .sessions
        .iter()
        .filter(|s| s.session.class == "slow")
        .map(|s| s.requests[0].started)
        .collect();
    assert!(
        (starts[0] - starts[1]).abs() < 0.5,
        "the shaped sessions did not overlap: {starts:?}"
    );
    assert!(
        fast > 2.0 * LIMIT_BPS as f64,
        "the unlimited class was slowed too: {:.3} Mbit/s",
        fast / 1e6
    );
    let peers = peers.lock().unwrap().clone();
    // From the namespace: the reachability probe (first pool address), then one
    // connection per session, each from its own leased address.
    let from = |a: Ipv4Addr| peers.iter().filter(|&&p| p == a).count();
    let second = Ipv4Addr::from(u32::from(first_client) + 1);
    assert_eq!(from(first_client), 2, "peers: {peers:?}");
    assert_eq!(from(second), 1, "peers: {peers:?}");
    assert_eq!(from(Ipv4Addr::LOCALHOST), 1, "peers: {peers:?}");

    assert_eq!(
        namespaces_of(pid),
        Vec::<String>::new(),
        "namespaces left behind"
    );
    let veth = format!("vkl{}h{slot}", pid % 10_000_000);
    let shown = Command::new("ip")
        .args(["link", "show", &veth])
        .output()
        .unwrap();
    assert!(!shown.status.success(), "veth {veth} left behind");
}
