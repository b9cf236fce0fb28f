//! The prefetch engine shared by `vodkit serve`, `vodkit prefetchd` and `vodkit simulate`.
//!
//! Policies decide how much to read when a viewer's request misses the page cache; the
//! engine detects misses and performs the enlarged reads, one at a time per device.
