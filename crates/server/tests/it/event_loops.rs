//! The foreground server's shape (`Server::bind_loops`): event-loop threads accepting from
//! one listening socket. The loops serve without the caller's runtime, the connection
//! limit and the connection ids span the loops, a second server on the port is refused,
//! and shutdown closes the listener and flushes the access log after the last loop has
//! drained.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::{logged_config, pattern, Client};

/// Listening TCP sockets on `port` (state 0A in /proc/net/tcp).
fn listeners_on(port: u16) -> usize {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
    text.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3
                && f[3] == "0A"
                && f[1]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
                    == Some(port)
        })
        .count()
}

/// Names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

#[test]
fn the_loops_share_one_listener_the_limit_and_the_ids() {
    let dir = tempfile::tempdir().unwrap();
    let body = pattern(256 * 1024);
    let (mut config, log) = logged_config(dir.path(), "v.mp4", &body);
    config.max_connections = 4;
    // The caller's runtime is single-threaded, as in `run_until_signal`: the loops must
    // not need it to serve.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let handle = rt
        .block_on(vodkit_server::Server::bind_loops(config, 3))
        .unwrap();
    let addr = handle.local_addr();
    assert_eq!(
        listeners_on(addr.port()),
        1,
        "one listening socket for every loop"
    );
    // A new thread takes its name a moment after it starts (until then it shows its
    // parent's): wait for the names, then check them.
    let named = |names: &[String]| (0..3).all(|i| names.contains(&format!("vodkit-loop-{i}")));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut names = thread_names();
    while !named(&names) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        names = thread_names();
    }
    for i in 0..3 {
        let name = format!("vodkit-loop-{i}");
        assert!(names.contains(&name), "{name} in {names:?}");
    }

    // A second server on the same port is refused, loops or not: the port is not shared.
    let mut again = vodkit_server::ServerConfig::new(dir.path());
    again.listen = addr;
    let err = rt
        .block_on(vodkit_server::Server::bind_loops(again, 2))
        .expect_err("the port is taken");
    assert!(err.to_string().contains("in use"), "{err}");

    // Served while the caller's runtime is not even polled.
    let conns = 40;
    for _ in 0..conns {
        let mut c = Client::connect(addr);
        let r = c.request("GET", "/v.mp4", &[("Connection", "close")]);
        assert_eq!(r.status, 200);
        assert!(r.body == body, "body intact");
    }

    // The closed connections' tasks end just after their last byte: wait for them, so the
    // permits below are all free.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while handle.stats().connections_open > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "connections never ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // Four connections held open fill the limit, whichever loops they landed on; every
    // further one is refused, on every loop.
    let mut held: Vec<Client> = (0..4).map(|_| Client::connect(addr)).collect();
    for c in &mut held {
        assert_eq!(c.get("/v.mp4", &[]).status, 200);
    }
    for _ in 0..12 {
        let mut c = Client::connect(addr);
        let r = c.try_read_response(false).expect("a refusal");
        assert_eq!(r.status, 503, "the limit is the server's, not a loop's");
    }
    drop(held);

    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), handle.shutdown())
            .await
            .expect("shutdown drains every loop")
    });
    assert_eq!(listeners_on(addr.port()), 0, "the listener closed");
    assert!(std::net::TcpStream::connect(addr).is_err());

    // The log was flushed after the last loop finished: one line per response, each
    // connection with an id of its own.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split('\t').collect())
        .collect();
    assert_eq!(lines.len(), conns + 4, "{text}");
    let ids: HashSet<&str> = lines.iter().map(|f| f[3]).collect();
    assert_eq!(ids.len(), conns + 4, "connection ids unique across loops");
}
