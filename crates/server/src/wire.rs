//! The byte transport under the request loop ([`Wire`]) and its plaintext kind: heads
//! with `send(MSG_MORE)`, bodies with sendfile or, in `--io direct`, `sendmsg` from the
//! engine's buffer pool. The TLS kind is in [`crate::tls_conn`].

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;
use vodkit_prefetch::Slice;

use crate::body::{send_bytes, send_file_range, send_slices, SendClock, SendError};
use crate::io::Prepared;
use crate::range::ByteRange;
use crate::response::{head_bytes, with_http_date, Body, Response};
use crate::Shared;

/// Identity of a connection, for the access log.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    pub id: u64,
    pub peer: SocketAddr,
    /// The connection speaks HTTP/2 ([`crate::h2_conn`]).
    pub http2: bool,
}

/// The byte transport under the request loop: a plaintext socket (sendfile, `MSG_MORE`) or
/// a TLS session (bytes read into a buffer and encrypted by rustls). Everything above it —
/// parsing, limits, timeouts, planning, accounting — is the same code for both.
pub(crate) trait Wire {
    /// Read whatever the peer has sent into the spare capacity of `buf`; `Ok(0)` at EOF.
    async fn read_more(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize>;
    /// Hand `data` to the transport; `more` says further bytes of this response follow.
    async fn write(
        &mut self,
        data: &[u8],
        more: bool,
        is_body: bool,
        clock: &mut SendClock,
    ) -> Result<(), SendError>;
    /// Send one window of a file range the I/O layer has prepared (`prep`): in `--io
    /// direct` its bytes in the engine's buffer pool, else the file's.
    async fn write_window(
        &mut self,
        shared: &Shared,
        file: &Arc<std::fs::File>,
        window: ByteRange,
        prep: &mut Prepared,
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        // The pool's chunks are let go once sent, before the manager decides on them.
        match prep.slices.take() {
            Some(slices) => self.write_slices(&slices, clock).await,
            None => {
                let blocking = prep.send_blocking;
                self.write_file(shared, file, window, blocking, clock).await
            }
        }
    }
    /// Send the pool's chunks of a window, in order; by default each is one body write.
    async fn write_slices(
        &mut self,
        slices: &[Slice],
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        for s in slices {
            self.write(s.bytes(), true, true, clock).await?;
        }
        Ok(())
    }
    /// Send `window` of `file` (reading it may block on the disk when `blocking`).
    async fn write_file(
        &mut self,
        shared: &Shared,
        file: &Arc<std::fs::File>,
        window: ByteRange,
        blocking: bool,
        clock: &mut SendClock,
    ) -> Result<(), SendError>;
    /// Push out whatever the transport still buffers of a response.
    async fn flush(&mut self, clock: &SendClock) -> Result<(), SendError>;
    /// Send `data` at once as one piece of a body of unknown length whose head announced
    /// `Transfer-Encoding: chunked` (a segment read while it is uploaded); the body ends
    /// with a write of the last chunk (`0\r\n\r\n`), and a response that stops before it
    /// is not complete. HTTP/1.1: one chunk, counted as `data.len()` body bytes.
    async fn write_chunk(&mut self, data: &[u8], clock: &mut SendClock) -> Result<(), SendError> {
        if data.is_empty() {
            return Ok(());
        }
        let size = format!("{:x}\r\n", data.len());
        let mut framed = Vec::with_capacity(size.len() + data.len() + 2);
        framed.extend_from_slice(size.as_bytes());
        framed.extend_from_slice(data);
        framed.extend_from_slice(b"\r\n");
        let before = clock.body_sent;
        let r = self.write(&framed, false, true, clock).await;
        // The access log counts the payload, not its framing.
        let sent = clock.body_sent - before;
        clock.body_sent = before
            + sent
                .saturating_sub(size.len() as u64)
                .min(data.len() as u64);
        r?;
        self.flush(clock).await
    }
    /// No request is pending: give back per-connection resources kept between requests.
    fn idle(&mut self, shared: &Shared);
}

/// A plaintext connection: heads with `send(MSG_MORE)`, bodies with sendfile or, in
/// `--io direct`, `sendmsg` from the engine's buffer pool.
pub(crate) struct Plain(pub TcpStream);

impl Wire for Plain {
    async fn read_more(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        // Into the spare capacity, not zeroed first. Through `AsyncRead`, whose short read
        // marks the socket drained: the next wait goes straight to epoll instead of first
        // trying a `recv` that would only say "try again".
        tokio::io::AsyncReadExt::read_buf(&mut self.0, buf).await
    }

    async fn write(
        &mut self,
        data: &[u8],
        more: bool,
        is_body: bool,
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        send_bytes(&self.0, data, more, is_body, clock).await
    }

    async fn write_slices(
        &mut self,
        slices: &[Slice],
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        send_slices(&self.0, slices, clock).await
    }

    async fn write_file(
        &mut self,
        _shared: &Shared,
        file: &Arc<std::fs::File>,
        window: ByteRange,
        blocking: bool,
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        send_file_range(&self.0, file, window, blocking, clock).await
    }

    async fn flush(&mut self, _clock: &SendClock) -> Result<(), SendError> {
        Ok(())
    }

    fn idle(&mut self, _shared: &Shared) {}
}

/// Send a whole text response in one write: its head and, unless `head_only` (a `HEAD`
/// request), its body, counted in `body_sent` once the transport took it.
pub(crate) async fn send_text<W: Wire>(
    shared: &Shared,
    wire: &mut W,
    resp: &Response,
    head_only: bool,
) -> (SendClock, Result<(), SendError>) {
    let mut clock = SendClock::new(shared.config.send_grace, shared.config.min_send_rate);
    let mut all = with_http_date(|date| head_bytes(resp, date, !resp.close));
    let body = match &resp.body {
        Body::Text(b) if !head_only => b.as_slice(),
        _ => &[],
    };
    all.extend_from_slice(body);
    let mut r = wire.write(&all, false, false, &mut clock).await;
    if r.is_ok() {
        clock.body_sent = body.len() as u64;
        r = wire.flush(&clock).await;
    }
    (clock, r)
}
