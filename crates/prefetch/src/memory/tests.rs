//! Tests of the memory manager on a simulated clock (no files, no page cache).

use super::*;
use vodkit_testkit::xorshift;

const F: FileId = 7;
const SIZE: u64 = 200 * MIB;
const KIB: u64 = 1 << 10;

fn cfg(budget: u64) -> MemoryConfig {
    MemoryConfig {
        drop_lag_bytes: 0,
        ..MemoryConfig::for_budget(budget)
    }
}

/// No reserve and a budget of `usable` bytes: the consumed-cache has room only for what
/// the streams do not hold.
fn tight(usable: u64) -> MemoryConfig {
    MemoryConfig {
        budget_bytes: usable,
        reserve_bytes: 0,
        drop_lag_bytes: 0,
        ..MemoryConfig::for_budget(usable)
    }
}

/// Client `c` starts watching file `c` at a bit rate of `kbps`: a read of its first MiB at
/// time 0.
fn first_read(m: &mut MemoryManager, c: u64, kbps: u32) -> StreamId {
    m.request(c, Some(c), 0, MIB, SIZE, kbps, 0.0).0
}

/// A manager of `budget` whose clients 1, 2, … started watching at the bit rates `kbps`
/// ([`first_read`]), with their streams in that order.
fn with_streams(budget: u64, kbps: &[u32]) -> (MemoryManager, Vec<StreamId>) {
    let mut m = MemoryManager::new(cfg(budget));
    let ids = (1..)
        .zip(kbps)
        .map(|(c, &k)| first_read(&mut m, c, k))
        .collect();
    (m, ids)
}

fn total(drops: &[Drop]) -> u64 {
    drops.iter().map(|d| d.end - d.start).sum()
}

/// One viewer's request of `[at, at + len)`; the engine reads `prefetch` bytes from `at`.
fn step(
    m: &mut MemoryManager,
    client: u64,
    at: u64,
    len: u64,
    prefetch: u64,
    now: f64,
) -> (StreamId, Vec<Drop>) {
    let (id, drops) = m.request(F, Some(client), at, at + len, SIZE, 2000, now);
    if prefetch > 0 {
        m.read(id, at, at + prefetch.max(len));
    }
    (id, drops)
}

#[test]
fn a_lone_stream_drops_what_it_consumed() {
    // The stream's 4 MiB reads take the whole budget: consumed bytes go at once.
    let mut m = MemoryManager::new(tight(4 * MIB));
    let (id, d) = step(&mut m, 1, 0, MIB, 4 * MIB, 0.0);
    assert!(d.is_empty());
    assert_eq!(m.totals().unconsumed_bytes, 4 * MIB);
    let (id2, d) = step(&mut m, 1, MIB, MIB, 0, 1.0);
    assert_eq!(id, id2, "a contiguous request continues the stream");
    assert_eq!(
        d,
        vec![Drop {
            file: F,
            start: 0,
            end: MIB
        }]
    );
    let d = m.consumed(id, 3 * MIB, 2.0);
    assert_eq!(total(&d), 2 * MIB);
    let t = m.totals();
    assert_eq!(
        (t.unconsumed_bytes, t.kept_bytes, t.dropped_bytes),
        (MIB, 0, 3 * MIB)
    );
    assert_eq!(t.consumed_cached_bytes, 0);
}

#[test]
fn consumed_bytes_stay_cached_while_the_budget_has_room() {
    // 16 MiB usable: one stream reading 4 MiB at a time leaves 12 MiB for consumed bytes.
    let mut m = MemoryManager::new(tight(16 * MIB));
    let (a, _) = step(&mut m, 1, 0, MIB, 4 * MIB, 0.0);
    assert!(m.consumed(a, 4 * MIB, 1.0).is_empty());
    let (a, _) = step(&mut m, 1, 4 * MIB, MIB, 4 * MIB, 2.0);
    assert!(m.consumed(a, 8 * MIB, 3.0).is_empty());
    assert_eq!(m.totals().consumed_cached_bytes, 8 * MIB);
    // A second stream (another file) needs room: the oldest consumed bytes go first.
    let (b, _) = m.request(9, Some(2), 0, MIB, SIZE, 2000, 4.0);
    let d = m.read(b, 0, 8 * MIB);
    assert_eq!(
        d,
        vec![Drop {
            file: F,
            start: 0,
            end: 4 * MIB
        }]
    );
    let t = m.totals();
    assert_eq!(t.consumed_cached_bytes, 4 * MIB);
    assert!(t.consumed_cached_bytes + t.unconsumed_bytes <= 16 * MIB);
    // A new stream at 5 MiB follows the first (at 8 MiB): the cached bytes between them
    // become the interval's kept bytes.
    m.request(F, Some(3), 5 * MIB, 6 * MIB, SIZE, 2000, 5.0);
    let t = m.totals();
    assert_eq!((t.consumed_cached_bytes, t.kept_bytes), (MIB, 3 * MIB));
}

#[test]
fn the_drop_lag_leaves_bytes_a_send_may_still_hold() {
    let lagged = MemoryConfig {
        drop_lag_bytes: 2 * MIB,
        ..tight(8 * MIB)
    };
    let mut m = MemoryManager::new(lagged.clone());
    let (id, _) = step(&mut m, 1, 0, MIB, 8 * MIB, 0.0);
    assert!(m.consumed(id, MIB, 1.0).is_empty(), "within the 2 MiB lag");
    let d = m.consumed(id, 5 * MIB, 2.0);
    assert_eq!(
        d,
        vec![Drop {
            file: F,
            start: 0,
            end: 3 * MIB
        }]
    );
    // At the end of the file the stream releases everything and holds nothing.
    let mut m = MemoryManager::new(lagged);
    let (id, _) = m.request(F, Some(1), 0, MIB, 3 * MIB, 2000, 0.0);
    m.read(id, 0, 3 * MIB);
    assert!(m.consumed(id, 3 * MIB, 1.0).is_empty(), "room for it");
    let t = m.totals();
    assert_eq!((t.consumed_cached_bytes, t.unconsumed_bytes), (3 * MIB, 0));
}

#[test]
fn a_close_follower_keeps_the_interval_and_consumes_it() {
    let mut m = MemoryManager::new(cfg(1 << 30));
    // The leader is 6 MiB ahead of the follower.
    let (lead, _) = step(&mut m, 1, 0, MIB, 2 * MIB, 0.0);
    m.consumed(lead, 6 * MIB, 1.0);
    let (follow, d) = step(&mut m, 2, 0, MIB, 2 * MIB, 2.0);
    assert!(d.is_empty());
    // The follower adopts the leader's cached 0..6 MiB as the interval's kept bytes.
    assert_eq!(m.totals().kept_bytes, 6 * MIB);
    assert_eq!(m.totals().consumed_cached_bytes, 0);
    // The leader's next consumption (6..10 MiB) is kept: the follower is 6 MiB behind.
    let d = m.consumed(lead, 10 * MIB, 3.0);
    assert!(d.is_empty(), "kept for the follower: {d:?}");
    assert_eq!(m.totals().kept_bytes, 10 * MIB);
    assert!(m.totals().horizon_bytes >= 6 * MIB);
    // The follower passes the kept range: an interval hit; then, with nobody behind, the
    // bytes are ordinary consumed bytes (cached: this budget has room).
    let d = m.consumed(follow, 10 * MIB, 4.0);
    let t = m.totals();
    assert_eq!(t.interval_hit_bytes, 10 * MIB);
    assert_eq!(t.kept_bytes, 0);
    assert!(d.is_empty());
    assert_eq!(t.consumed_cached_bytes, 10 * MIB);
}

#[test]
fn a_distant_follower_is_outside_the_horizon() {
    // Usable budget 256 MiB − 64 MiB reserve = 192 MiB; intervals may take half: 96 MiB.
    let mut m = MemoryManager::new(cfg(256 * MIB));
    let (lead, _) = step(&mut m, 1, 0, MIB, MIB, 0.0);
    m.consumed(lead, 120 * MIB, 1.0);
    let (_follow, _) = step(&mut m, 2, 0, MIB, MIB, 2.0);
    m.expire(2.5); // recompute the horizon
    assert_eq!(
        m.totals().horizon_bytes,
        0,
        "a 120 MiB interval does not fit 96 MiB"
    );
    m.consumed(lead, 130 * MIB, 3.0);
    let t = m.totals();
    assert_eq!(t.kept_bytes, 0);
    assert_eq!(
        t.consumed_cached_bytes,
        129 * MIB,
        "not kept: ordinary consumed bytes"
    );
}

#[test]
fn intervals_are_admitted_smallest_first() {
    // 96 MiB of interval budget; three pairs with gaps 10, 40 and 60 MiB: 10 + 40 fit,
    // adding 60 would not.
    let mut m = MemoryManager::new(cfg(256 * MIB));
    for (file, gap) in [(1u64, 10u64), (2, 40), (3, 60)] {
        let (a, _) = m.request(file, Some(1), 0, MIB, SIZE, 2000, 0.0);
        m.consumed(a, gap * MIB, 0.0);
        m.request(file, Some(2), 0, MIB, SIZE, 2000, 0.0);
    }
    m.expire(1.0);
    assert_eq!(m.totals().horizon_bytes, 40 * MIB);
}

#[test]
fn the_budget_is_never_exceeded() {
    // 40 viewers of 10 files at two bit rates, each asking for 512 KiB at a time and
    // reading as much ahead as the manager allows (the engine's behaviour).
    let budget = 256 * MIB;
    let mut m = MemoryManager::new(MemoryConfig::for_budget(budget));
    let usable = m.config().usable_bytes();
    let mut pos = vec![0u64; 40];
    let mut ids = vec![0; 40];
    let mut rng = 12345u64;
    for tick in 0..4000u64 {
        let v = (xorshift(&mut rng) % 40) as usize;
        let file = (v % 10) as FileId;
        let kbps = if v.is_multiple_of(2) { 419 } else { 2095 };
        let now = tick as f64 * 0.05;
        let len = 512 * 1024;
        let (id, _) = m.request(file, Some(v as u64), pos[v], pos[v] + len, SIZE, kbps, now);
        ids[v] = id;
        let cap = m.prefetch_cap(id);
        // The engine reads at least the request; more only within the cap.
        let read = cap.max(len);
        let already = m.streams[&id].prefetched_to;
        if already < pos[v] + len {
            m.read(id, pos[v], pos[v] + read);
        }
        pos[v] += len;
        m.consumed(id, pos[v], now);
        let t = m.totals();
        let recount: u64 = m.streams.values().map(Stream::unconsumed).sum();
        assert_eq!(t.unconsumed_bytes, recount, "tick {tick}: running total");
        let held: u64 = m.streams.values().map(Stream::held).sum();
        assert_eq!(m.held_total, held, "tick {tick}: running total");
        let with_client = m.streams.values().filter(|s| s.client.is_some()).count();
        let indexed: usize = m.by_client.values().map(Vec::len).sum();
        assert_eq!(with_client, indexed, "tick {tick}: client index");
        for (c, ids) in &m.by_client {
            assert!(ids.iter().all(|id| m.streams[id].client == Some(*c)));
        }
        for fs in m.files.values() {
            assert_eq!(fs.pos.len(), fs.order.len(), "tick {tick}: order index");
            for (id, p) in fs.each() {
                let st = &m.streams[&id];
                assert_eq!(
                    (p.consumed, p.prefetched),
                    (st.consumed_to, st.prefetched_to)
                );
            }
        }
        assert!(
            t.unconsumed_bytes + t.kept_bytes + t.consumed_cached_bytes <= usable + len,
            "tick {tick}: unconsumed {} + kept {} > usable {usable}",
            t.unconsumed_bytes,
            t.kept_bytes
        );
        assert!(t.kept_bytes <= usable / 2);
    }
    // Each cap fits beside the other streams' actual unconsumed bytes.
    let t = m.totals();
    for &id in &ids {
        let own = m.streams.get(&id).map_or(0, Stream::unconsumed);
        assert!(m.prefetch_cap(id) + (t.unconsumed_bytes - own) + t.kept_bytes <= usable);
    }
}

#[test]
fn shares_follow_the_square_root_of_the_bit_rate() {
    // An SD and an HD stream, and enough other SD streams that no share reaches the whole
    // pool.
    let (m, ids) = with_streams(1 << 30, &[419, 2095, 419, 419, 419, 419]);
    let (sd, hd) = (ids[0], ids[1]);
    let ratio = m.prefetch_cap(hd) as f64 / m.prefetch_cap(sd) as f64;
    assert!((ratio - 5f64.sqrt()).abs() < 0.01, "{ratio}");
    let pool = m.prefetch_pool();
    // Shares of twice the pool (the sawtooth), each within the pool itself.
    assert!(m.prefetch_cap(sd) + m.prefetch_cap(hd) <= 2 * pool);
    assert!(m.prefetch_cap(hd) <= pool);
    // One more SD stream would get less than the first did.
    assert!(m.share_for(419) < m.prefetch_cap(sd));
}

#[test]
fn a_stream_that_asks_faster_than_its_bit_rate_gets_a_larger_share() {
    let mut m = MemoryManager::new(cfg(1 << 30));
    // Two streams of one bit rate (419 kbit/s): `paced` asks for 512 KiB every 10 s (its
    // bit rate), `filling` every 2.5 s (a player filling its buffer, 4× faster).
    let (paced, _) = m.request(1, Some(1), 0, 512 * KIB, SIZE, 419, 0.0);
    let (filling, _) = m.request(2, Some(2), 0, 512 * KIB, SIZE, 419, 0.0);
    for c in 3..7 {
        first_read(&mut m, c, 419);
    }
    assert_eq!(m.prefetch_cap(paced), m.prefetch_cap(filling));
    for k in 1..=8u64 {
        m.request(
            1,
            Some(1),
            k * 512 * KIB,
            (k + 1) * 512 * KIB,
            SIZE,
            419,
            10.0 * k as f64,
        );
        m.request(
            2,
            Some(2),
            k * 512 * KIB,
            (k + 1) * 512 * KIB,
            SIZE,
            419,
            2.5 * k as f64,
        );
        for c in 3..7 {
            m.request(c, Some(c), 0, MIB, SIZE, 419, 10.0 * k as f64);
        }
    }
    // The paced stream's rate is its bit rate, so its weight stays √419; the filling one
    // converges on 4 × 419 kbit/s (512 KiB per 2.5 s = 1,678 kbit/s): twice the share.
    let ratio = m.prefetch_cap(filling) as f64 / m.prefetch_cap(paced) as f64;
    assert!((ratio - 2.0).abs() < 0.05, "{ratio}");
    // The shares still sum within twice the pool (the sawtooth).
    let t = m.totals();
    assert_eq!(t.weighted_streams, 6);
    let caps: u64 = (1..=6).map(|id| m.prefetch_cap(id)).sum();
    assert!(caps <= 2 * m.prefetch_pool(), "{caps}");
    // A client that asks as fast as the disk answers gains at most 8× its bit rate's weight².
    assert!((weight_at(419, 1e9) / weight_at(419, 419.0) - 8f64.sqrt()).abs() < 1e-9);
    assert_eq!(weight_at(419, 10.0), weight(419));
}

#[test]
fn a_stream_that_stops_releases_everything() {
    let mut m = MemoryManager::new(tight(8 * MIB));
    let (id, _) = step(&mut m, 1, 10 * MIB, MIB, 8 * MIB, 0.0);
    m.consumed(id, 12 * MIB, 1.0);
    assert!(m.expire(3.0).is_empty(), "not quiet yet");
    // Quiet for 2.5 x its (first-guess 10 s) gap: it gives up its read-ahead at once.
    let d = m.expire(30.0);
    assert_eq!(
        d.first().map(|d| d.start),
        Some(12 * MIB),
        "10..12 MiB went when consumed"
    );
    assert_eq!(
        total(&d),
        6 * MIB,
        "the read-ahead nobody will send goes at once"
    );
    assert_eq!(m.totals().streams, 1, "still a stream within the 40 s ttl");
    assert!(
        m.expire(41.5).is_empty(),
        "nothing left to drop when it ends"
    );
    let t = m.totals();
    assert_eq!(t.streams, 0);
    assert_eq!((t.unconsumed_bytes, t.kept_bytes), (0, 0));
    assert_eq!(t.dropped_bytes, 8 * MIB, "consumed and unconsumed alike");
    assert_eq!(t.consumed_cached_bytes, 0);
}

#[test]
fn a_jump_ends_the_old_stream() {
    let mut m = MemoryManager::new(cfg(1 << 30));
    let (a, _) = step(&mut m, 1, 0, MIB, 4 * MIB, 0.0);
    let (b, d) = step(&mut m, 1, 150 * MIB, MIB, 4 * MIB, 1.0);
    assert_ne!(a, b);
    assert_eq!(total(&d), 4 * MIB, "the abandoned prefetch is dropped");
    assert_eq!(m.totals().streams, 1);
}

#[test]
fn drops_spare_other_streams_unconsumed_prefetch() {
    // A budget too small for the 16 MiB interval between A and B: nothing is kept.
    let mut m = MemoryManager::new(cfg(20 * MIB));
    let (a, _) = m.request(F, Some(1), 0, MIB, SIZE, 2000, 0.0);
    m.read(a, 0, MIB);
    // B (anonymous, the preload daemon's case) has read ahead 4..8 MiB, not consumed it.
    let (b, _) = m.request(F, None, 4 * MIB, 5 * MIB, SIZE, 2000, 0.0);
    m.read(b, 4 * MIB, 8 * MIB);
    let d = m.consumed(a, 20 * MIB, 1.0);
    assert!(
        d.iter().all(|d| d.end <= 4 * MIB || d.start >= 8 * MIB),
        "B's 4..8 MiB must survive: {d:?}"
    );
    assert_eq!(total(&d), 16 * MIB);
    assert_eq!(m.totals().kept_bytes, 0);
}

#[test]
fn anonymous_requests_continue_by_position() {
    let mut m = MemoryManager::new(cfg(1 << 30));
    let (x, _) = m.request(F, None, 0, MIB, SIZE, 2000, 0.0);
    let (y, _) = m.request(F, None, 100 * MIB, 101 * MIB, SIZE, 2000, 0.0);
    assert_ne!(x, y);
    let (x2, _) = m.request(F, None, MIB, 2 * MIB, SIZE, 2000, 1.0);
    assert_eq!(x, x2);
    assert_eq!(m.totals().consumed_cached_bytes, MIB);
    let (y2, _) = m.request(F, None, 101 * MIB, 102 * MIB, SIZE, 2000, 1.0);
    assert_eq!(y, y2);
}

#[test]
fn drops_are_page_aligned_inwards() {
    assert_eq!(page_aligned(100, 9000, 100_000, 4096), Some((4096, 8192)));
    assert_eq!(page_aligned(100, 5000, 100_000, 4096), None);
    assert_eq!(
        page_aligned(4096, 10_000, 10_000, 4096),
        Some((4096, 12288))
    );
}

#[test]
fn the_reserve_is_bounded() {
    assert_eq!(default_reserve(256 * MIB), 64 * MIB);
    assert_eq!(default_reserve(4 << 30), (4u64 << 30) / 20);
    assert_eq!(default_reserve(64 * MIB), 32 * MIB);
}

#[test]
fn idle_streams_stop_shrinking_the_others_shares() {
    // Four streams: each share is 2 x pool / 4, half the pool.
    let (mut m, ids) = with_streams(1 << 30, &[2000; 4]);
    let (a, b) = (ids[0], ids[1]);
    let half = m.prefetch_cap(a);
    assert_eq!(half, m.prefetch_cap(b));
    assert!(half.abs_diff(m.prefetch_pool() / 2) <= 1, "{half}");
    // A keeps asking every 2 s at its bit rate (500 kB per 2 s is 2,000 kbit/s, so its
    // weight stays its bit rate's); the others went quiet. After max(2.5 x their gap, 5 s)
    // they no longer take a share, though they stay streams (followers, say) until the 40 s
    // ttl.
    const STEP: u64 = 500_000;
    for t in 1..=15 {
        let now = 2.0 * t as f64;
        m.request(1, Some(1), t * STEP, (t + 1) * STEP, SIZE, 2000, now);
        m.expire(now);
    }
    assert_eq!(m.totals().streams, 4);
    let alone = m.prefetch_cap(a);
    assert!(alone > half * 19 / 10, "{alone} vs {half}");
    // They ask again and take their shares back.
    for c in 2..5 {
        m.request(c, Some(c), MIB, 2 * MIB, SIZE, 2000, 31.0);
    }
    let a_cap = m.prefetch_cap(a);
    assert!(
        a_cap < half * 11 / 10 && a_cap > half * 9 / 10,
        "{a_cap} vs {half}"
    );
}

#[test]
fn a_stream_that_sent_the_whole_file_ends() {
    let mut m = MemoryManager::new(cfg(1 << 30));
    let (id, _) = m.request(F, Some(1), 0, 3 * MIB, 3 * MIB, 2000, 0.0);
    m.read(id, 0, 3 * MIB);
    m.consumed(id, 3 * MIB, 1.0);
    let t = m.totals();
    assert_eq!((t.streams, t.ended_streams, t.unconsumed_bytes), (0, 1, 0));
    assert_eq!(
        t.consumed_cached_bytes,
        3 * MIB,
        "sent bytes stay while there is room"
    );
}

#[test]
fn a_quiet_stream_gives_up_its_read_ahead() {
    let mut m = MemoryManager::new(cfg(64 * MIB));
    // A read 8 MiB ahead and then stopped asking; B keeps going.
    let a = first_read(&mut m, 1, 2000);
    m.read(a, 0, 8 * MIB);
    m.consumed(a, MIB, 0.5);
    let b = first_read(&mut m, 2, 2000);
    let before = m.prefetch_cap(b);
    let mut dropped = Vec::new();
    for t in 1..=30 {
        m.request(2, Some(2), t * MIB, (t + 1) * MIB, SIZE, 2000, t as f64);
        m.consumed(b, (t + 1) * MIB, t as f64);
        dropped.extend(m.expire(t as f64));
    }
    let gave_up: Vec<_> = dropped.iter().filter(|d| d.file == 1).collect();
    assert_eq!(gave_up.len(), 1, "{dropped:?}");
    assert_eq!((gave_up[0].start, gave_up[0].end), (MIB, 8 * MIB));
    assert_eq!(m.totals().streams, 2, "A is still a stream until the ttl");
    assert!(
        m.prefetch_cap(b) > before,
        "B's cap grew: {} vs {before}",
        m.prefetch_cap(b)
    );
    let recount: u64 = m.streams.values().map(Stream::unconsumed).sum();
    assert_eq!(m.totals().unconsumed_bytes, recount);
}

#[test]
fn bytes_within_the_drop_lag_count_and_leave_with_a_quiet_stream() {
    let lagged = MemoryConfig {
        drop_lag_bytes: 2 * MIB,
        ..tight(64 * MIB)
    };
    let mut m = MemoryManager::new(lagged);
    let (id, _) = m.request(F, Some(1), 0, MIB, SIZE, 2000, 0.0);
    m.read(id, 0, 4 * MIB);
    m.consumed(id, 3 * MIB, 0.5);
    // 1 MiB released; 2 MiB sent but within the lag: held, with the 1 MiB unconsumed
    // (its next read, 4 MiB, is larger).
    assert_eq!(m.held_total, 4 * MIB + 2 * MIB);
    m.expire(30.0);
    assert_eq!(m.held_total, 0, "a quiet stream holds nothing");
    let t = m.totals();
    assert_eq!(
        t.consumed_cached_bytes,
        3 * MIB,
        "all it sent is ordinary cache now"
    );
    assert_eq!(t.unconsumed_bytes, 0);
}

#[test]
fn read_ahead_another_viewer_will_reach_is_cached_not_dropped() {
    // X read 0..4 MiB of a title and went quiet; Y, 1 MiB in, reads on from X's prefetch.
    let mut m = MemoryManager::new(cfg(1 << 30));
    let (x, _) = m.request(F, Some(1), 0, MIB, SIZE, 2000, 0.0);
    m.read(x, 0, 4 * MIB);
    m.consumed(x, MIB, 0.5);
    let mut dropped = Vec::new();
    for t in 1..=30 {
        let at = MIB / 16 * t;
        m.request(F, Some(2), at, at + MIB / 16, SIZE, 2000, t as f64);
        dropped.extend(m.expire(t as f64));
    }
    assert!(dropped.is_empty(), "{dropped:?}");
    // X gave up 1..4 MiB when it went quiet (after 25 s): Y, at ~1.6 MiB, will reach it.
    assert!(
        m.totals().consumed_cached_bytes >= 2 * MIB,
        "{:?}",
        m.totals()
    );
}

#[test]
fn claimed_ranges_are_not_dropped_again() {
    let mut m = MemoryManager::new(cfg(1 << 30));
    let (a, _) = m.request(F, Some(1), 4 * MIB, 5 * MIB, SIZE, 2000, 0.0);
    m.read(a, 4 * MIB, 8 * MIB);
    assert!(m.claims(F, 6 * MIB, 7 * MIB), "unsent read-ahead");
    assert!(!m.claims(F, 10 * MIB, 11 * MIB));
    assert!(!m.claims(9, 4 * MIB, 5 * MIB), "another file");
    m.consumed(a, 8 * MIB, 1.0);
    assert!(
        m.claims(F, 4 * MIB, 5 * MIB),
        "sent, waiting in the consumed-cache"
    );
}

/// The page cache as the engine leaves it: pages read are resident until a drop takes
/// them (no kernel eviction). Every resident byte must be one the manager accounts for.
#[test]
fn every_resident_byte_is_accounted_for() {
    use std::collections::{BTreeSet, HashMap};
    const FSIZE: u64 = 2 * MIB;
    const PAGE: u64 = 4096;
    let len = 512 * 1024;
    let mut m = MemoryManager::new(MemoryConfig::for_budget(256 * MIB));
    let mut resident: HashMap<FileId, BTreeSet<u64>> = HashMap::new();
    let apply = |resident: &mut HashMap<FileId, BTreeSet<u64>>, drops: Vec<Drop>| {
        for d in drops {
            if let Some((a, b)) = page_aligned(d.start, d.end, FSIZE, PAGE) {
                if let Some(set) = resident.get_mut(&d.file) {
                    for p in a / PAGE..b.div_ceil(PAGE) {
                        set.remove(&p);
                    }
                }
            }
        }
    };
    // viewer: (file, next request offset, next request time, requests left)
    let mut viewers: Vec<(FileId, u64, f64, u32)> = Vec::new();
    let mut rng = 99u64;
    let mut next = || xorshift(&mut rng);
    let mut worst = 0i64;
    for tick in 0..4000u64 {
        let now = tick as f64 * 0.05;
        if tick < 3000 && tick % 2 == 0 {
            // ~20 arrivals a second over 300 files, popular ones more often.
            let r = next();
            let file = (r % 300).min(r % 37) + 1;
            viewers.push((file, 0, now, 1 + (next() % 4) as u32));
        }
        for (vid, v) in viewers.iter_mut().enumerate() {
            if v.3 == 0 || v.2 > now {
                continue;
            }
            let (file, at) = (v.0, v.1);
            let end = (at + len).min(FSIZE);
            let (id, d) = m.request(file, Some(vid as u64), at, end, FSIZE, 419, now);
            apply(&mut resident, d);
            let set = resident.entry(file).or_default();
            let missing = (at / PAGE..end.div_ceil(PAGE)).any(|p| !set.contains(&p));
            if missing {
                let read_end = (at + m.prefetch_cap(id).clamp(end - at, 3 * MIB)).min(FSIZE);
                for p in at / PAGE..read_end.div_ceil(PAGE) {
                    set.insert(p);
                }
                let d = m.read(id, at, read_end);
                apply(&mut resident, d);
            }
            let d = m.consumed(id, end, now);
            apply(&mut resident, d);
            v.1 = end;
            v.2 = now + 10.0;
            v.3 -= 1;
            if end >= FSIZE {
                v.3 = 0;
            }
        }
        if tick % 20 == 0 {
            let d = m.expire(now);
            apply(&mut resident, d);
            let t = m.totals();
            let res: u64 = resident.values().map(|s| s.len() as u64 * PAGE).sum();
            let lag = m.streams.len() as u64 * m.config().drop_lag_bytes;
            let accounted = t.unconsumed_bytes + t.kept_bytes + t.consumed_cached_bytes;
            let excess = res as i64 - (accounted + lag) as i64;
            worst = worst.max(excess);
            if tick % 400 == 0 {
                eprintln!(
                    "t={now:.0}s resident {:.1} MiB accounted {:.1} (+lag {:.1}) streams {}",
                    res as f64 / MIB as f64,
                    accounted as f64 / MIB as f64,
                    lag as f64 / MIB as f64,
                    m.streams.len()
                );
            }
        }
    }
    assert!(
        worst <= 0,
        "resident exceeded what the manager accounts for by {worst} bytes"
    );
}

#[test]
fn a_closed_connection_frees_its_share_and_then_its_read_ahead() {
    let mut m = MemoryManager::new(cfg(256 * MIB));
    let (a, _) = m.request(1, Some(10), 0, MIB, SIZE, 419, 0.0);
    let (b, _) = m.request(2, Some(20), 0, MIB, SIZE, 419, 0.0);
    for c in 30..38 {
        first_read(&mut m, c, 419);
    }
    m.read(b, 0, 8 * MIB);
    let shared = m.prefetch_cap(a);
    m.closed(20);
    let alone = m.prefetch_cap(a);
    assert!(
        alone > shared,
        "closing b's connection must enlarge a's share ({shared} → {alone})"
    );
    // Its read-ahead waits a little for a reconnecting player, then goes.
    assert!(m.expire(1.0).is_empty());
    assert_eq!(m.totals().unconsumed_bytes, 8 * MIB);
    let drops = m.expire(6.0);
    assert_eq!(total(&drops), 8 * MIB);
    assert_eq!(m.totals().unconsumed_bytes, 0);
}

#[test]
fn a_viewer_who_reconnects_keeps_its_stream() {
    let mut m = MemoryManager::new(cfg(256 * MIB));
    let (b, _) = m.request(2, Some(20), 0, MIB, SIZE, 419, 0.0);
    m.read(b, 0, 8 * MIB);
    m.closed(20);
    let (again, drops) = m.request(2, Some(20), MIB, 2 * MIB, SIZE, 419, 2.0);
    assert_eq!(again, b);
    assert!(drops.is_empty());
    assert!(m.expire(7.0).is_empty(), "asked again: not closed any more");
    assert_eq!(m.totals().unconsumed_bytes, 7 * MIB);
}

#[test]
fn bytes_within_the_drop_lag_count_against_the_caps() {
    // Two streams; one has sent 512 KiB it has not released (the lag): the other's cap
    // leaves room for them.
    let mut m = MemoryManager::new(MemoryConfig {
        drop_lag_bytes: MIB,
        ..tight(16 * MIB)
    });
    let (a, _) = m.request(1, Some(1), 0, MIB / 2, SIZE, 419, 0.0);
    m.read(a, 0, MIB / 2);
    m.consumed(a, MIB / 2, 0.1);
    let (b, _) = m.request(2, Some(2), 0, MIB / 2, SIZE, 419, 0.2);
    let lag_of_a = m.streams[&a].resident();
    assert_eq!(
        lag_of_a,
        MIB / 2,
        "a's sent bytes within the lag are resident"
    );
    assert!(m.prefetch_cap(b) + lag_of_a <= m.prefetch_pool());
}

#[test]
fn many_open_streams_do_not_shut_out_the_consumed_cache() {
    // 300 streams that each read 1 MiB and sent it: their next reads would reserve 300 MiB
    // of a 192 MiB usable budget; only `read_headroom_bytes` of it is set aside, so what
    // they sent stays cached (for the next viewer of a popular title) up to the rest.
    let mut m = MemoryManager::new(cfg(256 * MIB));
    for c in 0..300u64 {
        let id = first_read(&mut m, c, 419);
        m.read(id, 0, MIB);
        m.consumed(id, MIB, 0.5);
    }
    let room = m.config().usable_bytes() - m.config().read_headroom_bytes;
    assert_eq!(m.totals().consumed_cached_bytes, room);
    // A new read makes room by dropping the oldest consumed bytes.
    let (id, _) = m.request(999, Some(999), 0, MIB, SIZE, 419, 1.0);
    let drops = m.read(id, 0, 64 * MIB);
    assert_eq!(total(&drops), 64 * MIB);
    assert!(
        drops.windows(2).all(|w| w[0].file <= w[1].file),
        "oldest first"
    );
}

/// Viewers of one title arriving every `every` seconds, each consuming 250 kB/s (2 Mbit/s)
/// in 512 KiB requests with 1 MiB reads, for `until` seconds; `probe` sees the totals every
/// 0.1 s.
fn arrivals(
    cfg: MemoryConfig,
    every: f64,
    viewers: u64,
    until: f64,
    probe: &mut dyn FnMut(f64, &MemoryTotals),
) -> MemoryManager {
    let mut m = MemoryManager::new(cfg);
    let rate = 250_000.0;
    let mut next = vec![0u64; viewers as usize];
    let mut tick = 0u64;
    loop {
        let t = tick as f64 / 10.0;
        if t >= until {
            return m;
        }
        for v in 0..viewers {
            let start = v as f64 * every;
            if t < start {
                continue;
            }
            let due = ((t - start) * rate) as u64;
            while next[v as usize] <= due {
                let at = next[v as usize];
                let (id, _) = step(&mut m, v + 1, at, 512 * KIB, MIB, t);
                m.consumed(id, at + 512 * KIB, t);
                next[v as usize] += 512 * KIB;
            }
        }
        if tick.is_multiple_of(10) {
            m.expire(t);
        }
        probe(t, &m.totals());
        tick += 1;
    }
}

/// 8 MiB usable, all of it open to intervals: room for one real and one predicted 2.5 MB
/// interval, little left for the consumed-cache.
fn for_intervals() -> MemoryConfig {
    MemoryConfig {
        interval_share: 1.0,
        ..tight(8 * MIB)
    }
}

#[test]
fn the_next_viewer_of_a_popular_title_finds_what_the_last_one_sent() {
    // Viewers 10 s apart at 250 kB/s: once two have come, the next is expected 2.5 MB
    // behind the last, and what that one sends is kept for it.
    let (mut at_20, mut at_30, mut max_kept) = (0, 0, 0);
    arrivals(for_intervals(), 10.0, 3, 30.05, &mut |t, tot| {
        if (t - 19.9).abs() < 1e-6 {
            at_20 = tot.interval_hit_bytes;
        }
        at_30 = tot.interval_hit_bytes;
        max_kept = max_kept.max(tot.kept_bytes);
    });
    // From 20 s to 30 s viewer 2 reads the interval kept behind viewer 1 (2.5 MB) and
    // viewer 3, arriving at 20 s, the 2.5 MB viewer 2 sent in the 10 s before: 5 MB. The
    // consumed-cache alone (about 0.4 MB of room) would give viewer 3 almost nothing.
    let gained = at_30 - at_20;
    assert!(gained >= 4_500_000, "interval hits 20-30 s: {gained}");
    // Kept: at most the two real intervals and the one predicted behind viewer 3, each
    // 2.5 MB (plus a request of slack), and never beyond the usable budget.
    assert!(max_kept <= 7_500_000 + MIB, "kept {max_kept}");
}

#[test]
fn a_title_with_one_viewer_keeps_nothing_for_nobody() {
    let mut max_kept = 0;
    let m = arrivals(tight(4 * MIB), 10.0, 1, 30.0, &mut |_, t| {
        max_kept = max_kept.max(t.kept_bytes)
    });
    let t = m.totals();
    assert_eq!(max_kept, 0, "{t:?}");
    assert_eq!(t.interval_hit_bytes, 0);
    assert!(t.dropped_bytes > 0, "{t:?}");
}

#[test]
fn viewers_too_rare_for_the_budget_are_not_anticipated() {
    // 60 s apart: 15 MB predicted, more than the 8 MiB the intervals may take.
    let mut max_kept = 0;
    arrivals(for_intervals(), 60.0, 2, 100.0, &mut |_, t| {
        max_kept = max_kept.max(t.kept_bytes)
    });
    assert_eq!(max_kept, 0);
}

/// A viewer's first MiB read in a budget of 16 MiB with no reserve: the manager, its
/// stream, and the prefetch pool and the stream's cap then.
fn one_reader_in_16_mib() -> (MemoryManager, StreamId, (u64, u64)) {
    let mut m = MemoryManager::new(tight(16 * MIB));
    let (a, _) = step(&mut m, 1, 0, MIB, MIB, 0.0);
    let before = (m.prefetch_pool(), m.prefetch_cap(a));
    (m, a, before)
}

#[test]
fn bytes_socket_buffers_still_hold_come_off_the_budget() {
    let (mut m, a, before) = one_reader_in_16_mib();
    // 6 MiB of dropped pages are still referenced by socket buffers.
    m.set_unreleased(6 * MIB);
    assert_eq!(m.prefetch_pool(), before.0 - 6 * MIB);
    assert!(
        m.prefetch_cap(a) < before.1,
        "{before:?} {}",
        m.prefetch_cap(a)
    );
    assert_eq!(m.totals().unreleased_bytes, 6 * MIB);
    // Once they are let go, the room comes back.
    m.set_unreleased(0);
    assert_eq!((m.prefetch_pool(), m.prefetch_cap(a)), before);
}

#[test]
fn the_consumed_cache_gives_up_a_lone_viewers_bytes_before_a_popular_titles() {
    // 12 MiB usable, no intervals: what viewers sent waits in the consumed-cache.
    let mut m = MemoryManager::new(MemoryConfig {
        interval_share: 0.0,
        ..tight(12 * MIB)
    });
    // Title F gets a new viewer every 2 s; each reads and is sent its first 2 MiB.
    for (k, t) in [0.0, 2.0, 4.0].into_iter().enumerate() {
        let (id, _) = step(&mut m, 10 + k as u64, 0, 2 * MIB, 2 * MIB, t);
        m.consumed(id, 2 * MIB, t + 0.5);
        // The viewer leaves: no next read to make room for.
        m.closed(10 + k as u64);
    }
    // Later, one viewer of title 9 (nobody else watches it) is sent 4 MiB.
    let (b, _) = m.request(9, Some(20), 0, 4 * MIB, SIZE, 2000, 6.0);
    m.read(b, 0, 4 * MIB);
    m.consumed(b, 4 * MIB, 6.5);
    m.closed(20);
    assert_eq!(m.totals().consumed_cached_bytes, 6 * MIB);
    // A third title's 8 MiB read needs room for 2 MiB: the lone viewer's bytes go although
    // they are the newest, and the popular title's beginning stays.
    let (c, _) = m.request(11, Some(30), 0, MIB, SIZE, 2000, 7.0);
    let d = m.read(c, 0, 8 * MIB);
    assert!(!d.is_empty() && d.iter().all(|d| d.file == 9), "{d:?}");
    assert!(m.claims(F, 0, 2 * MIB));
    let left: u64 = 6 * MIB - total(&d);
    assert_eq!(m.totals().consumed_cached_bytes, left);
    assert!(left + 8 * MIB <= 12 * MIB, "{left}");
}

#[test]
fn viewing_depth_survival_follows_where_streams_end() {
    let mut r = Reach::default();
    assert_eq!(r.survival(0, 100 * MIB), 1.0);
    // Half the streams stop at once, half after reading 60% of their title (the table is
    // rebuilt every 64 ends: 129 ends make the last rebuild see them all).
    for i in 0..129 {
        r.ended_at(if i % 2 == 0 { 1000 } else { 60 * MIB }, 100 * MIB);
    }
    assert!(
        (r.survival(0, 100 * MIB) - 64.0 / 129.0).abs() < 1e-9,
        "{}",
        r.survival(0, 100 * MIB)
    );
    assert!((r.survival(30 * MIB, 100 * MIB) - 64.0 / 129.0).abs() < 1e-9);
    assert_eq!(r.survival(70 * MIB, 100 * MIB), 0.0);
    // Depth is a share of the title: a title of a tenth the size has the same curve at a
    // tenth of the offsets.
    assert!((r.survival(3 * MIB, 10 * MIB) - 64.0 / 129.0).abs() < 1e-9);
    assert_eq!(r.survival(7 * MIB, 10 * MIB), 0.0);
    assert_eq!(r.reached(0, 10 * MIB), 1.0);
    assert!((r.reached(3 * MIB, 10 * MIB) - 64.0 / 129.0).abs() < 1e-9);
}

#[test]
fn a_viewer_whose_connection_closed_ends_after_min_idle_unless_it_asks_again() {
    let mut m = MemoryManager::new(cfg(256 * MIB));
    let min_idle = m.config().min_idle_s;
    let (a, _) = step(&mut m, 1, 0, MIB, 2 * MIB, 0.0);
    let (b, _) = step(&mut m, 2, 0, MIB, 0, 0.5);
    m.consumed(a, MIB, 0.2);
    m.consumed(b, MIB, 0.7);
    // Viewer 2 leaves; viewer 1 closes too but reconnects within min_idle.
    m.closed(2);
    m.closed(1);
    let (a2, _) = step(&mut m, 1, MIB, MIB, 0, 1.0 + min_idle / 2.0);
    assert_eq!(a2, a, "a player that asks again keeps its stream");
    m.expire(1.0 + min_idle / 2.0);
    assert_eq!(m.totals().streams, 2);
    m.expire(1.0 + min_idle);
    let t = m.totals();
    assert_eq!((t.streams, t.ended_streams), (1, 1), "{t:?}");
}

#[test]
fn a_cut_prefetch_is_a_whole_number_of_requests() {
    // 10 MiB usable, four streams of one bit rate: each share is 2 x 10 / 4 = 5 MiB.
    let mut m = MemoryManager::new(tight(10 * MIB));
    let ids: Vec<StreamId> = (1..=4)
        .map(|c| m.request(c, Some(c), 0, 2 * MIB, SIZE, 2000, 0.0).0)
        .collect();
    let a = ids[0];
    assert_eq!(m.prefetch_cap(a), 5 * MIB);
    // Requests of 2 MiB: the 5 MiB cap ends inside the third request, so the cut goes up
    // to its end while nothing else is resident ...
    assert_eq!(m.capped_prefetch(a, 64 * MIB, 2 * MIB), 6 * MIB);
    // ... and never past what the policy wanted.
    assert_eq!(m.capped_prefetch(a, 5 * MIB + 1, 2 * MIB), 5 * MIB + 1);
    // Uncut sizes are left alone; a request larger than the cap is one whole request.
    assert_eq!(m.capped_prefetch(a, 3 * MIB, 2 * MIB), 3 * MIB);
    assert_eq!(m.capped_prefetch(a, 64 * MIB, 8 * MIB), 8 * MIB);
    // The other streams hold 4.5 MiB ahead: 5.5 MiB are free, too few for three requests,
    // so the cut goes down to two.
    m.read(ids[1], 0, 2 * MIB);
    m.read(ids[2], 0, 2 * MIB);
    m.read(ids[3], 0, MIB / 2);
    assert_eq!(m.prefetch_cap(a), 5 * MIB);
    assert_eq!(m.capped_prefetch(a, 64 * MIB, 2 * MIB), 4 * MIB);
    // A cap below one request still reads the request.
    m.read(ids[3], 0, 2 * MIB);
    m.read(ids[1], 0, 5 * MIB);
    let last_cap = m.prefetch_cap(a);
    assert!(last_cap < 2 * MIB);
    assert_eq!(m.capped_prefetch(a, 64 * MIB, 2 * MIB), 2 * MIB);
    let t = m.totals();
    assert_eq!(t.capped_reads, 5);
    // Every sized read counts its cap, cut or not: five of 5 MiB and the last one's.
    assert_eq!((t.sized_reads, t.cap_bytes), (6, 25 * MIB + last_cap));
}

#[test]
fn memory_the_rest_of_the_server_holds_comes_off_the_budget() {
    // A live window of 10 MiB sits in the same budget as the page cache.
    let (mut m, a, before) = one_reader_in_16_mib();
    m.set_other(10 * MIB);
    assert_eq!(m.prefetch_pool(), before.0 - 10 * MIB);
    assert!(m.prefetch_cap(a) < before.1, "{before:?}");
    assert_eq!(m.totals().other_bytes, 10 * MIB);
    // With socket buffers holding some too, both come off; more than the budget leaves
    // nothing to hand out rather than wrapping around.
    m.set_unreleased(4 * MIB);
    assert_eq!(m.prefetch_pool(), before.0 - 14 * MIB);
    m.set_other(64 * MIB);
    assert_eq!(m.prefetch_pool(), 0);
    // The window shrinks: the room comes back.
    m.set_other(0);
    m.set_unreleased(0);
    assert_eq!((m.prefetch_pool(), m.prefetch_cap(a)), before);
}

#[test]
fn drops_widen_to_whole_folios_only_over_unclaimed_bytes() {
    let mut m = MemoryManager::new(cfg(1 << 30));
    let (id, _) = m.request(F, Some(1), 0, MIB, SIZE, 2000, 0.0);
    m.read(id, 0, 3 * MIB);
    let unit = 2 * MIB;
    let d = |start, end| Drop {
        file: F,
        start,
        end,
    };
    // Clear of the stream's unsent read-ahead: both sides go out to folio boundaries.
    assert_eq!(
        m.widened(d(5 * MIB + 100, 7 * MIB - 100), unit, SIZE),
        d(4 * MIB, 8 * MIB)
    );
    // The head's folio holds the stream's read-ahead: only the tail widens.
    assert_eq!(
        m.widened(d(2 * MIB + 100, 3 * MIB + 5), unit, SIZE),
        d(2 * MIB + 100, 4 * MIB)
    );
    // Never past the end of the file; aligned drops and unit 0 are unchanged.
    assert_eq!(
        m.widened(d(SIZE - 100, SIZE - 10), unit, SIZE - 5),
        d(SIZE - 2 * MIB, SIZE - 5)
    );
    assert_eq!(
        m.widened(d(4 * MIB, 6 * MIB), unit, SIZE),
        d(4 * MIB, 6 * MIB)
    );
    assert_eq!(m.widened(d(5, 9), 0, SIZE), d(5, 9));
}

#[test]
fn streams_on_counts_the_files_current_streams() {
    let mut m = MemoryManager::new(cfg(1 << 30));
    assert_eq!(m.streams_on(F), 0);
    m.request(F, Some(1), 0, MIB, SIZE, 2000, 0.0);
    m.request(F, Some(2), 50 * MIB, 51 * MIB, SIZE, 2000, 0.0);
    m.request(F + 1, Some(3), 0, MIB, SIZE, 2000, 0.0);
    assert_eq!(m.streams_on(F), 2);
    m.closed(2);
    m.expire(1000.0);
    assert!(m.streams_on(F) < 2, "{}", m.streams_on(F));
}

#[test]
fn a_retention_without_followers_keeps_no_interval() {
    let spec: RetentionSpec = "greedy-dual".parse().unwrap();
    let mut m = MemoryManager::new(MemoryConfig {
        retention: spec,
        ..cfg(1 << 30)
    });
    let (lead, _) = step(&mut m, 1, 0, MIB, 2 * MIB, 0.0);
    m.consumed(lead, 6 * MIB, 1.0);
    step(&mut m, 2, 0, MIB, 2 * MIB, 2.0);
    m.consumed(lead, 10 * MIB, 3.0);
    let t = m.totals();
    assert_eq!(t.kept_bytes, 0);
    assert_eq!(t.horizon_bytes, 0);
    // What the leader sent waits in the consumed-cache instead (the budget has room),
    // less the 2 MiB the follower's first read took back into use.
    assert_eq!(t.consumed_cached_bytes, 8 * MIB);
}

#[test]
fn every_retention_stays_within_the_budget_and_drops_what_it_refuses() {
    for spec in RetentionSpec::all() {
        let usable = 48 * MIB;
        let mut m = MemoryManager::new(MemoryConfig {
            retention: spec,
            ..tight(usable)
        });
        let mut resident: Map<FileId, Vec<(u64, u64)>> = Map::default();
        let bytes = |r: &Map<FileId, Vec<(u64, u64)>>| -> u64 {
            r.values().flatten().map(|(a, b)| b - a).sum()
        };
        let apply = |r: &mut Map<FileId, Vec<(u64, u64)>>, drops: Vec<Drop>| {
            for d in drops {
                if let Some(v) = r.get_mut(&d.file) {
                    crate::ledger::cut(v, d.start, d.end);
                }
            }
        };
        let len = 512 * KIB;
        let mut pos = [0u64; 24];
        let mut rng = 99u64;
        for tick in 0..3000u64 {
            let v = (xorshift(&mut rng) % 24) as usize;
            // Viewers of six titles; a viewer who reaches 16 MiB starts again elsewhere.
            let file = (v % 6) as FileId;
            if pos[v] >= 16 * MIB {
                pos[v] = 0;
            }
            let now = tick as f64 * 0.05;
            let (id, d) = m.request(file, Some(v as u64), pos[v], pos[v] + len, SIZE, 2000, now);
            apply(&mut resident, d);
            let have = resident.get(&file).map_or(0, |r| {
                r.iter()
                    .map(|&(a, b)| b.min(pos[v] + len).saturating_sub(a.max(pos[v])))
                    .sum()
            });
            if have < len {
                let read = m.capped_prefetch(id, 4 * MIB, len).max(len);
                let r = resident.entry(file).or_default();
                r.push((pos[v], pos[v] + read));
                *r = merge(std::mem::take(r));
                let d = m.read(id, pos[v], pos[v] + read);
                apply(&mut resident, d);
            }
            pos[v] += len;
            let d = m.consumed(id, pos[v], now);
            apply(&mut resident, d);
            if tick % 20 == 0 {
                let d = m.expire(now);
                apply(&mut resident, d);
            }
            // Resident bytes stay within the usable budget, a read and the headroom.
            assert!(
                bytes(&resident) <= usable + 4 * MIB + m.config().read_headroom_bytes,
                "{spec} tick {tick}: resident {} of {usable}",
                bytes(&resident)
            );
        }
        let d = m.end_all();
        apply(&mut resident, d);
        assert_eq!(m.totals().consumed_cached_bytes, 0, "{spec}");
    }
}

#[test]
fn reads_stop_where_viewers_leave_unless_a_positioning_costs_more() {
    let mut m = MemoryManager::new(MemoryConfig::for_budget(1 << 30));
    let size = 100 * MIB;
    // Half the viewers leave a tenth into a title, the others watch it to the end.
    for i in 0..128 {
        m.reach
            .ended_at(if i % 2 == 0 { 10 * MIB } else { size }, size);
    }
    // Without a price for a positioning nothing is cut.
    assert_eq!(m.survival_len(0, size, 40 * MIB, MIB), 40 * MIB);
    // A positioning worth 1 MiB of transfer: reading on past the departures costs more
    // per watched byte than a second read would, so the read ends at the departures'
    // bucket, rounded up to whole 1 MiB requests.
    m.set_positioning_bytes(MIB);
    assert_eq!(m.survival_len(0, size, 40 * MIB, MIB), 11 * MIB);
    // Past the departures everyone left watches to the end: nothing to cut.
    assert_eq!(m.survival_len(20 * MIB, size, 40 * MIB, MIB), 40 * MIB);
    // A positioning worth 64 MiB: the long read wins despite the leavers.
    m.set_positioning_bytes(64 * MIB);
    assert_eq!(m.survival_len(0, size, 40 * MIB, MIB), 40 * MIB);
    // The switch turns the cut off in the manager's sizing.
    m.set_positioning_bytes(MIB);
    let (id, _) = m.request(F, Some(1), 0, MIB, size, 2000, 0.0);
    let on = m.capped_prefetch(id, 40 * MIB, MIB);
    let mut off = MemoryManager::new(MemoryConfig {
        survival_reads: false,
        ..MemoryConfig::for_budget(1 << 30)
    });
    off.reach = m.reach.clone();
    off.set_positioning_bytes(MIB);
    let (id, _) = off.request(F, Some(1), 0, MIB, size, 2000, 0.0);
    let full = off.capped_prefetch(id, 40 * MIB, MIB);
    assert!(on < full, "{on} vs {full}");
    assert_eq!(on, (11 * MIB).min(full));
}
