//! The engine's read orders on real files: a device worker held busy by a long read
//! serves the reads queued behind it by deadline, or sweeping by device place.

use super::{cold_file, tmp};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use vodkit_prefetch::placement::Placement;
use vodkit_prefetch::schedule::{IoOrder, Place};
use vodkit_prefetch::{Begin, Engine, EngineConfig, IoMode, Pending, ReadOutcome, ReadRequest};

const KIB: u64 = 1024;
const MIB: u64 = 1 << 20;

fn engine(order: IoOrder) -> Engine {
    Engine::new(EngineConfig {
        mode: IoMode::Serialized,
        policy: "none".parse().unwrap(),
        order,
        // Reads here wait behind a cold 64 MiB read, which a busy machine can stretch past
        // the longest wait: the orders are what these tests compare.
        max_wait_s: f64::INFINITY,
        ..Default::default()
    })
}

fn begin(e: &Engine, f: &Arc<File>, client: u64, offset: u64, len: u64) -> Pending {
    let req = ReadRequest {
        offset,
        len,
        client: Some(client),
        bitrate_kbps: Some(1000),
        ..Default::default()
    };
    match e.begin(f, &req).unwrap() {
        Begin::Pending(p) => p,
        Begin::Ready(_) => panic!("a cold range was reported resident"),
    }
}

fn wait(p: Pending) -> ReadOutcome {
    p.wait_blocking().unwrap()
}

#[test]
fn the_deadline_order_serves_a_client_about_to_run_dry_before_one_well_ahead() {
    for (order, dry_first) in [(IoOrder::Deadline, true), (IoOrder::Fifo, false)] {
        let dir = tmp();
        let (Some(blocker), Some(a), Some(b)) = (
            cold_file(&dir, "blocker", 64 * MIB),
            cold_file(&dir, "a", 8 * MIB),
            cold_file(&dir, "b", MIB),
        ) else {
            return;
        };
        let e = engine(order);
        assert_eq!(e.order(), order);
        let busy = begin(&e, &blocker, 9, 0, 64 * MIB);
        // Client 1 was sent up to 6 MiB just now: at 125 kB/s it holds a minute of video.
        let a0 = begin(&e, &a, 1, 0, 256 * KIB);
        let ahead = begin(&e, &a, 1, 6 * MIB, 256 * KIB);
        // Client 2 starts: it holds nothing.
        let dry = begin(&e, &b, 2, 0, 256 * KIB);
        wait(busy);
        wait(a0);
        let (ahead, dry) = (wait(ahead), wait(dry));
        assert_eq!(
            dry.finished_s <= ahead.started_s,
            dry_first,
            "{order}: {dry:?} {ahead:?}"
        );
        let s = e.stats();
        assert_eq!(s.devices[0].reads, 4);
    }
}

#[test]
fn the_sweep_serves_queued_reads_in_device_order() {
    let dir = tmp();
    let Some(blocker) = cold_file(&dir, "blocker", 64 * MIB) else {
        return;
    };
    let files: Vec<_> = (0..10)
        .map_while(|i| cold_file(&dir, &format!("f{i}"), 512 * KIB))
        .collect();
    if files.len() < 10 {
        return;
    }
    let e = engine(IoOrder::Sweep);
    let busy = begin(&e, &blocker, 99, 0, 64 * MIB);
    // Queued in an order unrelated to their places.
    let order = [3, 7, 0, 9, 5, 1, 8, 2, 6, 4];
    let pending: Vec<_> = order
        .iter()
        .map(|&i| (i, begin(&e, &files[i], i as u64, 0, 512 * KIB)))
        .collect();
    wait(busy);
    let mut served: Vec<(f64, Place)> = pending
        .into_iter()
        .map(|(i, p)| {
            let o = wait(p);
            let f = &files[i];
            let ino = f.metadata().unwrap().ino();
            (o.started_s, Placement::new().place(f, 0, ino, 0))
        })
        .collect();
    served.sort_by(|x, y| x.0.total_cmp(&y.0));
    // The first may have been taken with the blocker, before the others were queued;
    // the rest go up to the last place ahead of the head and turn back at most once.
    let places: Vec<Place> = served.iter().skip(1).map(|s| s.1).collect();
    let turns = places
        .windows(3)
        .filter(|w| (w[0] < w[1]) != (w[1] < w[2]))
        .count();
    assert!(turns <= 1, "more than one turn: {places:?}");
}
