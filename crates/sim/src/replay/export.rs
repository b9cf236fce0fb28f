//! The replay's request stream as an object trace, for a second opinion on its cache engine:
//! each request's byte range becomes the fixed-size blocks of its file it touches (object
//! `file × 2^20 + block`, size the block's bytes within the file), written as csv with the
//! header `time,obj_id,obj_size` (time in milliseconds), which libCacheSim's readers take.
//! [`engine_miss_ratios`] runs the manager's eviction orders ([`vodkit_prefetch::memory::order`])
//! on the same objects, so `scripts/libcachesim-miss-ratios` can check them.

use super::TracedRequest;
use std::io::Write as _;
use std::path::Path;
use vodkit_prefetch::memory::order::{self, Algo};

/// Bytes of one trace object: a block of a file.
pub const BLOCK_BYTES: u64 = 1 << 20;
/// Object ids: `file << FILE_SHIFT | block` (files up to 2^20 blocks).
const FILE_SHIFT: u32 = 20;

/// One object request of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectRequest {
    pub time_ms: u64,
    pub obj_id: u64,
    pub size: u64,
}

/// The blocks a request touches, as object requests.
pub fn objects(r: &TracedRequest) -> impl Iterator<Item = ObjectRequest> + '_ {
    let first = r.start / BLOCK_BYTES;
    let last = r.end.saturating_sub(1) / BLOCK_BYTES;
    let time_ms = (r.t.max(0.0) * 1000.0) as u64;
    (first..=last)
        .filter(move |_| r.end > r.start)
        .map(move |b| ObjectRequest {
            time_ms,
            obj_id: (r.file << FILE_SHIFT) | b,
            size: (r.file_size.min((b + 1) * BLOCK_BYTES)).saturating_sub(b * BLOCK_BYTES),
        })
        .filter(|o| o.size > 0)
}

/// Writes `reqs` as the csv trace (see the module doc) to `path`.
pub fn write_csv(path: &Path, reqs: &[ObjectRequest]) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("{}: {e}", path.display());
    let f = std::fs::File::create(path).map_err(fail)?;
    let mut out = std::io::BufWriter::new(f);
    writeln!(out, "time,obj_id,obj_size").map_err(fail)?;
    for o in reqs {
        writeln!(out, "{},{},{}", o.time_ms, o.obj_id, o.size).map_err(fail)?;
    }
    out.flush().map_err(fail)
}

/// (byte miss ratio, request miss ratio) of `reqs` through the manager's `algo` order run
/// as an object cache of `capacity` bytes.
pub fn engine_miss_ratios(algo: Algo, capacity: u64, reqs: &[ObjectRequest]) -> (f64, f64) {
    order::miss_ratios(algo, capacity, reqs.iter().map(|o| (o.obj_id, o.size)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_becomes_the_blocks_it_touches() {
        let r = TracedRequest {
            t: 1.5,
            file: 3,
            start: BLOCK_BYTES / 2,
            end: 2 * BLOCK_BYTES + 1,
            file_size: 2 * BLOCK_BYTES + 100,
        };
        let o: Vec<ObjectRequest> = objects(&r).collect();
        assert_eq!(o.len(), 3);
        assert_eq!(o[0].obj_id, 3 << 20);
        assert_eq!(o[0].time_ms, 1500);
        assert_eq!(o[1].size, BLOCK_BYTES);
        // The file's last block holds what is left of it.
        assert_eq!(o[2].size, 100);
    }
}
