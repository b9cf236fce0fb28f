//! Eviction orders over keyed, sized entries — FIFO, LRU, SIEVE and S3-FIFO — as the
//! consumed-cache's queue retentions use them, and [`ObjectCache`], the same orders run as a
//! plain object cache over a request trace (what `vodkit simulate --replay --export-trace`
//! checks against libCacheSim).
//!
//! SIEVE (Zhang et al., NSDI '24): one FIFO queue, a visited bit per entry, and a hand that
//! walks from the oldest entry towards the newest, clearing bits until it finds an unvisited
//! entry to evict. S3-FIFO (Yang et al., SOSP '23): a small FIFO (a tenth of the capacity)
//! that new entries enter, a main FIFO that entries asked for again while small move to,
//! and a ghost FIFO of keys evicted from the small queue: a key that comes back while its
//! ghost is remembered enters the main queue directly. Frequencies and thresholds follow
//! libCacheSim's defaults (promotion at two hits, main re-insertion while the frequency,
//! capped at 3, is positive).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;

/// Which order evicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, strum::IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum Algo {
    Fifo,
    Lru,
    Sieve,
    S3Fifo,
}

impl Algo {
    /// The name libCacheSim and the command line use.
    pub fn name(self) -> &'static str {
        self.into()
    }

    pub const ALL: [Algo; 4] = [Algo::Fifo, Algo::Lru, Algo::Sieve, Algo::S3Fifo];
}

/// S3-FIFO's small queue: this share of the capacity.
const SMALL_SHARE: f64 = 0.1;
/// S3-FIFO's ghost queue remembers keys worth this share of the capacity.
const GHOST_SHARE: f64 = 0.9;
/// S3-FIFO: hits in the small queue that move an entry to the main queue.
const TO_MAIN_HITS: u8 = 2;
/// Keys taken out for use whose frequency is remembered for their return.
const TAKEN_MEMORY: usize = 1 << 16;

#[derive(Clone, Copy, Debug)]
struct Entry {
    seq: u64,
    size: u64,
    freq: u8,
    main: bool,
}

/// One eviction order (see the module doc). Keys are unique; the caller decides when to
/// evict and how large the capacity is at that moment.
#[derive(Clone, Debug)]
pub struct Order<K: Copy + Eq + Hash> {
    algo: Algo,
    entries: HashMap<K, Entry>,
    /// Oldest first: the only queue (FIFO, LRU, SIEVE) or S3-FIFO's small queue.
    small: BTreeMap<u64, K>,
    /// S3-FIFO's main queue, oldest first.
    main: BTreeMap<u64, K>,
    small_bytes: u64,
    main_bytes: u64,
    /// S3-FIFO's ghost: keys evicted from the small queue, oldest first, with their sizes.
    ghost: BTreeMap<u64, (K, u64)>,
    ghost_index: HashMap<K, u64>,
    ghost_bytes: u64,
    /// SIEVE's hand: the sequence number it points at (`None`: the oldest entry).
    hand: Option<u64>,
    seq: u64,
    /// Frequencies of keys taken out for use ([`Order::take`]), restored when they return.
    taken: HashMap<K, (u8, bool)>,
    taken_fifo: VecDeque<K>,
}

impl<K: Copy + Eq + Hash> Order<K> {
    pub fn new(algo: Algo) -> Self {
        Order {
            algo,
            entries: HashMap::new(),
            small: BTreeMap::new(),
            main: BTreeMap::new(),
            small_bytes: 0,
            main_bytes: 0,
            ghost: BTreeMap::new(),
            ghost_index: HashMap::new(),
            ghost_bytes: 0,
            hand: None,
            seq: 0,
            taken: HashMap::new(),
            taken_fifo: VecDeque::new(),
        }
    }

    pub fn algo(&self) -> Algo {
        self.algo
    }

    pub fn contains(&self, key: K) -> bool {
        self.entries.contains_key(&key)
    }

    /// Bytes of the entries.
    pub fn bytes(&self) -> u64 {
        self.small_bytes + self.main_bytes
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A new entry. A key taken out for use comes back with its frequency plus the use; a
    /// key S3-FIFO's ghost remembers enters the main queue.
    pub fn insert(&mut self, key: K, size: u64) {
        if self.contains(key) {
            return;
        }
        let (freq, main) = match self.taken.remove(&key) {
            Some((f, m)) => (f.saturating_add(1), m),
            None => (0, false),
        };
        let main = self.forget_ghost(key) || main;
        self.push(key, size, freq, main);
    }

    /// Whether S3-FIFO's ghost remembered `key`; forgets it.
    pub fn forget_ghost(&mut self, key: K) -> bool {
        match self.ghost_index.remove(&key) {
            Some(seq) => {
                if let Some((_, size)) = self.ghost.remove(&seq) {
                    self.ghost_bytes -= size;
                }
                true
            }
            None => false,
        }
    }

    fn push(&mut self, key: K, size: u64, freq: u8, main: bool) {
        self.seq += 1;
        let main = main && self.algo == Algo::S3Fifo;
        let freq = match self.algo {
            Algo::Sieve => freq.min(1),
            Algo::S3Fifo => freq,
            Algo::Fifo | Algo::Lru => 0,
        };
        self.entries.insert(
            key,
            Entry {
                seq: self.seq,
                size,
                freq,
                main,
            },
        );
        if main {
            self.main.insert(self.seq, key);
            self.main_bytes += size;
        } else {
            self.small.insert(self.seq, key);
            self.small_bytes += size;
        }
    }

    /// `key` was asked for while present.
    pub fn hit(&mut self, key: K) {
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        match self.algo {
            Algo::Fifo => {}
            Algo::Sieve => e.freq = 1,
            Algo::S3Fifo => e.freq = e.freq.saturating_add(1),
            Algo::Lru => {
                let (size, old) = (e.size, e.seq);
                self.unlink(key, old);
                self.push(key, size, 0, false);
            }
        }
    }

    /// Removes `key` without evicting it (it left the cache for another reason); its size.
    pub fn remove(&mut self, key: K) -> Option<u64> {
        let e = *self.entries.get(&key)?;
        self.unlink(key, e.seq);
        Some(e.size)
    }

    /// Removes `key` because it is in use again; its frequency is remembered for when it
    /// comes back ([`Order::insert`]).
    pub fn take(&mut self, key: K) -> Option<u64> {
        let e = *self.entries.get(&key)?;
        self.unlink(key, e.seq);
        if self.taken.insert(key, (e.freq, e.main)).is_none() {
            self.taken_fifo.push_back(key);
            while self.taken_fifo.len() > TAKEN_MEMORY {
                if let Some(old) = self.taken_fifo.pop_front() {
                    self.taken.remove(&old);
                }
            }
        }
        Some(e.size)
    }

    /// Takes `key` (at `seq`) out of its queue.
    fn unlink(&mut self, key: K, seq: u64) -> Option<Entry> {
        let e = self.entries.remove(&key)?;
        if e.main {
            self.main.remove(&seq);
            self.main_bytes -= e.size;
        } else {
            if self.hand == Some(seq) {
                self.hand = self.newer(seq);
            }
            self.small.remove(&seq);
            self.small_bytes -= e.size;
        }
        Some(e)
    }

    /// The entry after `seq` towards the newest in the single queue.
    fn newer(&self, seq: u64) -> Option<u64> {
        use std::ops::Bound::{Excluded, Unbounded};
        self.small
            .range((Excluded(seq), Unbounded))
            .next()
            .map(|(&s, _)| s)
    }

    /// Evicts one entry for a cache of `capacity` bytes (S3-FIFO sizes its queues from it);
    /// `None` when empty.
    pub fn evict(&mut self, capacity: u64) -> Option<(K, u64)> {
        match self.algo {
            Algo::Fifo | Algo::Lru => {
                let (&seq, &key) = self.small.iter().next()?;
                self.unlink(key, seq).map(|e| (key, e.size))
            }
            Algo::Sieve => self.evict_sieve(),
            Algo::S3Fifo => self.evict_s3fifo(capacity),
        }
    }

    /// SIEVE: from the hand towards the newest (wrapping to the oldest), clear visited bits
    /// until an unvisited entry; evict it and leave the hand at the next newer one.
    fn evict_sieve(&mut self) -> Option<(K, u64)> {
        let oldest = *self.small.keys().next()?;
        let mut at = self.hand.unwrap_or(oldest);
        loop {
            let key = *self.small.get(&at)?;
            let e = self.entries.get_mut(&key)?;
            if e.freq == 0 {
                let next = self.newer(at);
                let gone = self.unlink(key, at);
                self.hand = next;
                return gone.map(|e| (key, e.size));
            }
            e.freq -= 1;
            at = self.newer(at).unwrap_or(oldest);
        }
    }

    /// S3-FIFO: evict from the main queue while it is over its share or the small queue is
    /// empty, else from the small queue (promoting entries hit twice); until one entry left.
    fn evict_s3fifo(&mut self, capacity: u64) -> Option<(K, u64)> {
        let small_cap = (capacity as f64 * SMALL_SHARE) as u64;
        let main_cap = capacity - small_cap;
        let ghost_cap = (capacity as f64 * GHOST_SHARE) as u64;
        while !self.entries.is_empty() {
            if self.main_bytes > main_cap || self.small_bytes == 0 {
                // Main: entries used since they were last here go round again.
                while let Some((&seq, &key)) = self.main.iter().next() {
                    let e = self.unlink(key, seq)?;
                    if e.freq >= 1 {
                        self.push(key, e.size, e.freq.min(3) - 1, true);
                    } else {
                        return Some((key, e.size));
                    }
                }
            } else {
                while let Some((&seq, &key)) = self.small.iter().next() {
                    let e = self.unlink(key, seq)?;
                    if e.freq >= TO_MAIN_HITS {
                        self.push(key, e.size, 0, true);
                    } else {
                        self.remember_ghost(key, e.size, ghost_cap);
                        return Some((key, e.size));
                    }
                }
            }
        }
        None
    }

    /// S3-FIFO's ghost: a FIFO of keys holding at most `cap` bytes of their sizes.
    fn remember_ghost(&mut self, key: K, size: u64, cap: u64) {
        if self.ghost_index.contains_key(&key) || size > cap {
            return;
        }
        while self.ghost_bytes + size > cap {
            let Some((&seq, &(old, s))) = self.ghost.iter().next() else {
                break;
            };
            self.ghost.remove(&seq);
            self.ghost_index.remove(&old);
            self.ghost_bytes -= s;
        }
        self.seq += 1;
        self.ghost.insert(self.seq, (key, size));
        self.ghost_index.insert(key, self.seq);
        self.ghost_bytes += size;
    }
}

/// An order run as an object cache of fixed capacity: a request for a present key is a
/// hit; otherwise the cache evicts until the object fits and admits it (an object larger
/// than the cache, or for S3-FIFO at least its small queue and not a ghost, is not
/// admitted) — libCacheSim's `get`. As libCacheSim does, S3-FIFO admits to its main queue
/// while the cache has room without evicting.
#[derive(Clone, Debug)]
pub struct ObjectCache<K: Copy + Eq + Hash> {
    order: Order<K>,
    capacity: u64,
}

impl<K: Copy + Eq + Hash> ObjectCache<K> {
    pub fn new(algo: Algo, capacity: u64) -> Self {
        ObjectCache {
            order: Order::new(algo),
            capacity,
        }
    }

    /// One request of object `key` of `size` bytes; whether it hit.
    pub fn get(&mut self, key: K, size: u64) -> bool {
        if self.order.contains(key) {
            self.order.hit(key);
            return true;
        }
        let ghost = self.order.algo == Algo::S3Fifo && self.order.forget_ghost(key);
        if size > self.capacity {
            return false;
        }
        if self.order.algo == Algo::S3Fifo
            && !ghost
            && size >= (self.capacity as f64 * SMALL_SHARE) as u64
        {
            return false;
        }
        // libCacheSim 0.3.5 fills an S3-FIFO cache that has room through its main queue.
        let room = self.order.bytes() + size <= self.capacity;
        while self.order.bytes() + size > self.capacity {
            if self.order.evict(self.capacity).is_none() {
                break;
            }
        }
        self.order.push(key, size, 0, ghost || room);
        false
    }

    pub fn bytes(&self) -> u64 {
        self.order.bytes()
    }
}

/// Byte miss ratio of `trace` (object, size) through an `algo` cache of `capacity` bytes;
/// also the request miss ratio.
pub fn miss_ratios<K: Copy + Eq + Hash>(
    algo: Algo,
    capacity: u64,
    trace: impl IntoIterator<Item = (K, u64)>,
) -> (f64, f64) {
    let mut c = ObjectCache::new(algo, capacity);
    let (mut reqs, mut misses, mut bytes, mut missed) = (0u64, 0u64, 0u64, 0u64);
    for (k, size) in trace {
        reqs += 1;
        bytes += size;
        if !c.get(k, size) {
            misses += 1;
            missed += size;
        }
    }
    let r = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
    (r(missed, bytes), r(misses, reqs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithms_are_named_as_libcachesim_names_them() {
        let names: Vec<_> = Algo::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(names, ["fifo", "lru", "sieve", "s3-fifo"]);
    }

    fn run(algo: Algo, cap: u64, keys: &[u64]) -> Vec<bool> {
        let mut c = ObjectCache::new(algo, cap);
        keys.iter().map(|&k| c.get(k, 10)).collect()
    }

    #[test]
    fn lru_keeps_the_recently_used_and_fifo_does_not() {
        // Capacity 2 objects: 1 2 1 3 1 — LRU evicts 2 for 3 and hits 1; FIFO evicts 1.
        let keys = [1, 2, 1, 3, 1];
        assert_eq!(run(Algo::Lru, 20, &keys), [false, false, true, false, true]);
        assert_eq!(
            run(Algo::Fifo, 20, &keys),
            [false, false, true, false, false]
        );
    }

    #[test]
    fn sieve_spares_visited_entries_and_moves_its_hand() {
        // 1 2 3, hit 1, then 4: the hand passes visited 1 (clearing it) and evicts 2.
        let keys = [1, 2, 3, 1, 4, 1, 3, 2];
        assert_eq!(
            run(Algo::Sieve, 30, &keys),
            [false, false, false, true, false, true, true, false]
        );
    }

    #[test]
    fn s3fifo_sends_one_hit_wonders_to_the_ghost_and_returning_keys_to_main() {
        let mut c = ObjectCache::new(Algo::S3Fifo, 100);
        // Objects of 5 bytes (small queue 10 bytes: 5 < 10, admitted). While it has room
        // the cache fills through the main queue.
        for k in 0..20u64 {
            c.get(k, 5);
        }
        assert!(c.order.entries.values().all(|e| e.main));
        // Full: the main queue (over its 90 bytes) gives up its oldest for 100 and 101,
        // which enter the small queue.
        assert!(!c.get(100, 5));
        assert!(!c.get(101, 5));
        assert!(!c.order.contains(0) && !c.order.contains(1));
        assert!(!c.order.ghost_index.contains_key(&0));
        // Main is back at its share: the small queue's oldest, 100, goes to the ghost.
        assert!(!c.get(102, 5));
        assert!(!c.order.contains(100));
        assert!(c.order.ghost_index.contains_key(&100));
        // 100 comes back: from the ghost straight into the main queue.
        assert!(!c.get(100, 5));
        assert!(c.order.entries[&100].main);
        assert!(c.bytes() <= 100);
    }

    #[test]
    fn taken_keys_come_back_with_their_use_counted() {
        let mut o: Order<u64> = Order::new(Algo::Sieve);
        o.insert(1, 10);
        o.insert(2, 10);
        o.take(1);
        o.insert(1, 10);
        // 1 returned visited: 2 goes first.
        assert_eq!(o.evict(20), Some((2, 10)));
        assert_eq!(o.evict(20), Some((1, 10)));
        assert_eq!(o.evict(20), None);
    }
}
