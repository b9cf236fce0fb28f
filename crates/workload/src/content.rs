//! The deterministic byte content of every file in a file set.
//!
//! A byte is a pure function of the file's path (relative to the served root, no leading
//! slash, `/` separators) and its offset, so a client can verify any range it receives
//! without a copy of the data, and a file set can be rewritten or repaired byte-exactly.
//!
//! Definition: let `k = fnv1a64(path)`. The file is a sequence of little-endian 64-bit
//! words; word `i` (covering offsets `8i .. 8i+8`) is `splitmix64(k ^ i)`. The byte at
//! offset `o` is byte `o % 8` of word `o / 8`.

/// FNV-1a, 64-bit, over the path's UTF-8 bytes.
pub fn path_key(path: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The splitmix64 finalizer: a cheap, well-mixed bijection on u64.
#[inline]
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fill `buf` with the content of the file keyed `key` starting at byte `offset`.
pub fn fill(key: u64, offset: u64, buf: &mut [u8]) {
    let mut pos = 0usize;
    let mut word = offset / 8;
    let skip = (offset % 8) as usize;
    if skip != 0 {
        let bytes = splitmix64(key ^ word).to_le_bytes();
        let n = (8 - skip).min(buf.len());
        buf[..n].copy_from_slice(&bytes[skip..skip + n]);
        pos = n;
        word += 1;
    }
    let mut chunks = buf[pos..].chunks_exact_mut(8);
    for chunk in &mut chunks {
        chunk.copy_from_slice(&splitmix64(key ^ word).to_le_bytes());
        word += 1;
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let bytes = splitmix64(key ^ word).to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&bytes[..n]);
    }
}

/// Index of the first byte of `data` (which was read at `offset` of the file keyed `key`)
/// that differs from the expected content, or `None` when every byte matches.
pub fn first_mismatch(key: u64, offset: u64, data: &[u8]) -> Option<usize> {
    let mut expected = [0u8; 4096];
    let mut done = 0usize;
    while done < data.len() {
        let n = (data.len() - done).min(expected.len());
        fill(key, offset + done as u64, &mut expected[..n]);
        if let Some(i) = data[done..done + n]
            .iter()
            .zip(&expected[..n])
            .position(|(a, b)| a != b)
        {
            return Some(done + i);
        }
        done += n;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_fill_matches_aligned_fill() {
        let key = path_key("v/title-000001.dat");
        let mut whole = vec![0u8; 100];
        fill(key, 0, &mut whole);
        for start in 0..20u64 {
            for len in 0..30usize {
                let mut part = vec![0u8; len];
                fill(key, start, &mut part);
                assert_eq!(&part[..], &whole[start as usize..start as usize + len]);
            }
        }
    }

    #[test]
    fn mismatch_is_located() {
        let key = path_key("a");
        let mut data = vec![0u8; 10_000];
        fill(key, 7, &mut data);
        assert_eq!(first_mismatch(key, 7, &data), None);
        data[5_000] ^= 1;
        assert_eq!(first_mismatch(key, 7, &data), Some(5_000));
        assert_eq!(first_mismatch(path_key("b"), 7, &data[..64]), Some(0));
    }
}
