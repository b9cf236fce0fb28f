//! Writing responses to a non-blocking socket: the head with `send(MSG_MORE)`, file
//! ranges with `sendfile(2)` straight from the page cache, and a minimum-send-rate clock
//! that drops clients which stop reading.
//!
//! When a range is not resident in memory the sendfile call would block on the disk, so
//! it is made on tokio's blocking pool (nginx's `aio threads` design) with a duplicated
//! socket descriptor, and the event loop keeps running.
//!
//! `--io direct` sends bytes the engine already holds in its buffer pool: `sendmsg` with
//! several slices per call (a `writev` with `MSG_NOSIGNAL`), never touching the disk.
//!
//! The user-space body paths (TLS, HTTP/2) read each piece of a file into a buffer first
//! ([`read_at`]).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::Interest;
use tokio::net::TcpStream;
use vodkit_prefetch::Slice;

use crate::range::ByteRange;

/// Why sending a response stopped early.
#[derive(Debug)]
pub enum SendError {
    /// The client closed the connection or the socket failed.
    Io(io::Error),
    /// The client read slower than the configured minimum rate.
    TooSlow,
    /// The file could not be read from its disk (the error of the read).
    Disk(Arc<io::Error>),
}

impl SendError {
    /// An `EIO` on the way out comes from the file (a socket fails with `EPIPE` or
    /// `ECONNRESET`): a disk error, whichever call saw it.
    pub(crate) fn classify(self) -> SendError {
        match self {
            SendError::Io(e) if e.raw_os_error() == Some(libc::EIO) => SendError::Disk(Arc::new(e)),
            other => other,
        }
    }
}

impl From<io::Error> for SendError {
    fn from(e: io::Error) -> Self {
        SendError::Io(e)
    }
}

/// Tracks bytes handed to the kernel for one response and the deadline they imply:
/// after `grace`, at least `min_rate` bytes per second must have gone out.
#[derive(Debug)]
pub struct SendClock {
    start: Instant,
    grace: Duration,
    min_rate: u64,
    /// Body bytes accepted by the kernel so far.
    pub body_sent: u64,
    head_sent: u64,
}

impl SendClock {
    pub fn new(grace: Duration, min_rate: u64) -> Self {
        SendClock {
            start: Instant::now(),
            grace,
            min_rate,
            body_sent: 0,
            head_sent: 0,
        }
    }

    /// Count `n` bytes handed over (body or head).
    pub(crate) fn count(&mut self, n: u64, is_body: bool) {
        if is_body {
            self.body_sent += n;
        } else {
            self.head_sent += n;
        }
    }

    /// Nothing of the response has gone out yet (an error status may still replace it).
    pub(crate) fn nothing_sent(&self) -> bool {
        self.head_sent == 0 && self.body_sent == 0
    }

    pub(crate) fn deadline(&self) -> Instant {
        let sent = self.body_sent + self.head_sent;
        let allowance = if self.min_rate == 0 {
            Duration::from_secs(365 * 24 * 3600)
        } else {
            Duration::from_secs_f64(sent as f64 / self.min_rate as f64)
        };
        self.start + self.grace + allowance
    }
}

/// Wait until the socket is writable, or fail when the send-rate deadline passes.
async fn writable(stream: &TcpStream, clock: &SendClock) -> Result<(), SendError> {
    let deadline = tokio::time::Instant::from_std(clock.deadline());
    match tokio::time::timeout_at(deadline, stream.writable()).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(SendError::TooSlow),
    }
}

/// Send a byte slice; `more` tells the kernel that further data follows (MSG_MORE), so
/// a head and the start of its body leave in the same segment.
pub async fn send_bytes(
    stream: &TcpStream,
    data: &[u8],
    more: bool,
    is_body: bool,
    clock: &mut SendClock,
) -> Result<(), SendError> {
    let fd = stream.as_raw_fd();
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    let mut done = 0usize;
    while done < data.len() {
        writable(stream, clock).await?;
        let rest = &data[done..];
        let r = stream.try_io(Interest::WRITABLE, || {
            // SAFETY: rest is a valid buffer and fd is the stream's open socket.
            let n = unsafe { libc::send(fd, rest.as_ptr().cast(), rest.len(), flags) };
            byte_count(n)
        });
        match r {
            Ok(n) => {
                done += n;
                if is_body {
                    clock.body_sent += n as u64;
                } else {
                    clock.head_sent += n as u64;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Most slices gathered into one `sendmsg`.
const MAX_IOVECS: usize = 64;

/// One `sendmsg` of `slices` starting `skip` bytes in; returns the bytes the kernel took.
fn sendmsg_once(sock: i32, slices: &[Slice], mut skip: usize) -> io::Result<usize> {
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(slices.len().min(MAX_IOVECS));
    for s in slices {
        let b = s.bytes();
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        let rest = &b[skip..];
        skip = 0;
        iov.push(libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        });
        if iov.len() == MAX_IOVECS {
            break;
        }
    }
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: every iovec points into a slice borrowed for the call (the kernel only reads
    // them); sock is the stream's open socket.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    byte_count(n)
}

/// The byte count a send call returned, or its `errno` when it returned -1.
fn byte_count(n: isize) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Send bytes held in memory (`--io direct`: the buffer pool's slices of a window), with
/// the same writability wait and minimum-rate clock as [`send_file_range`]. Counted as
/// body bytes.
pub async fn send_slices(
    stream: &TcpStream,
    slices: &[Slice],
    clock: &mut SendClock,
) -> Result<(), SendError> {
    let total: usize = slices.iter().map(Slice::len).sum();
    let mut done = 0usize;
    while done < total {
        writable(stream, clock).await?;
        let r = stream.try_io(Interest::WRITABLE, || {
            sendmsg_once(stream.as_raw_fd(), slices, done)
        });
        match r {
            Ok(n) => {
                done += n;
                clock.body_sent += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Largest count passed to one sendfile call (the kernel caps it near 2 GiB anyway).
const SENDFILE_CHUNK: u64 = 1 << 30;

fn sendfile_once(sock: i32, file: i32, offset: u64, count: u64) -> io::Result<usize> {
    let mut off = offset as libc::off_t;
    // SAFETY: both descriptors are open for the duration of the call; off is a valid pointer.
    let n = unsafe { libc::sendfile(sock, file, &mut off, count.min(SENDFILE_CHUNK) as usize) };
    byte_count(n)
}

/// Send a file range with sendfile. With `blocking`, each call runs on the blocking
/// thread pool because the kernel may have to read the disk.
pub async fn send_file_range(
    stream: &TcpStream,
    file: &Arc<File>,
    range: ByteRange,
    blocking: bool,
    clock: &mut SendClock,
) -> Result<(), SendError> {
    let mut offset = range.first;
    let end = range.last + 1;
    let dup: Option<Arc<OwnedFd>> = if blocking {
        Some(Arc::new(stream.as_fd().try_clone_to_owned()?))
    } else {
        None
    };
    while offset < end {
        writable(stream, clock).await?;
        let count = end - offset;
        let r = match &dup {
            None => stream.try_io(Interest::WRITABLE, || {
                sendfile_once(stream.as_raw_fd(), file.as_raw_fd(), offset, count)
            }),
            Some(sock) => {
                let (sock, f) = (sock.clone(), file.clone());
                let job = move || sendfile_once(sock.as_raw_fd(), f.as_raw_fd(), offset, count);
                let r = tokio::task::spawn_blocking(job)
                    .await
                    .map_err(io::Error::other)?;
                if let Err(e) = &r {
                    if e.kind() == io::ErrorKind::WouldBlock {
                        // Tell tokio the socket is full so writable() waits for an edge.
                        let _ = stream.try_io(Interest::WRITABLE, || -> io::Result<()> {
                            Err(io::ErrorKind::WouldBlock.into())
                        });
                    }
                }
                r
            }
        };
        match r {
            Ok(0) => {
                // The file shrank under us; the promised length cannot be delivered.
                return Err(SendError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file truncated",
                )));
            }
            Ok(n) => {
                offset += n as u64;
                clock.body_sent += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `pread` `n` bytes at `offset` into the front of `buf`; on the blocking pool when the
/// pages may have to come from the disk.
pub(crate) async fn read_at(
    file: &Arc<std::fs::File>,
    offset: u64,
    n: usize,
    buf: &mut Vec<u8>,
    blocking: bool,
) -> Result<(), SendError> {
    if buf.len() < n {
        buf.resize(n, 0);
    }
    let truncated = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            SendError::Io(std::io::Error::new(e.kind(), "file truncated"))
        } else {
            SendError::Io(e)
        }
    };
    if !blocking {
        return file.read_exact_at(&mut buf[..n], offset).map_err(truncated);
    }
    let mut owned = std::mem::take(buf);
    let f = file.clone();
    let (owned, r) = tokio::task::spawn_blocking(move || {
        let r = f.read_exact_at(&mut owned[..n], offset);
        (owned, r)
    })
    .await
    .map_err(|e| SendError::Io(std::io::Error::other(e)))?;
    *buf = owned;
    r.map_err(truncated)
}
