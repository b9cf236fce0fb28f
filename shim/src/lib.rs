//! Prefetching for unmodified servers: an `LD_PRELOAD` library that reports page-cache
//! misses of file reads to `vodkit prefetchd`, which serializes and enlarges them.
