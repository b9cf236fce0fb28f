//! The order of k-way merges and event queues: a heap entry that comes out of a
//! [`std::collections::BinaryHeap`] (a max-heap) smallest key first.

use std::cmp::Ordering;

/// A total order for merge keys, smallest first: floats by [`f64::total_cmp`], tuples
/// field by field.
pub trait MergeKey {
    fn merge_cmp(&self, other: &Self) -> Ordering;
}

impl MergeKey for f64 {
    fn merge_cmp(&self, other: &Self) -> Ordering {
        self.total_cmp(other)
    }
}

impl MergeKey for u64 {
    fn merge_cmp(&self, other: &Self) -> Ordering {
        self.cmp(other)
    }
}

impl MergeKey for usize {
    fn merge_cmp(&self, other: &Self) -> Ordering {
        self.cmp(other)
    }
}

impl<A: MergeKey, B: MergeKey> MergeKey for (A, B) {
    fn merge_cmp(&self, other: &Self) -> Ordering {
        self.0
            .merge_cmp(&other.0)
            .then_with(|| self.1.merge_cmp(&other.1))
    }
}

/// An entry of a `BinaryHeap` that pops the smallest `key` first (a completion time and a
/// sequence number, a run's head and the run's index); `value` rides along uncompared.
pub struct MinEntry<K, V> {
    pub key: K,
    pub value: V,
}

impl<K, V> MinEntry<K, V> {
    pub fn new(key: K, value: V) -> Self {
        MinEntry { key, value }
    }
}

impl<K: MergeKey, V> PartialEq for MinEntry<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.key.merge_cmp(&other.key) == Ordering::Equal
    }
}

impl<K: MergeKey, V> Eq for MinEntry<K, V> {}

impl<K: MergeKey, V> PartialOrd for MinEntry<K, V> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: MergeKey, V> Ord for MinEntry<K, V> {
    /// Reversed, so the max-heap's top is the smallest key.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.merge_cmp(&self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BinaryHeap;

    #[test]
    fn pops_the_earliest_time_then_the_lowest_sequence() {
        let mut heap = BinaryHeap::new();
        for (t, seq, v) in [(2.0, 0, 'c'), (1.0, 5, 'b'), (1.0, 3, 'a'), (-0.5, 9, 'z')] {
            heap.push(MinEntry::new((t, seq as u64), v));
        }
        let order: Vec<char> = std::iter::from_fn(|| heap.pop().map(|e| e.value)).collect();
        assert_eq!(order, ['z', 'a', 'b', 'c']);
    }
}
