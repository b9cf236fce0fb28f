//! A cluster of origins behind a real HAProxy, end to end: three `vodkit serve` origins,
//! each in its own network namespace, behind HAProxy routing by title. Every request of a
//! title (a DASH title's manifest, init and segments; a single-file title's byte ranges)
//! lands on one origin, read back from the origins' access logs; the titles spread over the
//! origins. One origin stopped: once HAProxy's check marks it down, its titles move to the
//! others and no other title moves (consistent hashing).

use crate::common::{self, ip};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};
use vodkit_peers::cluster::launch::{haproxy_stats, start, Balancer};
use vodkit_peers::cluster::{parse_origins, title_key, BalancerSpec, Route};
use vodkit_testkit::{needs, Need};

const ORIGINS: usize = 3;

/// Origin `k`'s namespace, joined to the root namespace by a veth pair; removed on drop.
struct OriginNet {
    ns: String,
    host_if: String,
    addr: Ipv4Addr,
}

impl OriginNet {
    fn create(k: usize) -> OriginNet {
        let tag = std::process::id() % 100_000;
        let net = OriginNet {
            ns: format!("vkcl{tag}-{k}"),
            host_if: format!("vkcl{tag}h{k}"),
            addr: Ipv4Addr::new(10, 233, k as u8, 2),
        };
        let inner = format!("vkcl{tag}n{k}");
        let (ns, host) = (&net.ns, &net.host_if);
        for step in [
            format!("netns add {ns}"),
            format!("link add {host} type veth peer name {inner}"),
            format!("link set {inner} netns {ns}"),
            format!("addr add 10.233.{k}.1/30 dev {host}"),
            format!("link set {host} up"),
            format!("-n {ns} addr add {}/30 dev {inner}", net.addr),
            format!("-n {ns} link set {inner} up"),
            format!("-n {ns} link set lo up"),
        ] {
            assert!(ip(&step), "ip {step}");
        }
        net
    }
}

impl Drop for OriginNet {
    fn drop(&mut self) {
        ip(&format!("netns del {}", self.ns));
        // Deleting the namespace deletes the pair with it; this is for a half-made one.
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Ten DASH-like titles (`/tK/manifest.mpd`, `/tK/v800/init.mp4`, `/tK/v800/seg-N.m4s`)
/// and ten single-file titles (`/full/sd-00000K.dat`).
fn library(root: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    for t in 0..10 {
        for rel in [
            format!("t{t}/manifest.mpd"),
            format!("t{t}/v800/init.mp4"),
            format!("t{t}/v800/seg-1.m4s"),
            format!("t{t}/v800/seg-2.m4s"),
            format!("t{t}/v800/seg-3.m4s"),
            format!("full/sd-{t:06}.dat"),
        ] {
            let p = root.join(&rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, vec![b'v'; 64 << 10]).unwrap();
            paths.push(format!("/{rel}"));
        }
    }
    paths
}

/// GET `path` through the balancer (bytes 0-999 of single-file titles, as a player's range
/// request), tagged with `round` as the session id the origins log; must answer 2xx.
fn get(port: u16, path: &str, round: u32) {
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
    let range = if path.ends_with(".dat") {
        "Range: bytes=0-999\r\n"
    } else {
        ""
    };
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: cluster\r\nX-Session-Id: {round}\r\n{range}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let head = String::from_utf8_lossy(&out[..out.len().min(12)]).into_owned();
    assert!(head.starts_with("HTTP/1.1 2"), "{path}: {head}");
}

/// For round `round`: origin index of each logged request, by title key, once the origins'
/// logs hold `expected` requests of that round.
fn served(logs: &[std::path::PathBuf], round: u32, expected: usize) -> Vec<(String, usize)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut out = Vec::new();
        for (k, log) in logs.iter().enumerate() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                let f: Vec<&str> = line.split('\t').collect();
                if f.get(5) == Some(&round.to_string().as_str()) {
                    out.push((title_key(f[7]), k));
                }
            }
        }
        if out.len() >= expected {
            assert_eq!(out.len(), expected, "requests logged twice: {out:?}");
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "round {round}: {} of {expected} requests in the access logs",
            out.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Each title's one origin; fails when a title's requests went to two.
fn placement(served: &[(String, usize)]) -> BTreeMap<String, usize> {
    let mut by_title: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for (t, k) in served {
        by_title.entry(t.clone()).or_default().insert(*k);
    }
    by_title
        .into_iter()
        .map(|(t, ks)| {
            assert_eq!(ks.len(), 1, "title {t} was served by origins {ks:?}");
            (t, ks.into_iter().next().unwrap())
        })
        .collect()
}

/// HAProxy's status of origin `name`, from its stats socket.
fn status(sock: &Path, name: &str) -> String {
    haproxy_stats(sock)
        .unwrap_or_default()
        .into_iter()
        .find(|o| o.name == name)
        .map(|o| o.status)
        .unwrap_or_default()
}

#[test]
fn haproxy_keeps_each_title_on_one_origin_and_moves_only_a_stopped_origins_titles() {
    if !needs(&[Need::Root, Need::Netns, Need::Peer("haproxy")]) {
        return;
    }
    let _netns = vodkit_testkit::turn(vodkit_testkit::turn::NETNS);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("library");
    let paths = library(&root);
    let nets: Vec<OriginNet> = (0..ORIGINS).map(OriginNet::create).collect();
    let logs: Vec<_> = (0..ORIGINS)
        .map(|k| dir.path().join(format!("origin-{k}.log")))
        .collect();
    let mut origins: Vec<Option<common::Daemon>> = nets
        .iter()
        .zip(&logs)
        .map(|(net, log)| {
            let mut cmd = std::process::Command::new("ip");
            cmd.args([
                "netns",
                "exec",
                &net.ns,
                env!("CARGO_BIN_EXE_vodkit"),
                "serve",
            ])
            .arg("--root")
            .arg(&root)
            .arg("--listen")
            .arg(format!("{}:8080", net.addr))
            .arg("--access-log")
            .arg(log);
            Some(common::Daemon::spawn(cmd))
        })
        .collect();
    for net in &nets {
        let addr = SocketAddr::from((net.addr, 8080));
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(Instant::now() < deadline, "origin {addr} never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let list: Vec<String> = nets.iter().map(|n| format!("{}:8080", n.addr)).collect();
    let port = vodkit_peers::free_port().unwrap();
    let mut spec = BalancerSpec::new(
        parse_origins(&list.join(",")).unwrap(),
        Route::Title,
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
    );
    spec.check_interval_s = 0.25;
    let run = dir.path().join("balancer");
    let _lb = start(Balancer::Haproxy, &spec, &run, "/t0/manifest.mpd").unwrap();

    for p in &paths {
        get(port, p, 1);
    }
    let before = placement(&served(&logs, 1, paths.len()));
    assert_eq!(before.len(), 20, "{before:?}");
    let used: BTreeSet<usize> = before.values().copied().collect();
    assert!(used.len() >= 2, "20 titles all on origin {used:?}");

    // Stop the origin holding the most titles, and wait until HAProxy's check sees it.
    let gone = (0..ORIGINS)
        .max_by_key(|k| before.values().filter(|v| *v == k).count())
        .unwrap();
    let (code, _) = origins[gone].take().unwrap().stop();
    assert_eq!(code, 0, "origin {gone} did not stop cleanly");
    let sock = run.join("haproxy.sock");
    let name = vodkit_peers::cluster::origin_name(gone);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !status(&sock, &name).starts_with("DOWN") {
        assert!(
            Instant::now() < deadline,
            "HAProxy never marked {name} down: {}",
            status(&sock, &name)
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    for p in &paths {
        get(port, p, 2);
    }
    let after = placement(&served(&logs, 2, paths.len()));
    for (title, was) in &before {
        let now = after[title];
        if *was == gone {
            assert_ne!(now, gone, "{title} is still on the stopped origin");
        } else {
            assert_eq!(now, *was, "{title} moved from origin {was} to {now}");
        }
    }
    drop(origins);
}

/// Bad input to `vodkit cluster` and to a cluster `--sut` entry is one line naming the flag
/// and what was expected, exit 2; good input prints a configuration for the route asked.
#[test]
fn cluster_input_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (args, needle) in [
        (
            "cluster haproxy-config --origins ",
            "a value is required for '--origins",
        ),
        (
            "cluster haproxy-config --origins ,",
            "--origins: no origins",
        ),
        (
            "cluster nginx-config --origins a:1 --route random",
            "route `random`: expected title, uri, roundrobin or leastconn",
        ),
        ("cluster nginx-config --origins a:1,a:1", "listed twice"),
        (
            "cluster haproxy-config --origins a:1 --live-origins a:1",
            "--live-origins: origin `a:1` is both a live and an on-demand origin",
        ),
        (
            "cluster haproxy-config --origins a:1 --live-origins b:1 --live-prefix live",
            "--live-origins: live prefix `live`",
        ),
        (
            "cluster haproxy-config --origins a:1 --listen nowhere",
            "--listen: listen address `nowhere`",
        ),
        (
            "cluster agent --probe seg-1.m4s",
            "--probe `seg-1.m4s`: expected a path",
        ),
        ("cluster agent --probe /x --min-speed 0", "--min-speed"),
        (
            "bench --workload w --out r --sut cluster:0:vodkit@haproxy:title",
            "from 1 to 64",
        ),
        (
            "bench --workload w --out r --sut cluster:2:vodkit@traefik:title",
            "balancer `traefik`: expected haproxy or nginx",
        ),
        (
            "bench --workload w --out r --sut cluster:2:vodkit@haproxy:sticky",
            "route `sticky`",
        ),
    ] {
        common::usage_error(d, args, needle);
    }
    let o = common::ok(
        d,
        "cluster haproxy-config --origins 10.0.0.1:80,10.0.0.2:80 --route uri",
    );
    assert!(o.stdout.contains("balance uri path-only"), "{}", o.stdout);
    let o = common::ok(
        d,
        "cluster nginx-config --origins 10.0.0.1:80 --route leastconn --workers 2",
    );
    assert!(o.stdout.contains("least_conn;") && o.stdout.contains("worker_processes 2;"));
}

/// The line `vodkit cluster agent` on `port` answers one check with.
fn ask_agent(port: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut s) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
            let mut line = String::new();
            s.read_to_string(&mut line).unwrap();
            return line;
        }
        assert!(
            Instant::now() < deadline,
            "the agent on {port} never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The agent against a real `vodkit serve`: a segment delivered in time is `up ready`, a
/// probe path the origin does not have is `down` with the reason, a segment that cannot
/// arrive as fast as asked is `drain`, and an origin that is not there is `down`.
#[test]
fn the_agent_judges_a_real_origin() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("library");
    library(&root);
    let origin = vodkit_peers::free_port().unwrap();
    let _serve = common::daemon(
        dir.path(),
        &format!(
            "serve --root {} --listen 127.0.0.1:{origin}",
            root.display()
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect((Ipv4Addr::LOCALHOST, origin)).is_err() {
        assert!(Instant::now() < deadline, "vodkit serve never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let agent = |probe: &str, extra: &str| {
        let port = vodkit_peers::free_port().unwrap();
        let d = common::daemon(
            dir.path(),
            &format!(
                "cluster agent --listen 127.0.0.1:{port} --origin 127.0.0.1:{origin} --probe {probe} {extra}"
            ),
        );
        (d, port)
    };
    let (_a, up) = agent("/t1/v800/seg-2.m4s", "--segment-duration 4s");
    assert_eq!(ask_agent(up), "up ready\n");
    let (_b, missing) = agent("/t1/v800/seg-99.m4s", "");
    assert_eq!(
        ask_agent(missing),
        "down #/t1/v800/seg-99.m4s answered 404\n"
    );
    // 64 KiB must arrive a million times faster than 1 ms of media plays: too slow.
    let (_c, slow) = agent(
        "/full/sd-000001.dat",
        "--probe-bytes 32KiB --segment-duration 1ms --min-speed 1000000",
    );
    assert_eq!(ask_agent(slow), "drain\n");
    let gone = vodkit_peers::free_port().unwrap();
    let port = vodkit_peers::free_port().unwrap();
    let _d = common::daemon(
        dir.path(),
        &format!(
            "cluster agent --listen 127.0.0.1:{port} --origin 127.0.0.1:{gone} --probe /t1/manifest.mpd"
        ),
    );
    assert!(ask_agent(port).starts_with("down #connecting to 127.0.0.1:"));
}
