//! The engine in `direct` mode on real files: exact bytes from the buffer pool at unaligned
//! offsets and at end of file, the page cache left empty, the same accounting as `asap`,
//! the pool within the memory manager's budget (a lone stream's sent chunks released, a
//! follower inside an interval served from kept chunks), and the buffered fallback.

use std::fs::File;
use std::sync::Arc;
use vodkit_prefetch::memory::MemoryConfig;
use vodkit_prefetch::residency::{self, Probe};
use vodkit_prefetch::{DirectOutcome, Engine, EngineConfig, IoMode, PolicySpec, ReadRequest};

const KIB: u64 = 1024;
const MIB: u64 = 1 << 20;

fn content(len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 13 + i / 4099) % 256) as u8)
        .collect()
}

/// A cold file of `size` bytes of [`content`] ([`crate::cold_copy`]), its directory, its
/// bytes, and an [`engine`] with `usable` bytes and `o_direct` to read it.
fn cold_engine(
    size: u64,
    usable: u64,
    o_direct: bool,
) -> Option<(tempfile::TempDir, Arc<File>, Vec<u8>, Engine)> {
    let dir = crate::tmp();
    let data = content(size);
    let f = crate::cold_copy(&dir, "title.bin", &data)?;
    Some((dir, f, data, engine(usable, o_direct)))
}

fn not_cached(f: &File, size: u64) -> u64 {
    residency::check(f, 0, size, size, Probe::Auto)
        .unwrap()
        .missing
}

/// `direct` with `fixed:2MiB`, `usable` bytes for the manager and the pool.
fn engine(usable: u64, o_direct: bool) -> Engine {
    Engine::new(EngineConfig {
        mode: IoMode::Direct,
        policy: PolicySpec::default(),
        sweep_every_s: 0.0,
        o_direct,
        memory: Some(MemoryConfig {
            budget_bytes: usable,
            reserve_bytes: 0,
            interval_share: 1.0,
            ..MemoryConfig::for_budget(usable)
        }),
        ..EngineConfig::default()
    })
}

fn fetch(e: &Engine, f: &Arc<File>, client: u64, offset: u64, len: u64) -> DirectOutcome {
    e.fetch_direct_blocking(
        f,
        ReadRequest {
            offset,
            len,
            client: Some(client),
            ..Default::default()
        },
    )
    .unwrap()
}

fn bytes(o: &DirectOutcome) -> Vec<u8> {
    o.slices.iter().flat_map(|s| s.bytes().to_vec()).collect()
}

#[test]
fn direct_reads_are_exact_and_leave_the_page_cache_empty() {
    let size = 6 * MIB + 777;
    let Some((_d, f, data, e)) = cold_engine(size, 64 * MIB, true) else {
        return;
    };
    // Unaligned requests, one crossing a chunk boundary, and the file's last partial block.
    let mut at = 1000;
    let mut from_disk = 0;
    for len in [300_000, 700_001, 256 * KIB, MIB + 3] {
        let o = fetch(&e, &f, 1, at, len);
        assert_eq!(o.outcome.requested, len);
        assert_eq!(
            bytes(&o),
            &data[at as usize..(at + len) as usize],
            "at {at}"
        );
        from_disk += o.outcome.from_disk;
        at += len;
    }
    let tail = fetch(&e, &f, 1, size - 777, 4 * KIB);
    assert_eq!(tail.outcome.requested, 777, "clipped at end of file");
    assert_eq!(bytes(&tail), &data[(size - 777) as usize..]);
    // The first request missed, the 2 MiB prefetch served the next ones.
    assert!(from_disk >= 300_000 && from_disk < at - 1000, "{from_disk}");
    let s = e.stats();
    assert_eq!(s.mode, "direct");
    let d = s.direct.clone().expect("direct figures");
    assert!(s.reads >= 2 && s.read_bytes >= 4 * MIB, "{s:?}");
    // Disk bytes are what the pool transferred: never a byte twice, although the reads
    // (sized as in `asap`, from each miss) overlapped chunks already pooled.
    assert_eq!(s.disk_bytes, d.read_bytes, "{s:?}");
    assert!(s.disk_bytes <= size && s.disk_bytes < s.read_bytes, "{s:?}");
    assert!(s.hits >= 1, "{s:?}");
    assert!(
        s.prefetch.prefetched_bytes > 0 && s.prefetch.used_bytes > 0,
        "{s:?}"
    );
    assert_eq!(s.prefetch.evicted_bytes, 0, "{s:?}");
    assert!(
        d.pool_bytes > 0 && d.pool_bytes <= d.capacity_bytes,
        "{d:?}"
    );
    if d.fallback_reads > 0 {
        eprintln!(
            "O_DIRECT refused in {}: the buffered fallback was used",
            env!("CARGO_TARGET_TMPDIR")
        );
        assert_eq!(d.direct_reads, 0, "{d:?}");
    } else {
        assert!(d.direct_reads >= 2, "{d:?}");
        // No page cache at all: the whole file is still not resident.
        assert_eq!(not_cached(&f, size), size, "{d:?}");
    }
}

#[test]
fn the_buffered_fallback_serves_exact_bytes_and_drops_its_pages() {
    let size = 3 * MIB + 5;
    let Some((_d, f, data, e)) = cold_engine(size, 64 * MIB, false) else {
        return;
    };
    let o = fetch(&e, &f, 1, 4095, 2 * MIB);
    assert_eq!(bytes(&o), &data[4095..4095 + 2 * MIB as usize]);
    let o = fetch(&e, &f, 1, 4095 + 2 * MIB, MIB);
    assert_eq!(bytes(&o), &data[(4095 + 2 * MIB) as usize..]);
    let d = e.direct().unwrap();
    assert_eq!(d.direct_reads, 0, "{d:?}");
    assert!(d.fallback_reads >= 1, "{d:?}");
    assert_eq!(
        not_cached(&f, size),
        size,
        "the fallback drops what it cached"
    );
}

/// One 512 KiB request of `client` at `at`, checked, then reported sent; returns the
/// bytes that came from disk.
fn play(e: &Engine, f: &Arc<File>, data: &[u8], client: u64, at: u64) -> u64 {
    let step = 512 * KIB;
    let o = fetch(e, f, client, at, step);
    assert_eq!(
        bytes(&o),
        &data[at as usize..(at + step) as usize],
        "{client} at {at}"
    );
    drop(o.slices);
    e.consumed(o.outcome.stream, at + step);
    let d = e.direct().unwrap();
    assert!(d.pool_bytes <= d.capacity_bytes, "{d:?}");
    o.outcome.from_disk
}

#[test]
fn a_lone_stream_stays_within_the_pool_and_releases_what_it_sent() {
    let size = 24 * MIB;
    let usable = 8 * MIB;
    let Some((_d, f, data, e)) = cold_engine(size, usable, true) else {
        return;
    };
    let mut at = 0;
    while at < size {
        play(&e, &f, &data, 1, at);
        at += 512 * KIB;
    }
    let s = e.stats();
    let d = s.direct.clone().unwrap();
    assert_eq!(d.capacity_bytes, usable);
    // The manager's drops made the room; the pool never had to evict anything.
    assert_eq!(d.evicted_bytes, 0, "{d:?}");
    assert_eq!(s.prefetch.evicted_bytes, 0, "no prefetch was lost: {s:?}");
    assert!(d.released_bytes >= size - usable, "{d:?}");
    // Every byte read is either still pooled or was released: no chunk leaked.
    assert_eq!(d.released_bytes + d.pool_bytes, d.read_bytes, "{d:?}");
    assert_eq!(d.chunks, d.pooled_chunks, "nobody else holds chunks: {d:?}");
}

#[test]
fn a_follower_inside_the_interval_reads_the_kept_chunks() {
    let size = 16 * MIB;
    let Some((_d, f, data, e)) = cold_engine(size, 8 * MIB, true) else {
        return;
    };
    let step = 512 * KIB;
    let mut lead = 0;
    while lead < 4 * MIB {
        play(&e, &f, &data, 1, lead);
        lead += step;
    }
    let mut follow = 0;
    let mut follower_disk = 0;
    while lead < size {
        play(&e, &f, &data, 1, lead);
        lead += step;
        follower_disk += play(&e, &f, &data, 2, follow);
        follow += step;
    }
    let m = e.memory().unwrap();
    let d = e.direct().unwrap();
    assert_eq!(
        follower_disk, 0,
        "every follower byte was pooled: {m:?} {d:?}"
    );
    assert!(m.interval_hit_bytes >= 4 * MIB, "{m:?}");
    assert_eq!(d.evicted_bytes, 0, "{d:?}");
    // The title was read from the device once.
    assert_eq!(d.read_bytes, size, "{d:?}");
}

#[test]
fn fetch_direct_needs_the_direct_mode() {
    let e = Engine::new(EngineConfig {
        mode: IoMode::Asap,
        sweep_every_s: 0.0,
        ..EngineConfig::default()
    });
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(dir.path().join("x"), b"abc").unwrap();
    let f = Arc::new(File::open(dir.path().join("x")).unwrap());
    let err = e
        .fetch_direct_blocking(&f, ReadRequest::default())
        .unwrap_err();
    assert!(err.to_string().contains("`direct`"), "{err}");
    assert!(e.direct().is_none() && e.stats().direct.is_none());
}
