//! Deterministic pseudo-random numbers for tests: the same cases on every run.

/// Advances the xorshift64 state `x` (never 0) and returns its new value.
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}
