//! Integration tests of the simulator on hand-built traces and the Netflix model.
//!
//! One test binary for the crate, linked once: each module holds one area's tests.

mod hand_built;
mod libcachesim;
mod netflix;
mod popularity_cache;
