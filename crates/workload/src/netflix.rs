//! The Netflix-like (DASH) workload model of thesis 5.5: multi-bitrate catalogs and
//! sessions made of transient, stable and inactive phases, with ground truth for the
//! trace analyzer.

use std::path::Path;

/// Generate the `netflix-2014` workload (thesis Table 5.5) into `out`: `catalog.json`,
/// `sessions.jsonl`, `workload.json`. `sets` are the `--set key=value` overrides. Returns
/// the printable summary.
pub fn new_workload(
    seed: u64,
    scale: f64,
    sets: &[(String, String)],
    out: &Path,
) -> Result<String, String> {
    let _ = (seed, scale, sets, out);
    Err("spec netflix-2014 is not implemented yet (issue #8)".to_string())
}
