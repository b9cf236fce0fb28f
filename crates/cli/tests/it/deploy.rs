//! The Kubernetes manifests in `deploy/k8s` are valid objects for a current Kubernetes
//! (checked offline by `kubernetes-validate`, which ships the API schemas), fit together
//! (the kustomizations name files that exist; the Job's shard count, completions and
//! parallelism agree; its arguments are ones `vodkit load` accepts), and the validator
//! does reject a broken Job, so the check can fail.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Kubernetes version the manifests are validated against.
const K8S_VERSION: &str = "1.30.0";

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// `kubernetes-validate` on `files`; `None` (after saying why) when it is not installed
/// outside CI.
fn validate(files: &[PathBuf]) -> Option<(bool, String)> {
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--kubernetes-version", K8S_VERSION])
        .args(files)
        .output();
    match out {
        Ok(o) => Some((
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )),
        Err(_) => {
            vodkit_testkit::skip("needs kubernetes-validate (pip install kubernetes-validate)");
            None
        }
    }
}

/// The `resources:` of a kustomization (the plain list form used here).
fn resources(kustomization: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(kustomization).unwrap();
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with("resources:") {
            inside = true;
        } else if inside {
            match line.trim().strip_prefix("- ") {
                Some(r) if line.starts_with("  ") => out.push(r.trim().to_string()),
                _ => inside = false,
            }
        }
    }
    out
}

fn setting(kustomization: &str, key: &str) -> String {
    kustomization
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("- {key}=")))
        .unwrap_or_else(|| panic!("no {key} literal"))
        .to_string()
}

#[test]
fn manifests_are_valid_and_consistent() {
    let k8s = deploy().join("k8s");
    let mut files = Vec::new();
    for dir in [k8s.clone(), k8s.join("merge")] {
        let list = resources(&dir.join("kustomization.yaml"));
        assert!(!list.is_empty(), "{}: no resources", dir.display());
        for r in list {
            let f = dir.join(&r);
            assert!(f.is_file(), "{} names {r}, which is missing", dir.display());
            files.push(f);
        }
    }
    let kustomization = std::fs::read_to_string(k8s.join("kustomization.yaml")).unwrap();
    for f in ["workload/sessions.jsonl", "workload/workload.json"] {
        assert!(k8s.join(f).is_file(), "configMapGenerator file {f} missing");
    }

    // The Job runs SHARDS pods, each with one shard index.
    let shards: u32 = setting(&kustomization, "SHARDS").parse().unwrap();
    let job = std::fs::read_to_string(k8s.join("load-job.yaml")).unwrap();
    for key in ["completions", "parallelism"] {
        let n: u32 = job
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
            .unwrap_or_else(|| panic!("no {key}"))
            .parse()
            .unwrap();
        assert_eq!(n, shards, "{key} must equal SHARDS");
    }
    assert!(job.contains("completionMode: Indexed"));
    assert!(job.contains("--shard=$(JOB_COMPLETION_INDEX)/$(SHARDS)"));

    // The container's arguments, with the settings substituted, are accepted by vodkit
    // (parsed up to reading the session log, which is not there).
    let rate = setting(&kustomization, "RATE");
    let start = setting(&kustomization, "START_AT");
    let args: Vec<String> = job
        .lines()
        .skip_while(|l| l.trim() != "args:")
        .skip(1)
        .map_while(|l| l.trim().strip_prefix("- ").map(str::to_string))
        .map(|a| {
            a.replace("$(TARGET)", "http://127.0.0.1:9")
                .replace("$(RATE)", &rate)
                .replace("$(JOB_COMPLETION_INDEX)", "1")
                .replace("$(SHARDS)", &shards.to_string())
                .replace("$(START_AT)", &start)
        })
        .collect();
    assert_eq!(args.first().map(String::as_str), Some("load"));
    let o = common::vodkit().args(&args).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("/workload/"),
        "the arguments parse and the mounted workload is what is missing: {err}"
    );

    let Some((valid, report)) = validate(&files) else {
        return;
    };
    assert!(valid, "deploy/k8s does not validate:\n{report}");

    // The validator can fail: a Job with an unknown completion mode and a misspelled
    // field is refused.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken-job.yaml");
    std::fs::write(
        &broken,
        job.replace("completionMode: Indexed", "completionMode: Sideways")
            .replace("backoffLimit:", "backofLimit:"),
    )
    .unwrap();
    let (valid, report) = validate(&[broken]).expect("installed above");
    assert!(!valid, "a broken Job passed:\n{report}");
}

/// The balancer's ConfigMap, `deploy/k8s/origin/haproxy-config.yaml`, rendered from the
/// `vodkit cluster haproxy-config` arguments its header names.
fn balancer_configmap(header: &str, config: &str) -> String {
    let mut out = header.to_string();
    out.push_str(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: origin-balancer\ndata:\n  haproxy.cfg: |\n",
    );
    for line in config.lines() {
        if line.is_empty() {
            out.push('\n');
        } else {
            out.push_str("    ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The committed ConfigMap is exactly what the generator prints for the arguments in its
/// header (`VODKIT_BLESS=1 cargo test -p vodkit --test it deploy` rewrites it), it lists
/// one origin per StatefulSet replica by their stable names, and the origin manifests
/// validate offline.
#[test]
fn origin_cluster_manifests_are_the_generators_and_valid() {
    let dir = deploy().join("k8s/origin");
    let path = dir.join("haproxy-config.yaml");
    let committed = std::fs::read_to_string(&path).unwrap();
    let header: String = committed
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let args = header
        .lines()
        .find_map(|l| l.strip_prefix("#   vodkit "))
        .expect("the header names the generating command")
        .to_string();
    let o = common::vodkit()
        .args(args.split_whitespace())
        .output()
        .unwrap();
    assert!(o.status.success(), "vodkit {args}: {o:?}");
    let expected = balancer_configmap(&header, &String::from_utf8(o.stdout).unwrap());
    if std::env::var_os("VODKIT_BLESS").is_some() {
        std::fs::write(&path, &expected).unwrap();
    } else {
        assert!(
            committed == expected,
            "{} is not the generator's output; run VODKIT_BLESS=1 cargo test -p vodkit --test it deploy",
            path.display()
        );
    }

    // One origin per replica, each by its StatefulSet pod name behind the headless Service.
    let set = std::fs::read_to_string(dir.join("origin-statefulset.yaml")).unwrap();
    let replicas: usize = set
        .lines()
        .find_map(|l| l.trim().strip_prefix("replicas: "))
        .unwrap()
        .parse()
        .unwrap();
    let origins: Vec<&str> = args
        .split_whitespace()
        .skip_while(|a| *a != "--origins")
        .nth(1)
        .unwrap()
        .split(',')
        .collect();
    assert_eq!(origins.len(), replicas, "{origins:?}");
    for (k, o) in origins.iter().enumerate() {
        assert!(
            o.starts_with(&format!("origin-{k}.origin.vodkit.svc")),
            "{o}"
        );
    }
    assert!(set.contains("serviceName: origin") && set.contains("volumeClaimTemplates:"));
    assert!(args.contains("--agent-port 9100") && set.contains("--listen=0.0.0.0:9100"));

    // Each container's arguments are ones vodkit accepts: parsed up to what only the pod
    // has (the mounted catalog, the library volume), or, for the agent, which would run,
    // up to a deliberately bad last flag.
    let lists: Vec<Vec<String>> = set
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim() == "args:")
        .map(|(i, _)| {
            set.lines()
                .skip(i + 1)
                .map_while(|l| l.trim().strip_prefix("- ").map(str::to_string))
                .collect()
        })
        .collect();
    assert_eq!(
        lists.len(),
        3,
        "init, serve and agent containers: {lists:?}"
    );
    for (mut list, needle) in lists
        .into_iter()
        .zip(["/catalog/", "/library", "--min-speed"])
    {
        if list[0] == "cluster" {
            list.push("--min-speed=0".into());
        }
        let o = common::vodkit().args(&list).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{list:?}: {err}");
        assert!(err.contains(needle), "{list:?}: {err}");
    }

    let files: Vec<PathBuf> = resources(&dir.join("kustomization.yaml"))
        .iter()
        .map(|r| dir.join(r))
        .collect();
    for f in &files {
        assert!(f.is_file(), "{} is missing", f.display());
    }
    assert!(dir.join("library/catalog.json").is_file());
    let Some((valid, report)) = validate(&files) else {
        return;
    };
    assert!(valid, "deploy/k8s/origin does not validate:\n{report}");
}
