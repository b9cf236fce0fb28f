//! Integration tests of packaging: the HLS and DASH outputs parsed by independent readers.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod packaging;
