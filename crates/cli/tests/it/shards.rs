//! Sharded load: three `vodkit load --shard I/3` processes, each in a network namespace of
//! its own with its own address (veth into a bridge in the server's namespace), start
//! together with `--start-at` against one `vodkit serve`; their merged results equal a
//! single-process run of the same log (sessions, requests and bytes exactly, histograms
//! merged), and `load merge` refuses an incomplete set. On loopback, two shards with the
//! ramps on count what one process counts: the ramps are the whole run's.

use crate::common;

use common::{ip, ok, usage_error};
use std::path::Path;
use std::process::Command;
use vodkit_testkit::{needs, Need};

const SHARDS: usize = 3;

/// A bridge with the server's address and one namespace per shard; removed on drop.
struct Net {
    bridge: String,
    namespaces: Vec<String>,
}

impl Net {
    fn create(tag: &str) -> Option<Net> {
        let net = Net {
            bridge: format!("vk{tag}br"),
            namespaces: (0..SHARDS).map(|i| format!("vk{tag}s{i}")).collect(),
        };
        let b = &net.bridge;
        if !(ip(&format!("link add {b} type bridge"))
            && ip(&format!("addr add 10.231.0.1/24 dev {b}"))
            && ip(&format!("link set {b} up")))
        {
            return None;
        }
        for (i, ns) in net.namespaces.iter().enumerate() {
            let (host, inner) = (format!("vk{tag}h{i}"), format!("vk{tag}n{i}"));
            let addr = format!("10.231.0.{}/24", i + 2);
            let steps = [
                format!("netns add {ns}"),
                format!("link add {host} type veth peer name {inner}"),
                format!("link set {inner} netns {ns}"),
                format!("link set {host} master {b}"),
                format!("link set {host} up"),
                format!("-n {ns} addr add {addr} dev {inner}"),
                format!("-n {ns} link set {inner} up"),
                format!("-n {ns} link set lo up"),
            ];
            if !steps.iter().all(|s| ip(s)) {
                return None;
            }
        }
        Some(net)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            ip(&format!("netns del {ns}"));
        }
        ip(&format!("link del {}", self.bridge));
    }
}

/// What merged shards must share with the single-process run.
const COUNTS: [&str; 6] = [
    "/sessions/started",
    "/sessions/completed",
    "/sessions/failed",
    "/requests/completed",
    "/requests/bytes",
    "/latency_ms/ttlb/count",
];

fn results(dir: &Path, name: &str) -> serde_json::Value {
    common::json_file(&dir.join(name))
}

/// Waits for the shard processes to succeed and the server to stop cleanly, merges `parts`
/// into merged.json and checks it has the [`COUNTS`] of single.json; returns the single
/// and the merged results.
fn merge_like_single(
    p: &Path,
    shards: Vec<std::process::Child>,
    server: common::Daemon,
    parts: &[String],
) -> (serde_json::Value, serde_json::Value) {
    for mut s in shards {
        assert!(s.wait().unwrap().success());
    }
    let (code, _) = server.stop();
    assert_eq!(code, 0);
    let single = results(p, "single.json");
    ok(
        p,
        &format!("load merge {} --out merged.json", parts.join(" ")),
    );
    let merged = results(p, "merged.json");
    for key in COUNTS {
        assert_eq!(
            merged.pointer(key),
            single.pointer(key),
            "{key}: merged shards vs single process"
        );
    }
    (single, merged)
}

#[test]
fn shards_in_namespaces_merge_to_the_single_process_run() {
    if !needs(&[Need::Netns]) {
        return;
    }
    let _netns = vodkit_testkit::turn(vodkit_testkit::turn::NETNS);
    let d = tempfile::tempdir().expect("temp dir");
    let p = d.path();
    ok(
        p,
        "workload new --spec youtube-2011 --scale 0.006 --set catalog.max_duration=8s --set request=64KiB --out w",
    );
    ok(p, "fileset create --workload w --root files");
    let tag = format!("{}", std::process::id() % 100_000);
    let Some(net) = Net::create(&tag) else {
        return vodkit_testkit::skip("cannot create namespaces and a bridge here");
    };
    let mut server = common::daemon(
        p,
        "serve --root files --listen 10.231.0.1:0 --access-log access.log",
    );
    let url = server.wait_for("listening on ");
    let load = format!(
        "load --target {url} --allow-remote --sessions w/sessions.jsonl --rate 20 --max-sessions 30 --no-link \
         --ramp-up-sessions 0 --ramp-down-sessions 0 --ramp-up-requests 0 --ramp-down-requests 0"
    );

    // The reference: one process, all sessions.
    ok(p, &format!("{load} --out single.json"));

    // Three shards, one per namespace, starting their clocks together in 3 s.
    let start = unix_in(3);
    let handles: Vec<_> = net
        .namespaces
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            let args =
                format!("{load} --shard {i}/{SHARDS} --start-at {start} --out shard-{i}.json");
            Command::new("ip")
                .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_vodkit")])
                .args(args.split_whitespace())
                .current_dir(p)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("ip netns exec starts")
        })
        .collect();
    let parts: Vec<String> = (0..SHARDS).map(|i| format!("shard-{i}.json")).collect();
    let (single, merged) = merge_like_single(p, handles, server, &parts);
    assert!(single["sessions"]["completed"].as_u64().unwrap() >= 20);
    assert_eq!(merged["run"]["rate"], single["run"]["rate"]);
    // Each shard ran a third of the log, from its own address.
    for i in 0..SHARDS {
        let r = results(p, &format!("shard-{i}.json"));
        assert_eq!(r["run"]["shard"]["index"], i as u64);
        assert_eq!(r["run"]["sessions_scheduled"], 10);
    }
    let log = std::fs::read_to_string(p.join("access.log")).unwrap();
    for i in 0..SHARDS {
        let addr = format!("10.231.0.{}", i + 2);
        assert!(log.contains(&addr), "no request from shard {i} ({addr})");
    }
    // An incomplete or mixed set is refused, naming what is wrong.
    usage_error(
        p,
        &format!("load merge {} {}", parts[0], parts[2]),
        "missing shard(s): 1/3",
    );
    usage_error(
        p,
        &format!("load merge {} single.json", parts[0]),
        "input 2 is not a shard",
    );
}

/// Unix seconds `ahead` seconds from now (a `--start-at`).
fn unix_in(ahead: u64) -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + ahead
}

#[test]
fn shards_with_ramps_count_what_one_process_counts() {
    let d = tempfile::tempdir().expect("temp dir");
    let p = d.path();
    ok(
        p,
        "workload new --spec youtube-2011 --scale 0.01 --set catalog.max_duration=8s --set request=64KiB --out w",
    );
    ok(p, "fileset create --workload w --root files");
    let mut server = common::daemon(p, "serve --root files --listen 127.0.0.1:0");
    let url = server.wait_for("listening on ");
    let load = format!(
        "load --target {url} --sessions w/sessions.jsonl --rate 20 --max-sessions 60 --no-link --quiet \
         --ramp-up-sessions 2 --ramp-down-sessions 1 --ramp-up-requests 5 --ramp-down-requests 3"
    );
    ok(p, &format!("{load} --out single.json"));
    let start = unix_in(3);
    let shards: Vec<_> = (0..2)
        .map(|i| {
            common::vodkit()
                .args(
                    format!("{load} --shard {i}/2 --start-at {start} --out shard-{i}.json")
                        .split_whitespace(),
                )
                .current_dir(p)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("vodkit load starts")
        })
        .collect();
    let parts = ["shard-0.json".to_string(), "shard-1.json".to_string()];
    let (single, _) = merge_like_single(p, shards, server, &parts);
    // 60 sessions less the first 2 and the last 1, every one completed on loopback.
    assert_eq!(single["sessions"]["started"], 57, "{}", single["sessions"]);
    assert_eq!(single["sessions"]["completed"], 57);
    for i in 0..2 {
        let r = results(p, &format!("shard-{i}.json"));
        let w = &r["run"]["steady_window_s"];
        assert!(
            w[1].as_f64().unwrap() > w[0].as_f64().unwrap(),
            "shard {i} has a steady window: {w}"
        );
    }
}
