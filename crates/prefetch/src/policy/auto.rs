//! `auto`: automatic prefetch sizing by gradient descent on a measured score (thesis 4.2).
//!
//! The policy keeps one size `p` for a reference bit rate and scales it to other rates
//! (square-root rule by default, thesis 4.3). Measurements are gathered over windows of
//! `adjust_interval` seconds while the size holds still. At the end of a window:
//!
//! 1. If the workers were busy less than `busy_threshold` of the window, nothing changes
//!    (under light load a bigger size always looks better and would later overload).
//! 2. If prefetch evictions exceed `evict_threshold` of the requested bytes, the target
//!    jumps to `mean eviction time × bit rate` (the size a viewer consumes before its
//!    prefetched data would be evicted), and the stored scores are dropped.
//! 3. Otherwise the window's score — disk milliseconds per 128 KiB read × miss ratio
//!    (disk bytes / requested bytes) — is stored for `p` and compared with the stored
//!    scores of `p + step` and `p − step`: move towards a lower neighbour; try an
//!    unmeasured neighbour when the measured one is worse (the larger one first); when
//!    both neighbours are worse, `p` is a minimum and the neighbours' stored scores are
//!    deflated by `score_deflation`, so that a neighbour rejected on a noisy measurement
//!    is eventually measured again.
//!
//! The size never jumps: it moves towards the target at `step` bytes per `ramp` seconds
//! (thesis 4.2.2), and measurements taken while it moves are discarded.

use super::{
    proportional_scale, sqrt_scale, ClassLog, ClassSize, Observation, Policy, PolicyState,
    ReadContext,
};
use std::collections::BTreeMap;

/// How the reference size is carried over to other bit rates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Scaling {
    /// Every bit rate gets the reference size.
    None,
    /// Size ∝ √bitrate (thesis 4.3).
    #[default]
    Sqrt,
    /// Size ∝ bitrate.
    Proportional,
}

impl Scaling {
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Size for `kbps` given `size` at `ref_kbps`.
    pub fn scale(self, size: u64, ref_kbps: u32, kbps: u32) -> u64 {
        match self {
            Scaling::None => size,
            Scaling::Sqrt => sqrt_scale(size, ref_kbps, kbps),
            Scaling::Proportional => proportional_scale(size, ref_kbps, kbps),
        }
    }

    /// Size at `ref_kbps` that scales to `size` at `kbps` (inverse of [`Scaling::scale`]).
    pub fn unscale(self, size: f64, ref_kbps: u32, kbps: f64) -> f64 {
        if kbps <= 0.0 {
            return size;
        }
        let ratio = ref_kbps as f64 / kbps;
        match self {
            Scaling::None => size,
            Scaling::Sqrt => size * ratio.sqrt(),
            Scaling::Proportional => size * ratio,
        }
    }
}

/// Parameters of `auto` (thesis Table 4.2 plus the ones the thesis leaves implicit).
#[derive(Clone, Debug, PartialEq)]
pub struct AutoParams {
    /// Initial size at `ref_kbps` (thesis: 3 MB for SD files on the WD Red drive).
    pub start_bytes: u64,
    /// Bit rate the size refers to.
    pub ref_kbps: u32,
    /// Length of a measurement window, seconds (Table 4.2: 180).
    pub adjust_interval_s: f64,
    /// Distance to the neighbouring sizes (Table 4.2: 0.5 MB).
    pub step_bytes: u64,
    /// Fraction by which stored scores shrink at a minimum (Table 4.2: 5%).
    pub score_deflation: f64,
    /// Minimum worker busy fraction for adjusting (Table 4.2: 60%).
    pub busy_threshold: f64,
    /// Prefetch-evicted / requested bytes above which the eviction time sets the size
    /// (Table 4.2: 5%).
    pub evict_threshold: f64,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// Seconds to move the size by one step (the thesis asks for a gradual change but
    /// gives no rate).
    pub ramp_s: f64,
    /// Length of the eviction guard's periods. The thesis checks the eviction rule only
    /// when a window closes; until then every prefetch at a size memory cannot hold is read
    /// twice, so the guard applies the rule as soon as two consecutive periods of this
    /// length each exceed `evict_threshold` (one period alone can be a burst, such as the
    /// first seconds after a server starts with a cold cache, that the size did not cause).
    pub guard_s: f64,
    pub scaling: Scaling,
}

/// Table 4.2 and section 4.5 defaults (`seed-figures.toml` `[auto_prefetch]`).
pub mod defaults {
    pub const ADJUST_INTERVAL_S: f64 = 180.0;
    pub const STEP_BYTES: u64 = 524_288;
    pub const SCORE_DEFLATION: f64 = 0.05;
    pub const BUSY_THRESHOLD: f64 = 0.60;
    pub const EVICT_THRESHOLD: f64 = 0.05;
    /// Start sizes by drive and workload: (name, bytes, reference kbps).
    pub const START_PRESETS: [(&str, u64, u32); 4] = [
        ("wd_red_sd", 3_145_728, 419),
        ("wd_red_hd", 4_194_304, 2095),
        ("seagate_sd", 2_097_152, 419),
        ("seagate_hd", 3_145_728, 2095),
    ];
    pub const MAX_BYTES: u64 = 64 << 20;
    pub const RAMP_S: f64 = 60.0;
    pub const GUARD_S: f64 = 15.0;
}

impl Default for AutoParams {
    fn default() -> Self {
        let (_, start_bytes, ref_kbps) = defaults::START_PRESETS[0];
        AutoParams {
            start_bytes,
            ref_kbps,
            adjust_interval_s: defaults::ADJUST_INTERVAL_S,
            step_bytes: defaults::STEP_BYTES,
            score_deflation: defaults::SCORE_DEFLATION,
            busy_threshold: defaults::BUSY_THRESHOLD,
            evict_threshold: defaults::EVICT_THRESHOLD,
            min_bytes: defaults::STEP_BYTES,
            max_bytes: defaults::MAX_BYTES,
            ramp_s: defaults::RAMP_S,
            guard_s: defaults::GUARD_S,
            scaling: Scaling::Sqrt,
        }
    }
}

/// What the last window decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No window has finished yet.
    Starting,
    /// Load below `busy_threshold`: holding the size.
    Idle,
    /// Gradient descent moved (or is moving) to a neighbour.
    Descending,
    /// At a minimum; stored scores deflated.
    AtMinimum,
    /// Prefetch evictions set the target from the eviction time.
    Evicting,
}

impl Phase {
    fn code(self) -> f64 {
        match self {
            Phase::Starting => 0.0,
            Phase::Idle => 1.0,
            Phase::Descending => 2.0,
            Phase::AtMinimum => 3.0,
            Phase::Evicting => 4.0,
        }
    }
}

/// Measurements of the current window.
#[derive(Clone, Debug, Default)]
struct Window {
    start_s: f64,
    obs: Observation,
    /// Σ len × kbps and Σ len over misses, for the average bit rate.
    rate_sum: f64,
    rate_weight: f64,
}

impl Window {
    fn at(start_s: f64) -> Self {
        Window {
            start_s,
            ..Default::default()
        }
    }

    fn mean_kbps(&self) -> Option<f64> {
        (self.rate_weight > 0.0).then(|| self.rate_sum / self.rate_weight)
    }
}

/// The automatic sizing policy.
#[derive(Clone, Debug)]
pub struct AutoPolicy {
    params: AutoParams,
    spec: String,
    /// Size now in use at the reference bit rate (moves gradually).
    size: f64,
    /// Size the policy is moving to.
    target: u64,
    clock: Option<f64>,
    window: Window,
    scores: BTreeMap<u64, f64>,
    last_score: Option<f64>,
    last_busy: Option<f64>,
    phase: Phase,
    windows: u64,
    /// When the eviction guard last moved the size (it acts at most once per `interval`:
    /// evictions of data prefetched before a shrink would otherwise shrink it again).
    last_guard_s: Option<f64>,
    /// The eviction guard's current period (start time and what it measured so far).
    guard_period: Window,
    /// What the consecutive periods over the threshold measured, and how many they are.
    guard_strikes: (u32, Observation),
    /// Largest reference size the memory budget allows (from
    /// [`Observation::budget_per_sqrt_kbps`]), if a memory manager reports one.
    ceiling: Option<u64>,
    log: ClassLog,
}

impl AutoPolicy {
    pub fn new(params: AutoParams, spec: String) -> Self {
        let start = params.start_bytes.clamp(params.min_bytes, params.max_bytes);
        AutoPolicy {
            size: start as f64,
            target: start,
            params,
            spec,
            clock: None,
            window: Window::default(),
            scores: BTreeMap::new(),
            last_score: None,
            last_busy: None,
            phase: Phase::Starting,
            windows: 0,
            last_guard_s: None,
            guard_period: Window::default(),
            guard_strikes: (0, Observation::default()),
            ceiling: None,
            log: ClassLog::default(),
        }
    }

    /// Size in use at the reference bit rate.
    pub fn reference_bytes(&self) -> u64 {
        self.size.round() as u64
    }

    /// Size the policy is moving towards.
    pub fn target_bytes(&self) -> u64 {
        self.target
    }

    /// Score stored for a reference size, if measured.
    pub fn stored_score(&self, size: u64) -> Option<f64> {
        self.scores.get(&size).copied()
    }

    /// Moves the clock to `now`: ramps the size, and closes the window when due.
    fn advance(&mut self, now: f64) {
        let last = match self.clock {
            None => {
                self.clock = Some(now);
                self.window = Window::at(now);
                self.guard_period = Window::at(now);
                return;
            }
            Some(last) if now < last => return,
            Some(last) => last,
        };
        self.clock = Some(now);
        if self.eviction_guard(now) {
            return;
        }
        if self.size.round() as u64 != self.target {
            self.ramp(now - last);
            if self.size.round() as u64 == self.target {
                self.size = self.target as f64;
                // Measurements taken while moving do not describe any one size.
                self.window = Window::at(now);
            }
            return;
        }
        if now - self.window.start_s >= self.params.adjust_interval_s {
            self.close_window(now);
            self.window = Window::at(now);
        }
    }

    /// Whether `o` evicted more than `evict_threshold` of its requested bytes.
    fn over_threshold(&self, o: &Observation) -> bool {
        o.requested_bytes > 0
            && o.evictions > 0
            && o.evicted_bytes as f64 / o.requested_bytes as f64 > self.params.evict_threshold
    }

    /// Closes the guard's period when `guard_s` have passed and applies the eviction rule
    /// before the window closes when two consecutive periods exceeded the threshold; true
    /// when it did (the window then restarts at the new size).
    fn eviction_guard(&mut self, now: f64) -> bool {
        if now - self.guard_period.start_s < self.params.guard_s {
            return false;
        }
        let period = std::mem::replace(&mut self.guard_period, Window::at(now));
        if !self.over_threshold(&period.obs) {
            self.guard_strikes = (0, Observation::default());
            return false;
        }
        self.guard_strikes.0 += 1;
        self.guard_strikes.1.merge(&period.obs);
        let recently = self
            .last_guard_s
            .is_some_and(|t| now - t < self.params.adjust_interval_s);
        if self.guard_strikes.0 < 2 || recently {
            return false;
        }
        let (_, o) = std::mem::take(&mut self.guard_strikes);
        self.jump_to_eviction_size(&o);
        self.window = Window::at(now);
        self.last_guard_s = Some(now);
        true
    }

    fn ramp(&mut self, dt: f64) {
        let speed = self.params.step_bytes as f64 / self.params.ramp_s.max(f64::MIN_POSITIVE);
        let max_move = speed * dt;
        let gap = self.target as f64 - self.size;
        if gap.abs() <= max_move {
            self.size = self.target as f64;
        } else {
            self.size += max_move.copysign(gap);
        }
    }

    fn set_target(&mut self, bytes: f64) {
        let lo = self.params.min_bytes as f64;
        let hi = self.params.max_bytes as f64;
        self.target = bytes.clamp(lo, hi.max(lo)).round() as u64;
    }

    fn close_window(&mut self, now: f64) {
        let elapsed = now - self.window.start_s;
        if elapsed <= 0.0 {
            return;
        }
        self.windows += 1;
        let o = self.window.obs.clone();
        let busy = o.busy_s / elapsed;
        self.last_busy = Some(busy);
        if busy < self.params.busy_threshold {
            self.phase = Phase::Idle;
            return;
        }
        if o.requested_bytes == 0 {
            return;
        }
        if self.over_threshold(&o) {
            self.jump_to_eviction_size(&o);
            return;
        }
        let score = window_score(&o);
        self.last_score = Some(score);
        self.descend(score);
    }

    fn jump_to_eviction_size(&mut self, o: &Observation) {
        let eviction_time = o.eviction_time_s / o.evictions as f64;
        let kbps = self
            .window
            .mean_kbps()
            .unwrap_or(self.params.ref_kbps as f64);
        let at_mean_rate = eviction_time * kbps * 1000.0 / 8.0;
        let at_ref = self
            .params
            .scaling
            .unscale(at_mean_rate, self.params.ref_kbps, kbps);
        self.set_target(at_ref);
        // Shrinking is immediate: every prefetch at the old size is partly evicted unread.
        // Growing back stays gradual.
        if (self.target as f64) < self.size {
            self.size = self.target as f64;
        }
        self.scores.clear();
        self.phase = Phase::Evicting;
    }

    fn descend(&mut self, score: f64) {
        let p = self.target;
        self.scores.insert(p, score);
        let step = self.params.step_bytes;
        let larger = p
            .checked_add(step)
            .filter(|&s| s <= self.params.max_bytes && self.ceiling.is_none_or(|c| s <= c));
        let smaller = p
            .checked_sub(step)
            .filter(|&s| s >= self.params.min_bytes && s > 0);
        let score_of = |s: Option<u64>| s.and_then(|s| self.scores.get(&s).copied());
        let (sl, ss) = (score_of(larger), score_of(smaller));
        let better = [(larger, sl), (smaller, ss)]
            .into_iter()
            .filter_map(|(size, sc)| Some((size?, sc?)))
            .filter(|&(_, sc)| sc < score)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let next = match (better, sl, ss) {
            (Some((size, _)), _, _) => Some(size),
            (None, None, _) if larger.is_some() => larger,
            (None, _, None) if smaller.is_some() => smaller,
            _ => None,
        };
        match next {
            Some(size) => {
                self.target = size;
                self.phase = Phase::Descending;
            }
            None => {
                // Deflate the scores that hold us here, so a neighbour rejected on a
                // noisy measurement is measured again. Scores of sizes further away keep
                // their value: deflating them too would make the descent wander off to
                // long-unmeasured sizes after a long stay at a minimum.
                let keep = 1.0 - self.params.score_deflation;
                for n in [larger, smaller].into_iter().flatten() {
                    if let Some(s) = self.scores.get_mut(&n) {
                        *s *= keep;
                    }
                }
                self.phase = Phase::AtMinimum;
            }
        }
    }

    /// The memory budget bounds the reference size: a size above it would only be cut
    /// short by the engine (and measured as if it were larger). Shrinking to it is
    /// immediate, like the eviction rule's; the search then works below it. The ceiling is
    /// not rounded down to the step grid: between 0.5 and 1 MB (a busy server's share)
    /// that rounding threw away up to half of what the budget allows.
    fn apply_ceiling(&mut self, per_sqrt_kbps: f64) {
        let raw = per_sqrt_kbps * f64::from(self.params.ref_kbps.max(1)).sqrt();
        let ceiling = (raw.round() as u64).clamp(self.params.min_bytes, self.params.max_bytes);
        self.ceiling = Some(ceiling);
        if self.target > ceiling {
            self.target = ceiling;
            self.scores.retain(|&s, _| s <= ceiling);
        }
        if self.size > ceiling as f64 {
            self.size = ceiling as f64;
        }
    }

    fn size_for(&self, kbps: u32) -> u64 {
        self.params
            .scaling
            .scale(self.reference_bytes(), self.params.ref_kbps, kbps)
    }
}

/// Disk milliseconds per 128 KiB read × miss ratio; 0 when nothing was read.
pub fn window_score(o: &Observation) -> f64 {
    if o.disk_bytes == 0 || o.requested_bytes == 0 {
        return 0.0;
    }
    let transactions = o.disk_bytes as f64 / 131_072.0;
    let ms_per_transaction = o.disk_time_s * 1000.0 / transactions;
    let miss_ratio = o.disk_bytes as f64 / o.requested_bytes as f64;
    ms_per_transaction * miss_ratio
}

impl Policy for AutoPolicy {
    fn prefetch_bytes(&mut self, ctx: &ReadContext) -> u64 {
        self.advance(ctx.now_s);
        let kbps = ctx.bitrate();
        self.window.rate_sum += ctx.len as f64 * kbps as f64;
        self.window.rate_weight += ctx.len as f64;
        let size = self.size_for(kbps);
        self.log.note(kbps, size)
    }

    fn observe(&mut self, o: &Observation) {
        if let Some(per) = o.budget_per_sqrt_kbps {
            self.apply_ceiling(per);
        }
        if self.clock.is_none() {
            self.advance(o.now_s);
        }
        self.window.obs.merge(o);
        self.guard_period.obs.merge(o);
        self.advance(o.now_s);
    }

    fn current(&self) -> PolicyState {
        let mut classes: Vec<ClassSize> = self
            .log
            .kbps()
            .chain(std::iter::once(self.params.ref_kbps))
            .map(|kbps| ClassSize {
                bitrate_kbps: kbps,
                bytes: self.size_for(kbps),
            })
            .collect();
        classes.sort_by_key(|c| c.bitrate_kbps);
        classes.dedup_by_key(|c| c.bitrate_kbps);
        let mut detail = BTreeMap::new();
        detail.insert("reference_kbps".into(), self.params.ref_kbps as f64);
        detail.insert("reference_bytes".into(), self.reference_bytes() as f64);
        detail.insert("target_bytes".into(), self.target as f64);
        if let Some(c) = self.ceiling {
            detail.insert("ceiling_bytes".into(), c as f64);
        }
        detail.insert("phase".into(), self.phase.code());
        detail.insert("windows".into(), self.windows as f64);
        if let Some(s) = self.last_score {
            detail.insert("last_score".into(), s);
        }
        if let Some(b) = self.last_busy {
            detail.insert("last_busy_fraction".into(), b);
        }
        PolicyState {
            policy: self.spec.clone(),
            classes,
            detail,
        }
    }
}

impl Default for AutoPolicy {
    fn default() -> Self {
        AutoPolicy::new(AutoParams::default(), "auto".into())
    }
}
