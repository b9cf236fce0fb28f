//! What an adaptive player needs from a manifest: the renditions (bit rate, init segment) and,
//! per rendition, the segments in play order with their URL, byte range and duration.
//! DASH MPDs are parsed by `dash-mpd-core` (SegmentTemplate with `$Number$`/`$Time$` and
//! SegmentTimeline, SegmentList, SegmentBase with a `sidx`), HLS playlists by `m3u8-rs`
//! (segment files and `#EXT-X-BYTERANGE`). URLs come out as absolute paths on the origin.
//! Two kinds of rendition need one more fetch before their segments are known: a DASH
//! `SegmentBase` (its `sidx`, [`Segments::Sidx`]) and an HLS variant (its media playlist,
//! [`Segments::Playlist`]).

use serde::Serialize;

/// A fetchable piece: origin path and optional inclusive byte range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Piece {
    pub path: String,
    pub range: Option<(u64, u64)>,
}

impl Piece {
    /// The whole object at `path`.
    pub fn whole(path: String) -> Piece {
        Piece { path, range: None }
    }
}

/// One media segment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    pub piece: Piece,
    pub duration_s: f64,
}

/// How a rendition's segments are known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Segments {
    Listed(Vec<Segment>),
    /// DASH `SegmentBase`: fetch `index` (the `sidx`), then [`from_sidx`].
    Sidx {
        index: Piece,
    },
    /// HLS variant: fetch this media playlist, then [`hls_media`].
    Playlist {
        path: String,
    },
}

/// One rendition of the video.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rendition {
    pub id: String,
    pub bandwidth_bps: u64,
    pub init: Option<Piece>,
    pub segments: Segments,
}

/// One period: its renditions in ascending bandwidth.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Period {
    pub duration_s: Option<f64>,
    pub renditions: Vec<Rendition>,
}

/// A parsed presentation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Presentation {
    pub periods: Vec<Period>,
}

/// Why a manifest cannot be played.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError(pub String);

impl std::fmt::Display for ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ManifestError {}

fn bad<T>(url: &str, what: impl std::fmt::Display) -> Result<T, ManifestError> {
    Err(ManifestError(format!("{url}: {what}")))
}

/// Resolve `reference` against the origin path `base` (RFC 3986 for the path-only case:
/// absolute paths stand, relative ones replace the last segment, `..` climbs). Absolute URLs
/// on another origin are refused: the load generator talks to one origin.
pub fn resolve(base: &str, reference: &str) -> Result<String, ManifestError> {
    let reference = reference.trim();
    if reference.is_empty() {
        // An empty reference is the base itself (a SegmentURL or Initialization without a URL).
        return Ok(base.split('#').next().unwrap_or(base).to_string());
    }
    if reference.contains("://") {
        let after = reference.split_once("://").map(|x| x.1).unwrap_or("");
        return match after.find('/') {
            Some(i) => Ok(after[i..].to_string()),
            None => Ok("/".into()),
        };
    }
    let joined = if reference.starts_with('/') {
        reference.to_string()
    } else {
        let dir = match base.split(['?', '#']).next().unwrap_or("").rfind('/') {
            Some(i) => &base[..=i],
            None => "/",
        };
        format!("{dir}{reference}")
    };
    let (path, query) = match joined.find('?') {
        Some(i) => (&joined[..i], &joined[i..]),
        None => (joined.as_str(), ""),
    };
    let mut out: Vec<&str> = Vec::new();
    let ends_with_slash = path.ends_with('/');
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if out.pop().is_none() {
                    return bad(
                        base,
                        format!("`{reference}` climbs above the origin's root"),
                    );
                }
            }
            p => out.push(p),
        }
    }
    let mut s = format!("/{}", out.join("/"));
    if ends_with_slash && !out.is_empty() {
        s.push('/');
    }
    s.push_str(query);
    Ok(s)
}

fn parse_range(url: &str, text: &str) -> Result<(u64, u64), ManifestError> {
    let parsed = text
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?)));
    match parsed {
        Some((a, b)) if a <= b => Ok((a, b)),
        _ => bad(url, format!("byte range `{text}` is not FIRST-LAST")),
    }
}

/// Parse a DASH MPD fetched from `url` (an origin path). Video adaptation sets only (by
/// `contentType`/`mimeType`); the first video set of each period is played.
pub fn dash(url: &str, xml: &str) -> Result<Presentation, ManifestError> {
    let mpd = dash_mpd_core::parse(xml)
        .map_err(|e| ManifestError(format!("{url}: not a valid MPD: {e}")))?;
    if mpd.mpdtype.as_deref() == Some("dynamic") {
        return bad(
            url,
            "a dynamic (live) MPD: only static presentations are played",
        );
    }
    let total = mpd.mediaPresentationDuration.map(|d| d.as_secs_f64());
    let mpd_base = base_of(url, &mpd.base_url)?;
    let mut periods = Vec::new();
    let n_periods = mpd.periods.len();
    for (pi, p) in mpd.periods.iter().enumerate() {
        let p_base = base_of(&mpd_base, &p.BaseURL)?;
        let duration_s =
            p.duration
                .map(|d| d.as_secs_f64())
                .or(if n_periods == 1 { total } else { None });
        let Some(set) = p.adaptations.iter().find(|a| {
            a.contentType.as_deref() == Some("video")
                || a.mimeType
                    .as_deref()
                    .is_some_and(|m| m.starts_with("video/"))
                || a.representations.iter().any(|r| {
                    r.mimeType
                        .as_deref()
                        .is_some_and(|m| m.starts_with("video/"))
                })
        }) else {
            return bad(url, format!("period {pi} has no video adaptation set"));
        };
        let a_base = base_of(&p_base, &set.BaseURL)?;
        let mut renditions = Vec::new();
        for (ri, r) in set.representations.iter().enumerate() {
            let id = r.id.clone().unwrap_or_else(|| format!("{ri}"));
            let Some(bandwidth_bps) = r.bandwidth else {
                return bad(
                    url,
                    format!("period {pi}, representation `{id}` has no @bandwidth"),
                );
            };
            let r_base = base_of(&a_base, &r.BaseURL)?;
            let template = r
                .SegmentTemplate
                .as_ref()
                .or(set.SegmentTemplate.as_ref())
                .or(p.SegmentTemplate.as_ref());
            let ctx = Where {
                url,
                period: pi,
                id: &id,
                bandwidth: bandwidth_bps,
            };
            let (init, segments) = if let Some(t) = template {
                template_segments(&ctx, &r_base, t, duration_s)?
            } else if let Some(list) = r.SegmentList.as_ref().or(set.SegmentList.as_ref()) {
                list_segments(&ctx, &r_base, list)?
            } else if let Some(b) = r.SegmentBase.as_ref().or(set.SegmentBase.as_ref()) {
                let Some(index) = b.indexRange.as_deref() else {
                    return bad(
                        url,
                        format!("representation `{id}`: SegmentBase without indexRange"),
                    );
                };
                let init = match b.Initialization.as_ref().and_then(|i| i.range.as_deref()) {
                    Some(r) => Some(Piece {
                        path: r_base.clone(),
                        range: Some(parse_range(url, r)?),
                    }),
                    None => None,
                };
                (
                    init,
                    Segments::Sidx {
                        index: Piece {
                            path: r_base.clone(),
                            range: Some(parse_range(url, index)?),
                        },
                    },
                )
            } else {
                // A single-segment representation: the whole BaseURL.
                let d = duration_s.ok_or_else(|| {
                    ManifestError(format!(
                        "{url}: representation `{id}` has neither segments nor a known duration"
                    ))
                })?;
                (
                    None,
                    Segments::Listed(vec![Segment {
                        piece: Piece::whole(r_base.clone()),
                        duration_s: d,
                    }]),
                )
            };
            renditions.push(Rendition {
                id,
                bandwidth_bps,
                init,
                segments,
            });
        }
        if renditions.is_empty() {
            return bad(
                url,
                format!("period {pi}: the video adaptation set has no representations"),
            );
        }
        renditions.sort_by_key(|r| r.bandwidth_bps);
        periods.push(Period {
            duration_s,
            renditions,
        });
    }
    if periods.is_empty() {
        return bad(url, "no periods");
    }
    Ok(Presentation { periods })
}

struct Where<'a> {
    url: &'a str,
    period: usize,
    id: &'a str,
    bandwidth: u64,
}

/// The base URL after applying the first of `bases` (if any) to `parent`.
fn base_of(parent: &str, bases: &[dash_mpd_core::BaseURL]) -> Result<String, ManifestError> {
    match bases.first() {
        Some(b) => resolve(parent, &b.base),
        None => Ok(parent.to_string()),
    }
}

/// Expand `$RepresentationID$`, `$Bandwidth$`, `$Number%05d$`, `$Time$` and `$$`.
fn expand(w: &Where<'_>, template: &str, number: u64, time: u64) -> Result<String, ManifestError> {
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let Some(j) = after.find('$') else {
            return bad(w.url, format!("unterminated `$` in template `{template}`"));
        };
        let tag = &after[..j];
        let (name, width) = match tag.split_once("%0") {
            Some((n, f)) => {
                let width = f
                    .strip_suffix('d')
                    .and_then(|x| x.parse::<usize>().ok())
                    .ok_or_else(|| {
                        ManifestError(format!("{}: bad format `{tag}` in template", w.url))
                    })?;
                (n, width)
            }
            None => (tag, 0),
        };
        match name {
            "" => out.push('$'),
            "RepresentationID" => out.push_str(w.id),
            "Bandwidth" => out.push_str(&format!("{:0width$}", w.bandwidth)),
            "Number" => out.push_str(&format!("{number:0width$}")),
            "Time" => out.push_str(&format!("{time:0width$}")),
            other => return bad(w.url, format!("unknown template identifier `${other}$`")),
        }
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Cap on segments per rendition, so a hostile manifest cannot exhaust memory.
pub const MAX_SEGMENTS: usize = 1_000_000;

fn template_segments(
    w: &Where<'_>,
    base: &str,
    t: &dash_mpd_core::SegmentTemplate,
    duration_s: Option<f64>,
) -> Result<(Option<Piece>, Segments), ManifestError> {
    let timescale = t.timescale.unwrap_or(1).max(1) as f64;
    let start = t.startNumber.unwrap_or(1);
    let init = match t.initialization.as_deref() {
        Some(i) => Some(Piece::whole(resolve(base, &expand(w, i, start, 0)?)?)),
        None => None,
    };
    let Some(media) = t.media.as_deref() else {
        return bad(
            w.url,
            format!(
                "period {}, representation `{}`: SegmentTemplate without @media",
                w.period, w.id
            ),
        );
    };
    let mut segs = Vec::new();
    if let Some(tl) = &t.SegmentTimeline {
        let mut time = 0u64;
        let mut number = start;
        for s in &tl.segments {
            if let Some(t0) = s.t {
                time = t0;
            }
            let repeat = match s.r {
                Some(r) if r < 0 => {
                    // Repeat until the period ends.
                    let Some(d) = duration_s else {
                        return bad(
                            w.url,
                            "SegmentTimeline r=-1 in a period of unknown duration",
                        );
                    };
                    let end = (d * timescale) as u64;
                    end.saturating_sub(time)
                        .div_ceil(s.d.max(1))
                        .saturating_sub(1)
                }
                Some(r) => r as u64,
                None => 0,
            };
            if s.d == 0 {
                return bad(w.url, "SegmentTimeline entry with d=0");
            }
            for _ in 0..=repeat {
                if segs.len() >= MAX_SEGMENTS {
                    return bad(w.url, format!("more than {MAX_SEGMENTS} segments"));
                }
                segs.push(Segment {
                    piece: Piece::whole(resolve(base, &expand(w, media, number, time)?)?),
                    duration_s: s.d as f64 / timescale,
                });
                time += s.d;
                number += 1;
            }
        }
    } else {
        let Some(d) = t.duration.filter(|d| *d > 0.0) else {
            return bad(w.url, format!("representation `{}`: SegmentTemplate has neither @duration nor a SegmentTimeline", w.id));
        };
        let Some(total) = duration_s else {
            return bad(
                w.url,
                "SegmentTemplate @duration needs the period's or presentation's duration",
            );
        };
        let seg_s = d / timescale;
        let n = (total / seg_s - 1e-9).ceil().max(1.0) as usize;
        if n > MAX_SEGMENTS {
            return bad(w.url, format!("{n} segments: more than {MAX_SEGMENTS}"));
        }
        for i in 0..n {
            let number = start + i as u64;
            let time = (i as f64 * d) as u64;
            let dur = seg_s.min(total - i as f64 * seg_s);
            segs.push(Segment {
                piece: Piece::whole(resolve(base, &expand(w, media, number, time)?)?),
                duration_s: dur,
            });
        }
    }
    Ok((init, Segments::Listed(segs)))
}

fn list_segments(
    w: &Where<'_>,
    base: &str,
    list: &dash_mpd_core::SegmentList,
) -> Result<(Option<Piece>, Segments), ManifestError> {
    let timescale = list.timescale.unwrap_or(1).max(1) as f64;
    let Some(d) = list.duration else {
        return bad(
            w.url,
            format!("representation `{}`: SegmentList without @duration", w.id),
        );
    };
    // An entry's piece: its URL against the base (the base itself without one), and its
    // byte range if it has one.
    let piece = |url: Option<&str>, range: Option<&str>| -> Result<Piece, ManifestError> {
        Ok(Piece {
            path: resolve(base, url.unwrap_or(""))?,
            range: range.map(|r| parse_range(w.url, r)).transpose()?,
        })
    };
    let init = match &list.Initialization {
        Some(i) => Some(piece(i.sourceURL.as_deref(), i.range.as_deref())?),
        None => None,
    };
    let mut segs = Vec::with_capacity(list.segment_urls.len());
    for s in &list.segment_urls {
        segs.push(Segment {
            piece: piece(s.media.as_deref(), s.mediaRange.as_deref())?,
            duration_s: d as f64 / timescale,
        });
    }
    Ok((init, Segments::Listed(segs)))
}

/// The segments a `sidx` lists, given the bytes of the index range fetched from `index`.
pub fn from_sidx(index: &Piece, bytes: &[u8]) -> Result<Vec<Segment>, ManifestError> {
    let at = index.range.map(|r| r.0).unwrap_or(0);
    let sidx = vodkit_media::bmff::read_sidx(bytes, at)
        .map_err(|e| ManifestError(format!("{}: index range: {e}", index.path)))?;
    Ok(sidx
        .references
        .iter()
        .map(|&(off, len, d)| Segment {
            piece: Piece {
                path: index.path.clone(),
                range: Some((off, off + len - 1)),
            },
            duration_s: d as f64 / sidx.timescale as f64,
        })
        .collect())
}

/// Parse an HLS playlist fetched from `url`: a master playlist gives one period whose
/// renditions point at their media playlists; a media playlist alone gives one rendition.
pub fn hls(url: &str, text: &[u8]) -> Result<Presentation, ManifestError> {
    match m3u8_rs::parse_playlist_res(text) {
        Ok(m3u8_rs::Playlist::MasterPlaylist(m)) => {
            let mut renditions = Vec::new();
            for (i, v) in m.variants.iter().filter(|v| !v.is_i_frame).enumerate() {
                renditions.push(Rendition {
                    id: format!("{i}"),
                    bandwidth_bps: v.bandwidth,
                    init: None,
                    segments: Segments::Playlist {
                        path: resolve(url, &v.uri)?,
                    },
                });
            }
            if renditions.is_empty() {
                return bad(url, "master playlist without variants");
            }
            renditions.sort_by_key(|r| r.bandwidth_bps);
            Ok(Presentation {
                periods: vec![Period {
                    duration_s: None,
                    renditions,
                }],
            })
        }
        Ok(m3u8_rs::Playlist::MediaPlaylist(_)) => {
            let (init, segments) = hls_media(url, text)?;
            let duration = segments.iter().map(|s| s.duration_s).sum();
            Ok(Presentation {
                periods: vec![Period {
                    duration_s: Some(duration),
                    renditions: vec![Rendition {
                        id: "0".into(),
                        bandwidth_bps: 0,
                        init,
                        segments: Segments::Listed(segments),
                    }],
                }],
            })
        }
        Err(_) => bad(
            url,
            "not a valid M3U8 playlist (it must start with #EXTM3U)",
        ),
    }
}

/// The init piece and segments of an HLS media playlist fetched from `url`.
pub fn hls_media(url: &str, text: &[u8]) -> Result<(Option<Piece>, Vec<Segment>), ManifestError> {
    let m = match m3u8_rs::parse_media_playlist_res(text) {
        Ok(m) => m,
        Err(_) => return bad(url, "not a valid media playlist"),
    };
    if !m.end_list {
        return bad(
            url,
            "no #EXT-X-ENDLIST: a live playlist; only VOD is played",
        );
    }
    let mut init = None;
    let mut segs = Vec::with_capacity(m.segments.len());
    // Where the next byte range without an offset starts, per resource.
    let mut next_offset: Option<(String, u64)> = None;
    for s in &m.segments {
        if let Some(map) = &s.map {
            let path = resolve(url, &map.uri)?;
            let range = map.byte_range.as_ref().map(|b| {
                let off = b.offset.unwrap_or(0);
                (off, off + b.length.max(1) - 1)
            });
            if init.is_none() {
                init = Some(Piece { path, range });
            }
        }
        let path = resolve(url, &s.uri)?;
        let range = match &s.byte_range {
            None => None,
            Some(b) => {
                let off = match (b.offset, &next_offset) {
                    (Some(o), _) => o,
                    (None, Some((p, o))) if *p == path => *o,
                    (None, _) => {
                        return bad(url, format!("#EXT-X-BYTERANGE for `{}` without an offset and no previous range of it", s.uri));
                    }
                };
                if b.length == 0 {
                    return bad(url, format!("#EXT-X-BYTERANGE of length 0 for `{}`", s.uri));
                }
                next_offset = Some((path.clone(), off + b.length));
                Some((off, off + b.length - 1))
            }
        };
        segs.push(Segment {
            piece: Piece { path, range },
            duration_s: s.duration as f64,
        });
    }
    if segs.is_empty() {
        return bad(url, "media playlist without segments");
    }
    Ok((init, segs))
}

/// A dynamic (live) DASH MPD, as a live viewer reads it: one video representation whose
/// `SegmentTemplate` numbers segments of a fixed duration from `availabilityStartTime`.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveMpd {
    url: String,
    id: String,
    /// `@bandwidth` of the representation played (the first video one).
    pub bandwidth_bps: u64,
    /// `availabilityStartTime` plus the period's start, ms since the Unix epoch: segment
    /// `start_number` begins there.
    pub start_ms: i64,
    /// Segment duration (`@duration` / `@timescale`), seconds.
    pub segment_s: f64,
    pub start_number: u64,
    /// Segment duration in the template's timescale (for `$Time$`).
    ticks: f64,
    media: String,
    pub init: Option<Piece>,
    /// `availabilityTimeOffset`, seconds: a segment may be requested this long before it
    /// is complete (low-latency DASH: its chunks come as they are made).
    pub availability_offset_s: f64,
    /// `availabilityTimeComplete` (`false`: segments are sent while being written).
    pub availability_complete: bool,
    /// `ServiceDescription` / `Latency@target`, seconds.
    pub latency_target_s: Option<f64>,
    /// `ServiceDescription` / `PlaybackRate` (min, max).
    pub playback_rate: Option<(f64, f64)>,
    /// `suggestedPresentationDelay`, seconds.
    pub suggested_delay_s: Option<f64>,
    /// The presentation became static (the stream ended): segments past this number do not
    /// come.
    pub end_number: Option<u64>,
    /// `UTCTiming` with an ISO 8601 time to fetch (`http-iso`, `http-xsdate`): the origin's
    /// clock.
    pub clock: Option<Piece>,
}

impl LiveMpd {
    /// Origin path of segment number `n`.
    pub fn segment(&self, n: u64) -> Result<Piece, ManifestError> {
        let w = Where {
            url: &self.url,
            period: 0,
            id: &self.id,
            bandwidth: self.bandwidth_bps,
        };
        let time = (n.saturating_sub(self.start_number) as f64 * self.ticks) as u64;
        Ok(Piece::whole(resolve(
            &self.url,
            &expand(&w, &self.media, n, time)?,
        )?))
    }

    /// Capture time of segment `n`'s first frame, ms since the Unix epoch.
    pub fn begins_ms(&self, n: u64) -> f64 {
        self.start_ms as f64
            + (n.saturating_sub(self.start_number)) as f64 * self.segment_s * 1000.0
    }

    /// When segment `n` may be requested, ms since the Unix epoch: its end minus the
    /// availability offset (DASH-IF IOP: availability start = AST + (N+1)·D − ATO).
    pub fn available_ms(&self, n: u64) -> f64 {
        self.begins_ms(n) + (self.segment_s - self.availability_offset_s) * 1000.0
    }

    /// Whether segments are sent while being written (a low-latency MPD).
    pub fn low_latency(&self) -> bool {
        self.availability_offset_s > 0.0
    }

    /// The newest segment that may be requested at `now_ms`.
    pub fn newest_at(&self, now_ms: f64) -> Option<u64> {
        let since = now_ms - self.available_ms(self.start_number);
        if since < 0.0 {
            return None;
        }
        let n = self.start_number + (since / (self.segment_s * 1000.0)).floor() as u64;
        Some(match self.end_number {
            Some(e) => n.min(e.saturating_sub(1)),
            None => n,
        })
    }
}

/// Parse a DASH MPD fetched from `url` as a live stream: dynamic (or static once the
/// stream ended), `SegmentTemplate` with `@duration` and `$Number$`.
pub fn dash_live(url: &str, xml: &str) -> Result<LiveMpd, ManifestError> {
    let mpd = dash_mpd_core::parse(xml)
        .map_err(|e| ManifestError(format!("{url}: not a valid MPD: {e}")))?;
    let dynamic = mpd.mpdtype.as_deref() == Some("dynamic");
    let Some(period) = mpd.periods.first() else {
        return bad(url, "no periods");
    };
    let Some(set) = period.adaptations.iter().find(|a| {
        a.contentType.as_deref() == Some("video")
            || a.mimeType
                .as_deref()
                .is_some_and(|m| m.starts_with("video/"))
    }) else {
        return bad(url, "no video adaptation set");
    };
    let Some(rep) = set.representations.first() else {
        return bad(url, "the video adaptation set has no representations");
    };
    let id = rep.id.clone().unwrap_or_else(|| "0".into());
    let bandwidth_bps = rep.bandwidth.unwrap_or(0);
    let mpd_base = base_of(url, &mpd.base_url)?;
    let base = base_of(
        &base_of(&base_of(&mpd_base, &period.BaseURL)?, &set.BaseURL)?,
        &rep.BaseURL,
    )?;
    let Some(t) = rep
        .SegmentTemplate
        .as_ref()
        .or(set.SegmentTemplate.as_ref())
        .or(period.SegmentTemplate.as_ref())
    else {
        return bad(url, "a live MPD without a SegmentTemplate");
    };
    let timescale = t.timescale.unwrap_or(1).max(1) as f64;
    let Some(d) = t.duration.filter(|d| *d > 0.0) else {
        return bad(
            url,
            "SegmentTemplate without a positive @duration (a SegmentTimeline is not followed live)",
        );
    };
    let Some(media) = t.media.clone() else {
        return bad(url, "SegmentTemplate without @media");
    };
    let start_number = t.startNumber.unwrap_or(1);
    let w = Where {
        url,
        period: 0,
        id: &id,
        bandwidth: bandwidth_bps,
    };
    let init = match t.initialization.as_deref() {
        Some(i) => Some(Piece::whole(resolve(
            &base,
            &expand(&w, i, start_number, 0)?,
        )?)),
        None => None,
    };
    let segment_s = d / timescale;
    let period_start_ms = period.start.map_or(0, |s| s.as_millis() as i64);
    let start_ms = match (mpd.availabilityStartTime, dynamic) {
        (Some(t), _) => t.timestamp_millis() + period_start_ms,
        (None, true) => return bad(url, "a dynamic MPD without availabilityStartTime"),
        (None, false) => period_start_ms,
    };
    let end_number = if dynamic {
        None
    } else {
        let total = mpd
            .mediaPresentationDuration
            .or(period.duration)
            .map(|x| x.as_secs_f64())
            .ok_or_else(|| ManifestError(format!("{url}: a static MPD without a duration")))?;
        Some(start_number + (total / segment_s - 1e-9).ceil().max(0.0) as u64)
    };
    let services = mpd
        .ServiceDescription
        .iter()
        .chain(&period.service_description);
    let (mut latency_target_s, mut playback_rate) = (None, None);
    for sd in services {
        if let Some(t) = sd.Latency.iter().find_map(|l| l.target) {
            latency_target_s.get_or_insert(t / 1000.0);
        }
        if let Some(r) = sd.PlaybackRate.first() {
            if let (Some(a), Some(b)) = (r.min, r.max) {
                playback_rate.get_or_insert((a, b));
            }
        }
    }
    let clock = match mpd.UTCTiming.iter().find(|u| {
        u.schemeIdUri.ends_with(":http-iso:2014") || u.schemeIdUri.ends_with(":http-xsdate:2014")
    }) {
        Some(u) => match u.value.as_deref() {
            Some(v) => Some(Piece::whole(resolve(url, v)?)),
            None => None,
        },
        None => None,
    };
    let offset = t.availabilityTimeOffset.unwrap_or(0.0);
    let availability_offset_s = if offset.is_finite() {
        offset.clamp(0.0, segment_s)
    } else {
        0.0
    };
    Ok(LiveMpd {
        url: base,
        id,
        bandwidth_bps,
        start_ms,
        segment_s,
        start_number,
        ticks: d,
        media,
        init,
        availability_offset_s,
        availability_complete: t.availabilityTimeComplete.unwrap_or(true),
        latency_target_s,
        playback_rate,
        suggested_delay_s: mpd.suggestedPresentationDelay.map(|x| x.as_secs_f64()),
        end_number,
        clock,
    })
}

/// A live media playlist's current window (`vodkit load` live viewers).
#[derive(Debug, Clone, PartialEq)]
pub struct LiveWindow {
    /// `#EXT-X-TARGETDURATION`, seconds.
    pub target_s: f64,
    /// Media sequence number of `segments[0]` (after any segments a delta update skipped).
    pub first: u64,
    pub segments: Vec<LiveSegment>,
    /// `#EXT-X-ENDLIST`: the stream has ended and nothing will be added.
    pub ended: bool,
    /// The init segment (`#EXT-X-MAP`), if any.
    pub init: Option<Piece>,
    /// Low-latency HLS: what the playlist announces about its parts (`#EXT-X-PART-INF`).
    pub ll: Option<LowLatency>,
    /// The segment in progress (number [`LiveWindow::end`]): its parts so far, no
    /// `#EXTINF` yet.
    pub partial: Option<LiveSegment>,
    /// Segments a delta update (`#EXT-X-SKIP`) left out before `segments[0]`.
    pub skipped: u64,
}

/// One segment of a live window.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveSegment {
    pub piece: Piece,
    pub duration_s: f64,
    /// `#EXT-X-PROGRAM-DATE-TIME` (capture time of its first frame), ms since the Unix epoch.
    pub pdt_ms: Option<i64>,
    /// Its parts (`#EXT-X-PART`), when the playlist still lists them.
    pub parts: Vec<LivePart>,
}

/// One part of a live segment (`#EXT-X-PART`).
#[derive(Debug, Clone, PartialEq)]
pub struct LivePart {
    pub piece: Piece,
    pub duration_s: f64,
    /// `INDEPENDENT=YES`: playback may start at it.
    pub independent: bool,
}

/// What a low-latency playlist announces (`#EXT-X-PART-INF`, `#EXT-X-SERVER-CONTROL`,
/// `#EXT-X-PRELOAD-HINT`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LowLatency {
    /// `PART-TARGET`, seconds.
    pub part_target_s: f64,
    /// `CAN-BLOCK-RELOAD=YES`: `_HLS_msn`/`_HLS_part` reloads are held until that part.
    pub can_block_reload: bool,
    /// `PART-HOLD-BACK`, seconds (RFC 8216bis: at least 2 part targets; 3 if absent).
    pub part_hold_back_s: Option<f64>,
    /// `CAN-SKIP-UNTIL`, seconds: delta updates (`_HLS_skip=YES`) are offered.
    pub can_skip_until_s: Option<f64>,
    /// `#EXT-X-PRELOAD-HINT:TYPE=PART`: the part that comes next, requested before it exists.
    pub hint: Option<Piece>,
}

/// Where a part is: media sequence number of its segment, part index in it.
pub type PartAt = (u64, usize);

impl LiveWindow {
    /// Media sequence number one past the newest complete segment.
    pub fn end(&self) -> u64 {
        self.first + self.segments.len() as u64
    }

    /// Segment with media sequence number `n`, if the window holds it.
    pub fn get(&self, n: u64) -> Option<&LiveSegment> {
        n.checked_sub(self.first)
            .and_then(|i| self.segments.get(usize::try_from(i).ok()?))
    }

    /// Segment `n`, complete or in progress.
    fn any(&self, n: u64) -> Option<&LiveSegment> {
        match &self.partial {
            Some(p) if n == self.end() => Some(p),
            _ => self.get(n),
        }
    }

    /// Part `at`, if listed.
    pub fn part(&self, at: PartAt) -> Option<&LivePart> {
        self.any(at.0)?.parts.get(at.1)
    }

    /// Capture time of segment `n`'s first frame, ms since the Unix epoch.
    pub fn pdt_ms(&self, n: u64) -> Option<i64> {
        self.any(n)?.pdt_ms
    }

    /// Seconds of parts of segment `at.0` before part `at.1`.
    pub fn before_part_s(&self, at: PartAt) -> f64 {
        self.any(at.0).map_or(0.0, |s| {
            s.parts.iter().take(at.1).map(|p| p.duration_s).sum()
        })
    }

    /// The part after `at`: the next of its segment, or part 0 of the next segment once
    /// `at` is the last part of a complete segment.
    pub fn after(&self, at: PartAt) -> PartAt {
        match self.get(at.0) {
            Some(s) if !s.parts.is_empty() && at.1 + 1 >= s.parts.len() => (at.0 + 1, 0),
            _ => (at.0, at.1 + 1),
        }
    }

    /// `at` moved on past the end of a complete segment whose parts are all listed (a part
    /// index that segment turned out not to have).
    pub fn settle(&self, at: PartAt) -> PartAt {
        match self.get(at.0) {
            Some(s) if !s.parts.is_empty() && at.1 >= s.parts.len() => (at.0 + 1, 0),
            _ => at,
        }
    }

    /// Where a low-latency viewer joins: `play`, the part whose start is at least
    /// `hold_back_s` behind the end of the newest part, and `fetch`, the independent part
    /// at or before it that its fetching starts from (the parts between are fetched for
    /// decoding, not played). `None` when the parts listed do not reach that far back.
    pub fn join(&self, hold_back_s: f64) -> Option<(PartAt, PartAt)> {
        // Every listed part, oldest first.
        let mut all: Vec<(PartAt, &LivePart)> = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            let n = self.first + i as u64;
            all.extend(s.parts.iter().enumerate().map(|(k, p)| ((n, k), p)));
        }
        if let Some(p) = &self.partial {
            all.extend(
                p.parts
                    .iter()
                    .enumerate()
                    .map(|(k, x)| ((self.end(), k), x)),
            );
        }
        let mut behind = 0.0;
        let mut play = None;
        for (i, (_, part)) in all.iter().enumerate().rev() {
            behind += part.duration_s;
            if behind + 1e-6 >= hold_back_s {
                play = Some(i);
                break;
            }
        }
        let play = play?;
        let fetch = (0..=play).rev().find(|&i| all[i].1.independent)?;
        Some((all[play].0, all[fetch].0))
    }

    /// Fill the segments a delta update skipped from `older`, the window it updates (those
    /// `older` no longer holds stay out: `first` moves past them).
    pub fn merge_delta(&mut self, older: &LiveWindow) {
        if self.skipped == 0 {
            return;
        }
        let from = self.first - self.skipped;
        let known: Vec<LiveSegment> = (from..self.first)
            .skip_while(|&n| older.get(n).is_none())
            .map_while(|n| older.get(n).cloned())
            .collect();
        self.first -= known.len() as u64;
        self.skipped -= known.len() as u64;
        self.segments.splice(0..0, known);
    }
}

/// The attributes of an attribute list (`A=1,B="x,y",C=YES`), names and unquoted values.
fn attributes(list: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = list.trim();
    while !rest.is_empty() {
        let Some((name, after)) = rest.split_once('=') else {
            break;
        };
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            match q.split_once('"') {
                Some((v, n)) => (v, n),
                None => (q, ""),
            }
        } else {
            match after.split_once(',') {
                Some((v, n)) => (v, n),
                None => (after, ""),
            }
        };
        out.push((name.trim(), value.trim()));
        rest = next.trim_start_matches(',').trim_start();
    }
    out
}

fn attribute<'a>(list: &[(&str, &'a str)], name: &str) -> Option<&'a str> {
    list.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

/// A positive seconds attribute, or a one-line error naming the tag and attribute.
fn seconds(
    url: &str,
    tag: &str,
    list: &[(&str, &str)],
    name: &str,
) -> Result<Option<f64>, ManifestError> {
    match attribute(list, name) {
        None => Ok(None),
        Some(v) => match v.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(Some(x)),
            _ => bad(
                url,
                format!("#{tag}: {name}={v} is not a number of seconds"),
            ),
        },
    }
}

/// A line `m3u8-rs` does not keep: it drops tags after the last segment URI, where a
/// low-latency playlist lists the parts of the segment in progress and the preload hint.
/// Appended as one more URI, it carries them to us as that pseudo-segment's tags.
const TAIL: &str = "vodkit-tail-of-the-playlist";

/// Parse a live (or ended) HLS media playlist: its window, with program date-times, and
/// — in a low-latency playlist — its parts, preload hint and server control, and the
/// segments a delta update skipped.
pub fn hls_live(url: &str, text: &[u8]) -> Result<LiveWindow, ManifestError> {
    let mut whole = Vec::with_capacity(text.len() + TAIL.len() + 2);
    whole.extend_from_slice(text);
    whole.extend_from_slice(format!("\n{TAIL}\n").as_bytes());
    let m = match m3u8_rs::parse_media_playlist_res(&whole) {
        Ok(m) => m,
        Err(_) => return bad(url, "not a valid media playlist"),
    };
    if m.target_duration == 0 {
        return bad(url, "#EXT-X-TARGETDURATION missing or 0");
    }
    let mut init = None;
    let mut segments = Vec::with_capacity(m.segments.len());
    let mut ll: Option<LowLatency> = None;
    let mut control = LowLatency::default();
    let mut skipped = 0u64;
    let mut partial = None;
    for s in &m.segments {
        if let (Some(map), None) = (&s.map, &init) {
            init = Some(Piece::whole(resolve(url, &map.uri)?));
        }
        let mut parts = Vec::new();
        for t in &s.unknown_tags {
            let list = attributes(t.rest.as_deref().unwrap_or(""));
            match t.tag.as_str() {
                "X-PART-INF" => {
                    let Some(target) =
                        seconds(url, "EXT-X-PART-INF", &list, "PART-TARGET")?.filter(|x| *x > 0.0)
                    else {
                        return bad(url, "#EXT-X-PART-INF without a positive PART-TARGET");
                    };
                    ll.get_or_insert_with(LowLatency::default).part_target_s = target;
                }
                "X-SERVER-CONTROL" => {
                    control.can_block_reload = attribute(&list, "CAN-BLOCK-RELOAD") == Some("YES");
                    control.part_hold_back_s =
                        seconds(url, "EXT-X-SERVER-CONTROL", &list, "PART-HOLD-BACK")?;
                    control.can_skip_until_s =
                        seconds(url, "EXT-X-SERVER-CONTROL", &list, "CAN-SKIP-UNTIL")?;
                }
                "X-SKIP" => {
                    skipped = attribute(&list, "SKIPPED-SEGMENTS")
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(|| {
                            ManifestError(format!(
                                "{url}: #EXT-X-SKIP without a SKIPPED-SEGMENTS count"
                            ))
                        })?;
                }
                "X-PART" => {
                    let (Some(uri), Some(duration_s)) = (
                        attribute(&list, "URI"),
                        seconds(url, "EXT-X-PART", &list, "DURATION")?,
                    ) else {
                        return bad(url, "#EXT-X-PART without URI and DURATION");
                    };
                    parts.push(LivePart {
                        piece: Piece::whole(resolve(url, uri)?),
                        duration_s,
                        independent: attribute(&list, "INDEPENDENT") == Some("YES"),
                    });
                }
                "X-PRELOAD-HINT" if attribute(&list, "TYPE") == Some("PART") => {
                    if let Some(uri) = attribute(&list, "URI") {
                        control.hint = Some(Piece::whole(resolve(url, uri)?));
                    }
                }
                _ => {}
            }
        }
        let pdt_ms = s.program_date_time.map(|t| t.timestamp_millis());
        if s.uri == TAIL {
            if !parts.is_empty() {
                partial = Some(LiveSegment {
                    piece: Piece::whole(String::new()),
                    duration_s: parts.iter().map(|p| p.duration_s).sum(),
                    pdt_ms,
                    parts,
                });
            }
            continue;
        }
        if s.byte_range.is_some() {
            return bad(url, "#EXT-X-BYTERANGE in a live playlist is not supported");
        }
        if !(s.duration.is_finite() && s.duration > 0.0) {
            return bad(
                url,
                format!("segment `{}` has duration {}", s.uri, s.duration),
            );
        }
        segments.push(LiveSegment {
            piece: Piece::whole(resolve(url, &s.uri)?),
            duration_s: s.duration as f64,
            pdt_ms,
            parts,
        });
    }
    let ll = ll.map(|l| LowLatency {
        part_target_s: l.part_target_s,
        ..control
    });
    Ok(LiveWindow {
        target_s: m.target_duration as f64,
        first: m.media_sequence + skipped,
        segments,
        ended: m.end_list,
        init,
        ll,
        partial,
        skipped,
    })
}

#[cfg(test)]
mod tests;
