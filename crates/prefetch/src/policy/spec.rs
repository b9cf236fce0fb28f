//! Policy specifications as strings (`--prefetch` values) and building policies from them.
//!
//! Grammar (sizes accept `2MiB`, `512KiB`, `3145728`; durations `180`, `3m`, `90s`;
//! fractions `0.05` or `5%`):
//!
//! ```text
//! none
//! fixed:SIZE
//! proportional:SIZE@KBPS
//! sqrt:SIZE@KBPS
//! first-grow[:SIZE | :key=value,...]          keys: max growth open0 chunk0 other
//! first-grow-sr[:SIZE@KBPS | :key=value,...]  keys: as first-grow, plus ref
//! auto[:key=value,...]   keys: start (SIZE, SIZE@KBPS or a preset such as wd_red_hd)
//!                        ref interval step deflation busy evict min max ramp guard
//!                        scale (sqrt | proportional | none)
//! ```

use super::auto::defaults::START_PRESETS;
use super::{
    AutoParams, AutoPolicy, FirstGrowParams, FirstGrowPolicy, FixedPolicy, NonePolicy, Policy,
    ScaledPolicy, Scaling,
};
use std::fmt;
use std::str::FromStr;

/// A parsed `--prefetch` value.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicySpec {
    None,
    Fixed {
        bytes: u64,
    },
    Proportional {
        bytes: u64,
        ref_kbps: u32,
    },
    Sqrt {
        bytes: u64,
        ref_kbps: u32,
    },
    /// `first-grow` when `sr_ref_kbps` is `None`, `first-grow-sr` otherwise.
    FirstGrow(FirstGrowParams),
    Auto(AutoParams),
}

/// A bad policy string; displays as one line naming the input and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("prefetch policy `{input}`: {problem}")]
pub struct SpecError {
    pub input: String,
    pub problem: String,
}

impl PolicySpec {
    /// The default policy as `--prefetch` text: a fixed 2 MiB, the size the seeds measure
    /// against (thesis 3.7.1, Libception §3). The one place this literal is written.
    pub const DEFAULT_TEXT: &'static str = "fixed:2MiB";
}

impl Default for PolicySpec {
    /// [`PolicySpec::DEFAULT_TEXT`], parsed.
    fn default() -> Self {
        PolicySpec::Fixed { bytes: 2 << 20 }
    }
}

const KINDS: &str =
    "none, fixed:SIZE, proportional:SIZE@KBPS, sqrt:SIZE@KBPS, first-grow, first-grow-sr, auto";

impl FromStr for PolicySpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let input = s.trim();
        let fail = |problem: String| SpecError {
            input: input.to_string(),
            problem,
        };
        let (kind, arg) = match input.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (input, None),
        };
        let need_arg = |what: &str| arg.ok_or_else(|| fail(format!("expected `{kind}:{what}`")));
        match kind {
            "none" | "off" => match arg {
                None => Ok(PolicySpec::None),
                Some(_) => Err(fail("`none` takes no argument".into())),
            },
            "fixed" => Ok(PolicySpec::Fixed {
                bytes: parse_size(need_arg("SIZE")?).map_err(fail)?,
            }),
            "proportional" | "sqrt" => {
                let (bytes, ref_kbps) = parse_sized_rate(need_arg("SIZE@KBPS")?).map_err(fail)?;
                let ref_kbps =
                    ref_kbps.ok_or_else(|| fail(format!("expected `{kind}:SIZE@KBPS`")))?;
                Ok(if kind == "sqrt" {
                    PolicySpec::Sqrt { bytes, ref_kbps }
                } else {
                    PolicySpec::Proportional { bytes, ref_kbps }
                })
            }
            "first-grow" => parse_first_grow(arg, FirstGrowParams::default()).map_err(fail),
            "first-grow-sr" => parse_first_grow(arg, FirstGrowParams::square_root()).map_err(fail),
            "auto" => parse_auto(arg).map_err(fail),
            "" => Err(fail(format!("empty; expected one of {KINDS}"))),
            other => Err(fail(format!(
                "unknown policy `{other}`; expected one of {KINDS}"
            ))),
        }
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    Ok(vodkit_units::parse_size(s)?)
}

/// A reference bit rate in kbit/s: `419` (kbit/s) or with a unit (`419k`, `3Mbit/s`).
fn parse_kbps(s: &str) -> Result<u32, String> {
    let bad = || vodkit_units::UnitError::new(vodkit_units::Quantity::BitRate, s);
    match vodkit_units::parse_kbps(s) {
        Ok(0) => Err(bad().because("must be positive").into()),
        Ok(k) => Ok(u32::try_from(k).map_err(|_| bad())?),
        Err(_) => Err(bad().into()),
    }
}

/// `SIZE` or `SIZE@KBPS`.
fn parse_sized_rate(s: &str) -> Result<(u64, Option<u32>), String> {
    match s.split_once('@') {
        Some((size, kbps)) => Ok((parse_size(size)?, Some(parse_kbps(kbps)?))),
        None => Ok((parse_size(s)?, None)),
    }
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    Ok(vodkit_units::parse_positive_duration(s)?.as_secs_f64())
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("`{t}` is not a fraction (expected e.g. 0.05 or 5%)"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("`{t}` must be between 0 and 1 (or 0% and 100%)"))
    }
}

fn parse_growth(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(g) if g.is_finite() && g > 0.0 => Ok(g),
        _ => Err(format!("`{s}` is not a growth factor (expected e.g. 3.35)")),
    }
}

/// Splits `k=v,k=v`; each key is handed to `set`, which knows the policy's keys.
fn for_each_pair(
    arg: &str,
    mut set: impl FnMut(&str, &str) -> Result<(), String>,
) -> Result<(), String> {
    for pair in arg.split(',') {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("`{pair}` should be key=value"))?;
        set(k.trim(), v.trim())?;
    }
    Ok(())
}

fn parse_first_grow(arg: Option<&str>, mut p: FirstGrowParams) -> Result<PolicySpec, String> {
    let sr = p.sr_ref_kbps.is_some();
    let Some(arg) = arg.filter(|a| !a.trim().is_empty()) else {
        return Ok(PolicySpec::FirstGrow(p));
    };
    if !arg.contains('=') {
        let (max, kbps) = parse_sized_rate(arg)?;
        p.max_bytes = max;
        match (kbps, sr) {
            (Some(_), false) => return Err("first-grow takes a plain SIZE (no @KBPS)".into()),
            (Some(k), true) => p.sr_ref_kbps = Some(k),
            (None, _) => {}
        }
        return Ok(PolicySpec::FirstGrow(p));
    }
    for_each_pair(arg, |k, v| {
        match k {
            "max" => {
                let (max, kbps) = parse_sized_rate(v)?;
                p.max_bytes = max;
                if let Some(k) = kbps {
                    if !sr {
                        return Err("first-grow `max` takes a plain SIZE".into());
                    }
                    p.sr_ref_kbps = Some(k);
                }
            }
            "growth" => p.growth = parse_growth(v)?,
            "open0" => p.first_open_at_zero = parse_size(v)?,
            "chunk0" => p.first_chunk_at_zero = parse_size(v)?,
            "other" => p.first_other = parse_size(v)?,
            "ref" if sr => p.sr_ref_kbps = Some(parse_kbps(v)?),
            _ => {
                let extra = if sr { " ref" } else { "" };
                return Err(format!(
                    "unknown key `{k}` (expected max growth open0 chunk0 other{extra})"
                ));
            }
        }
        Ok(())
    })?;
    Ok(PolicySpec::FirstGrow(p))
}

fn parse_auto(arg: Option<&str>) -> Result<PolicySpec, String> {
    let mut p = AutoParams::default();
    let mut min_set = false;
    if let Some(arg) = arg.filter(|a| !a.trim().is_empty()) {
        for_each_pair(arg, |k, v| {
            match k {
                "start" => {
                    if let Some(&(_, bytes, kbps)) = START_PRESETS
                        .iter()
                        .find(|(n, _, _)| n.replace('_', "-") == v.replace('_', "-"))
                    {
                        p.start_bytes = bytes;
                        p.ref_kbps = kbps;
                    } else {
                        let (bytes, kbps) = parse_sized_rate(v).map_err(|e| {
                            let names: Vec<_> = START_PRESETS.iter().map(|t| t.0).collect();
                            format!("{e}; or a preset: {}", names.join(" "))
                        })?;
                        p.start_bytes = bytes;
                        if let Some(k) = kbps {
                            p.ref_kbps = k;
                        }
                    }
                }
                "ref" => p.ref_kbps = parse_kbps(v)?,
                "interval" => p.adjust_interval_s = parse_seconds(v)?,
                "step" => p.step_bytes = parse_size(v)?,
                "deflation" => p.score_deflation = parse_fraction(v)?,
                "busy" => p.busy_threshold = parse_fraction(v)?,
                "evict" => p.evict_threshold = parse_fraction(v)?,
                "min" => {
                    p.min_bytes = parse_size(v)?;
                    min_set = true;
                }
                "max" => p.max_bytes = parse_size(v)?,
                "ramp" => p.ramp_s = parse_seconds(v)?,
                "guard" => p.guard_s = parse_seconds(v)?,
                "scale" => {
                    p.scaling = match v {
                        "sqrt" => Scaling::Sqrt,
                        "proportional" => Scaling::Proportional,
                        "none" => Scaling::None,
                        _ => {
                            return Err(format!("scale `{v}`: expected sqrt, proportional or none"))
                        }
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown key `{k}` (expected start ref interval step deflation busy \
                         evict min max ramp guard scale)"
                    ))
                }
            }
            Ok(())
        })?;
    }
    if p.step_bytes == 0 {
        return Err("step must be larger than zero".into());
    }
    if !min_set {
        p.min_bytes = p.step_bytes;
    }
    if p.min_bytes > p.max_bytes {
        return Err(format!(
            "min ({}) is larger than max ({})",
            p.min_bytes, p.max_bytes
        ));
    }
    Ok(PolicySpec::Auto(p))
}

impl PolicySpec {
    /// A fresh policy in its initial state.
    pub fn build(&self) -> Box<dyn Policy> {
        match self {
            PolicySpec::None => Box::new(NonePolicy::default()),
            PolicySpec::Fixed { bytes } => Box::new(FixedPolicy::new(*bytes)),
            PolicySpec::Proportional { bytes, ref_kbps } => {
                Box::new(ScaledPolicy::new(Scaling::Proportional, *bytes, *ref_kbps))
            }
            PolicySpec::Sqrt { bytes, ref_kbps } => {
                Box::new(ScaledPolicy::new(Scaling::Sqrt, *bytes, *ref_kbps))
            }
            PolicySpec::FirstGrow(p) => Box::new(FirstGrowPolicy::new(p.clone(), self.to_string())),
            PolicySpec::Auto(p) => Box::new(AutoPolicy::new(p.clone(), self.to_string())),
        }
    }

    /// True for `none`: misses read only what was requested.
    pub fn is_none(&self) -> bool {
        matches!(self, PolicySpec::None)
    }
}

impl fmt::Display for PolicySpec {
    /// The canonical spelling; parsing it gives back an equal spec.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicySpec::None => write!(f, "none"),
            PolicySpec::Fixed { bytes } => write!(f, "fixed:{bytes}"),
            PolicySpec::Proportional { bytes, ref_kbps } => {
                write!(f, "proportional:{bytes}@{ref_kbps}")
            }
            PolicySpec::Sqrt { bytes, ref_kbps } => write!(f, "sqrt:{bytes}@{ref_kbps}"),
            PolicySpec::FirstGrow(p) => {
                let name = if p.sr_ref_kbps.is_some() { "first-grow-sr" } else { "first-grow" };
                write!(
                    f,
                    "{name}:max={},growth={},open0={},chunk0={},other={}",
                    p.max_bytes, p.growth, p.first_open_at_zero, p.first_chunk_at_zero, p.first_other
                )?;
                if let Some(r) = p.sr_ref_kbps {
                    write!(f, ",ref={r}")?;
                }
                Ok(())
            }
            PolicySpec::Auto(p) => write!(
                f,
                "auto:start={}@{},interval={},step={},deflation={},busy={},evict={},min={},max={},ramp={},guard={},scale={}",
                p.start_bytes,
                p.ref_kbps,
                p.adjust_interval_s,
                p.step_bytes,
                p.score_deflation,
                p.busy_threshold,
                p.evict_threshold,
                p.min_bytes,
                p.max_bytes,
                p.ramp_s,
                p.guard_s,
                p.scaling.name()
            ),
        }
    }
}

impl serde::Serialize for PolicySpec {
    /// As its canonical string, e.g. `"sqrt:6291456@2095"`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for PolicySpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
