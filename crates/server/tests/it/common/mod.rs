//! The server's test harness, from the shared test kit: the in-process server on a
//! temporary root, its deterministic file contents, and the byte-exact HTTP client; and
//! what several suites add to it: waiting for the live origin's counters, and h2c clients.

pub use vodkit_testkit::http::{Client, Resp};
pub use vodkit_testkit::process::run_ok;
pub use vodkit_testkit::server::{logged_config, pattern, rotated_patterns, TestServer};

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use vodkit_server::live::IngestStats;

/// Wait (polling `/stats`) until `done` holds for the live origin's counters (the server
/// counts bytes as its reads complete).
pub fn wait_for(s: &TestServer, done: impl Fn(&IngestStats) -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let st = s.stats().ingest.unwrap();
        if done(&st) {
            return;
        }
        assert!(Instant::now() < until, "never reached: {st:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A runtime for the test's own HTTP/2 clients.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// An h2c client connection (its driver spawned) made by `builder`.
pub async fn h2_connect(
    addr: SocketAddr,
    builder: &h2::client::Builder,
) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = builder.handshake::<_, Bytes>(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}
