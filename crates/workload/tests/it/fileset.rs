//! File sets on a real filesystem: create, verify, resume, repair, refuse, and placement.

use vodkit_workload::fileset::{self, placement, CreateOptions, FilesetError};
use vodkit_workload::generate::Plan;
use vodkit_workload::model::{Catalog, Layout};
use vodkit_workload::spec;

fn small_catalog(seed: u64) -> Catalog {
    // 40 titles of a few hundred KiB: quick to write, several chunks each.
    let sets: Vec<(String, String)> = [
        ("catalog.collections.sd.titles", "40"),
        ("catalog.collections.sd.sessions", "10"),
        ("catalog.max_duration", "\"12s\""),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Plan::new(spec::load("youtube-2011", &sets, 1.0).unwrap(), seed).catalog
}

/// [`small_catalog`] and a fresh directory, when slow tests run.
fn slow_catalog_and_dir() -> Option<(Catalog, tempfile::TempDir)> {
    if !vodkit_testkit::needs(&[vodkit_testkit::Need::Slow]) {
        return None;
    }
    Some((small_catalog(1), tempfile::tempdir().unwrap()))
}

fn opts(layout: Option<Layout>) -> CreateOptions {
    CreateOptions {
        layout,
        progress: false,
        backing_image: None,
    }
}

#[test]
fn a_file_set_the_emulated_disks_host_cannot_hold_is_refused_before_writing() {
    let cat = small_catalog(1);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    // /proc reports no free space at all: the image "there" cannot grow.
    let o = CreateOptions {
        backing_image: Some("/proc/vodkit-test.img".into()),
        ..opts(None)
    };
    let e = fileset::create(&cat, &root, &o).unwrap_err().to_string();
    assert!(e.contains("--scale") && e.contains("/proc"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    let written = std::fs::read_dir(&root)
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name() != ".vodkit-fileset.json")
            })
            .count()
        })
        .unwrap_or(0);
    assert_eq!(written, 0, "nothing was written");
}

#[test]
fn create_verify_resume_and_repair() {
    let Some((cat, dir)) = slow_catalog_and_dir() else {
        return;
    };
    let root = dir.path().join("root");
    let r = fileset::create(&cat, &root, &opts(None)).unwrap();
    assert_eq!(r.files, 40);
    assert_eq!(r.written_files, 40);
    assert!(fileset::verify(&cat, &root, None, false)
        .unwrap()
        .problems
        .is_empty());

    // Idempotent: a second run writes nothing.
    let again = fileset::create(&cat, &root, &opts(None)).unwrap();
    assert_eq!(
        (
            again.written_files,
            again.skipped_files,
            again.bytes_written
        ),
        (0, 40, 0)
    );

    // A truncated file is finished from where it stopped; a corrupted tail is rewritten.
    let files = fileset::planned_files(&cat, None).unwrap();
    let (a, b) = (root.join(&files[3].1.path), root.join(&files[7].1.path));
    let len_a = std::fs::metadata(&a).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&a)
        .unwrap()
        .set_len(len_a / 2)
        .unwrap();
    let mut bytes = std::fs::read(&b).unwrap();
    let cut = bytes.len() / 2;
    bytes.truncate(cut);
    *bytes.last_mut().unwrap() ^= 0xff;
    std::fs::write(&b, &bytes).unwrap();
    let v = fileset::verify(&cat, &root, None, false).unwrap();
    assert_eq!(v.problems.len(), 2, "{:?}", v.problems);
    let fixed = fileset::create(&cat, &root, &opts(None)).unwrap();
    assert_eq!((fixed.repaired_files, fixed.written_files), (2, 2));
    assert_eq!(
        fixed.bytes_written,
        (len_a - len_a / 2) + std::fs::metadata(&b).unwrap().len()
    );
    assert!(fileset::verify(&cat, &root, None, false)
        .unwrap()
        .problems
        .is_empty());

    // A flipped byte in a complete file is found by verify, with its offset.
    let mut bytes = std::fs::read(&a).unwrap();
    bytes[1234] ^= 1;
    std::fs::write(&a, &bytes).unwrap();
    let v = fileset::verify(&cat, &root, None, false).unwrap();
    assert_eq!(v.problems.len(), 1);
    assert!(
        v.problems[0].problem.contains("byte 1234"),
        "{:?}",
        v.problems
    );
}

#[test]
fn chunked_layout_shares_root_and_on_disk_size() {
    let Some((cat, dir)) = slow_catalog_and_dir() else {
        return;
    };
    fileset::create(&cat, dir.path(), &opts(None)).unwrap();
    let chunked = Layout::Chunked {
        chunk_bytes: 128 * 1024,
    };
    assert_eq!(
        vodkit_workload::layout::layout_name(chunked),
        "chunked:128KiB"
    );
    let r = fileset::create(&cat, dir.path(), &opts(Some(chunked))).unwrap();
    let unchunked: u64 = fileset::planned_files(&cat, None)
        .unwrap()
        .iter()
        .map(|(_, f)| f.size_bytes)
        .sum();
    assert_eq!(r.bytes, unchunked);
    assert!(r.files > 40);
    assert!(fileset::verify(&cat, dir.path(), Some(chunked), false)
        .unwrap()
        .problems
        .is_empty());
    let marker: fileset::Marker =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(fileset::MARKER)).unwrap())
            .unwrap();
    assert_eq!(marker.layouts, ["unchunked", "chunked:128KiB"]);
}

#[test]
fn refuses_foreign_files_and_other_workloads() {
    let cat = small_catalog(1);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious.txt"), b"mine").unwrap();
    let e = fileset::create(&cat, dir.path(), &opts(None)).unwrap_err();
    assert!(matches!(e, FilesetError::Runtime(_)));
    assert!(e.to_string().contains("precious.txt"), "{e}");
    assert_eq!(
        std::fs::read(dir.path().join("precious.txt")).unwrap(),
        b"mine"
    );

    let other = tempfile::tempdir().unwrap();
    fileset::create(&cat, other.path(), &opts(None)).unwrap();
    let e = fileset::create(&small_catalog(2), other.path(), &opts(None)).unwrap_err();
    assert!(e.to_string().contains("another workload"), "{e}");
}

#[test]
fn placement_reads_extents_in_creation_order() {
    let cat = small_catalog(1);
    let dir = tempfile::tempdir().unwrap();
    fileset::create(&cat, dir.path(), &opts(None)).unwrap();
    let report = match placement::report(&cat, dir.path(), None) {
        Ok(r) => r,
        Err(e) if e.to_string().contains("FIEMAP failed") => {
            return vodkit_testkit::skip(format_args!(
                "{e} (the temporary directory is not on a FIEMAP filesystem)"
            ));
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(report.titles, 40);
    let files = fileset::planned_files(&cat, None).unwrap();
    for (t, (_, f)) in report.per_title.iter().zip(&files) {
        assert!(t.avg_lba > 0.0);
        assert!(t.fragments >= 1);
        assert_eq!(
            t.bytes.div_ceil(4096),
            f.size_bytes.div_ceil(4096),
            "extents cover the file"
        );
    }
    assert!(report.out_of_sequence_fraction <= 1.0);
    // A report does not diverge from itself; with every title out of sequence (other tests
    // writing files at the same moment can interleave the allocations) there is nothing to
    // compare.
    match placement::divergence(&report, &report) {
        Some(d) => assert_eq!(d, 0.0),
        None => assert!(report.per_title.iter().all(|t| t.out_of_sequence)),
    }
}

#[test]
fn bad_catalog_is_an_input_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("catalog.json"), b"{\"spec\":1}").unwrap();
    let e = fileset::load_catalog(dir.path()).unwrap_err();
    assert!(matches!(e, FilesetError::Input(_)));
    assert!(
        e.to_string().contains("catalog.json:1: not a catalog"),
        "{e}"
    );
    let mut cat = small_catalog(1);
    cat.titles[0].renditions[0].files[0].path = "../escape.dat".into();
    std::fs::write(
        dir.path().join("catalog.json"),
        serde_json::to_string(&cat).unwrap(),
    )
    .unwrap();
    let e = fileset::load_catalog(dir.path()).unwrap_err();
    assert!(e.to_string().contains("must be relative"), "{e}");
}
