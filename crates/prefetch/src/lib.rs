//! The prefetch engine shared by `vodkit serve`, `vodkit prefetchd` and `vodkit simulate`.
//!
//! Policies ([`policy`]) decide how much to read when a viewer's request misses the page
//! cache; they are pure state machines driven by the caller's clock, so the simulator
//! runs exactly the code the server deploys. See `docs/prefetch.md`.

pub mod policy;

pub use policy::{
    ChainKind, Observation, Policy, PolicySpec, PolicyState, ReadContext, SpecError,
    DEFAULT_BITRATE_KBPS,
};
