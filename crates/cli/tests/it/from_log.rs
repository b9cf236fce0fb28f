//! Production logs round-trip: a real nginx logs `vodkit load` traffic in `combined` format
//! (plus `$request_time` and `"$http_range"`, the documented additions); `vodkit workload
//! from-log` rebuilds sessions from that log; replaying them against nginx again gives a
//! second log whose chains (`vodkit trace chains`) match the first's: the same number of
//! chains, bytes and requests, chain by chain in size.

use crate::common;

use common::ok;
use std::path::Path;
use vodkit_peers::{PeerSetup, ServerProcess};

const COMBINED_RANGE: &str = "$remote_addr - $remote_user [$time_local] \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" $request_time \"$http_range\"";

fn nginx(root: &Path, run: &Path) -> Option<ServerProcess> {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Peer("nginx")]) {
        return None;
    }
    std::fs::create_dir_all(run).unwrap();
    let probe = first_file(root);
    let setup = PeerSetup {
        log_format: Some(COMBINED_RANGE),
        ..PeerSetup::new(root, run, &probe, 1)
    };
    Some(vodkit_peers::start_nginx(&setup, &vodkit_peers::no_wrap).expect("nginx starts"))
}

fn first_file(root: &Path) -> String {
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for e in entries {
            if e.is_dir() {
                stack.push(e);
            } else if !e.file_name().unwrap().to_string_lossy().starts_with('.') {
                return format!("/{}", e.strip_prefix(root).unwrap().display());
            }
        }
    }
    panic!("no file under {}", root.display())
}

/// The lines of `log` that `vodkit load` caused (not the readiness probe), into `out`.
fn load_lines(log: &Path, out: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(log).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| l.contains("\"vodkit-load/"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(out, kept).unwrap();
    out.to_path_buf()
}

/// (chains, requests, bytes, sorted chain sizes) of a `chains.csv`.
fn chains(path: &Path) -> (usize, u64, u64, Vec<u64>) {
    let mut r = csv::Reader::from_path(path).unwrap();
    let h = r.headers().unwrap().clone();
    let col = |n: &str| h.iter().position(|c| c == n).unwrap();
    let (bytes, requests) = (col("bytes"), col("requests"));
    let mut sizes = Vec::new();
    let mut reqs = 0;
    for rec in r.records() {
        let rec = rec.unwrap();
        sizes.push(rec[bytes].parse::<u64>().unwrap());
        reqs += rec[requests].parse::<u64>().unwrap();
    }
    sizes.sort_unstable();
    (sizes.len(), reqs, sizes.iter().sum(), sizes)
}

#[test]
fn a_combined_log_from_nginx_round_trips_through_from_log() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    ok(
        p,
        "workload new --spec youtube-2011 --scale 0.001 --set catalog.max_duration=8s --set request=64KiB --out w",
    );
    ok(p, "fileset create --workload w --root files");
    let root = p.join("files");

    // Original traffic, logged by nginx in combined format.
    let Some(first) = nginx(&root, &p.join("run1")) else {
        return;
    };
    let url = format!("http://127.0.0.1:{}", first.port);
    ok(
        p,
        &format!(
            "load --target {url} --sessions w/sessions.jsonl --rate 20 --no-link --out r1.json"
        ),
    );
    drop(first); // stops nginx, which flushes its log
    let log1 = load_lines(&p.join("run1/access.log"), &p.join("log1"));
    ok(
        p,
        &format!(
            "trace chains --log {} --format combined --out t1",
            log1.display()
        ),
    );

    // Sessions rebuilt from that log, replayed against nginx again.
    let o = ok(
        p,
        &format!(
            "workload from-log --log {} --format combined --keep-identities --out w2",
            log1.display()
        ),
    );
    assert!(o.stdout.contains("identities kept"), "{o:?}");
    let Some(second) = nginx(&root, &p.join("run2")) else {
        return;
    };
    let url = format!("http://127.0.0.1:{}", second.port);
    ok(
        p,
        &format!("load --target {url} --sessions w2/sessions.jsonl --rate 20 --out r2.json"),
    );
    drop(second);
    let log2 = load_lines(&p.join("run2/access.log"), &p.join("log2"));
    ok(
        p,
        &format!(
            "trace chains --log {} --format combined --out t2",
            log2.display()
        ),
    );

    let (n1, req1, bytes1, sizes1) = chains(&p.join("t1/chains.csv"));
    let (n2, req2, bytes2, sizes2) = chains(&p.join("t2/chains.csv"));
    assert!(n1 >= 3, "the original run made {n1} chains");
    assert!(
        req1 > n1 as u64,
        "chains of several paced requests ({req1} requests, {n1} chains)"
    );
    assert_eq!(req2, req1, "requests");
    assert_eq!(bytes2, bytes1, "bytes");
    assert_eq!(n2, n1, "chains");
    assert_eq!(sizes2, sizes1, "chain sizes");

    // Without --keep-identities the paths are hashed and the summary says so.
    let o = ok(
        p,
        &format!(
            "workload from-log --log {} --format combined --key k --out w3",
            log1.display()
        ),
    );
    assert!(o.stdout.contains("identities hashed (key given)"), "{o:?}");
    let sessions = std::fs::read_to_string(p.join("w3/sessions.jsonl")).unwrap();
    assert!(sessions.contains("\"/f/"), "hashed paths");
    // A stand-in file set of the same sizes can be built from the rebuilt catalog.
    ok(p, "fileset create --workload w3 --root files3");
    assert!(p.join("files3/f").is_dir());
}
