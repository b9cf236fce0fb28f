//! Retention: what the memory manager keeps of the bytes its viewers have consumed, behind
//! one trait so the server, the preload daemon and the memory replay run the same rules and
//! the replay compares candidates by swapping one value ([`RetentionSpec`] in
//! [`super::MemoryConfig::retention`]).
//!
//! A retention answers three questions at the manager's granularity (byte ranges of titles):
//!
//! - **followers**: are consumed bytes kept for a stream that follows (Dan & Sitaram's interval
//!   caching, with the follower predicted from the title's arrivals when none is there yet)?
//! - **admission**: does a consumed range enter the consumed-cache at all? With `prefix`, only
//!   ranges worth at least what the cache has lately been evicting: a range's worth is its
//!   title's arrival rate times the share of viewers who read that deep (the workload's
//!   survival curve), so each title keeps a prefix whose length grows with its popularity;
//! - **eviction**: which cached range goes first when the budget needs room — GreedyDual on
//!   that worth (the least valuable first, ageing by the value of the last eviction), or one
//!   of the queue orders of [`super::order`]: FIFO, LRU, SIEVE, S3-FIFO (a ghost list admits
//!   ranges evicted once and asked for again to its main queue).

use super::order::{Algo, Order};
use crate::policy::FileId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A consumed-cache range: its file and first byte.
pub type Key = (FileId, u64);

/// How the consumed-cache orders its ranges for eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Eviction {
    /// GreedyDual on the range's worth (arrival rate × survival of its depth).
    GreedyDual,
    Queue(Algo),
}

/// A retention, as configured: `followers`, `prefix` and an eviction order joined by `+`
/// (`followers+greedy-dual`, `prefix+sieve`, `s3-fifo`, ...; the order defaults to
/// `greedy-dual`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RetentionSpec {
    pub followers: bool,
    pub prefix: bool,
    pub eviction: Eviction,
}

impl Default for RetentionSpec {
    /// Interval caching with predicted followers, GreedyDual for the rest.
    fn default() -> Self {
        RetentionSpec {
            followers: true,
            prefix: false,
            eviction: Eviction::GreedyDual,
        }
    }
}

impl RetentionSpec {
    /// The candidates `--retention all` compares.
    pub fn all() -> Vec<RetentionSpec> {
        let mut v = Vec::new();
        for followers in [true, false] {
            for (prefix, eviction) in [
                (false, Eviction::GreedyDual),
                (true, Eviction::GreedyDual),
                (false, Eviction::Queue(Algo::Lru)),
                (false, Eviction::Queue(Algo::Sieve)),
                (false, Eviction::Queue(Algo::S3Fifo)),
            ] {
                v.push(RetentionSpec {
                    followers,
                    prefix,
                    eviction,
                });
            }
        }
        v
    }

    /// A comma-separated list of specs, or `all`.
    pub fn parse_list(text: &str) -> Result<Vec<RetentionSpec>, String> {
        if text.trim() == "all" {
            return Ok(Self::all());
        }
        text.split(',').map(str::parse).collect()
    }

    /// The retention this spec describes.
    pub fn build(self) -> Box<dyn Retention> {
        match self.eviction {
            Eviction::GreedyDual => Box::new(GreedyDual::new(self)),
            Eviction::Queue(algo) => Box::new(Queue {
                spec: self,
                order: Order::new(algo),
            }),
        }
    }
}

impl fmt::Display for RetentionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.followers {
            f.write_str("followers+")?;
        }
        if self.prefix {
            f.write_str("prefix+")?;
        }
        match self.eviction {
            Eviction::GreedyDual => f.write_str("greedy-dual"),
            Eviction::Queue(a) => f.write_str(a.name()),
        }
    }
}

impl std::str::FromStr for RetentionSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut spec = RetentionSpec {
            followers: false,
            prefix: false,
            eviction: Eviction::GreedyDual,
        };
        let mut order = None;
        for part in s.trim().split('+').map(str::trim) {
            let eviction = match part {
                "followers" => {
                    spec.followers = true;
                    continue;
                }
                "prefix" => {
                    spec.prefix = true;
                    continue;
                }
                "greedy-dual" => Eviction::GreedyDual,
                "lru" => Eviction::Queue(Algo::Lru),
                "fifo" => Eviction::Queue(Algo::Fifo),
                "sieve" => Eviction::Queue(Algo::Sieve),
                "s3-fifo" => Eviction::Queue(Algo::S3Fifo),
                other => {
                    return Err(format!(
                        "retention `{s}`: unknown part `{other}`; expected followers, prefix and one of greedy-dual, lru, fifo, sieve, s3-fifo joined by +"
                    ))
                }
            };
            if order.replace(eviction).is_some() {
                return Err(format!(
                    "retention `{s}`: more than one eviction order; expected one of greedy-dual, lru, fifo, sieve, s3-fifo"
                ));
            }
        }
        spec.eviction = order.unwrap_or(Eviction::GreedyDual);
        Ok(spec)
    }
}

impl TryFrom<String> for RetentionSpec {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<RetentionSpec> for String {
    fn from(s: RetentionSpec) -> String {
        s.to_string()
    }
}

/// The rules of a retention (see the module doc). The consumed-cache calls the order's
/// methods for every range it holds: [`Retention::inserted`] when one enters,
/// [`Retention::split`] when a part of it leaves, [`Retention::taken`] when a viewer asks
/// for it again, [`Retention::removed`] when it leaves otherwise, and
/// [`Retention::victim`] for the next range to drop.
pub trait Retention: fmt::Debug + Send {
    fn spec(&self) -> RetentionSpec;

    /// Whether consumed bytes are kept for a following stream.
    fn keeps_intervals(&self) -> bool {
        self.spec().followers
    }

    /// Whether a consumed range worth `value` enters the cache, given the worth of what it
    /// has lately evicted (`None`: nothing yet).
    fn admits(&self, value: f64, evicted_value: Option<f64>) -> bool {
        !self.spec().prefix || evicted_value.is_none_or(|v| value >= v)
    }

    /// Range `key` of `bytes` worth `value` entered the cache.
    fn inserted(&mut self, key: Key, bytes: u64, value: f64);

    /// Range `old` was cut to `parts` (keys and bytes), which keep its place.
    fn split(&mut self, old: Key, parts: &[(Key, u64)]);

    /// A viewer asked for range `key` again: it leaves the cache while in use.
    fn taken(&mut self, key: Key);

    /// Range `key` left the cache (kept for a follower).
    fn removed(&mut self, key: Key);

    /// The next range to drop from a cache allowed `room` bytes; it leaves the order.
    fn victim(&mut self, room: u64) -> Option<Key>;

    fn boxed_clone(&self) -> Box<dyn Retention>;
}

impl Clone for Box<dyn Retention> {
    fn clone(&self) -> Self {
        self.boxed_clone()
    }
}

/// GreedyDual on worth: a range's priority is the floor (the priority of the last range
/// evicted) plus its worth; the lowest goes first, so ranges nobody comes back for age out.
#[derive(Clone, Debug)]
struct GreedyDual {
    spec: RetentionSpec,
    /// (priority bits, sequence, start) → file; priorities are non-negative `f64` bits,
    /// which sort like the numbers.
    queue: BTreeMap<(u64, u64, u64), FileId>,
    place: crate::Map<Key, (u64, u64)>,
    floor: f64,
    seq: u64,
}

impl GreedyDual {
    fn new(spec: RetentionSpec) -> Self {
        GreedyDual {
            spec,
            queue: BTreeMap::new(),
            place: crate::Map::default(),
            floor: 0.0,
            seq: 0,
        }
    }

    fn forget(&mut self, key: Key) -> Option<(u64, u64)> {
        let (prio, seq) = self.place.remove(&key)?;
        self.queue.remove(&(prio, seq, key.1));
        Some((prio, seq))
    }
}

impl Retention for GreedyDual {
    fn spec(&self) -> RetentionSpec {
        self.spec
    }

    fn inserted(&mut self, key: Key, _bytes: u64, value: f64) {
        self.forget(key);
        self.seq += 1;
        let prio = (self.floor + value).to_bits();
        self.queue.insert((prio, self.seq, key.1), key.0);
        self.place.insert(key, (prio, self.seq));
    }

    fn split(&mut self, old: Key, parts: &[(Key, u64)]) {
        let Some((prio, seq)) = self.forget(old) else {
            return;
        };
        for &(k, _) in parts {
            self.queue.insert((prio, seq, k.1), k.0);
            self.place.insert(k, (prio, seq));
        }
    }

    fn taken(&mut self, key: Key) {
        self.forget(key);
    }

    fn removed(&mut self, key: Key) {
        self.forget(key);
    }

    fn victim(&mut self, _room: u64) -> Option<Key> {
        let (&(prio, seq, start), &file) = self.queue.iter().next()?;
        self.queue.remove(&(prio, seq, start));
        self.place.remove(&(file, start));
        self.floor = self.floor.max(f64::from_bits(prio));
        Some((file, start))
    }

    fn boxed_clone(&self) -> Box<dyn Retention> {
        Box::new(self.clone())
    }
}

/// A queue order of [`super::order`] over the cache's ranges.
#[derive(Clone, Debug)]
struct Queue {
    spec: RetentionSpec,
    order: Order<Key>,
}

impl Retention for Queue {
    fn spec(&self) -> RetentionSpec {
        self.spec
    }

    fn inserted(&mut self, key: Key, bytes: u64, _value: f64) {
        self.order.remove(key);
        self.order.insert(key, bytes);
    }

    fn split(&mut self, old: Key, parts: &[(Key, u64)]) {
        // A queue keeps no place for a part: the parts join as new entries.
        self.order.remove(old);
        for &(k, b) in parts {
            self.order.insert(k, b);
        }
    }

    fn taken(&mut self, key: Key) {
        self.order.take(key);
    }

    fn removed(&mut self, key: Key) {
        self.order.remove(key);
    }

    fn victim(&mut self, room: u64) -> Option<Key> {
        self.order.evict(room).map(|(k, _)| k)
    }

    fn boxed_clone(&self) -> Box<dyn Retention> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_read_back_what_they_print() {
        for s in RetentionSpec::all() {
            assert_eq!(s.to_string().parse::<RetentionSpec>(), Ok(s));
        }
        assert_eq!(
            "followers".parse::<RetentionSpec>(),
            Ok(RetentionSpec::default())
        );
        assert!("followers+lru+sieve".parse::<RetentionSpec>().is_err());
        let e = "lfu".parse::<RetentionSpec>().unwrap_err();
        assert!(e.contains("unknown part `lfu`"), "{e}");
    }

    #[test]
    fn greedy_dual_evicts_the_least_worth_and_ages_by_the_floor() {
        let mut g = RetentionSpec::default().build();
        g.inserted((1, 0), 10, 5.0);
        g.inserted((2, 0), 10, 1.0);
        assert_eq!(g.victim(0), Some((2, 0)));
        // The floor is now 1: a range worth 4.5 inserted now outranks the old one worth 5.
        g.inserted((3, 0), 10, 4.5);
        assert_eq!(g.victim(0), Some((1, 0)));
        assert_eq!(g.victim(0), Some((3, 0)));
        assert_eq!(g.victim(0), None);
    }

    #[test]
    fn prefix_admits_only_what_is_worth_the_evictions() {
        let p: RetentionSpec = "prefix".parse().unwrap();
        let r = p.build();
        assert!(r.admits(0.1, None));
        assert!(r.admits(2.0, Some(1.0)));
        assert!(!r.admits(0.5, Some(1.0)));
        assert!(RetentionSpec::default().build().admits(0.5, Some(1.0)));
    }
}
