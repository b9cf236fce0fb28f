//! Drive presets and where each of their numbers comes from.
//!
//! Sources: seed 001 Table 1 (FreeBSD `diskinfo -t` on the HP 10k SAS and WD Red drives:
//! raw MB/s at the outer, middle and inner positions and positioning times over a full,
//! half and quarter stroke), thesis 4.4.1 / 4.5.3 (WD Red WD10EFRX 5,400 rpm, Seagate
//! ST1000DM003 7,200 rpm, both 1 TB), thesis 5.6.2 (Hitachi Deskstar 5K3000: 125.5 MB/s for
//! sequential 2 MB reads, 48.4 MB/s for random 2 MB reads). `docs/disk.md` has the table.

use super::seek::SeekCurve;
pub use super::spec::{half_rotation_ms, DriveSpec, Published};
use super::zones::ZoneProfile;
use serde::{Deserialize, Serialize};

/// Names accepted by [`preset`].
pub const PRESET_NAMES: [&str; 4] = ["wd-red", "hp-10k", "hitachi-5k3000", "seagate-7200"];

/// Number of constant-rate zones every preset uses (recent drives have a few dozen).
const ZONES: u32 = 32;

/// A drive preset by name: the typed form of `--preset wd-red` / `hdd:wd-red`, parsed once
/// where the text comes in and passed as this value from then on. In files (state, reports)
/// it is written as its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Preset {
    #[serde(rename = "wd-red")]
    WdRed,
    #[serde(rename = "hp-10k")]
    Hp10k,
    #[serde(rename = "hitachi-5k3000")]
    Hitachi5k3000,
    #[serde(rename = "seagate-7200")]
    Seagate7200,
}

impl Preset {
    /// Every preset, in the order of [`PRESET_NAMES`].
    pub const ALL: [Preset; 4] = [
        Preset::WdRed,
        Preset::Hp10k,
        Preset::Hitachi5k3000,
        Preset::Seagate7200,
    ];

    /// The preset's name (`wd-red`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Preset::WdRed => PRESET_NAMES[0],
            Preset::Hp10k => PRESET_NAMES[1],
            Preset::Hitachi5k3000 => PRESET_NAMES[2],
            Preset::Seagate7200 => PRESET_NAMES[3],
        }
    }

    /// The drive's parameters.
    pub fn spec(self) -> DriveSpec {
        match self {
            Preset::WdRed => wd_red(),
            Preset::Hp10k => hp_10k(),
            Preset::Hitachi5k3000 => hitachi_5k3000(),
            Preset::Seagate7200 => seagate_7200(),
        }
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Preset {
    type Err = String;

    fn from_str(s: &str) -> Result<Preset, String> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown preset `{s}` (expected one of: {})",
                    PRESET_NAMES.join(", ")
                )
            })
    }
}

/// Look a preset up by name; `None` for an unknown name (see [`PRESET_NAMES`]).
pub fn preset(name: &str) -> Option<DriveSpec> {
    name.parse::<Preset>().ok().map(Preset::spec)
}

/// Outer, middle and inner rates (MB/s) over the presets' zone count.
fn zones([outer, middle, inner]: [f64; 3]) -> ZoneProfile {
    ZoneProfile {
        outer_mb_s: outer,
        middle_mb_s: middle,
        inner_mb_s: inner,
        zones: ZONES,
    }
}

/// Zones of a drive known by its outer rate only, in the WD Red's proportions (middle
/// 115/133 and inner 67/133 of the outer rate).
fn wd_red_shaped(outer: f64) -> ZoneProfile {
    zones([outer, outer * 115.0 / 133.0, outer * 67.0 / 133.0])
}

/// A drive measured in seed 001 Table 1: raw MB/s at the outer, middle and inner
/// positions, and positioning ms over a quarter, half and full stroke.
fn from_table(
    (name, model, capacity_bytes, rpm): (&str, &str, u64, f64),
    [outer, middle, inner]: [f64; 3],
    [quarter, half, full]: [f64; 3],
) -> DriveSpec {
    DriveSpec {
        name: name.into(),
        model: model.into(),
        capacity_bytes,
        rpm,
        zones: zones([outer, middle, inner]),
        seek: SeekCurve::fit(quarter, half, full, half_rotation_ms(rpm)),
        published: Published {
            outer_mb_s: Some(outer),
            middle_mb_s: Some(middle),
            inner_mb_s: Some(inner),
            full_stroke_ms: Some(full),
            half_stroke_ms: Some(half),
            quarter_stroke_ms: Some(quarter),
            ..Published::default()
        },
    }
}

/// WD Red WD10EFRX, 1 TB, 5,400 rpm: zones and seeks straight from seed 001 Table 1.
pub fn wd_red() -> DriveSpec {
    let model = "Western Digital Red WD10EFRX 1 TB 5,400 rpm";
    from_table(
        ("wd-red", model, 1_000_204_886_016, 5400.0),
        [133.0, 115.0, 67.0],
        [18.9, 23.1, 32.6],
    )
}

/// HP 146 GB 10,000 rpm 2.5" SAS: zones and seeks straight from seed 001 Table 1.
pub fn hp_10k() -> DriveSpec {
    let model = "HP 146 GB 10,000 rpm SAS";
    from_table(
        ("hp-10k", model, 146_815_733_760, 10_000.0),
        [122.0, 107.0, 73.0],
        [6.8, 8.0, 10.5],
    )
}

/// Hitachi Deskstar 5K3000 (2 TB, 5,400 rpm), the drive behind thesis Eq. 5.4.
///
/// Only two figures are published: 125.5 MB/s sequential and 48.4 MB/s random, both for
/// 2 MB reads. The outer rate is the sequential figure; middle and inner rates keep the WD
/// Red's proportions (a drive of the same class and speed). The seek curve has the WD
/// Red's shape scaled by the factor that makes the model's random 2 MB throughput equal
/// to the published one, so the model's Eq. 5.4 `s_max` comes out at 39.4 seeks/s.
pub fn hitachi_5k3000() -> DriveSpec {
    let rpm = 5400.0;
    let outer = 125.5;
    let mut spec = DriveSpec {
        name: "hitachi-5k3000".into(),
        model: "Hitachi Deskstar 5K3000 2 TB 5,400 rpm".into(),
        capacity_bytes: 2_000_398_934_016,
        rpm,
        zones: wd_red_shaped(outer),
        seek: wd_red().seek,
        published: Published {
            outer_mb_s: Some(outer),
            sequential_2mb_mb_s: Some(125.5),
            random_2mb_mb_s: Some(48.4),
            s_max_per_s: Some(39.4),
            ..Published::default()
        },
    };
    let k = super::capacity::fit_seek_scale(&spec, 2.0 * super::zones::MIB, 48.4);
    spec.seek = spec.seek.scaled(k);
    spec
}

/// Seagate Barracuda ST1000DM003 (1 TB, 7,200 rpm), the faster drive of thesis 4.5.3.
///
/// The seeds give only its speed and that it seeks and rotates faster than the WD Red. The
/// preset takes the manufacturer's data sheet: 210 MB/s maximum sustained rate (used as the
/// outer rate, middle and inner in the WD Red's proportions) and an 8.5 ms average read seek
/// (the WD Red's seek shape scaled so the mean over random positions is 8.5 ms).
pub fn seagate_7200() -> DriveSpec {
    let rpm = 7200.0;
    let outer = 210.0;
    let shape = wd_red().seek;
    let seek = shape.scaled(8.5 / shape.mean_random_ms());
    DriveSpec {
        name: "seagate-7200".into(),
        model: "Seagate Barracuda ST1000DM003 1 TB 7,200 rpm".into(),
        capacity_bytes: 1_000_204_886_016,
        rpm,
        zones: wd_red_shaped(outer),
        seek,
        published: Published {
            outer_mb_s: Some(outer),
            ..Published::default()
        },
    }
}
