//! The netflix-2014 catalog: titles with TV/movie durations, popularity by server role, and
//! per-title files in separate audio, separate video and combined encodings, each laid out
//! as a segment-offset table followed by 2 s VBR segments.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use crate::model::Media;

/// Audio bit rates (kbit/s); the two lowest carry most of the title time (thesis Fig. 5.2).
pub const AUDIO_KBPS: [u32; 5] = [64, 96, 128, 192, 384];
/// Video-only ladder (14 rates, 235 to 10,000 kbit/s).
pub const VIDEO_KBPS: [u32; 14] = [
    235, 375, 560, 750, 1050, 1400, 1750, 2350, 3000, 4300, 4500, 5800, 6500, 10000,
];
/// Combined audio+video ladder (8 rates).
pub const COMBINED_KBPS: [u32; 8] = [370, 500, 650, 1000, 1300, 1600, 2200, 3200];

/// Length of one segment of content in seconds (Table 5.5).
pub const SEGMENT_S: f64 = 2.0;
/// Segments in one repetition of a file's VBR size pattern.
const VBR_PERIOD: usize = 16;

/// One file of the catalog: one title at one bit rate.
#[derive(Clone, Debug)]
pub struct NfFile {
    /// Name used in logs and the file table (also the path below the served root).
    pub name: String,
    pub title: u32,
    pub media: Media,
    pub bitrate_kbps: u32,
    pub drive: u16,
    pub segments: u32,
    /// Bytes of the segment-offset table at the start of the file.
    pub header_bytes: u64,
    /// Sizes of `VBR_PERIOD` consecutive segments; the pattern repeats over the file.
    pattern: [u32; VBR_PERIOD],
    period_bytes: u64,
}

impl NfFile {
    /// Byte offset where segment `i` starts (`i == segments` gives the file size).
    pub fn segment_offset(&self, i: u32) -> u64 {
        let i = i.min(self.segments) as usize;
        let full = (i / VBR_PERIOD) as u64 * self.period_bytes;
        let part: u64 = self.pattern[..i % VBR_PERIOD]
            .iter()
            .map(|&s| u64::from(s))
            .sum();
        self.header_bytes + full + part
    }

    pub fn size_bytes(&self) -> u64 {
        self.segment_offset(self.segments)
    }
}

/// One title and the indices of its files in [`NfCatalog::files`].
#[derive(Clone, Debug)]
pub struct NfTitle {
    pub id: u32,
    pub rank: u32,
    pub duration_s: f64,
    pub audio: Vec<usize>,
    pub video: Vec<usize>,
    pub combined: Vec<usize>,
    /// Cumulative popularity weight up to and including this title (for sampling).
    pub cum_weight: f64,
}

#[derive(Clone, Debug)]
pub struct NfCatalog {
    pub titles: Vec<NfTitle>,
    pub files: Vec<NfFile>,
}

/// Which kind of server the popularity is shaped for (thesis 5.2.1, Fig. 5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerRole {
    /// Zipf-like with an unusual bump over the 20 most popular titles.
    Catalog,
    /// Zipf-like with an exponential cutoff in the tail.
    Flash,
}

/// Draw a title duration in seconds: TV peaks at 22 and 43 minutes, movies around 90.
fn draw_duration(rng: &mut ChaCha8Rng) -> f64 {
    let u: f64 = rng.random();
    let (mean_min, sd_min) = if u < 0.30 {
        (22.0, 1.5)
    } else if u < 0.62 {
        (43.0, 2.5)
    } else {
        (92.0, 18.0)
    };
    let m: f64 = Normal::new(mean_min, sd_min)
        .expect("valid normal")
        .sample(rng);
    m.clamp(10.5, 180.0) * 60.0
}

fn popularity_weight(rank: u32, role: ServerRole, zipf_alpha: f64) -> f64 {
    let r = f64::from(rank);
    match role {
        ServerRole::Catalog => {
            let base = r.powf(-zipf_alpha);
            if rank <= 20 {
                base * 4.0
            } else {
                base
            }
        }
        ServerRole::Flash => r.powf(-zipf_alpha) * (-r / 2000.0).exp(),
    }
}

fn vbr_pattern(rng: &mut ChaCha8Rng, base: f64) -> [u32; VBR_PERIOD] {
    let normal = Normal::new(0.0f64, 0.3).expect("valid normal");
    let factors: Vec<f64> = (0..VBR_PERIOD).map(|_| normal.sample(rng).exp()).collect();
    let mean = factors.iter().sum::<f64>() / VBR_PERIOD as f64;
    let mut out = [0u32; VBR_PERIOD];
    for (o, f) in out.iter_mut().zip(&factors) {
        *o = ((base * f / mean).round() as u32).max(188);
    }
    out
}

fn new_file(
    rng: &mut ChaCha8Rng,
    title: u32,
    duration_s: f64,
    media: Media,
    kbps: u32,
    drives: u16,
) -> NfFile {
    let letter = match media {
        Media::Audio => 'a',
        Media::Video => 'v',
        Media::Combined => 'c',
    };
    let segments = (duration_s / SEGMENT_S).ceil() as u32;
    let base = f64::from(kbps) * 1000.0 / 8.0 * SEGMENT_S;
    let pattern = vbr_pattern(rng, base);
    let period_bytes = pattern.iter().map(|&s| u64::from(s)).sum();
    NfFile {
        name: format!("nf/t{title:05}/{letter}{kbps}.mp4"),
        title,
        media,
        bitrate_kbps: kbps,
        drive: rng.random_range(0..drives.max(1)),
        segments,
        header_bytes: 2048 + 8 * u64::from(segments),
        pattern,
        period_bytes,
    }
}

/// Build the catalog. Title ids are 1-based; rank 1 is the most popular title.
pub fn build(
    rng: &mut ChaCha8Rng,
    titles: u32,
    role: ServerRole,
    zipf_alpha: f64,
    drives: u16,
) -> NfCatalog {
    let mut ranks: Vec<u32> = (1..=titles).collect();
    // Shuffle ranks so popularity is independent of id (Fisher-Yates).
    for i in (1..ranks.len()).rev() {
        let j = rng.random_range(0..=i);
        ranks.swap(i, j);
    }
    let mut files = Vec::new();
    let mut out = Vec::with_capacity(titles as usize);
    let mut cum = 0.0;
    for id in 1..=titles {
        let duration_s = draw_duration(rng);
        let grade: f64 = rng.random();
        let max_video = if grade < 0.03 {
            10000
        } else if grade < 0.55 {
            5800
        } else if grade < 0.85 {
            3000
        } else {
            1750
        };
        let mut t = NfTitle {
            id,
            rank: ranks[(id - 1) as usize],
            duration_s,
            audio: vec![],
            video: vec![],
            combined: vec![],
            cum_weight: 0.0,
        };
        for &k in &[64u32, 96, 192] {
            if k != 64 || rng.random::<f64>() < 0.3 {
                t.audio.push(files.len());
                files.push(new_file(rng, id, duration_s, Media::Audio, k, drives));
            }
        }
        for &k in VIDEO_KBPS.iter().filter(|&&k| k <= max_video) {
            t.video.push(files.len());
            files.push(new_file(rng, id, duration_s, Media::Video, k, drives));
        }
        let max_combined = if max_video >= 3000 { 3200 } else { 1600 };
        for &k in COMBINED_KBPS.iter().filter(|&&k| k <= max_combined) {
            t.combined.push(files.len());
            files.push(new_file(rng, id, duration_s, Media::Combined, k, drives));
        }
        out.push(t);
    }
    // Cumulative weights in id order; sampling is by binary search.
    for t in &mut out {
        cum += popularity_weight(t.rank, role, zipf_alpha);
        t.cum_weight = cum;
    }
    NfCatalog { titles: out, files }
}

impl NfCatalog {
    /// Pick a title index by popularity.
    pub fn draw_title(&self, rng: &mut ChaCha8Rng) -> usize {
        let total = self.titles.last().map_or(0.0, |t| t.cum_weight);
        let x = rng.random::<f64>() * total;
        self.titles
            .partition_point(|t| t.cum_weight <= x)
            .min(self.titles.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn segment_offsets_increase_and_end_at_size() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let cat = build(&mut rng, 5, ServerRole::Catalog, 0.8, 4);
        for f in &cat.files {
            assert_eq!(f.segment_offset(0), f.header_bytes);
            let mut prev = f.segment_offset(0);
            for i in 1..=f.segments {
                let o = f.segment_offset(i);
                assert!(o > prev, "{}: segment {i}", f.name);
                prev = o;
            }
            assert_eq!(f.size_bytes(), prev);
            // Average segment size is within 5% of the nominal bit rate.
            let per_seg = (f.size_bytes() - f.header_bytes) as f64 / f64::from(f.segments);
            let nominal = f64::from(f.bitrate_kbps) * 250.0;
            assert!(
                (per_seg / nominal - 1.0).abs() < 0.05,
                "{} {per_seg} {nominal}",
                f.name
            );
        }
    }

    #[test]
    fn durations_have_tv_and_movie_modes() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let cat = build(&mut rng, 2000, ServerRole::Flash, 0.8, 4);
        let count = |lo: f64, hi: f64| {
            cat.titles
                .iter()
                .filter(|t| t.duration_s >= lo * 60.0 && t.duration_s < hi * 60.0)
                .count()
        };
        assert!(count(20.0, 24.0) > 400);
        assert!(count(40.0, 46.0) > 400);
        assert!(count(75.0, 110.0) > 400);
        assert!(count(0.0, 10.0) == 0);
    }
}
