//! Unit tests of the `direct` buffer pool on real files: exact bytes at unaligned offsets
//! and at end of file, aligned allocations, the capacity never exceeded, shared chunks
//! kept while referenced, chunks freed by the manager's drop ranges, and the buffered
//! fallback.

use super::*;
use crate::residency::page_size;
use std::io::Write;
use std::os::unix::fs::MetadataExt;

const KIB: u64 = 1024;
const MIB: u64 = 1 << 20;

fn content(len: u64) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + i / 4093) % 256) as u8).collect()
}

/// A file of `len` bytes next to the test binary (a real disk; /tmp may be tmpfs).
fn file(len: u64) -> (tempfile::TempDir, Arc<File>, Vec<u8>) {
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir_in(exe.parent().unwrap()).unwrap();
    let path = dir.path().join("title.bin");
    let data = content(len);
    let mut f = File::create(&path).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    (dir, Arc::new(File::open(&path).unwrap()), data)
}

fn pool(capacity: u64) -> BufferPool {
    BufferPool::new(PoolConfig {
        room_wait: Duration::from_millis(50),
        ..PoolConfig::new(capacity)
    })
}

fn dev(f: &File) -> u64 {
    f.metadata().unwrap().dev()
}

fn gather(slices: &[Slice]) -> Vec<u8> {
    slices.iter().flat_map(|s| s.bytes().to_vec()).collect()
}

#[test]
fn alignment_arithmetic_rounds_out_and_stops_at_the_last_block() {
    assert_eq!(align_down(5000, 4096), 4096);
    assert_eq!(align_up(5000, 4096), 8192);
    assert_eq!(align_up(8192, 4096), 8192);
    assert_eq!(align_down(0, 4096), 0);
    // An unaligned range inside the file: start down, end up.
    assert_eq!(aligned_span(5000, 9000, 100_000, 4096), (4096, 12288));
    // A range past end of file stops at the block holding the last byte.
    assert_eq!(aligned_span(9000, 50_000, 10_000, 4096), (8192, 12288));
    // A file that ends on a block boundary.
    assert_eq!(aligned_span(0, 1 << 30, 8192, 4096), (0, 8192));
    // Nothing at or past end of file.
    let (a, b) = aligned_span(12_288, 20_000, 10_000, 4096);
    assert!(a >= b, "{a}..{b}");
}

#[test]
fn fill_returns_exact_bytes_for_unaligned_ranges_and_the_last_partial_block() {
    let size = 2 * MIB + 1234;
    let (_d, f, data) = file(size);
    let p = pool(8 * MIB);
    let id = 7;
    for (a, b) in [
        (1000, 300_000),
        (MIB - 1, MIB + 1),
        (size - 1234, size),
        (size - 5000, size),
        (0, size),
    ] {
        let got = p.fill(&f, id, dev(&f), a, b, size).unwrap();
        let slices = slices_for(&got.chunks, a, b).expect("covered");
        assert_eq!(gather(&slices), &data[a as usize..b as usize], "{a}..{b}");
        for c in &got.chunks {
            let align = p.alignment(dev(&f));
            assert_eq!(c.addr() % align as usize, 0, "buffer alignment");
            assert_eq!(c.start() % align, 0, "chunk start alignment");
            assert_eq!(c.allocated() as u64 % align, 0, "allocation size");
            assert!(c.allocated() as u64 <= align_up(SEGMENT_BYTES, align));
            assert!(c.end() <= size);
        }
    }
    let last = p.lookup(id, size - 1, size);
    assert_eq!(gather(&last.slices.unwrap()), &data[size as usize - 1..]);
    // The last chunk holds the partial block: fewer valid bytes than allocated.
    let tail = p.fill(&f, id, dev(&f), size - 1, size, size).unwrap();
    assert_eq!(tail.read_bytes, 0, "already pooled: nothing read again");
    let c = tail.chunks.last().unwrap();
    assert_eq!(c.end(), size);
    assert!(c.len() < c.allocated());
    // Whole file read once: every byte read exactly once over all fills.
    let st = p.stats();
    assert_eq!(st.read_bytes, size, "{st:?}");
    assert!(st.direct_reads + st.fallback_reads >= 1);
}

#[test]
fn o_direct_works_here_or_the_fallback_says_why() {
    let (_d, f, data) = file(MIB);
    let p = pool(4 * MIB);
    let got = p.fill(&f, 1, dev(&f), 4097, 70_000, MIB).unwrap();
    assert_eq!(
        gather(&slices_for(&got.chunks, 4097, 70_000).unwrap()),
        &data[4097..70_000]
    );
    match open_direct(&f) {
        Ok(_) => assert_eq!((got.direct_reads, got.fallback_reads), (1, 0)),
        Err(e) => {
            eprintln!("O_DIRECT refused next to the test binary ({e}): fallback used");
            assert_eq!((got.direct_reads, got.fallback_reads), (0, 1));
        }
    }
}

#[test]
fn a_filesystem_that_refuses_o_direct_is_detected() {
    // procfs refuses O_DIRECT with EINVAL, as tmpfs does on older kernels.
    let e = open_direct_path(Path::new("/proc/self/status")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
}

#[test]
fn the_buffered_fallback_reads_exact_bytes_and_is_counted() {
    let size = MIB + 77;
    let (_d, f, data) = file(size);
    let p = BufferPool::new(PoolConfig {
        o_direct: false,
        ..PoolConfig::new(4 * MIB)
    });
    let got = p.fill(&f, 3, dev(&f), 100, size, size).unwrap();
    assert_eq!(
        gather(&slices_for(&got.chunks, 100, size).unwrap()),
        &data[100..]
    );
    assert_eq!((got.direct_reads, got.fallback_reads), (0, 1));
    assert_eq!(p.stats().fallback_reads, 1);
}

#[test]
fn the_capacity_is_never_exceeded() {
    let size = 8 * MIB;
    let (_d, f, data) = file(size);
    let cap = MIB;
    let p = pool(cap);
    let mut held = Vec::new();
    for i in 0..8u64 {
        let a = i * MIB / 2;
        let b = a + MIB / 2;
        let got = p.fill(&f, 9, dev(&f), a, b, size).unwrap();
        assert!(p.in_use() <= cap, "step {i}: {} > {cap}", p.in_use());
        let s = slices_for(&got.chunks, a, b).unwrap();
        assert_eq!(gather(&s), &data[a as usize..b as usize]);
        // Connections hold every other range while the next reads happen.
        if i % 2 == 0 {
            held.push(s);
        } else {
            held.clear();
        }
        assert!(p.in_use() <= cap);
    }
    let st = p.stats();
    assert!(st.evicted_bytes > 0, "old chunks made room: {st:?}");
    // Connections hold the whole capacity: a further read waits, then fails, and the
    // pool stays within its capacity.
    let a = p.fill(&f, 9, dev(&f), 0, MIB / 2, size).unwrap();
    let b = p.fill(&f, 9, dev(&f), MIB / 2, MIB, size).unwrap();
    let e = p
        .fill(&f, 9, dev(&f), 4 * MIB, 4 * MIB + 4096, size)
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::OutOfMemory, "{e}");
    assert!(!e.to_string().contains('\n'));
    assert!(p.in_use() <= cap);
    assert!(p.stats().room_waits >= 1);
    // A read larger than the whole pool is refused at once.
    drop((a, b, held));
    let e = p
        .fill(&f, 9, dev(&f), 2 * MIB, 3 * MIB + 4096, size)
        .unwrap_err();
    assert!(e.to_string().contains("exceeds its capacity"), "{e}");
}

#[test]
fn shared_chunks_stay_while_referenced_and_go_when_released() {
    let size = MIB;
    let (_d, f, data) = file(size);
    let p = pool(4 * MIB);
    let (a, b) = (0, 512 * KIB);
    p.fill(&f, 5, dev(&f), a, b, size).unwrap();
    let used = p.in_use();
    assert_eq!(used, 512 * KIB);
    // Two viewers of one title share the same chunks.
    let v1 = p.lookup(5, a, b).slices.unwrap();
    let v2 = p.lookup(5, 100, 300_000).slices.unwrap();
    assert!(Arc::ptr_eq(&v1[0].chunk, &v2[0].chunk));
    assert_eq!(p.in_use(), used, "sharing allocates nothing");
    // Empty and foreign ranges change nothing.
    p.release(5, 1000, 1000);
    p.release(6, 0, b);
    assert_eq!(p.missing(5, a, b), 0);
    // The manager keeps the first half (an interval) and drops the rest: the chunks of
    // the dropped half leave the pool, the kept ones stay.
    p.release(5, 256 * KIB, b);
    assert_eq!(p.missing(5, a, 256 * KIB), 0);
    assert_eq!(p.missing(5, 256 * KIB, b), 256 * KIB);
    // The viewers still hold the released chunk: its memory stays counted and readable.
    assert_eq!(p.in_use(), used);
    assert_eq!(gather(&v1), &data[..b as usize]);
    drop(v1);
    drop(v2);
    assert_eq!(
        p.in_use(),
        256 * KIB,
        "the released chunk went with its last reader"
    );
    // A drop in two unaligned pieces (widened to whole blocks) frees the rest.
    p.release(5, 8192 + 1000, 256 * KIB);
    assert_eq!(p.in_use(), 256 * KIB, "blocks 0 and 1 are not yet dropped");
    p.release(5, 0, 8000);
    assert_eq!(p.in_use(), 0);
    let st = p.stats();
    assert_eq!((st.chunks, st.pooled_chunks), (0, 0), "{st:?}");
    assert_eq!(st.released_bytes, 512 * KIB);
    assert_eq!(st.evicted_bytes, 0);
}

#[test]
fn slices_for_refuses_holes() {
    let (_d, f, _) = file(MIB);
    let p = pool(4 * MIB);
    let x = p.fill(&f, 2, dev(&f), 0, 8192, MIB).unwrap();
    let y = p.fill(&f, 2, dev(&f), 16384, 20000, MIB).unwrap();
    let mut all = x.chunks.clone();
    all.extend(y.chunks);
    assert!(slices_for(&all, 0, 20000).is_none());
    assert!(slices_for(&all, 100, 8192).is_some());
    let l = p.lookup(2, 0, 20000);
    assert_eq!(l.covered, 8192 + (20000 - 16384));
    assert!(l.slices.is_none());
}

#[test]
fn logical_block_size_comes_from_sysfs_or_defaults() {
    let root = tempfile::tempdir().unwrap();
    let (links, disk) = crate::device::fake_sysfs(root.path(), "devices/sdq", 65, 0);
    std::fs::create_dir_all(disk.join("queue")).unwrap();
    std::fs::write(disk.join("queue/logical_block_size"), "8192\n").unwrap();
    assert_eq!(logical_block_size(&links, libc::makedev(65, 0)), 8192);
    assert_eq!(logical_block_size(&links, libc::makedev(65, 1)), 8192);
    assert_eq!(logical_block_size(&links, libc::makedev(0, 99)), 512);
    let p = BufferPool::new(PoolConfig {
        sysfs: links,
        ..PoolConfig::new(MIB)
    });
    assert_eq!(p.alignment(libc::makedev(65, 1)), 8192);
    assert_eq!(p.alignment(libc::makedev(0, 99)), MIN_ALIGN);
}

/// Resident bytes of this process (`/proc/self/statm`, second field × page size).
fn resident_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * page_size()
}

/// Freed buffers give their memory back to the system at once, so the process's resident
/// memory is what the pool counts (from malloc's arenas it stayed resident, and a `--io
/// direct` server at its budget was OOM-killed). Other tests run in this process at the
/// same time, so the margins are wide: 64 MiB is allocated and freed.
#[test]
fn freed_buffers_leave_resident_memory() {
    let before = resident_bytes();
    let mut bufs: Vec<AlignedBuf> = (0..256)
        .map(|_| AlignedBuf::zeroed(SEGMENT_BYTES as usize, MIN_ALIGN as usize).unwrap())
        .collect();
    for b in &mut bufs {
        assert!(b.mapped);
        assert_eq!(b.as_mut_ptr() as usize % MIN_ALIGN as usize, 0);
        // SAFETY (test): the buffer has SEGMENT_BYTES writable bytes.
        unsafe { std::ptr::write_bytes(b.as_mut_ptr(), 0xAB, b.len()) };
    }
    let full = resident_bytes();
    assert!(
        full >= before + 48 * MIB,
        "64 MiB written: resident {before} -> {full}"
    );
    assert!(bufs.iter().all(|b| b.as_slice().iter().all(|&x| x == 0xAB)));
    drop(bufs);
    let after = resident_bytes();
    assert!(
        after + 48 * MIB <= full,
        "64 MiB freed: resident {full} -> {after}"
    );
    // An alignment above the page size comes from the allocator, still aligned and zeroed.
    let big = 4 * page_size() as usize;
    let b = AlignedBuf::zeroed(2 * big, big).unwrap();
    assert!(!b.mapped);
    assert_eq!(b.ptr.as_ptr() as usize % big, 0);
    assert!(b.as_slice().iter().all(|&x| x == 0));
}
