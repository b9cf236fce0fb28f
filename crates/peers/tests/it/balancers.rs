//! The balancers of a cluster, for real: every configuration `vodkit cluster` can generate
//! passes `haproxy -c` and `nginx -t` (and a broken one does not, so the check can fail),
//! and both balancers, started in front of two origins, send every request of a title to
//! one origin while different titles spread over both.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use vodkit_peers::cluster::launch::{check, start, Balancer};
use vodkit_peers::cluster::{parse_origins, title_key, BalancerSpec, Route};
use vodkit_peers::free_port;
use vodkit_testkit::{needs, Need};

fn specs() -> Vec<BalancerSpec> {
    let mut out = Vec::new();
    for route in Route::ALL {
        for (origins, agent) in [
            ("10.0.0.1:8080,10.0.0.2:8080,10.0.0.3:8080", None),
            ("127.0.0.1:18080,localhost:18081", Some(9100)),
        ] {
            let mut s = BalancerSpec::new(
                parse_origins(origins).unwrap(),
                route,
                "127.0.0.1:18000".parse().unwrap(),
            );
            s.agent_port = agent;
            // Bounded loads where the recipe has them (HAProxy renders the factor on the
            // hash routes; nginx ignores it).
            s.balance_factor = agent.map(|_| 125);
            out.push(s.clone());
            let live = parse_origins("10.0.1.1:8080,localhost:18090").unwrap();
            s.split_live("/live/", live).unwrap();
            out.push(s);
        }
    }
    out
}

fn check_all(balancer: Balancer, peer: &str) {
    if !needs(&[Need::Peer(peer)]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (k, spec) in specs().into_iter().enumerate() {
        for run_dir in [None, Some(dir.path().join(format!("run{k}")))] {
            if let Some(d) = &run_dir {
                std::fs::create_dir_all(d).unwrap();
            }
            let spec = BalancerSpec {
                run_dir,
                ..spec.clone()
            };
            let conf = dir.path().join(format!("{k}.conf"));
            let text = balancer.render(&spec);
            std::fs::write(&conf, &text).unwrap();
            if let Err(out) = check(balancer, &conf, dir.path()) {
                panic!("{peer} refuses the {} config:\n{text}\n{out}", spec.route);
            }
        }
    }
    let conf = dir.path().join("broken.conf");
    let text = balancer.render(&specs()[0]).replace("server", "servre");
    std::fs::write(&conf, text).unwrap();
    assert!(check(balancer, &conf, dir.path()).is_err());
}

#[test]
fn every_haproxy_config_passes_haproxys_own_check() {
    check_all(Balancer::Haproxy, "haproxy");
}

#[test]
fn every_nginx_config_passes_nginx_t() {
    check_all(Balancer::Nginx, "nginx");
}

/// A listener on a free local port handing every connection to `each`, on a thread of
/// its own; its port.
fn listen(each: impl Fn(TcpStream) + Send + 'static) -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || l.incoming().flatten().for_each(each));
    port
}

/// An origin that answers every request with its own name.
fn named_origin(name: &'static str) -> u16 {
    listen(move |c| {
        std::thread::spawn(move || answer(c, name));
    })
}

fn answer(mut c: TcpStream, name: &str) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Ok(n) = c.read(&mut chunk) else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.drain(..end + 4);
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{name}",
                name.len()
            );
            if c.write_all(reply.as_bytes()).is_err() {
                return;
            }
        }
    }
}

/// The body of GET `path` on 127.0.0.1:`port`.
fn get(port: u16, path: &str) -> String {
    get_as(port, path, None)
}

/// The body of GET `path` on 127.0.0.1:`port`, from viewer `session` (`X-Session-Id`) if given.
fn get_as(port: u16, path: &str, session: Option<&str>) -> String {
    let viewer: Vec<_> = session.map(|v| ("X-Session-Id", v)).into_iter().collect();
    let (status, body) =
        vodkit_testkit::http::get_with(&format!("127.0.0.1:{port}"), path, &viewer);
    assert_eq!(status, 200, "{path}: {body}");
    body
}

fn routes_by_title(balancer: Balancer, peer: &str) {
    if !needs(&[Need::Peer(peer)]) {
        return;
    }
    let (a, b, l) = (named_origin("a"), named_origin("b"), named_origin("live"));
    let origins = parse_origins(&format!("127.0.0.1:{a},127.0.0.1:{b}")).unwrap();
    let port = free_port().unwrap();
    let mut spec = BalancerSpec::new(
        origins,
        Route::Title,
        format!("127.0.0.1:{port}").parse().unwrap(),
    );
    spec.split_live("/live/", parse_origins(&format!("127.0.0.1:{l}")).unwrap())
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _lb = start(balancer, &spec, dir.path(), "/t0/manifest.mpd").unwrap();
    let mut by_title: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for t in 0..24 {
        for path in [
            format!("/t{t}/manifest.mpd"),
            format!("/t{t}/v800/init.mp4"),
            format!("/t{t}/v800/seg-1.m4s"),
            format!("/t{t}/v2400/seg-7.m4s?md5=x"),
            format!("/chunk-512k/sd-{t:06}-0000.dat"),
            format!("/chunk-512k/sd-{t:06}-0001.dat"),
            format!("/full/sd-{t:06}.dat"),
        ] {
            by_title
                .entry(title_key(&path))
                .or_default()
                .insert(get(port, &path));
        }
    }
    for (title, origins) in &by_title {
        assert_eq!(
            origins.len(),
            1,
            "{peer}: title {title} went to {origins:?}"
        );
    }
    let used: BTreeSet<_> = by_title.values().flatten().collect();
    assert_eq!(used.len(), 2, "{peer}: 48 titles all on {used:?}");
}

#[test]
fn haproxy_sends_a_titles_requests_to_one_origin() {
    routes_by_title(Balancer::Haproxy, "haproxy");
}

#[test]
fn nginx_sends_a_titles_requests_to_one_origin() {
    routes_by_title(Balancer::Nginx, "nginx");
}

/// Bounded loads in HAProxy's recipe: a viewer's requests for a title stay on the origin its
/// first request went to even once that origin takes no new viewers (drained through the
/// admin socket), while a new viewer of the same title goes to the other origin.
#[test]
fn haproxy_keeps_a_viewer_on_its_origin_under_bounded_loads() {
    if !needs(&[Need::Peer("haproxy")]) {
        return;
    }
    let (a, b) = (named_origin("a"), named_origin("b"));
    let port = free_port().unwrap();
    let mut spec = BalancerSpec::new(
        parse_origins(&format!("127.0.0.1:{a},127.0.0.1:{b}")).unwrap(),
        Route::Title,
        format!("127.0.0.1:{port}").parse().unwrap(),
    );
    spec.balance_factor = Some(125);
    let dir = tempfile::tempdir().unwrap();
    let _lb = start(Balancer::Haproxy, &spec, dir.path(), "/t0/manifest.mpd").unwrap();
    let first = get_as(port, "/t3/v800/seg-1.m4s", Some("s1"));
    let server = if first == "a" { "o1" } else { "o2" };
    let mut sock =
        std::os::unix::net::UnixStream::connect(dir.path().join("haproxy.sock")).unwrap();
    writeln!(sock, "set server origins/{server} state drain").unwrap();
    let mut reply = String::new();
    sock.read_to_string(&mut reply).unwrap();
    assert!(reply.trim().is_empty(), "admin socket: {reply}");
    for k in 2..6 {
        let path = format!("/t3/v800/seg-{k}.m4s");
        assert_eq!(get_as(port, &path, Some("s1")), first, "s1 moved at {path}");
    }
    assert_ne!(
        get_as(port, "/t3/v800/seg-1.m4s", Some("s2")),
        first,
        "a new viewer went to the drained origin"
    );
}

/// An agent that answers every check with `line`.
fn fixed_agent(line: &'static str) -> u16 {
    listen(move |mut c| {
        let _ = c.write_all(line.as_bytes());
    })
}

/// HAProxy reads the agent's three answers as meant: `up ready` keeps an origin up,
/// `drain` drains it, `down #why` takes it down. Each origin gets its own agent port by
/// listening on its own loopback address (the agent port is the same for all origins).
#[test]
fn haproxy_obeys_the_agents_verdicts() {
    use vodkit_peers::cluster::launch::haproxy_stats;
    if !needs(&[Need::Peer("haproxy")]) {
        return;
    }
    let agent_port = fixed_agent("up ready\n");
    let bind = |ip: [u8; 4], line: &'static str| {
        let l = TcpListener::bind((Ipv4Addr::from(ip), agent_port)).unwrap();
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                let _ = c.write_all(line.as_bytes());
            }
        });
    };
    bind([127, 0, 0, 2], "drain\n");
    bind([127, 0, 0, 3], "down #too slow\n");
    let mut list = Vec::new();
    for (ip, name) in [("127.0.0.1", "a"), ("127.0.0.2", "b"), ("127.0.0.3", "c")] {
        let l = TcpListener::bind((ip.parse::<Ipv4Addr>().unwrap(), 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                std::thread::spawn(move || answer(c, name));
            }
        });
        list.push(format!("{ip}:{port}"));
    }
    let port = free_port().unwrap();
    let mut spec = BalancerSpec::new(
        parse_origins(&list.join(",")).unwrap(),
        Route::Title,
        format!("127.0.0.1:{port}").parse().unwrap(),
    );
    spec.agent_port = Some(agent_port);
    spec.check_interval_s = 0.2;
    let dir = tempfile::tempdir().unwrap();
    let _lb = start(Balancer::Haproxy, &spec, dir.path(), "/t0/manifest.mpd").unwrap();
    let want = [("o1", "UP"), ("o2", "DRAIN"), ("o3", "DOWN")];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let stats = haproxy_stats(&dir.path().join("haproxy.sock")).unwrap();
        let got: Vec<(String, String)> = stats.into_iter().map(|o| (o.name, o.status)).collect();
        let done = want
            .iter()
            .all(|(n, s)| got.iter().any(|(gn, gs)| gn == n && gs.starts_with(s)));
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "agent verdicts not applied: {got:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Only the origin that is up and ready gets new viewers.
    for t in 0..8 {
        assert_eq!(get(port, &format!("/t{t}/v800/seg-1.m4s")), "a");
    }
}
