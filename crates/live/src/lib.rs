//! Live sources for live-streaming experiments (seed 004's pseudo-encoder, its Fig. 2):
//! `vodkit live push` publishes N live streams in real time to an origin by HTTP `PUT` —
//! segments, a sliding-window HLS media playlist and a dynamic DASH MPD per stream — and
//! records its own publish latency and failures, since losing ingest hurts every viewer.
//!
//! * [`playlist`] — the HLS media playlist and the DASH MPD of a window (pure text).
//! * [`source`] — the publishing loop: a thread per stream, segments due at
//!   `t0 + (n + 1) × D`, `PUT` with keep-alive, old segments removed with `DELETE`; in
//!   low-latency mode parts due every `D / k`, each segment uploaded by one chunked `PUT`
//!   while its parts are produced.
//! * [`http`] — the small HTTP/1.1 client the source publishes with.
//! * [`title`] — a packaged title's rendition looped as live segments (`--title`).
//!
//! Layout (shared with `vodkit serve --ingest` and `vodkit load` live viewers): stream k
//! lives under `PREFIX/stream-k/` with `init.mp4`, `seg-N.m4s`, `index.m3u8` and
//! `manifest.mpd` (and in low-latency mode the parts `seg-N.P.m4s`).

pub mod http;
pub mod playlist;
pub mod source;
pub mod title;

pub use source::{LowLatency, Report, Source, SourceConfig};
pub use title::LiveTitle;
