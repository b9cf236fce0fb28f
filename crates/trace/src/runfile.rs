//! The run files of the external sorts and spills (`--sort`, the from-log rebuild's spill,
//! the analyzer's idle and closing sessions): runs in a directory made on first use,
//! records of little-endian numbers and byte strings behind a 32-bit length.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::record::RequestKind;

/// An I/O error on `dir`, with the directory named.
pub(crate) fn at_dir(dir: &Path) -> impl Fn(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", dir.display()))
}

/// Create run number `n`, making the run directory (`prefix` and a random tail, in `dir`)
/// in `tmp` on first use.
pub(crate) fn create(
    tmp: &mut Option<tempfile::TempDir>,
    dir: &Path,
    prefix: &str,
    n: usize,
) -> io::Result<(PathBuf, BufWriter<File>)> {
    let t = match tmp.take() {
        Some(t) => t,
        None => tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(dir)
            .map_err(at_dir(dir))?,
    };
    let path = tmp.insert(t).path().join(format!("run-{n}"));
    let w = BufWriter::with_capacity(1 << 16, File::create(&path)?);
    Ok((path, w))
}

/// Write the length `n` of what follows; `too_long` says what did not fit in 32 bits.
pub(crate) fn put_len(w: &mut impl Write, n: usize, too_long: &str) -> io::Result<()> {
    let n = u32::try_from(n).map_err(|_| io::Error::other(too_long.to_string()))?;
    put_u32(w, n)
}

/// Write `b` behind its length.
pub(crate) fn put_bytes(w: &mut impl Write, b: &[u8], too_long: &str) -> io::Result<()> {
    put_len(w, b.len(), too_long)?;
    w.write_all(b)
}

/// The 8 bytes that open a record; `None` at the end of the run.
pub(crate) fn first8(r: &mut impl Read) -> io::Result<Option<[u8; 8]>> {
    let mut b8 = [0u8; 8];
    match r.read_exact(&mut b8) {
        Ok(()) => Ok(Some(b8)),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// The next 8 bytes.
pub(crate) fn get8(r: &mut impl Read) -> io::Result<[u8; 8]> {
    let mut b8 = [0u8; 8];
    r.read_exact(&mut b8)?;
    Ok(b8)
}

/// A length written by [`put_len`].
pub(crate) fn get_len(r: &mut impl Read) -> io::Result<usize> {
    Ok(get_u32(r)? as usize)
}

/// Bytes written by [`put_bytes`].
pub(crate) fn get_bytes(r: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut v = vec![0u8; get_len(r)?];
    r.read_exact(&mut v)?;
    Ok(v)
}

/// Write a `u32`.
pub(crate) fn put_u32(w: &mut impl Write, x: u32) -> io::Result<()> {
    w.write_all(&x.to_le_bytes())
}

/// Write a `u64`.
pub(crate) fn put_u64(w: &mut impl Write, x: u64) -> io::Result<()> {
    w.write_all(&x.to_le_bytes())
}

/// Write an `f64`, every bit of it.
pub(crate) fn put_f64(w: &mut impl Write, x: f64) -> io::Result<()> {
    w.write_all(&x.to_le_bytes())
}

/// A `u32` written by [`put_u32`].
pub(crate) fn get_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut b4 = [0u8; 4];
    r.read_exact(&mut b4)?;
    Ok(u32::from_le_bytes(b4))
}

/// A `u64` written by [`put_u64`].
pub(crate) fn get_u64(r: &mut impl Read) -> io::Result<u64> {
    Ok(u64::from_le_bytes(get8(r)?))
}

/// An `f64` written by [`put_f64`].
pub(crate) fn get_f64(r: &mut impl Read) -> io::Result<f64> {
    Ok(f64::from_le_bytes(get8(r)?))
}

/// One byte.
pub(crate) fn get_u8(r: &mut impl Read) -> io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}

/// A request kind, as one byte (1: open-ended).
pub(crate) fn put_kind(w: &mut impl Write, k: RequestKind) -> io::Result<()> {
    w.write_all(&[u8::from(k == RequestKind::Open)])
}

/// A kind written by [`put_kind`].
pub(crate) fn get_kind(r: &mut impl Read) -> io::Result<RequestKind> {
    Ok(match get_u8(r)? {
        1 => RequestKind::Open,
        _ => RequestKind::Chunk,
    })
}

/// `items` as their number ([`put_len`]; `too_long` says what did not fit) followed by
/// each, written by `item`.
pub(crate) fn put_seq<W: Write, T>(
    w: &mut W,
    items: &[T],
    too_long: &str,
    mut item: impl FnMut(&mut W, &T) -> io::Result<()>,
) -> io::Result<()> {
    put_len(w, items.len(), too_long)?;
    for x in items {
        item(w, x)?;
    }
    Ok(())
}

/// Items written by [`put_seq`], each read by `item`.
pub(crate) fn get_seq<R: Read, T>(
    r: &mut R,
    mut item: impl FnMut(&mut R) -> io::Result<T>,
) -> io::Result<Vec<T>> {
    let n = get_len(r)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(item(r)?);
    }
    Ok(v)
}
