//! End-to-end tests of the `vodkit` binary, one per subcommand: the happy path on small
//! inputs (seconds each), a usage error (exit 2, one line on stderr) and a runtime failure
//! (exit 1), through the real argument parsing and the self-spawned children (`serve`
//! under `bench`, `prefetchd` under `preload`, the `hdd daemon`).

use crate::common;

use common::*;
use std::path::Path;

/// Each `(line, needle)` is a usage error naming `needle`.
fn usage_errors(dir: &Path, cases: &[(&str, &str)]) {
    for (line, needle) in cases {
        usage_error(dir, *line, needle);
    }
}

/// Each `(line, needle)` is a runtime failure naming `needle`.
fn runtime_errors(dir: &Path, cases: &[(&str, &str)]) {
    for (line, needle) in cases {
        runtime_error(dir, *line, needle);
    }
}

/// A directory that cannot be made (under `/proc`).
const NO_DIR: &str = "/proc/no-such-dir";

/// `line`, with `{}` standing for [`NO_DIR`], is a runtime failure naming that directory.
fn unwritable(dir: &Path, line: &str) {
    runtime_error(dir, &*line.replace("{}", NO_DIR), NO_DIR);
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// A temporary directory holding [`small_workload`].
fn workload_dir() -> tempfile::TempDir {
    let d = tmp();
    small_workload(d.path());
    d
}

fn exists(dir: &Path, files: &str) {
    for f in files.split_whitespace() {
        assert!(dir.join(f).exists(), "{} missing", dir.join(f).display());
    }
}

#[test]
fn no_subcommand_prints_help_and_exits_2() {
    let d = tmp();
    let o = run_in(d.path(), &[]);
    assert_eq!(o.code, 2, "{o:?}");
    assert!(o.stderr.contains("Usage: vodkit <COMMAND>"), "{o:?}");
    let v = ok(d.path(), &["--version"]);
    assert!(v.stdout.starts_with("vodkit "), "{v:?}");
    usage_error(d.path(), &["frobnicate"], "frobnicate");
}

#[test]
fn workload() {
    let d = workload_dir();
    let p = d.path();
    exists(
        p,
        "w/catalog.json w/sessions.jsonl w/workload.json w/summary.json",
    );
    let list = ok(p, "workload spec list");
    assert!(list.stdout.lines().any(|l| l == "youtube-2011"), "{list:?}");
    let show = ok(p, "workload spec show youtube-2011");
    assert!(show.stdout.contains("[catalog]"), "{show:?}");
    ok(p, "workload export --format thesis --in w --out w.log");
    ok(p, "workload import --out w2 w.log");
    let n = |f: &str| std::fs::read_to_string(p.join(f)).unwrap().lines().count();
    assert_eq!(n("w2/sessions.jsonl"), n("w/sessions.jsonl"));
    ok(
        p,
        "workload synth-log --scale 0.01 --set sessions=20 --out syn",
    );
    exists(p, "syn/log.csv syn/files.csv syn/truth/chains.csv");

    usage_errors(
        p,
        &[
            ("workload new --spec no-such-spec --out x", "no-such-spec"),
            ("workload export --format nope --in w --out x", "--format"),
        ],
    );
    unwritable(p, "workload new --spec youtube-2011 --out {}/w");
}

#[test]
fn fileset() {
    let d = workload_dir();
    let p = d.path();
    let v = ok(p, "fileset verify --workload w --root files");
    assert!(!v.stdout.is_empty(), "{v:?}");
    let pl = ok(p, "fileset placement --workload w --root files");
    assert!(pl.stdout.contains("titles"), "{pl:?}");

    usage_error(p, "fileset verify --workload w --root absent", "absent");
    usage_error(p, "fileset create --workload w", "--root");
    unwritable(p, "fileset create --workload w --root {}");
}

#[test]
fn serve_load_trace_and_simulate() {
    let d = workload_dir();
    let p = d.path();
    let mut server = common::daemon(
        p,
        "serve --root files --listen 127.0.0.1:0 --admin 127.0.0.1:0 --access-log access.log --prefetch fixed:1MiB",
    );
    let url = server.wait_for("listening on ");
    let admin = server.wait_for("admin on http://");
    let load = format!("load --target {url} --sessions w/sessions.jsonl");
    let o = ok(
        p,
        &format!("{load} --rate 50 --max-sessions 3 --verify --out r.json"),
    );
    assert!(o.stdout.contains("qos"), "{o:?}");
    let (status, stats) = http_get(&admin, "/stats");
    assert_eq!(status, 200);
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert!(stats["requests_total"].as_u64().unwrap() >= 3, "{stats}");
    assert_eq!(stats["prefetch"]["policy"]["policy"], "fixed:1048576");
    let (code, _) = server.stop();
    assert_eq!(code, 0, "serve exits cleanly on SIGTERM");

    let results = json_file(&p.join("r.json"));
    assert!(results.is_object());
    let merged = ok(p, "load merge r.json --json");
    assert!(merged.stdout.contains("\"run\""), "{merged:?}");

    for sub in ["chains", "phases", "report"] {
        let catalog = "--catalog w/catalog.json";
        ok(
            p,
            &format!("trace {sub} --log access.log {catalog} --out t-{sub}"),
        );
    }
    exists(
        p,
        "t-chains/chains.csv t-report/report.html t-report/sessions.csv",
    );
    ok(
        p,
        "trace chains --log access.log --requests --output-format parquet --rows-per-file 2 --out t-pq",
    );
    exists(p, "t-pq/chains-00000.parquet t-pq/requests-00001.parquet");

    ok(
        p,
        "workload synth-log --scale 0.01 --set sessions=20 --out syn",
    );
    ok(
        p,
        "simulate --chains syn/truth/chains.csv --files syn/files.csv --out sim",
    );
    exists(p, "sim/sim.json sim/index.html");

    let no_sessions = format!("load --target {url} --sessions absent.jsonl");
    usage_errors(
        p,
        &[
            ("serve --root absent", "--root absent"),
            ("serve --root files --prefetch fixed:lots", "--prefetch"),
            (
                "serve --root files --cors example.com",
                "--cors: `example.com`",
            ),
            (&no_sessions, "absent.jsonl"),
            ("trace chains --log absent.log --out t", "absent.log"),
            (
                "trace chains --log access.log --rows-per-file 10 --out t",
                "--rows-per-file needs --output-format parquet",
            ),
            (
                "simulate --chains absent.csv --files syn/files.csv --out s",
                "absent.csv",
            ),
            (
                "simulate --validate --validate-policy auto --out v",
                "fixed:SIZE",
            ),
        ],
    );
    let no_dir = NO_DIR;
    let load_to_no_dir = format!("{load} --max-sessions 1 --out {no_dir}/r.json");
    let simulate_to_no_dir =
        format!("simulate --chains syn/truth/chains.csv --files syn/files.csv --out {no_dir}");
    runtime_errors(
        p,
        &[
            ("serve --root files --listen 192.0.2.1:80", "192.0.2.1:80"),
            (&load_to_no_dir, no_dir),
            (
                &format!("trace chains --log access.log --out {no_dir}"),
                no_dir,
            ),
            (&simulate_to_no_dir, no_dir),
        ],
    );
}

#[test]
fn trace_reads_a_file_table_past_its_share_of_memory() {
    // 600 listed files, each read once, four to a session: within 64 KiB the file table's
    // eighth holds a few hundred of them, so it goes to disk while files.csv is read, before
    // the output directory exists, and every output must still be the default's.
    let d = tmp();
    let p = d.path();
    let mut files = String::from("file,bitrate_kbps,media,size_bytes,drive\n");
    let mut log = String::from(
        "ts_end,service_time_s,session,file,offset,length,open_ended,bytes_sent,device_type\n",
    );
    for i in 0..600u32 {
        let media = ["video", "audio"][(i % 2) as usize];
        files += &format!(
            "nf/t{i:05}/v.mp4,{},{media},{},d{}\n",
            235 + i,
            4096 + i,
            i % 3
        );
        let t = 1000.0 + f64::from(i) * 0.5;
        log += &format!("{t:.3},0.01,s{},nf/t{i:05}/v.mp4,0,4096,0,4096,tv\n", i / 4);
    }
    std::fs::write(p.join("files.csv"), files).unwrap();
    std::fs::write(p.join("log.csv"), log).unwrap();
    for (memory, out) in [("", "t-default"), ("--memory 64KiB", "t-small")] {
        ok(
            p,
            &format!("trace report --log log.csv --files files.csv {memory} --out {out}"),
        );
    }
    for f in ["chains.csv", "phases.csv", "sessions.csv", "chains.json"] {
        let a = std::fs::read(p.join("t-default").join(f)).unwrap();
        let b = std::fs::read(p.join("t-small").join(f)).unwrap();
        assert!(a == b, "{f} differs within 64 KiB");
    }
    let chains = std::fs::read_to_string(p.join("t-small/chains.csv")).unwrap();
    assert!(
        chains.contains("nf/t00599/v.mp4") && chains.contains(",d2"),
        "{chains}"
    );
}

#[test]
fn serve_checks_and_load_makes_signed_urls() {
    let d = workload_dir();
    let p = d.path();
    std::fs::write(p.join("url.key"), "s3cr3t\n").unwrap();
    std::fs::write(p.join("empty.key"), "\n").unwrap();
    let mut server = common::daemon(
        p,
        "serve --root files --listen 127.0.0.1:0 --secure-link url.key",
    );
    let url = server.wait_for("listening on ");
    let load = format!(
        "load --target {url} --sessions w/sessions.jsonl --rate 50 --max-sessions 3 --json"
    );
    let failed = |o: &Out| -> u64 {
        let r: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        r["sessions"]["failed"].as_u64().unwrap()
    };
    for form in ["md5", "hmac"] {
        let o = ok(
            p,
            &format!("{load} --sign-key url.key --sign-ttl 5m --sign-form {form}"),
        );
        assert_eq!(failed(&o), 0, "{form}: {o:?}");
    }
    let o = ok(p, &load);
    assert_eq!(failed(&o), 3, "unsigned: {o:?}");
    server.stop();
    usage_errors(
        p,
        &[
            ("serve --root files --secure-link empty.key", "empty.key"),
            ("serve --root files --secure-link absent.key", "absent.key"),
            (
                "serve --root files --secure-link url.key --secure-link-prefix x",
                "--secure-link-prefix",
            ),
            (&format!("{load} --sign-key empty.key"), "empty.key"),
            (
                &format!("{load} --sign-key url.key --sign-form sha1"),
                "sha1",
            ),
        ],
    );
}

#[test]
fn bench_runs_a_child_vodkit_serve() {
    let d = workload_dir();
    let p = d.path();
    ok(
        p,
        "bench --workload w --root files --sut vodkit:asap:fixed:1MiB,nginx --search fixed-rates:5 --point-duration 3s --out b --quiet",
    );
    exists(p, "b/bench.json b/report.md b/report.html");
    let bench = std::fs::read_to_string(p.join("b/bench.json")).unwrap();
    assert!(bench.contains("vodkit:asap:fixed:1MiB"), "{bench}");
    // A relative --out and --root reach nginx as absolute paths (nginx resolves relative
    // ones against its own prefix): it ran, it did not fail to start.
    let report: serde_json::Value = serde_json::from_str(&bench).unwrap();
    let nginx = report["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sut"] == "nginx")
        .expect("nginx in the report");
    if vodkit_peers_present() {
        assert_eq!(nginx["status"], "measured", "{nginx}");
    }

    usage_errors(
        p,
        &[
            ("bench --workload w --sut iis --out b2", "iis"),
            (
                "bench --workload w --sut vodkit:asap:fixed:lots --out b2",
                "lots",
            ),
            ("bench --workload w --testbed hdd:floppy --out b2", "floppy"),
            ("bench --workload w --memory lots --out b2", "--memory"),
            (
                "bench --workload w --criterion lenient --out b2",
                "--criterion",
            ),
        ],
    );
    unwritable(
        p,
        "bench --workload w --root files --sut vodkit --search fixed-rates:5 --out {}",
    );
}

#[test]
fn demo_checks_its_input_first() {
    // The demo itself runs for minutes (docs/bench.md); here only its argument handling.
    let d = tmp();
    usage_error(d.path(), &["demo", "--bogus"], "--bogus");
    unwritable(d.path(), "demo --out {} --quiet");
}

#[test]
fn preload_and_prefetchd() {
    let d = workload_dir();
    let p = d.path();
    let lib = ok(p, &["preload", "--print-path"]);
    assert!(Path::new(lib.stdout.trim()).is_file(), "{lib:?}");

    // `preload` starts its own daemon for the program and reports its counters.
    let file = walk_first_file(&p.join("files"));
    let sock = p.join("pd.sock");
    let o = ok(
        p,
        &[
            "preload",
            "--socket",
            sock.to_str().unwrap(),
            "--metrics",
            "pm.json",
            "--",
            "cat",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(
        o.stdout.len() as u64,
        std::fs::metadata(&file).unwrap().len()
    );
    let metrics = json_file(&p.join("pm.json"));
    assert_eq!(metrics["policy"], "fixed:2097152", "{metrics}");

    let sock2 = p.join("pd2.sock");
    let mut daemon = common::daemon(
        p,
        &format!(
            "prefetchd --socket {} --admin 127.0.0.1:0 --prefetch fixed:4MiB",
            sock2.display()
        ),
    );
    let admin = daemon.wait_for("admin on http://");
    let (status, body) = http_get(&admin, "/stats");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("fixed:4194304"), "{body}");
    let (code, _) = daemon.stop();
    assert_eq!(code, 0, "prefetchd exits cleanly on SIGTERM");

    usage_errors(
        p,
        &[
            ("prefetchd --mode nope", "--mode"),
            ("prefetchd --prefetch fixed:lots", "--prefetch"),
            ("preload --mode nope -- true", "--mode"),
            ("preload --admission auto --root . -- true", "--admission"),
            ("prefetchd --admission auto --root .", "--admin"),
            ("prefetchd --admission auto --admin 127.0.0.1:0", "--root"),
        ],
    );
    let no_program = format!(
        "preload --socket {} -- /nonexistent/program",
        p.join("p3.sock").display()
    );
    runtime_errors(
        p,
        &[
            (&no_program, "/nonexistent/program"),
            (&format!("prefetchd --socket {NO_DIR}/x.sock"), NO_DIR),
        ],
    );
}

fn walk_first_file(dir: &Path) -> std::path::PathBuf {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for e in entries {
        if e.is_file() {
            return e;
        }
        if e.is_dir() {
            return walk_first_file(&e);
        }
    }
    panic!("no file under {}", dir.display())
}

#[test]
fn sys_and_run() {
    let d = tmp();
    let p = d.path();
    let o = ok(p, "sys watch --interval 100ms --count 2 --json");
    let lines: Vec<serde_json::Value> = o
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{o:?}");
    assert!(lines[0]["memory"]["total"].as_u64().unwrap() > 0);
    usage_errors(
        p,
        &[
            ("sys watch --interval 0s", "--interval"),
            ("run --memory lots -- true", "--memory"),
        ],
    );

    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Root]) {
        return;
    }
    let o = ok(p, "run --memory 256MiB --report run.json -- true");
    assert!(o.stderr.contains("limit 256 MiB"), "{o:?}");
    let report = json_file(&p.join("run.json"));
    assert_eq!(report["limit_bytes"], 256 << 20);
    runtime_error(
        p,
        "run --memory 256MiB -- /nonexistent/program",
        "/nonexistent/program",
    );
}

#[test]
fn hdd() {
    let d = tmp();
    let p = d.path();
    let state = p.join("state");
    let state = state.to_str().unwrap();
    let presets = ok(p, &["hdd", "presets"]);
    assert!(presets.stdout.contains("wd-red"), "{presets:?}");
    let status = ok(p, &["hdd", "status", "--state-dir", state]);
    assert!(
        status.stdout.contains("no emulated disks are up"),
        "{status:?}"
    );

    let bad_range = format!("hdd tune --mount m --state-dir {state} --eio-sectors 5-1");
    let not_up = format!("hdd bench --mount m --state-dir {state}");
    usage_errors(
        p,
        &[
            (
                "hdd up --preset floppy --size 64MiB --image x --mount m",
                "floppy",
            ),
            (&bad_range, "--eio-sectors"),
            (&not_up, "no emulated disk is up"),
        ],
    );

    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Fuse]) {
        return;
    }
    let _disk = vodkit_testkit::turn(vodkit_testkit::turn::DISK);
    // The image goes to /var/tmp: loop devices need a file system that supports direct I/O.
    let img = tempfile::Builder::new()
        .prefix("vodkit-cli-hdd")
        .tempdir_in("/var/tmp")
        .unwrap();
    let image = img.path().join("hdd.img");
    let mount = p.join("mnt");
    let (image, mount) = (image.to_str().unwrap(), mount.to_str().unwrap());
    let up_at = |image: &str| {
        format!("hdd up --size 64MiB --image {image} --mount {mount} --state-dir {state}")
    };
    let up = ok(p, &up_at(image));
    assert!(up.stdout.contains("wd-red"), "{up:?}");
    // The fault commands travel as Control values through the control file.
    let tune = run_in(
        p,
        &format!("hdd tune --mount {mount} --state-dir {state} --eio-sectors 100-200"),
    );
    let st = ok(p, &["hdd", "status", "--state-dir", state, "--json"]);
    let down = run_in(p, &["hdd", "down", "--mount", mount, "--state-dir", state]);
    assert_eq!(tune.code, 0, "{tune:?}");
    assert_eq!(down.code, 0, "{down:?}");
    assert!(tune.stdout.contains("eio-range 100 200"), "{tune:?}");
    let st: serde_json::Value = serde_json::from_str(&st.stdout).unwrap();
    assert_eq!(
        st[0]["counters"]["faults"]["ranges"],
        serde_json::json!([[100, 200]]),
        "{st}"
    );
    runtime_error(p, &up_at(&format!("{NO_DIR}/hdd.img")), NO_DIR);
}

/// Whether nginx is installed (the bench reports it skipped otherwise; CI has it).
fn vodkit_peers_present() -> bool {
    vodkit_testkit::needs(&[vodkit_testkit::Need::Peer("nginx")])
}

#[test]
fn bench_refuses_a_bad_fast_forward_naming_the_flag() {
    for bad in ["fast", "0.5", "8,fill=-1"] {
        let o = common::vodkit()
            .args([
                "bench",
                "--workload",
                "w",
                "--out",
                "o",
                "--fast-forward",
                bad,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--fast-forward"), "{bad}: {err}");
    }
}

/// One request on a fresh connection to `url` (`http://ADDR`); the raw answer.
fn exchange(url: &str, raw: &str) -> String {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let mut t = std::net::TcpStream::connect(addr).unwrap();
    t.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    t.write_all(raw.as_bytes()).unwrap();
    let mut got = Vec::new();
    let _ = t.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn serve_takes_its_live_limits_and_playlist_lifetime_from_flags() {
    let d = tmp();
    let p = d.path();
    std::fs::create_dir(p.join("files")).unwrap();
    let mut server = common::daemon(
        p,
        "serve --root files --listen 127.0.0.1:0 --ingest /live/ --ingest-token t0k \
         --ingest-max-streams 1 --ingest-max-objects 2 --live-playlist-max-age 4s \
         --ingest-body-timeout 1s",
    );
    let url = server.wait_for("listening on ");
    let put = |path: &str, body: &str| {
        exchange(
            &url,
            &format!(
                "PUT {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer t0k\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    let playlist = "#EXTM3U\n#EXT-X-TARGETDURATION:6\n";
    assert!(put("/live/a/index.m3u8", playlist).starts_with("HTTP/1.1 201 Created\r\n"));
    assert!(put("/live/a/init.mp4", "init").starts_with("HTTP/1.1 201 "));
    let full = put("/live/a/v2.m3u8", playlist);
    assert!(full.starts_with("HTTP/1.1 507 "), "{full}");
    assert!(full.contains("--ingest-max-objects"), "{full}");
    let other = put("/live/b/seg-0.m4s", "x");
    assert!(other.contains("--ingest-max-streams"), "{other}");
    let got = exchange(
        &url,
        "GET /live/a/index.m3u8 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(
        got.to_ascii_lowercase()
            .contains("cache-control: max-age=4\r\n"),
        "{got}"
    );
    let (code, _) = server.stop();
    assert_eq!(code, 0);
    usage_errors(
        p,
        &[(
            "serve --root files --live-playlist-max-age soon",
            "--live-playlist-max-age",
        )],
    );
}
