//! The preload shim's library (shared object): compiled from `shim/c` by the build script,
//! embedded in every binary that links this crate, and written out once to a cache file
//! named after its content hash, so it works from any checkout or installed binary.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// The bytes of `libvodkit_preload.so`.
pub static BYTES: &[u8] = include_bytes!(env!("VODKIT_PRELOAD_SO"));

/// Environment variable naming the daemon socket the library connects to.
pub const ENV_SOCKET: &str = "VODKIT_PREFETCHD_SOCKET";
/// Environment variable bounding the library's wait for a reply, in milliseconds.
pub const ENV_TIMEOUT_MS: &str = "VODKIT_PRELOAD_TIMEOUT_MS";
/// Environment variable that silences the library's one warning per process (`1`).
pub const ENV_QUIET: &str = "VODKIT_PRELOAD_QUIET";

fn content_hash(bytes: &[u8]) -> u64 {
    // FNV-1a is enough to tell builds apart; this is a cache key, not a security check.
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("vodkit");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h).join(".cache").join("vodkit");
    }
    // SAFETY: getuid has no preconditions.
    std::env::temp_dir().join(format!("vodkit-{}", unsafe { libc::getuid() }))
}

/// Where the library is written, and write it there if it is missing or different.
///
/// Servers that drop privileges (nginx, Apache workers) load the library before they do,
/// so a file readable only by the invoking user is fine; it is made world-readable anyway.
pub fn path() -> io::Result<PathBuf> {
    match write_into(cache_dir()) {
        Ok(p) => Ok(p),
        // SAFETY: getuid has no preconditions.
        Err(_) => {
            write_into(std::env::temp_dir().join(format!("vodkit-{}", unsafe { libc::getuid() })))
        }
    }
}

fn write_into(dir: PathBuf) -> io::Result<PathBuf> {
    let file = dir.join(format!("libvodkit_preload-{:016x}.so", content_hash(BYTES)));
    if fs::read(&file).map(|b| b == BYTES).unwrap_or(false) {
        return Ok(file);
    }
    fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!(".libvodkit_preload-{}.tmp", std::process::id()));
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(BYTES)?;
        f.sync_all()?;
    }
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
    fs::rename(&tmp, &file)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_library_is_an_elf_shared_object() {
        assert!(BYTES.len() > 1000);
        assert_eq!(&BYTES[..4], b"\x7fELF");
        // e_type at offset 16: 3 = ET_DYN
        assert_eq!(u16::from_le_bytes([BYTES[16], BYTES[17]]), 3);
    }

    #[test]
    fn path_is_stable_and_holds_the_bytes() {
        let a = path().unwrap();
        let b = path().unwrap();
        assert_eq!(a, b);
        assert_eq!(fs::read(&a).unwrap(), BYTES);
    }
}
