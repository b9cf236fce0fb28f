//! Adaptive bit-rate rules: which rendition an adaptive player fetches next, from what it has
//! measured (segment download throughput) and what it holds (seconds of buffered media).
//! Pure: the caller feeds observations with its own clock, so the rules are tested on
//! synthetic traces.
//!
//! - [`Rule::Throughput`] (dash.js's ThroughputRule): the highest rendition whose bit rate
//!   fits under a safety share of the estimated throughput. The estimate is the smaller of a
//!   fast and a slow exponentially weighted average (half-lives in seconds of download time),
//!   so it falls quickly and rises slowly.
//! - [`Rule::Buffer`] (BBA-0, Huang et al., SIGCOMM 2014): below a *reservoir* of buffer the
//!   lowest rendition, above reservoir + *cushion* the highest, in between a rate mapped
//!   linearly from the buffer level; the choice only moves when the mapped rate crosses a
//!   neighbouring rung (hysteresis), which damps oscillation.
//! - [`Rule::Hybrid`] (dash.js's "dynamic" strategy): the throughput rule while the buffer is
//!   short (start-up, after a stall), the buffer rule once it holds `switch_s` seconds, and
//!   back when it falls to half of that.
//!
//! While a segment downloads, [`Abr::abandon`] decides whether to give it up for a lower
//! rendition ([`Abandon`]: dash.js's AbandonRequestsRule and hls.js's emergency switch-down),
//! the way a real player reacts to a server that slows down mid-segment.

use serde::{Deserialize, Serialize};
use strum::{EnumString, VariantNames};

/// Which rule chooses renditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, EnumString, VariantNames)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown_rule)]
pub enum Rule {
    Throughput,
    #[strum(to_string = "buffer", serialize = "bba")]
    Buffer,
    #[strum(to_string = "hybrid", serialize = "dynamic")]
    Hybrid,
}

fn unknown_rule(s: &str) -> String {
    vodkit_units::unknown_choice("ABR rule", s, Rule::VARIANTS)
}

/// Tunables of the rules (defaults close to dash.js and the BBA paper).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AbrSettings {
    /// Share of the throughput estimate a rendition may use.
    pub safety: f64,
    /// Half-lives (seconds of download time) of the fast and slow throughput averages.
    pub fast_half_life_s: f64,
    pub slow_half_life_s: f64,
    /// BBA reservoir and cushion (seconds of buffer).
    pub reservoir_s: f64,
    pub cushion_s: f64,
    /// Hybrid: buffer level at which the buffer rule takes over.
    pub switch_s: f64,
    /// Bit rate assumed before anything was downloaded (bit/s): the first segment comes from
    /// the highest rendition not above it (0: the lowest). dash.js assumes 1,000 kbit/s,
    /// hls.js 500 kbit/s.
    pub initial_bps: u64,
}

impl Default for AbrSettings {
    fn default() -> AbrSettings {
        AbrSettings {
            safety: 0.9,
            fast_half_life_s: 3.0,
            slow_half_life_s: 8.0,
            reservoir_s: 8.0,
            cushion_s: 16.0,
            switch_s: 12.0,
            initial_bps: 0,
        }
    }
}

/// When a player gives up a slow segment download (on by default in dash.js and hls.js).
///
/// After `grace_s` of a download that has received some bytes, the player projects the
/// download's total time from the bytes received so far. It abandons the download when
/// (dash.js) the projection reaches `multiplier` × the segment's duration **and** (hls.js) the
/// rest would arrive after the buffer runs dry (always, before playback has started), and a
/// lower rendition's copy of the segment would arrive sooner than the rest of this one. It
/// then fetches the segment again from the highest lower rendition that fits under the
/// safety share of the measured rate (the lowest when none does).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Abandon {
    /// No decision before the download has run this long (seconds).
    pub grace_s: f64,
    /// Projected download time, in segment durations, from which a download is too slow.
    pub multiplier: f64,
}

impl Default for Abandon {
    /// dash.js's defaults: `abandonDurationMultiplier` 1.8; a grace of 0.5 s (its rule waits for
    /// a few progress events, hls.js for half a second or more).
    fn default() -> Abandon {
        Abandon {
            grace_s: 0.5,
            multiplier: 1.8,
        }
    }
}

/// A download in progress, as [`Abr::abandon`] sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Index of the rendition being downloaded (ascending ladder).
    pub rendition: usize,
    /// Seconds of media the segment holds.
    pub duration_s: f64,
    /// Bytes the segment is expected to hold (its rendition's bit rate × duration).
    pub expected_bytes: u64,
    /// Bytes received so far and seconds since the request was sent.
    pub received: u64,
    pub elapsed_s: f64,
    /// Seconds of media buffered now, and whether playback has started.
    pub buffer_s: f64,
    pub playing: bool,
}

/// Exponentially weighted throughput average, weighted by download time.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ewma {
    half_life_s: f64,
    value: f64,
    weight: f64,
}

impl Ewma {
    fn new(half_life_s: f64) -> Ewma {
        Ewma {
            half_life_s,
            value: 0.0,
            weight: 0.0,
        }
    }

    fn add(&mut self, bps: f64, seconds: f64) {
        let alpha = 0.5f64.powf(seconds / self.half_life_s);
        self.value = alpha * self.value + (1.0 - alpha) * bps;
        self.weight = alpha * self.weight + (1.0 - alpha);
    }

    /// Zero-bias-corrected estimate (the first samples are not pulled towards 0).
    fn get(&self) -> Option<f64> {
        (self.weight > 0.0).then(|| self.value / self.weight)
    }
}

/// The chooser of one player session.
#[derive(Debug, Clone)]
pub struct Abr {
    rule: Rule,
    settings: AbrSettings,
    /// Rendition bit rates (bit/s), ascending.
    ladder: Vec<u64>,
    fast: Ewma,
    slow: Ewma,
    current: usize,
    /// Hybrid: the buffer rule is in charge.
    buffer_mode: bool,
}

impl Abr {
    /// A chooser over `ladder_bps` (sorted here; must not be empty) starting at the lowest
    /// rendition, or at `start` when the caller knows better (e.g. a configured initial bit rate).
    pub fn new(rule: Rule, settings: AbrSettings, ladder_bps: &[u64]) -> Abr {
        let mut ladder = ladder_bps.to_vec();
        ladder.sort_unstable();
        ladder.dedup();
        if ladder.is_empty() {
            ladder.push(0);
        }
        Abr {
            rule,
            settings,
            ladder,
            fast: Ewma::new(settings.fast_half_life_s),
            slow: Ewma::new(settings.slow_half_life_s),
            current: 0,
            buffer_mode: false,
        }
    }

    pub fn ladder(&self) -> &[u64] {
        &self.ladder
    }

    /// A finished download of `bytes` that took `seconds`.
    pub fn observe(&mut self, bytes: u64, seconds: f64) {
        if bytes == 0 || seconds.is_nan() || seconds <= 0.0 {
            return;
        }
        let bps = bytes as f64 * 8.0 / seconds;
        self.fast.add(bps, seconds);
        self.slow.add(bps, seconds);
    }

    /// Make rendition `index` the current one (the player abandoned a download for it).
    pub fn switch_to(&mut self, index: usize) {
        self.current = index.min(self.ladder.len() - 1);
    }

    /// Whether to abandon the download `p` ([`Abandon`]): the lower rendition to fetch the
    /// segment from instead, or `None` to keep downloading.
    pub fn abandon(&self, rule: &Abandon, p: &Progress) -> Option<usize> {
        let current = p.rendition.min(self.ladder.len() - 1);
        if current == 0 || p.received == 0 || p.elapsed_s < rule.grace_s || p.duration_s <= 0.0 {
            return None;
        }
        let rate_bps = p.received as f64 * 8.0 / p.elapsed_s;
        let projected_s = p.expected_bytes as f64 * 8.0 / rate_bps;
        if projected_s < rule.multiplier * p.duration_s {
            return None;
        }
        let rest_s = p.expected_bytes.saturating_sub(p.received) as f64 * 8.0 / rate_bps;
        if p.playing && rest_s <= p.buffer_s {
            return None;
        }
        let budget = rate_bps * self.settings.safety;
        let to = self.ladder[..current]
            .iter()
            .rposition(|&b| b as f64 <= budget)
            .unwrap_or(0);
        let refetch_s = self.ladder[to] as f64 * p.duration_s / rate_bps;
        (refetch_s < rest_s).then_some(to)
    }

    /// Current throughput estimate (bit/s), once something was downloaded.
    pub fn estimate_bps(&self) -> Option<f64> {
        match (self.fast.get(), self.slow.get()) {
            (Some(f), Some(s)) => Some(f.min(s)),
            _ => None,
        }
    }

    /// The rendition (index into the ascending ladder) for the next segment, with
    /// `buffer_s` seconds of media buffered.
    pub fn choose(&mut self, buffer_s: f64) -> usize {
        let next = match self.rule {
            Rule::Throughput => self.by_throughput(),
            Rule::Buffer => self.by_buffer(buffer_s),
            Rule::Hybrid => {
                if self.buffer_mode && buffer_s < self.settings.switch_s / 2.0 {
                    self.buffer_mode = false;
                } else if !self.buffer_mode && buffer_s >= self.settings.switch_s {
                    self.buffer_mode = true;
                }
                if self.buffer_mode {
                    self.by_buffer(buffer_s)
                } else {
                    self.by_throughput()
                }
            }
        };
        self.current = next;
        next
    }

    fn by_throughput(&self) -> usize {
        let Some(est) = self.estimate_bps() else {
            let initial = self.settings.initial_bps;
            return self.ladder.iter().rposition(|&b| b <= initial).unwrap_or(0);
        };
        let budget = est * self.settings.safety;
        self.ladder
            .iter()
            .rposition(|&b| b as f64 <= budget)
            .unwrap_or(0)
    }

    fn by_buffer(&self, buffer_s: f64) -> usize {
        let s = &self.settings;
        let top = self.ladder.len() - 1;
        if buffer_s <= s.reservoir_s {
            return 0;
        }
        if buffer_s >= s.reservoir_s + s.cushion_s {
            return top;
        }
        let (lo, hi) = (self.ladder[0] as f64, self.ladder[top] as f64);
        let mapped = lo + (buffer_s - s.reservoir_s) / s.cushion_s * (hi - lo);
        let cur = self.current.min(top);
        let up = if cur < top {
            self.ladder[cur + 1] as f64
        } else {
            f64::INFINITY
        };
        let down = self.ladder[cur] as f64;
        if mapped >= up {
            // The highest rung strictly below the mapped rate.
            self.ladder
                .iter()
                .rposition(|&b| (b as f64) < mapped)
                .unwrap_or(cur)
                .max(cur)
        } else if mapped <= down && cur > 0 {
            // The lowest rung strictly above the mapped rate, as BBA-0 does.
            self.ladder
                .iter()
                .position(|&b| (b as f64) > mapped)
                .unwrap_or(cur)
                .min(cur)
        } else {
            cur
        }
    }
}

/// What a player with `rule` fetches when nothing but its own link limits it: the mean bit
/// rate (bit/s, weighted by media time) over segments of `durations_s`, downloaded back to
/// back over a link of `link_bps` (0: unlimited) with no latency, never more than
/// `buffer_target_s` ahead of the playhead, playback starting once `startup_s` is buffered.
/// It is the reference of `quality:P`'s bit-rate condition: a loaded server may cost a
/// session some quality, not more than the share the criterion allows.
pub fn unloaded_mean_bps(
    rule: Rule,
    settings: AbrSettings,
    ladder_bps: &[u64],
    link_bps: u64,
    durations_s: &[f64],
    buffer_target_s: f64,
    startup_s: f64,
) -> f64 {
    // An unlimited link still takes some time per segment, or the estimate is infinite.
    const UNLIMITED_BPS: f64 = 1e11;
    let link = if link_bps == 0 {
        UNLIMITED_BPS
    } else {
        link_bps as f64
    };
    let mut abr = Abr::new(rule, settings, ladder_bps);
    let (mut level, mut playing) = (0.0f64, false);
    let (mut weighted, mut total) = (0.0f64, 0.0f64);
    for &d in durations_s {
        if !(d.is_finite() && d > 0.0) {
            continue;
        }
        if playing && level > buffer_target_s {
            level = buffer_target_s;
        }
        let pick = abr.choose(level);
        let bps = abr.ladder[pick] as f64;
        let seconds = bps * d / link;
        if playing {
            level -= seconds;
            if level < 0.0 {
                level = 0.0;
                playing = false;
            }
        }
        abr.observe((bps * d / 8.0).round() as u64, seconds);
        level += d;
        if !playing && level + 1e-9 >= startup_s {
            playing = true;
        }
        weighted += bps * d;
        total += d;
    }
    if total > 0.0 {
        weighted / total
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LADDER: [u64; 4] = [500_000, 1_000_000, 2_500_000, 5_000_000];

    /// Download one 4 s segment of the current rendition over a link of `mbps`, then choose
    /// the next with `buffer_s` buffered.
    fn step(abr: &mut Abr, mbps: f64, buffer_s: f64) -> usize {
        let bits = abr.ladder[abr.current] as f64 * 4.0;
        abr.observe((bits / 8.0) as u64, bits / (mbps * 1e6));
        abr.choose(buffer_s)
    }

    #[test]
    fn throughput_rule_steps_down_fast_and_up_slowly() {
        let mut abr = Abr::new(Rule::Throughput, AbrSettings::default(), &LADDER);
        assert_eq!(abr.choose(0.0), 0, "nothing measured: the lowest");
        let guess = AbrSettings {
            initial_bps: 1_000_000,
            ..AbrSettings::default()
        };
        assert_eq!(
            Abr::new(Rule::Throughput, guess, &LADDER).choose(0.0),
            1,
            "dash.js's 1 Mbit/s guess"
        );
        let mut choices = Vec::new();
        for _ in 0..10 {
            choices.push(step(&mut abr, 8.0, 10.0));
        }
        assert_eq!(*choices.last().unwrap(), 3, "{choices:?}");
        // Capacity drops to 1.5 Mbit/s: at most two segments later the choice fits it.
        let mut after = Vec::new();
        for _ in 0..6 {
            after.push(step(&mut abr, 1.5, 10.0));
        }
        let first_fit = after.iter().position(|&c| LADDER[c] <= 1_500_000).unwrap();
        assert!(
            first_fit <= 1,
            "stepped down after {first_fit} segments: {after:?}"
        );
        assert_eq!(*after.last().unwrap(), 1);
        // Back up to 8 Mbit/s: the slow average delays the climb.
        let mut up = Vec::new();
        for _ in 0..30 {
            up.push(step(&mut abr, 8.0, 10.0));
        }
        assert!(up[0] < 3, "no jump straight to the top: {up:?}");
        assert_eq!(*up.last().unwrap(), 3, "{up:?}");
        assert!(
            up.windows(2).all(|w| w[1] >= w[0]),
            "monotone climb: {up:?}"
        );
    }

    #[test]
    fn oscillating_throughput_is_damped() {
        // Alternating 1.6 and 3.6 Mbit/s (mean 2.6): a per-sample rule would flip between
        // rungs 1 and 2 every segment.
        let mut abr = Abr::new(Rule::Throughput, AbrSettings::default(), &LADDER);
        let mut choices = Vec::new();
        for i in 0..40 {
            let r = if i % 2 == 0 { 1.6 } else { 3.6 };
            choices.push(step(&mut abr, r, 10.0));
        }
        let switches = choices[10..].windows(2).filter(|w| w[0] != w[1]).count();
        assert!(switches <= 3, "{switches} switches: {choices:?}");
        let mut bba = Abr::new(Rule::Buffer, AbrSettings::default(), &LADDER);
        let mut b = Vec::new();
        for i in 0..40 {
            // Buffer wobbling around the level where the BBA map crosses 2.5 Mbit/s (15.1 s):
            // without hysteresis every segment would switch.
            b.push(bba.choose(if i % 2 == 0 { 14.5 } else { 15.5 }));
        }
        let switches = b[2..].windows(2).filter(|w| w[0] != w[1]).count();
        assert!(switches <= 1, "BBA hysteresis: {b:?}");
    }

    #[test]
    fn buffer_rule_maps_reservoir_and_cushion() {
        let s = AbrSettings::default();
        let mut abr = Abr::new(Rule::Buffer, s, &LADDER);
        assert_eq!(abr.choose(2.0), 0, "inside the reservoir");
        assert_eq!(abr.choose(30.0), 3, "above reservoir + cushion");
        assert_eq!(abr.choose(2.0), 0, "back into the reservoir");
        // Climbing through the cushion passes the rungs in order.
        let mut seen = Vec::new();
        for tenth in 80..=240 {
            seen.push(abr.choose(tenth as f64 / 10.0));
        }
        assert!(seen.windows(2).all(|w| w[1] >= w[0]), "{seen:?}");
        assert_eq!(seen.first(), Some(&0));
        assert_eq!(seen.last(), Some(&3));
        for r in 0..4 {
            assert!(seen.contains(&r), "rung {r} skipped: {seen:?}");
        }
    }

    #[test]
    fn hybrid_uses_throughput_at_start_and_buffer_when_full() {
        let mut abr = Abr::new(Rule::Hybrid, AbrSettings::default(), &LADDER);
        // Short buffer, fast link: the throughput rule climbs although BBA would say 0.
        let mut c = 0;
        for _ in 0..10 {
            c = step(&mut abr, 8.0, 4.0);
        }
        assert_eq!(c, 3);
        // Long buffer, link collapsed: the buffer rule holds the quality a while.
        assert_eq!(step(&mut abr, 0.6, 30.0), 3);
        // The buffer drains below half the switch level: the throughput rule again.
        assert_eq!(step(&mut abr, 0.6, 5.0), 0);
        // At 5 s of buffer BBA would stay at the lowest rung; the throughput rule climbs.
        let mut c = 0;
        for _ in 0..40 {
            c = step(&mut abr, 8.0, 5.0);
        }
        assert!(c > 0, "throughput rule in charge below the switch level");
        assert!("bba".parse::<Rule>().is_ok() && "x".parse::<Rule>().is_err());
    }

    #[test]
    fn a_slow_download_is_abandoned_for_a_rung_that_fits() {
        let abr = Abr::new(Rule::Throughput, AbrSettings::default(), &LADDER);
        let rule = Abandon::default();
        // A 4 s segment of the 5 Mbit/s rung (2.5 MB) arriving at 1.2 Mbit/s: 16.7 s in all,
        // over 1.8 × 4 s, with 6 s buffered: give it up for the 1 Mbit/s rung.
        let slow = Progress {
            rendition: 3,
            duration_s: 4.0,
            expected_bytes: 2_500_000,
            received: 150_000,
            elapsed_s: 1.0,
            buffer_s: 6.0,
            playing: true,
        };
        assert_eq!(abr.abandon(&rule, &slow), Some(1));
        // Inside the grace time, or before any byte: no decision.
        for p in [
            Progress {
                elapsed_s: 0.4,
                received: 60_000,
                ..slow
            },
            Progress {
                received: 0,
                elapsed_s: 5.0,
                ..slow
            },
        ] {
            assert_eq!(abr.abandon(&rule, &p), None, "{p:?}");
        }
        // Fast enough (5.6 s projected < 7.2 s): keep it.
        let fine = Progress {
            received: 450_000,
            ..slow
        };
        assert_eq!(abr.abandon(&rule, &fine), None);
        // Slow, but the buffer outlasts the rest: keep it; before playback started the
        // buffer does not protect it.
        let covered = Progress {
            buffer_s: 20.0,
            ..slow
        };
        assert_eq!(abr.abandon(&rule, &covered), None);
        assert_eq!(
            abr.abandon(
                &rule,
                &Progress {
                    playing: false,
                    ..covered
                }
            ),
            Some(1)
        );
        // The lowest rung is never abandoned; nothing fits a crawl: the lowest rung.
        assert_eq!(
            abr.abandon(
                &rule,
                &Progress {
                    rendition: 0,
                    ..slow
                }
            ),
            None
        );
        let crawl = Progress {
            received: 20_000,
            ..slow
        };
        assert_eq!(abr.abandon(&rule, &crawl), Some(0));
        // Almost done: refetching even the lowest rung would take longer than the rest.
        let nearly = Progress {
            rendition: 1,
            expected_bytes: 500_000,
            received: 480_000,
            elapsed_s: 10.0,
            buffer_s: 0.0,
            ..slow
        };
        assert_eq!(abr.abandon(&rule, &nearly), None);
    }

    #[test]
    fn unloaded_reference_follows_the_link() {
        let d = [4.0; 30];
        let s = AbrSettings::default();
        // Unlimited: the throughput rule climbs to the top after the first segment.
        let top = unloaded_mean_bps(Rule::Throughput, s, &LADDER, 0, &d, 30.0, 8.0);
        assert!(top > 0.95 * 5_000_000.0, "{top}");
        // A 3 Mbit/s link: 2.5 Mbit/s fits under 90% of it, 5 Mbit/s never does.
        let mid = unloaded_mean_bps(Rule::Throughput, s, &LADDER, 3_000_000, &d, 30.0, 8.0);
        assert!(mid > 2_300_000.0 && mid <= 2_500_000.0, "{mid}");
        // The buffer rule and the hybrid fill the buffer before they climb, so they are
        // lower over a short session than over a long one.
        for rule in [Rule::Buffer, Rule::Hybrid] {
            let short = unloaded_mean_bps(rule, s, &LADDER, 3_000_000, &d[..5], 30.0, 8.0);
            let long = unloaded_mean_bps(rule, s, &LADDER, 3_000_000, &[4.0; 200], 30.0, 8.0);
            assert!(short < long, "{rule:?}: {short} vs {long}");
            assert!(
                long <= 3_000_000.0 * 1.01,
                "{rule:?} above the link: {long}"
            );
        }
        // Nothing to play: no reference.
        assert_eq!(
            unloaded_mean_bps(Rule::Hybrid, s, &LADDER, 0, &[], 30.0, 8.0),
            0.0
        );
    }
}
