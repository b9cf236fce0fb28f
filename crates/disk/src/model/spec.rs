//! What the timing model knows about one drive model ([`DriveSpec`]) and the figures it was
//! fitted to ([`Published`]): the floor under the presets ([`super::preset`]) and the
//! capacity formulas ([`super::capacity`]).

use super::seek::SeekCurve;
use super::zones::ZoneProfile;
use serde::{Deserialize, Serialize};

/// Everything the timing model needs to know about one drive model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriveSpec {
    /// Preset name (`wd-red`, ...).
    pub name: String,
    /// Marketing name of the drive the preset imitates.
    pub model: String,
    /// Capacity in bytes of the real drive.
    pub capacity_bytes: u64,
    /// Spindle speed.
    pub rpm: f64,
    /// Transfer rate by zone.
    pub zones: ZoneProfile,
    /// Seek time by distance.
    pub seek: SeekCurve,
    /// The figures the preset was fitted to, for reports and tests.
    pub published: Published,
}

/// Published figures of a drive (MB/s are MiB/s in this model; ms include rotation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Published {
    pub outer_mb_s: Option<f64>,
    pub middle_mb_s: Option<f64>,
    pub inner_mb_s: Option<f64>,
    /// Positioning time over a full stroke, ms (seek plus rotational latency).
    pub full_stroke_ms: Option<f64>,
    pub half_stroke_ms: Option<f64>,
    pub quarter_stroke_ms: Option<f64>,
    /// Throughput of 2 MB reads at random positions, MB/s.
    pub random_2mb_mb_s: Option<f64>,
    /// Throughput of sequential 2 MB reads, MB/s.
    pub sequential_2mb_mb_s: Option<f64>,
    /// Maximum seeks per second derived with thesis Eq. 5.4.
    pub s_max_per_s: Option<f64>,
}

/// Average rotational latency (half a revolution) in ms.
pub fn half_rotation_ms(rpm: f64) -> f64 {
    30_000.0 / rpm
}
