//! One HTTP/1.1 exchange on a persistent connection: write a GET (whole file, closed range
//! or open-ended range), parse the response head with `httparse`, read exactly the body
//! the request calls for (through the session's token bucket; a chunked body — an object
//! the origin sends while it is still being written — decoded as it arrives), verify it if
//! asked, and classify whatever goes wrong. A connection may instead be a stream handle of an HTTP/2
//! connection ([`crate::h2`]), which the same checks and accounting serve.

use crate::exchange::{body_plan, fail, range_first, take_body, target, Head};
pub use crate::exchange::{Ask, BodySink, Done, ExchangeError, Progress};
use crate::link::Bucket;
use crate::record::{Failure, FailureReason};
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;
use vodkit_workload::content;

/// Largest response head accepted.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest single read from the socket.
const READ_BYTES: usize = 64 * 1024;

/// The byte stream under a connection: plain TCP or TLS over TCP; or a handle of an
/// HTTP/2 connection, which is not read or written as bytes here.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    H2(crate::h2::Mux),
}

/// The error of reading or writing an HTTP/2 handle as a byte stream.
fn not_bytes() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "an HTTP/2 connection is not a byte stream",
    )
}

/// What a TCP or TLS byte stream is to the request loop.
trait ByteStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> ByteStream for T {}

impl Stream {
    /// The byte stream to read and write; `None` for an HTTP/2 handle.
    fn bytes(self: Pin<&mut Self>) -> Option<Pin<&mut dyn ByteStream>> {
        match self.get_mut() {
            Stream::Plain(s) => Some(Pin::new(s)),
            Stream::Tls(s) => Some(Pin::new(s.as_mut())),
            Stream::H2(_) => None,
        }
    }
}

impl tokio::io::AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.bytes()
            .map_or_else(|| Poll::Ready(Err(not_bytes())), |s| s.poll_read(cx, buf))
    }
}

impl tokio::io::AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.bytes()
            .map_or_else(|| Poll::Ready(Err(not_bytes())), |s| s.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.bytes()
            .map_or_else(|| Poll::Ready(Err(not_bytes())), |s| s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.bytes()
            .map_or(Poll::Ready(Ok(())), |s| s.poll_shutdown(cx))
    }
}

/// An open connection plus the bytes read from it but not yet consumed.
pub struct Conn {
    stream: Stream,
    buf: Vec<u8>,
    /// Exchanges completed on this connection (0 = fresh).
    pub exchanges: u32,
}

impl Conn {
    /// Open a TCP connection; `recv_buffer` shrinks the receive buffer for slow links.
    pub async fn open(addr: SocketAddr, recv_buffer: Option<u32>) -> Result<Conn, Failure> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(|e| Failure::new(FailureReason::Connect, format!("{addr}: {e}")))?;
        Conn::connect(socket, addr, recv_buffer).await
    }

    /// Connect a socket made elsewhere (e.g. inside a network namespace) to `addr`.
    pub async fn connect(
        socket: TcpSocket,
        addr: SocketAddr,
        recv_buffer: Option<u32>,
    ) -> Result<Conn, Failure> {
        let connect_err =
            |e: io::Error| Failure::new(FailureReason::Connect, format!("{addr}: {e}"));
        if let Some(bytes) = recv_buffer {
            socket.set_recv_buffer_size(bytes).map_err(connect_err)?;
        }
        let stream = socket.connect(addr).await.map_err(connect_err)?;
        stream.set_nodelay(true).map_err(connect_err)?;
        Ok(Conn {
            stream: Stream::Plain(stream),
            buf: Vec::new(),
            exchanges: 0,
        })
    }

    /// Run the TLS handshake on a fresh connection (`connector`: the viewer's, with its
    /// resumption cache).
    pub async fn secure(
        self,
        tls: &crate::tls::TlsClient,
        connector: &tokio_rustls::TlsConnector,
    ) -> Result<Conn, Failure> {
        match self.stream {
            Stream::Plain(tcp) => Ok(Conn {
                stream: Stream::Tls(Box::new(tls.handshake(connector, tcp).await?)),
                buf: self.buf,
                exchanges: self.exchanges,
            }),
            Stream::Tls(_) | Stream::H2(_) => Ok(self),
        }
    }

    /// Speak HTTP/2 on this fresh connection: by prior knowledge in cleartext, over TLS
    /// only when ALPN chose `h2`. `window`: the stream receive window (see
    /// [`crate::h2::handshake`]).
    pub async fn into_h2(self, window: Option<u32>) -> Result<Conn, Failure> {
        let resumed = self.tls_resumed();
        let mux = match self.stream {
            Stream::Plain(tcp) => crate::h2::handshake(tcp, false, None, window).await?,
            Stream::Tls(tls) => {
                if tls.get_ref().1.alpn_protocol() != Some(crate::tls::ALPN_H2) {
                    return Err(Failure::new(
                        FailureReason::Protocol,
                        "the server did not choose HTTP/2 (ALPN h2) for --http 2",
                    ));
                }
                crate::h2::handshake(*tls, true, resumed, window).await?
            }
            Stream::H2(mux) => mux,
        };
        Ok(Conn::of_h2(mux))
    }

    fn of_h2(mux: crate::h2::Mux) -> Conn {
        Conn {
            exchanges: mux.exchanges(),
            stream: Stream::H2(mux),
            buf: Vec::new(),
        }
    }

    /// Another handle of this HTTP/2 connection, while it can carry requests (`None` for
    /// an HTTP/1.1 connection, which carries one request at a time).
    pub fn share(&self) -> Option<Conn> {
        match &self.stream {
            Stream::H2(mux) if mux.alive() => Some(Conn::of_h2(mux.clone())),
            _ => None,
        }
    }

    /// Whether this connection's TLS session was resumed (`None`: plaintext).
    pub fn tls_resumed(&self) -> Option<bool> {
        match &self.stream {
            Stream::Plain(_) => None,
            Stream::Tls(s) => {
                Some(s.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed))
            }
            Stream::H2(mux) => mux.resumed,
        }
    }

    /// Give back the read buffer's memory while the connection idles (pacing waits).
    pub fn release_buffer(&mut self) {
        if self.buf.is_empty() {
            self.buf = Vec::new();
        }
    }

    async fn read_some(&mut self, bucket: Option<&Bucket>) -> io::Result<usize> {
        let want = match bucket {
            Some(b) => b.grant(READ_BYTES).await,
            None => READ_BYTES,
        };
        self.buf.reserve(want);
        let n = (&mut self.stream)
            .take(want as u64)
            .read_buf(&mut self.buf)
            .await?;
        if let Some(b) = bucket {
            b.charge(n);
        }
        Ok(n)
    }
}

/// The request head.
pub fn request_head(ask: &Ask<'_>) -> Vec<u8> {
    let path = target(ask);
    let mut head = Vec::with_capacity(128 + path.len());
    let _ = write!(
        head,
        "GET {} HTTP/1.1\r\nHost: {}\r\nX-Session-Id: {}\r\nUser-Agent: vodkit-load/{} (session id {})\r\n",
        path,
        ask.host,
        ask.session_id,
        env!("CARGO_PKG_VERSION"),
        ask.session_id
    );
    if let Some(range) = ask.range {
        let _ = write!(head, "Range: {}\r\n", range.header_value());
    }
    head.extend_from_slice(b"\r\n");
    head
}

fn parse_head(buf: &[u8]) -> Result<Option<Head>, ExchangeError> {
    let mut headers = [httparse::EMPTY_HEADER; 48];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => {
            return Err(fail(
                FailureReason::Protocol,
                format!("bad response head: {e}"),
            ))
        }
    };
    let mut head = Head {
        len,
        status: resp.code.unwrap_or(0),
        http10: resp.version == Some(0),
        ..Head::default()
    };
    for h in resp.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = value.parse::<u64>().map_err(|_| {
                fail(
                    FailureReason::Protocol,
                    format!("bad Content-Length {value:?}"),
                )
            })?;
            head.content_length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding")
            && !value.eq_ignore_ascii_case("identity")
        {
            if !value.eq_ignore_ascii_case("chunked") {
                return Err(fail(
                    FailureReason::Protocol,
                    format!("Transfer-Encoding {value:?} is not supported (only chunked)"),
                ));
            }
            head.chunked = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            let v = value.to_ascii_lowercase();
            head.connection_close |= v.contains("close");
            head.keep_alive |= v.contains("keep-alive");
        } else if h.name.eq_ignore_ascii_case("content-range") {
            head.range_first = range_first(value);
        }
    }
    Ok(Some(head))
}

/// Classify a buffer that should start with a response head, as the client would for
/// `ask`: `Ok(None)` = head incomplete, `Ok(Some((body bytes to read or None for
/// until-close, close afterwards)))`, or the failure. Used by the fuzz target.
pub fn classify_head(buf: &[u8], ask: &Ask<'_>) -> Result<Option<(Option<u64>, bool)>, Failure> {
    let unwrap = |e: ExchangeError| match e {
        ExchangeError::Failed(f) => f,
        ExchangeError::Stale => Failure::new(FailureReason::Reset, "stale connection"),
    };
    match parse_head(buf).map_err(unwrap)? {
        None => Ok(None),
        Some(head) => body_plan(ask, &head).map(Some).map_err(unwrap),
    }
}

/// Where the decoding of a chunked body stands (RFC 9112 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunked {
    /// A chunk-size line comes next.
    Size,
    /// This many data bytes of the current chunk are still to come.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer fields after the last chunk, up to an empty line.
    Trailer,
    Done,
}

impl Chunked {
    /// Strip the framing at the front of `buf` as far as it goes; returns how many bytes at
    /// its front are body data (0: more input is needed, or the body is done).
    fn step(&mut self, buf: &mut Vec<u8>) -> Result<usize, ExchangeError> {
        let bad = |what: &str| fail(FailureReason::Protocol, format!("chunked body: {what}"));
        loop {
            match *self {
                Chunked::Size => match httparse::parse_chunk_size(buf) {
                    Ok(httparse::Status::Complete((n, size))) => {
                        buf.drain(..n);
                        *self = if size == 0 {
                            Chunked::Trailer
                        } else {
                            Chunked::Data(size)
                        };
                    }
                    Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
                        return Err(bad("chunk-size line longer than 64 KiB"))
                    }
                    Ok(httparse::Status::Partial) => return Ok(0),
                    Err(_) => return Err(bad("bad chunk-size line")),
                },
                Chunked::Data(left) => return Ok((buf.len() as u64).min(left) as usize),
                Chunked::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(0);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(bad("no CRLF after a chunk's data"));
                    }
                    buf.drain(..2);
                    *self = Chunked::Size;
                }
                Chunked::Trailer => match buf.windows(2).position(|w| w == b"\r\n") {
                    Some(0) => {
                        buf.drain(..2);
                        *self = Chunked::Done;
                    }
                    Some(i) => {
                        buf.drain(..i + 2);
                    }
                    None if buf.len() > MAX_HEAD_BYTES => {
                        return Err(bad("trailer longer than 64 KiB"))
                    }
                    None => return Ok(0),
                },
                Chunked::Done => return Ok(0),
            }
        }
    }

    /// `n` data bytes of the current chunk were taken.
    fn took(&mut self, n: usize) {
        if let Chunked::Data(left) = *self {
            let left = left.saturating_sub(n as u64);
            *self = if left == 0 {
                Chunked::DataEnd
            } else {
                Chunked::Data(left)
            };
        }
    }
}

fn io_failure(e: &io::Error, what: &str) -> ExchangeError {
    fail(FailureReason::Reset, format!("{what}: {e}"))
}

/// Run one exchange. `live_bytes` counts body bytes as they arrive; `sink`, when given,
/// sees every body byte in order.
pub async fn exchange(
    conn: &mut Conn,
    ask: &Ask<'_>,
    bucket: Option<&Bucket>,
    live_bytes: &AtomicU64,
    progress: &mut Progress,
    mut sink: Option<BodySink<'_, '_>>,
) -> Result<Done, ExchangeError> {
    if let Stream::H2(mux) = &mut conn.stream {
        let done = crate::h2::exchange(mux, ask, bucket, live_bytes, progress, sink).await;
        conn.exchanges = mux.exchanges();
        return done;
    }
    let reused = conn.exchanges > 0;
    let head_bytes = request_head(ask);
    let sent = async {
        conn.stream.write_all(&head_bytes).await?;
        conn.stream.flush().await
    };
    if let Err(e) = sent.await {
        return Err(if reused {
            ExchangeError::Stale
        } else {
            io_failure(&e, "sending request")
        });
    }
    // Response head.
    let head = loop {
        if !conn.buf.is_empty() {
            if let Some(head) = parse_head(&conn.buf)? {
                break head;
            }
            if conn.buf.len() > MAX_HEAD_BYTES {
                return Err(fail(
                    FailureReason::Protocol,
                    "response head larger than 64 KiB",
                ));
            }
        }
        let had = conn.buf.len();
        match conn.read_some(bucket).await {
            Ok(0) if had == 0 && reused => return Err(ExchangeError::Stale),
            Ok(0) if had == 0 => {
                return Err(fail(
                    FailureReason::Reset,
                    "connection closed before a response",
                ))
            }
            Ok(0) => {
                return Err(fail(
                    FailureReason::Protocol,
                    "connection closed inside the response head",
                ))
            }
            Ok(_) => {
                progress.first_byte.get_or_insert_with(Instant::now);
            }
            Err(_) if had == 0 && reused => return Err(ExchangeError::Stale),
            Err(e) => return Err(io_failure(&e, "reading response head")),
        }
    };
    progress.status = head.status;
    let (need, close_after) = body_plan(ask, &head)?;
    conn.buf.drain(..head.len);

    let key = ask
        .verify
        .then(|| content::path_key(ask.path.trim_start_matches('/')));
    let origin = ask.range.map(|r| r.first()).unwrap_or(0);
    let mut chunks = head.chunked.then_some(Chunked::Size);
    loop {
        let remaining = need.map(|n| n - progress.bytes).unwrap_or(u64::MAX);
        let available = match chunks.as_mut() {
            Some(c) => c.step(&mut conn.buf)?,
            None => conn.buf.len(),
        };
        let take = (available as u64).min(remaining) as usize;
        if take > 0 {
            let data = &conn.buf[..take];
            take_body(
                key,
                origin,
                ask,
                data,
                progress,
                live_bytes,
                sink.as_deref_mut(),
            )?;
            conn.buf.drain(..take);
            if let Some(c) = chunks.as_mut() {
                c.took(take);
                // More of the same chunk may already be buffered.
                if need != Some(progress.bytes) {
                    continue;
                }
            }
        }
        if need == Some(progress.bytes) || chunks == Some(Chunked::Done) {
            break;
        }
        match conn.read_some(bucket).await {
            Ok(0) if chunks.is_some() => {
                // An aborted upload ends the response without its last chunk.
                return Err(fail(
                    FailureReason::ShortBody,
                    format!(
                        "connection closed after {} body bytes, before the last chunk",
                        progress.bytes
                    ),
                ));
            }
            Ok(0) if need.is_none() => break,
            Ok(0) => {
                return Err(fail(
                    FailureReason::ShortBody,
                    format!(
                        "connection closed after {} of {} body bytes",
                        progress.bytes,
                        need.unwrap_or(0)
                    ),
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                return Err(fail(
                    FailureReason::ShortBody,
                    format!("connection reset after {} body bytes", progress.bytes),
                ))
            }
            Err(e) => return Err(io_failure(&e, "reading body")),
        }
    }
    conn.exchanges += 1;
    let server_keeps = if head.http10 {
        head.keep_alive
    } else {
        !head.connection_close
    };
    Ok(Done {
        reusable: server_keeps && !close_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vodkit_workload::model::ByteRange;

    fn ask(range: Option<ByteRange>) -> Ask<'static> {
        Ask {
            path: "/v/a.dat",
            range,
            host: "127.0.0.1:80",
            session_id: 3,
            verify: false,
            sign: None,
        }
    }

    #[test]
    fn request_head_carries_range_and_session() {
        let head = request_head(&ask(Some(ByteRange::OpenEnded { first: 10, read: 5 })));
        let text = String::from_utf8(head).unwrap();
        assert!(text.starts_with("GET /v/a.dat HTTP/1.1\r\n"));
        assert!(text.contains("Range: bytes=10-\r\n"));
        assert!(text.contains("X-Session-Id: 3\r\n"));
        // A user agent per session: combined logs key sessions by address + user agent.
        assert!(text.contains("User-Agent: vodkit-load/"), "{text}");
        assert!(text.contains("(session id 3)\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n"));
    }

    #[test]
    fn head_parsing_and_body_plans() {
        let raw = b"HTTP/1.1 206 Partial Content\r\nContent-Length: 100\r\nContent-Range: bytes 0-99/500\r\n\r\nxx";
        let head = parse_head(raw).unwrap().unwrap();
        assert_eq!(head.status, 206);
        assert_eq!(head.content_length, Some(100));
        assert_eq!(head.range_first, Some(0));
        let closed = ask(Some(ByteRange::Closed { first: 0, last: 99 }));
        assert_eq!(body_plan(&closed, &head).unwrap(), (Some(100), false));
        let too_small = ask(Some(ByteRange::Closed { first: 0, last: 49 }));
        assert!(matches!(
            body_plan(&too_small, &head),
            Err(ExchangeError::Failed(Failure {
                reason: FailureReason::OversizedBody,
                ..
            }))
        ));
        let open = ask(Some(ByteRange::OpenEnded { first: 0, read: 40 }));
        assert_eq!(body_plan(&open, &head).unwrap(), (Some(40), true));
        let whole = ask(None);
        assert!(matches!(
            body_plan(&whole, &head),
            Err(ExchangeError::Failed(Failure {
                reason: FailureReason::Status,
                ..
            }))
        ));
    }

    #[test]
    fn random_bytes_never_panic_the_head_parser() {
        // xorshift64: deterministic garbage, half of it behind a plausible status line.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || vodkit_testkit::xorshift(&mut x);
        let asks = [
            ask(None),
            ask(Some(ByteRange::Closed { first: 5, last: 9 })),
            ask(Some(ByteRange::OpenEnded { first: 0, read: 3 })),
        ];
        for i in 0..20_000 {
            let len = (next() % 200) as usize;
            let mut buf: Vec<u8> = if i % 2 == 0 {
                b"HTTP/1.1 206 X\r\nContent-Length: ".to_vec()
            } else {
                Vec::new()
            };
            buf.extend((0..len).map(|_| {
                let b = next() as u8;
                match b % 16 {
                    0..=2 => b'\n',
                    3 => b'\r',
                    _ => b,
                }
            }));
            for a in &asks {
                let _ = classify_head(&buf, a);
            }
        }
    }

    #[test]
    fn garbage_and_unknown_codings_are_protocol_errors_chunked_is_read() {
        assert!(matches!(
            parse_head(b"SSH-2.0-OpenSSH\r\n\r\n"),
            Err(ExchangeError::Failed(Failure {
                reason: FailureReason::Protocol,
                ..
            }))
        ));
        assert!(matches!(
            parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            Err(ExchangeError::Failed(Failure {
                reason: FailureReason::Protocol,
                ..
            }))
        ));
        let head = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(head.chunked);
        // Its end is marked: the connection stays open after it.
        assert_eq!(body_plan(&ask(None), &head).unwrap(), (None, false));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le")
            .unwrap()
            .is_none());
    }

    /// Decode `wire` fed in pieces of `step` bytes; the body, or the first error.
    fn dechunk(wire: &[u8], step: usize) -> Result<(Vec<u8>, bool), ExchangeError> {
        let mut state = Chunked::Size;
        let mut buf = Vec::new();
        let mut body = Vec::new();
        for piece in wire.chunks(step) {
            buf.extend_from_slice(piece);
            loop {
                let n = state.step(&mut buf)?;
                if n == 0 {
                    break;
                }
                body.extend(buf.drain(..n));
                state.took(n);
            }
        }
        Ok((body, state == Chunked::Done))
    }

    #[test]
    fn a_chunked_body_decodes_whatever_the_reads_and_ends_at_its_last_chunk() {
        let wire = b"5\r\nhello\r\n1;ext=1\r\n \r\nB\r\nlive world!\r\n0\r\nX-T: 1\r\n\r\n";
        for step in [1, 2, 3, 7, 100] {
            let (body, done) = dechunk(wire, step).unwrap();
            assert_eq!(body, b"hello live world!", "reads of {step}");
            assert!(done);
        }
        // Cut before the last chunk: not done (the exchange reports a short body).
        let (body, done) = dechunk(&wire[..20], 4).unwrap();
        assert!(!done);
        assert_eq!(body, b"hello ");
        assert!(dechunk(b"zz\r\n", 1).is_err());
        assert!(dechunk(b"2\r\nabXY", 1).is_err());
    }
}
