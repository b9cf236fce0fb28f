//! Human units in specs (sizes, times, bandwidths), from the one units crate: see
//! `vodkit_units` for the forms accepted and the SI/IEC rules.

pub use vodkit_units::{
    compact_size, human_size, parse_bandwidth, parse_kbps, parse_seconds, parse_size,
    parse_size_or_time, Bandwidth, Seconds, Size, SizeOrTime,
};
