//! SIGTERM on the foreground server (`run_until_signal`, what `vodkit serve` runs): the
//! response in flight completes, then the server returns cleanly. Its own test binary,
//! because the signal goes to the whole process.

use std::io::{BufRead, Read};
use std::sync::mpsc;
use std::time::Duration;

use vodkit_testkit::http::Client;
use vodkit_testkit::server::{logged_config, pattern};

#[test]
fn sigterm_drains_then_returns() {
    let dir = tempfile::tempdir().unwrap();
    let big = pattern(48 * 1024 * 1024);
    let (mut config, log) = logged_config(dir.path(), "big.mp4", &big);
    config.min_send_rate = 0;
    config.worker_threads = 2;
    let (tx, rx) = mpsc::channel();
    let server = std::thread::spawn(move || {
        vodkit_server::run_until_signal(config, move |addr, _| tx.send(addr).unwrap())
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("server ready");
    let mut c = Client::connect(addr);
    c.send("GET /big.mp4 HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut status = String::new();
    c.reader.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    // SAFETY: sending a signal to our own process; the server's handler receives it.
    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    let mut rest = Vec::new();
    c.reader.read_to_end(&mut rest).unwrap();
    assert!(
        rest.ends_with(&big[big.len() - 65536..]),
        "the in-flight body completed"
    );
    let result = server.join().unwrap();
    assert!(result.is_ok(), "{result:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    let last: Vec<&str> = text.lines().last().unwrap().split('\t').collect();
    assert_eq!(
        (last[9], last[10], last[13]),
        ("200", "50331648", "done"),
        "{last:?}"
    );
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "listener closed"
    );
}
