//! Bit rates of served files, read from a file: a workload `catalog.json` (every
//! rendition's files get its `bitrate_kbps`), a JSON object `{"path": kbps, ...}`, or a
//! text file with one `path kbps` pair per line (`#` starts a comment).
//!
//! The result is a typed map (relative path → kbit/s) that the caller hands to the
//! prefetch engine (`vodkit_prefetch::BitrateMap`); the engine never reads these files.

use std::collections::HashMap;
use std::path::Path;

use crate::error::InputError;
use crate::model::Catalog;

/// Path (relative to the served root, no leading `/`) → bit rate in kbit/s.
pub type Bitrates = HashMap<String, u32>;

fn key(path: &str) -> String {
    path.trim_start_matches('/').to_string()
}

/// Every file of every rendition in `catalog`.
pub fn of_catalog(catalog: &Catalog) -> Bitrates {
    let mut m = Bitrates::new();
    for title in &catalog.titles {
        for r in &title.renditions {
            for f in &r.files {
                m.insert(key(&f.path), r.bitrate_kbps);
            }
        }
    }
    m
}

/// Loads a catalog, a JSON map or a text map, telling them apart by content. Errors are
/// one line naming the file (and line where known).
pub fn load(path: &Path) -> Result<Bitrates, InputError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| InputError::whole(&name, format!("cannot read bit rates: {e}")))?;
    if text.trim_start().starts_with('{') {
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| InputError::at_line(&name, e.line(), format!("invalid JSON: {e}")))?;
        if value.get("titles").is_some() {
            let catalog: Catalog = serde_json::from_value(value)
                .map_err(|e| InputError::whole(&name, format!("not a valid catalog.json: {e}")))?;
            return Ok(of_catalog(&catalog));
        }
        let obj: HashMap<String, u32> = serde_json::from_value(value).map_err(|e| {
            InputError::whole(
                &name,
                format!("expected a JSON object of path: kbps (positive integers): {e}"),
            )
        })?;
        return Ok(obj.into_iter().map(|(p, k)| (key(&p), k)).collect());
    }
    parse_text(&text, &name)
}

/// `path kbps` per line; errors carry `origin` and the line number.
pub fn parse_text(text: &str, origin: &str) -> Result<Bitrates, InputError> {
    let mut m = Bitrates::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(p), Some(k), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(InputError::at_line(
                origin,
                i + 1,
                format!("expected `PATH KBPS`, got `{line}`"),
            ));
        };
        // KBPS: kbit/s as a number (`419`), or a bit rate with its unit (`3Mbit/s`).
        let kbps = crate::units::parse_kbps(k)
            .ok()
            .and_then(|k| u32::try_from(k).ok())
            .filter(|&k| k > 0)
            .ok_or_else(|| {
                let e = vodkit_units::UnitError::new(vodkit_units::Quantity::BitRate, k);
                InputError::at_line(origin, i + 1, format!("KBPS: {e}"))
            })?;
        m.insert(key(p), kbps);
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Media, Rendition, Title};

    fn rendition(kbps: u32, path: &str) -> Rendition {
        Rendition::one_file(kbps, Media::Combined, path.into(), 10)
    }

    #[test]
    fn catalog_renditions_give_rates() {
        let catalog = Catalog {
            spec: "t".into(),
            seed: 1,
            titles: vec![Title {
                id: 1,
                rank: 1,
                duration_s: 10.0,
                renditions: vec![rendition(419, "sd/t1.dat"), rendition(2095, "hd/t1.dat")],
            }],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.json");
        std::fs::write(&path, serde_json::to_string(&catalog).unwrap()).unwrap();
        let m = load(&path).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m.get("hd/t1.dat"), Some(&2095));
        assert_eq!(m.get("sd/t1.dat"), Some(&419));
        assert_eq!(m, of_catalog(&catalog));
    }

    #[test]
    fn text_and_json_maps() {
        let m = parse_text("# comment\n/a.mp4 800\n\nb.mp4 3000 # hd\n", "t").unwrap();
        assert_eq!((m.get("a.mp4"), m.get("b.mp4")), (Some(&800), Some(&3000)));
        assert_eq!(parse_text("a.mp4\n", "t").unwrap_err().line, Some(1));
        let err = parse_text("ok 1\nbad fast\n", "t").unwrap_err();
        assert_eq!(err.line, Some(2));
        assert!(err.problem.contains("fast"));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rates.json");
        std::fs::write(&p, r#"{"/x.ts": 1200}"#).unwrap();
        assert_eq!(load(&p).unwrap().get("x.ts"), Some(&1200));
        std::fs::write(&p, r#"{"/x.ts": "fast"}"#).unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("rates.json") && !e.contains('\n'), "{e}");
        let t = dir.path().join("rates.txt");
        std::fs::write(&t, "a 1\nb -3\n").unwrap();
        let e = load(&t).unwrap_err().to_string();
        assert!(e.contains("rates.txt:2:"), "{e}");
        let e = load(&dir.path().join("missing.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.json"), "{e}");
    }
}
