//! Decoding `Transfer-Encoding: chunked` request bodies (RFC 9112 §7.1): what a live
//! encoder sends when it `PUT`s a segment it is still writing (ffmpeg's HLS and DASH muxers
//! with `-method PUT`). Chunk-size lines are parsed by `httparse`, trailers by its header
//! parser and then ignored.
//!
//! Pure and incremental: the caller appends what the socket gave to a buffer and calls
//! [`Chunked::feed`] until it reports the end; nothing here reads a socket or a clock.

/// Longest chunk-size line (size, extensions, CRLF) accepted.
const MAX_SIZE_LINE: usize = 1024;
/// Largest trailer section accepted.
const MAX_TRAILERS: usize = 8192;
/// Most trailer fields accepted.
const MAX_TRAILER_FIELDS: usize = 32;

/// Why a chunked body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// The decoded body would exceed the caller's limit (answer `413`).
    TooLarge,
    /// Not chunked framing (answer `400`).
    Malformed(&'static str),
}

impl ChunkError {
    /// The HTTP status answering this error.
    pub fn status(self) -> u16 {
        match self {
            ChunkError::TooLarge => 413,
            ChunkError::Malformed(_) => 400,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting a chunk-size line.
    Size,
    /// This many data bytes of the current chunk are still to come.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer fields and the final CRLF.
    Trailers,
    Done,
}

/// An incremental decoder of one chunked body.
#[derive(Debug, Clone)]
pub struct Chunked {
    state: State,
    max: u64,
    total: u64,
}

impl Chunked {
    /// A decoder that refuses bodies longer than `max` bytes (decoded).
    pub fn new(max: u64) -> Chunked {
        Chunked {
            state: State::Size,
            max,
            total: 0,
        }
    }

    /// Decoded body bytes so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Decodes what `buf` holds: removes the bytes it consumed, appends body bytes to `out`
    /// (when given; a discarded body passes `None`). `Ok(true)` once the body ended; the
    /// bytes after it (a pipelined request) stay in `buf`. `Ok(false)`: more input needed.
    pub fn feed(
        &mut self,
        buf: &mut Vec<u8>,
        mut out: Option<&mut Vec<u8>>,
    ) -> Result<bool, ChunkError> {
        let mut at = 0;
        let result = loop {
            let rest = &buf[at..];
            match self.state {
                State::Done => break Ok(true),
                State::Size => {
                    if rest.is_empty() {
                        break Ok(false);
                    }
                    if !rest[0].is_ascii_hexdigit() {
                        break Err(ChunkError::Malformed("bad chunk size"));
                    }
                    match httparse::parse_chunk_size(rest) {
                        Ok(httparse::Status::Complete((n, size))) => {
                            at += n;
                            if size > self.max.saturating_sub(self.total) {
                                break Err(ChunkError::TooLarge);
                            }
                            self.state = if size == 0 {
                                State::Trailers
                            } else {
                                State::Data(size)
                            };
                        }
                        Ok(httparse::Status::Partial) if rest.len() <= MAX_SIZE_LINE => {
                            break Ok(false)
                        }
                        _ => break Err(ChunkError::Malformed("bad chunk size")),
                    }
                }
                State::Data(left) => {
                    if rest.is_empty() {
                        break Ok(false);
                    }
                    let take = (left.min(rest.len() as u64)) as usize;
                    if let Some(o) = out.as_deref_mut() {
                        o.extend_from_slice(&rest[..take]);
                    }
                    at += take;
                    self.total += take as u64;
                    self.state = if left == take as u64 {
                        State::DataEnd
                    } else {
                        State::Data(left - take as u64)
                    };
                }
                State::DataEnd => {
                    if rest.len() < 2 {
                        break Ok(false);
                    }
                    if &rest[..2] != b"\r\n" {
                        break Err(ChunkError::Malformed("chunk data not followed by CRLF"));
                    }
                    at += 2;
                    self.state = State::Size;
                }
                State::Trailers => {
                    let mut fields = [httparse::EMPTY_HEADER; MAX_TRAILER_FIELDS];
                    match httparse::parse_headers(rest, &mut fields) {
                        Ok(httparse::Status::Complete((n, _))) => {
                            at += n;
                            self.state = State::Done;
                        }
                        Ok(httparse::Status::Partial) if rest.len() <= MAX_TRAILERS => {
                            break Ok(false)
                        }
                        _ => break Err(ChunkError::Malformed("bad trailer section")),
                    }
                }
            }
        };
        buf.drain(..at);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes.
    fn decode(input: &[u8], step: usize, max: u64) -> (Result<bool, ChunkError>, Vec<u8>, Vec<u8>) {
        let mut d = Chunked::new(max);
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        let mut r = Ok(false);
        for piece in input.chunks(step.max(1)) {
            buf.extend_from_slice(piece);
            r = d.feed(&mut buf, Some(&mut out));
            if r != Ok(false) {
                break;
            }
        }
        (r, out, buf)
    }

    const BODY: &[u8] =
        b"4\r\nWiki\r\n5;name=value\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\n\r\n";

    #[test]
    fn decodes_in_any_pieces_and_leaves_what_follows() {
        for step in [1, 2, 3, 7, 1000] {
            let mut input = BODY.to_vec();
            input.extend_from_slice(b"GET / HTTP/1.1\r\n");
            let (r, out, rest) = decode(&input, step, 1 << 20);
            assert_eq!(r, Ok(true), "step {step}");
            assert_eq!(out, b"Wikipedia in\r\n\r\nchunks.", "step {step}");
            if step >= input.len() {
                assert_eq!(rest, b"GET / HTTP/1.1\r\n");
            }
        }
    }

    #[test]
    fn trailers_are_read_and_dropped() {
        let input = b"3\r\nabc\r\n0\r\nX-Checksum: 1\r\nX-Other: 2\r\n\r\nnext";
        let (r, out, rest) = decode(input, 1000, 100);
        assert_eq!(
            (r, out.as_slice(), rest.as_slice()),
            (Ok(true), &b"abc"[..], &b"next"[..])
        );
    }

    #[test]
    fn the_limit_counts_decoded_bytes() {
        assert_eq!(decode(BODY, 1000, 23).0, Ok(true));
        assert_eq!(decode(BODY, 1000, 22).0, Err(ChunkError::TooLarge));
        // A declared size beyond the limit is refused before its data arrives.
        assert_eq!(
            decode(b"ffffffff\r\n", 1000, 1 << 20).0,
            Err(ChunkError::TooLarge)
        );
        assert_eq!(ChunkError::TooLarge.status(), 413);
    }

    #[test]
    fn bad_framing_is_malformed_never_a_hang() {
        for bad in [
            &b"\r\n"[..],
            b"zz\r\n",
            b"-1\r\n",
            b"4\r\nWikiXX",
            b"10000000000000000\r\n",
        ] {
            let (r, _, _) = decode(bad, 1000, u64::MAX);
            assert!(matches!(r, Err(ChunkError::Malformed(_))), "{bad:?}: {r:?}");
        }
        // A size line that never ends is cut off at its limit.
        let mut long = b"1;".to_vec();
        long.extend(vec![b'x'; MAX_SIZE_LINE + 8]);
        assert!(matches!(
            decode(&long, 100, u64::MAX).0,
            Err(ChunkError::Malformed(_))
        ));
        let (r, _, _) = decode(b"0\r\nX: 1\r\n", 1000, 100);
        assert_eq!(r, Ok(false), "trailers still open");
        assert_eq!(ChunkError::Malformed("x").status(), 400);
    }
}
