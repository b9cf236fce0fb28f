//! One client connection on a TLS listener: the handshake (bounded by the handshake
//! timeout, a failure is one debug line), then the plaintext listener's request loop
//! ([`crate::conn::requests`]) over a TLS [`Wire`]: bodies are read into the connection's
//! body buffer and written through rustls. Nothing is ever sent in plaintext here.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::body::{read_at, SendClock, SendError};
use crate::conn::requests;
use crate::range::ByteRange;
use crate::wire::{ConnInfo, Wire};
use crate::Shared;

type Stream = TlsStream<TcpStream>;

/// Largest piece of a file read into the connection's buffer at once (rustls cuts it into
/// 16 KiB records).
const CHUNK: u64 = 256 << 10;

/// How long a closing connection waits to send its `close_notify`.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Handshake, then serve requests until the client closes, a limit ends it, or shutdown.
pub async fn serve(shared: Arc<Shared>, tcp: TcpStream, info: ConnInfo) {
    let Some(tls) = shared.tls.as_ref() else {
        return;
    };
    // The failure is counted before the socket is closed, so a client that sees the close
    // also sees the counter.
    let accept = tls.acceptor.accept(tcp).into_fallible();
    tokio::pin!(accept);
    let stream = match tokio::time::timeout(tls.handshake_timeout, &mut accept).await {
        Ok(Ok(s)) => s,
        Ok(Err((e, tcp))) => {
            shared.metrics.tls_handshake_failures.inc();
            tracing::debug!(
                "conn {} from {}: TLS handshake failed: {e}",
                info.id,
                info.peer
            );
            drop(tcp);
            return;
        }
        Err(_) => {
            shared.metrics.tls_handshake_failures.inc();
            tracing::debug!(
                "conn {} from {}: TLS handshake not done within {:?}",
                info.id,
                info.peer,
                tls.handshake_timeout
            );
            return;
        }
    };
    shared.metrics.tls_handshakes.inc();
    if stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
        shared.metrics.tls_resumed.inc();
    }
    if shared.config.http2.is_some()
        && stream.get_ref().1.alpn_protocol() == Some(crate::tls::ALPN_H2)
    {
        crate::h2_conn::serve(shared.clone(), stream, info).await;
        return;
    }
    let mut wire = Tls {
        stream,
        body: Vec::new(),
    };
    requests(&shared, &mut wire, info).await;
    let _ = tokio::time::timeout(CLOSE_WAIT, wire.stream.shutdown()).await;
}

/// A TLS session as the request loop's transport. The body buffer is borrowed from the
/// listener's pool for the first file range and kept while requests follow back to back;
/// it goes back whenever the connection goes idle.
struct Tls {
    stream: Stream,
    body: Vec<u8>,
}

impl Wire for Tls {
    async fn read_more(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        self.stream.read_buf(buf).await
    }

    /// Hand `data` to rustls (which encrypts and writes it), within the send-rate deadline.
    async fn write(
        &mut self,
        data: &[u8],
        _more: bool,
        is_body: bool,
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        let deadline = tokio::time::Instant::from_std(clock.deadline());
        match tokio::time::timeout_at(deadline, self.stream.write_all(data)).await {
            Ok(Ok(())) => {
                clock.count(data.len() as u64, is_body);
                Ok(())
            }
            Ok(Err(e)) => Err(SendError::Io(e)),
            Err(_) => Err(SendError::TooSlow),
        }
    }

    // `--io direct` windows go through the trait's `write_slices`: rustls reads the pool's
    // chunks directly into its records.
    async fn write_file(
        &mut self,
        shared: &Shared,
        file: &Arc<std::fs::File>,
        window: ByteRange,
        blocking: bool,
        clock: &mut SendClock,
    ) -> Result<(), SendError> {
        if self.body.len() < CHUNK as usize {
            if let Some(t) = &shared.tls {
                self.body = t.buffers.take(CHUNK as usize);
            }
        }
        let mut at = window.first;
        while at <= window.last {
            let n = (window.last + 1 - at).min(CHUNK) as usize;
            let mut body = std::mem::take(&mut self.body);
            let r = read_at(file, at, n, &mut body, blocking).await;
            let r = match r {
                Ok(()) => self.write(&body[..n], true, true, clock).await,
                Err(e) => Err(e),
            };
            self.body = body;
            r?;
            at += n as u64;
        }
        Ok(())
    }

    /// Push every queued record to the socket.
    async fn flush(&mut self, clock: &SendClock) -> Result<(), SendError> {
        let deadline = tokio::time::Instant::from_std(clock.deadline());
        match tokio::time::timeout_at(deadline, self.stream.flush()).await {
            Ok(r) => r.map_err(SendError::Io),
            Err(_) => Err(SendError::TooSlow),
        }
    }

    fn idle(&mut self, shared: &Shared) {
        if let Some(t) = &shared.tls {
            t.buffers.put(std::mem::take(&mut self.body));
        }
    }
}
