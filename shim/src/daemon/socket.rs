//! The daemon's Unix seqpacket socket: listening, and receiving a request together with
//! the descriptor the library attached to it.

use crate::protocol::{Reply, Request, REPLY_LEN, REQUEST_LEN};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path must be 1..{} bytes long",
                addr.sun_path.len() - 1
            ),
        ));
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    Ok((
        addr,
        std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
    ))
}

fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked before it is owned.
    let fd =
        cvt(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fd was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Connect to a daemon socket (used to detect a live daemon and by tests).
pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    let addr = sockaddr(path)?;
    let fd = seqpacket()?;
    at_address(&fd, &addr, libc::connect)?;
    Ok(fd)
}

/// `call` ([`libc::connect`] or [`libc::bind`]) on socket `fd` with address `addr`.
fn at_address(
    fd: &OwnedFd,
    addr: &(libc::sockaddr_un, libc::socklen_t),
    call: AddressCall,
) -> io::Result<()> {
    let (addr, len) = addr;
    // SAFETY: addr is a valid sockaddr_un of `len` bytes and fd an open socket; connect(2)
    // and bind(2) only read the address.
    cvt(unsafe {
        call(
            fd.as_raw_fd(),
            (addr as *const libc::sockaddr_un).cast(),
            *len,
        )
    })?;
    Ok(())
}

/// The signature connect(2) and bind(2) share.
type AddressCall =
    unsafe extern "C" fn(libc::c_int, *const libc::sockaddr, libc::socklen_t) -> libc::c_int;

/// Bind and listen at `path`. A leftover socket file nobody listens on is replaced; a live
/// daemon at the same path is an error.
pub fn listen(path: &Path) -> io::Result<OwnedFd> {
    let addr = sockaddr(path)?;
    if path.exists() {
        if connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("a prefetch daemon already listens on {}", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let fd = seqpacket()?;
    at_address(&fd, &addr, libc::bind)?;
    // Servers drop privileges after loading the library; their workers must still connect.
    // A client can only ask for reads of descriptors it already holds, so this is safe.
    let cpath = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "socket path contains NUL"))?;
    // SAFETY: cpath is a valid NUL-terminated string.
    cvt(unsafe { libc::chmod(cpath.as_ptr(), 0o666) })?;
    // SAFETY: fd is a bound socket.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), 1024) })?;
    Ok(fd)
}

/// Wait for the next connection; `Ok(None)` once the listener was shut down.
pub fn accept(listener: RawFd) -> io::Result<Option<OwnedFd>> {
    loop {
        // SAFETY: accept4 with null address pointers is allowed.
        let fd = unsafe {
            libc::accept4(
                listener,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd >= 0 {
            // SAFETY: fd was just returned by accept4 and is owned by nobody else.
            return Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) | Some(libc::ECONNABORTED) => continue,
            Some(libc::EINVAL) | Some(libc::EBADF) => return Ok(None),
            Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM) => {
                tracing::warn!("accept: {e}; retrying");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            _ => return Err(e),
        }
    }
}

/// One message read from a connection.
pub enum Incoming {
    /// A request, with the file descriptor when one was attached.
    Request(Request, Option<OwnedFd>),
    /// A message that could not be decoded (the connection stays usable).
    Garbage(String),
    /// The peer closed the connection (or it was shut down).
    Closed,
}

/// Receive one message; descriptors attached to it are always taken over (and closed).
pub fn receive(conn: RawFd) -> io::Result<Incoming> {
    let mut data = [0u8; REQUEST_LEN + 16];
    let mut ctrl = [0u64; 16];
    loop {
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: msghdr is plain data; all-zero is valid before the fields are set.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctrl.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&ctrl);
        // SAFETY: msg points at live buffers of the sizes given.
        let n = unsafe { libc::recvmsg(conn, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if e.raw_os_error() == Some(libc::ECONNRESET) {
                return Ok(Incoming::Closed);
            }
            return Err(e);
        }
        let fds = take_fds(&msg);
        if n == 0 {
            return Ok(Incoming::Closed);
        }
        let n = n as usize;
        if msg.msg_flags & libc::MSG_TRUNC != 0 {
            return Ok(Incoming::Garbage(format!("oversized message ({n}+ bytes)")));
        }
        let mut fds = fds.into_iter();
        return Ok(match Request::decode(&data[..n]) {
            Ok(req) => Incoming::Request(req, fds.next()),
            Err(e) => Incoming::Garbage(e.to_string()),
        });
    }
}

fn take_fds(msg: &libc::msghdr) -> Vec<OwnedFd> {
    let mut out = Vec::new();
    // SAFETY: msg was filled by recvmsg; the CMSG macros walk its control buffer.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    if fd >= 0 {
                        out.push(OwnedFd::from_raw_fd(fd));
                    }
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    out
}

/// Send the reply to request `seq`. A peer that went away is not an error.
pub fn send_reply(conn: RawFd, reply: Reply, seq: u64) -> io::Result<()> {
    let b = reply.encode(seq);
    // SAFETY: b is a live buffer of REPLY_LEN bytes.
    let n = unsafe { libc::send(conn, b.as_ptr().cast(), REPLY_LEN, libc::MSG_NOSIGNAL) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EPIPE) | Some(libc::ECONNRESET) => Ok(()),
            _ => Err(e),
        };
    }
    Ok(())
}

/// Send a request with a descriptor attached, as the library does (for tests and checks).
pub fn send_request(conn: RawFd, req: &Request, file: RawFd) -> io::Result<()> {
    let b = req.encode();
    let mut iov = libc::iovec {
        iov_base: b.as_ptr() as *mut libc::c_void,
        iov_len: b.len(),
    };
    let mut ctrl = [0u64; 4];
    // SAFETY: msghdr is plain data; fields are set below to live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure size computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    // SAFETY: the control buffer is large enough for one descriptor.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), file);
    }
    // SAFETY: msg points at live buffers.
    cvt(unsafe { libc::sendmsg(conn, &msg, libc::MSG_NOSIGNAL) } as libc::c_int)?;
    Ok(())
}

/// Receive one reply (blocking), as the library does (for tests and checks).
pub fn receive_reply(conn: RawFd) -> io::Result<(u32, u64, u64, u64)> {
    let mut b = [0u8; REPLY_LEN];
    // SAFETY: b is a live buffer of REPLY_LEN bytes.
    let n = unsafe { libc::recv(conn, b.as_mut_ptr().cast(), REPLY_LEN, 0) };
    if n != REPLY_LEN as isize {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short reply"));
    }
    let word = |at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let status = u32::from_ne_bytes(b[4..8].try_into().expect("4 bytes"));
    Ok((status, word(8), word(16), word(24)))
}
