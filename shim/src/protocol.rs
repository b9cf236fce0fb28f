//! Messages between the preload shim's library and its daemon; mirrors `shim/c/protocol.h`.
//!
//! One request per seqpacket message with the reading descriptor attached (SCM_RIGHTS),
//! one reply per request, except for notes of resident reads ([`Request::resident`]),
//! which are never answered. Native endianness: both ends always run on the same host.

/// `"VKPF"`, first field of every message.
pub const MAGIC: u32 = 0x564b_5046;
/// Protocol version sent by the library.
pub const VERSION: u16 = 1;
/// Size of a request message in bytes.
pub const REQUEST_LEN: usize = 48;
/// Request flag: the range was read from memory; an accounting note, never answered.
pub const FLAG_RESIDENT: u32 = 1;
/// Size of a reply message in bytes.
pub const REPLY_LEN: usize = 32;

/// The libc call that missed the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Read,
    Pread,
    Readv,
    Sendfile,
    CopyFileRange,
    Splice,
}

impl Op {
    fn from_wire(v: u16) -> Option<Op> {
        Some(match v {
            1 => Op::Read,
            2 => Op::Pread,
            3 => Op::Readv,
            4 => Op::Sendfile,
            5 => Op::CopyFileRange,
            6 => Op::Splice,
            _ => return None,
        })
    }

    /// Wire value of the call.
    pub fn to_wire(self) -> u16 {
        match self {
            Op::Read => 1,
            Op::Pread => 2,
            Op::Readv => 3,
            Op::Sendfile => 4,
            Op::CopyFileRange => 5,
            Op::Splice => 6,
        }
    }
}

/// A read that missed the page cache, as reported by one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub op: Op,
    pub pid: u32,
    /// First byte the application asked for.
    pub offset: u64,
    /// Bytes asked for, already clamped to the file size.
    pub len: u64,
    /// File size seen by the library.
    pub file_size: u64,
    /// Per-process sequence number, echoed in the reply.
    pub seq: u64,
    /// A note that the range was read from memory (no reply expected), not a miss.
    pub resident: bool,
}

/// Why a request message was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("message is {0} bytes, expected {REQUEST_LEN}")]
    Length(usize),
    #[error("bad magic {0:#x}")]
    Magic(u32),
    #[error("unsupported protocol version {0}")]
    Version(u16),
    #[error("unknown call code {0}")]
    Op(u16),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Request {
    /// Parse a request message.
    pub fn decode(b: &[u8]) -> Result<Request, DecodeError> {
        if b.len() != REQUEST_LEN {
            return Err(DecodeError::Length(b.len()));
        }
        let magic = u32_at(b, 0);
        if magic != MAGIC {
            return Err(DecodeError::Magic(magic));
        }
        let version = u16_at(b, 4);
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let op = u16_at(b, 6);
        Ok(Request {
            op: Op::from_wire(op).ok_or(DecodeError::Op(op))?,
            pid: u32_at(b, 8),
            offset: u64_at(b, 16),
            len: u64_at(b, 24),
            file_size: u64_at(b, 32),
            seq: u64_at(b, 40),
            resident: u32_at(b, 12) & FLAG_RESIDENT != 0,
        })
    }

    /// Encode as the library does (used by tests and by `vodkit prefetchd` self-checks).
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_ne_bytes());
        b[4..6].copy_from_slice(&VERSION.to_ne_bytes());
        b[6..8].copy_from_slice(&self.op.to_wire().to_ne_bytes());
        b[8..12].copy_from_slice(&self.pid.to_ne_bytes());
        let flags = if self.resident { FLAG_RESIDENT } else { 0 };
        b[12..16].copy_from_slice(&flags.to_ne_bytes());
        b[16..24].copy_from_slice(&self.offset.to_ne_bytes());
        b[24..32].copy_from_slice(&self.len.to_ne_bytes());
        b[32..40].copy_from_slice(&self.file_size.to_ne_bytes());
        b[40..48].copy_from_slice(&self.seq.to_ne_bytes());
        b
    }
}

/// What the daemon tells the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The daemon read what was needed.
    Done,
    /// Prefetch-only mode: the library reads `[offset, offset + len)` itself.
    PrefetchHere { offset: u64, len: u64 },
    /// Nothing was read (tracking only, or nothing needed).
    Skipped,
    /// The daemon failed; the library goes on anyway.
    Error,
}

impl Reply {
    /// Encode the reply to the request numbered `seq`.
    pub fn encode(&self, seq: u64) -> [u8; REPLY_LEN] {
        let (status, offset, len) = match *self {
            Reply::Done => (0u32, 0, 0),
            Reply::PrefetchHere { offset, len } => (1, offset, len),
            Reply::Skipped => (2, 0, 0),
            Reply::Error => (3, 0, 0),
        };
        let mut b = [0u8; REPLY_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_ne_bytes());
        b[4..8].copy_from_slice(&status.to_ne_bytes());
        b[8..16].copy_from_slice(&seq.to_ne_bytes());
        b[16..24].copy_from_slice(&offset.to_ne_bytes());
        b[24..32].copy_from_slice(&len.to_ne_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips() {
        let r = Request {
            op: Op::Sendfile,
            pid: 4242,
            offset: 1 << 33,
            len: 524_288,
            file_size: 1 << 34,
            seq: 7,
            resident: false,
        };
        assert_eq!(Request::decode(&r.encode()), Ok(r));
        let note = Request {
            resident: true,
            ..r
        };
        assert_eq!(Request::decode(&note.encode()), Ok(note));
        assert_eq!(note.encode()[12..16], FLAG_RESIDENT.to_ne_bytes());
    }

    #[test]
    fn bad_requests_are_named() {
        let r = Request {
            op: Op::Read,
            pid: 1,
            offset: 0,
            len: 1,
            file_size: 1,
            seq: 1,
            resident: false,
        };
        let mut b = r.encode();
        assert_eq!(Request::decode(&b[..40]), Err(DecodeError::Length(40)));
        b[6] = 99;
        assert_eq!(Request::decode(&b), Err(DecodeError::Op(99)));
        b[0] = 0;
        assert!(matches!(Request::decode(&b), Err(DecodeError::Magic(_))));
    }

    #[test]
    fn reply_layout_matches_the_c_header() {
        let b = Reply::PrefetchHere {
            offset: 4096,
            len: 2 << 20,
        }
        .encode(9);
        assert_eq!(u32_at(&b, 0), MAGIC);
        assert_eq!(u32_at(&b, 4), 1);
        assert_eq!(u64_at(&b, 8), 9);
        assert_eq!(u64_at(&b, 16), 4096);
        assert_eq!(u64_at(&b, 24), 2 << 20);
    }
}
