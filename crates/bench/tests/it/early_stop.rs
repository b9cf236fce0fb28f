//! Early stop end to end: a point against a server that answers every request seconds late
//! ends as soon as its failure under `pace` is certain, and fails as the same point run for
//! its whole window does.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;
use vodkit_workload::model::{ByteRange, Request, Session};

/// How late the server answers: every session of two requests ends far beyond 2 s behind.
const DELAY: Duration = Duration::from_secs(3);

/// A loopback HTTP/1.1 server answering every range request `DELAY` late (keep-alive, a
/// thread per connection); its port.
fn late_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || answer_late(conn));
        }
    });
    port
}

fn answer_late(conn: TcpStream) {
    let Ok(read) = conn.try_clone() else { return };
    let (mut reader, mut conn) = (BufReader::new(read), conn);
    loop {
        let mut range = (0u64, 0u64);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end().to_ascii_lowercase();
            if line.is_empty() {
                break;
            }
            if let Some((a, b)) = line
                .strip_prefix("range: bytes=")
                .and_then(|r| r.split_once('-'))
            {
                range = (a.parse().unwrap_or(0), b.parse().unwrap_or(0));
            }
        }
        std::thread::sleep(DELAY);
        let len = range.1 + 1 - range.0;
        let head = format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Length: {len}\r\nContent-Range: bytes {}-{}/1000000\r\n\r\n",
            range.0, range.1
        );
        if conn.write_all(head.as_bytes()).is_err()
            || conn.write_all(&vec![0u8; len as usize]).is_err()
        {
            return;
        }
    }
}

/// Sessions of two 1,000-byte requests paced 1 s apart (10 s timeouts: none times out).
fn sessions() -> Vec<Session> {
    (0..80)
        .map(|id| {
            let requests = (0..2)
                .map(|k| Request {
                    pacing_s: f64::from(k),
                    ..Request::new(
                        "/v.mp4",
                        Some(ByteRange::closed(k as u64 * 1000, 1000)),
                        10.0,
                    )
                })
                .collect();
            Session::new(id, 1.0, "lan", requests)
        })
        .collect()
}

#[test]
fn an_overloaded_point_ends_once_its_failure_is_certain() {
    // Every point drops the page cache (as root).
    let _cache = vodkit_testkit::turn(vodkit_testkit::turn::PAGE_CACHE);
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("workload");
    vodkit_workload::WorkloadDir::new(&workload)
        .write_sessions(&sessions())
        .unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir_all(&root).unwrap();
    let sut = format!("url:http://127.0.0.1:{}/", late_server());
    let bench = |early_stop: bool, out: &str| {
        let mut req = crate::bench_request(
            &workload,
            &sut,
            "plain",
            "fixed-rates:4".into(),
            10,
            dir.path(),
        );
        req.root = Some(root.clone());
        req.criterion = "pace:2s".parse().unwrap();
        req.early_stop = early_stop;
        req.out = dir.path().join(out);
        let (rep, _) = vodkit_bench::runner::run(&req).unwrap();
        let md = std::fs::read_to_string(req.out.join("report.md")).unwrap();
        let [p] = &rep.servers[0].points[..] else {
            panic!("one point: {:?}", rep.servers[0].points)
        };
        (p.clone(), md)
    };

    let (p, md) = bench(true, "early");
    assert!(!p.passed, "{p:?}");
    let e = p
        .metrics
        .client
        .stopped_early
        .as_ref()
        .expect("stopped early");
    eprintln!("4 sessions/s, answered {DELAY:?} late: {}", e.describe());
    assert!(e.why.contains("more than 2 s behind"), "{e:?}");
    assert!(
        md.contains("points ended once their failure was certain"),
        "{md}"
    );

    // The whole window fails too.
    let (whole, _) = bench(false, "whole");
    assert!(!whole.passed, "{whole:?}");
    assert!(whole.metrics.client.stopped_early.is_none());
    assert!(
        whole.metrics.client.lag_p95_s.is_some_and(|l| l > 2.0),
        "{whole:?}"
    );
}
