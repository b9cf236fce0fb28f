//! The publisher's HTTP/1.1 client: `PUT` and `DELETE` on one keep-alive connection per
//! stream (reopened when the origin closes it), responses framed by `Content-Length`,
//! every step bounded by a timeout. A `PUT` can also be sent with `Transfer-Encoding:
//! chunked` and its body fed over time ([`Client::begin_chunked`], [`Client::chunk`],
//! [`Client::end_chunked`]): a low-latency segment is uploaded while it is produced. Plain `http://` on loopback or the namespaces a test
//! builds; the origin's answer is parsed by `httparse`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// An `http://host:port` origin.
#[derive(Debug, Clone, PartialEq)]
pub struct Origin {
    pub addr: SocketAddr,
    /// `Host` header value.
    pub host: String,
}

impl Origin {
    /// Parse `http://HOST[:PORT][/…]` (the path is ignored).
    pub fn parse(url: &str) -> Result<Origin, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("target `{url}`: expected http://HOST[:PORT] (https is not supported by the source yet)")
        })?;
        let host = rest.split('/').next().unwrap_or("");
        if host.is_empty() {
            return Err(format!("target `{url}`: no host"));
        }
        let with_port = if host.contains(':') {
            host.to_string()
        } else {
            format!("{host}:80")
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| format!("target `{url}`: {e}"))?
            .next()
            .ok_or_else(|| format!("target `{url}`: no address"))?;
        Ok(Origin {
            addr,
            host: host.to_string(),
        })
    }
}

/// One connection to the origin, opened on demand.
pub struct Client {
    origin: Origin,
    token: Option<String>,
    timeout: Duration,
    conn: Option<TcpStream>,
}

/// Largest response head or error body read.
const MAX_RESPONSE: usize = 64 * 1024;

impl Client {
    pub fn new(origin: Origin, token: Option<String>, timeout: Duration) -> Client {
        Client {
            origin,
            token,
            timeout,
            conn: None,
        }
    }

    fn connect(&mut self) -> std::io::Result<&mut TcpStream> {
        if self.conn.is_none() {
            let s = TcpStream::connect_timeout(&self.origin.addr, self.timeout)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(self.timeout))?;
            s.set_write_timeout(Some(self.timeout))?;
            self.conn = Some(s);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no connection"))
    }

    /// Send `method path` with `body`; the status code, or an error (the connection is
    /// dropped and the next call reconnects).
    pub fn send(&mut self, method: &str, path: &str, body: &[u8]) -> Result<u16, String> {
        let r = self.exchange(method, path, body);
        if r.as_ref().map_or(true, |(_, close)| *close) {
            self.conn = None;
        }
        r.map(|(status, _)| status)
            .map_err(|e| format!("{method} {path}: {e}"))
    }

    /// The request head of `method path`, with `framing` (`Content-Length: N` or
    /// `Transfer-Encoding: chunked`).
    fn head(&self, method: &str, path: &str, framing: &str) -> String {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: vodkit-live/{}\r\n{framing}\r\n",
            self.origin.host,
            env!("CARGO_PKG_VERSION"),
        );
        if let Some(t) = &self.token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        head.push_str("\r\n");
        head
    }

    fn exchange(&mut self, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, bool)> {
        let mut out = self
            .head(method, path, &format!("Content-Length: {}", body.len()))
            .into_bytes();
        out.extend_from_slice(body);
        let s = self.connect()?;
        s.write_all(&out)?;
        read_response(s)
    }

    /// Start a `PUT` of `path` whose body follows in chunks ([`Client::chunk`]) and ends
    /// with [`Client::end_chunked`]; nothing else may be sent on this client meanwhile.
    pub fn begin_chunked(&mut self, path: &str) -> Result<(), String> {
        let head = self.head("PUT", path, "Transfer-Encoding: chunked");
        let r = self.connect().and_then(|s| s.write_all(head.as_bytes()));
        r.map_err(|e| {
            self.conn = None;
            format!("PUT {path}: {e}")
        })
    }

    /// Send `data` as one chunk of the body begun by [`Client::begin_chunked`]. `Ok(None)`
    /// when sent; `Ok(Some(status))` when the origin has already answered (it refused
    /// the upload, or read it no further): the request is over and the connection
    /// dropped.
    pub fn chunk(&mut self, path: &str, data: &[u8]) -> Result<Option<u16>, String> {
        if data.is_empty() {
            // A zero-length chunk would end the body.
            return Ok(None);
        }
        let r = self.send_chunk(data);
        match r {
            Ok(None) => Ok(None),
            Ok(Some(status)) => {
                self.conn = None;
                Ok(Some(status))
            }
            Err(e) => {
                self.conn = None;
                Err(format!("PUT {path}: {e}"))
            }
        }
    }

    fn send_chunk(&mut self, data: &[u8]) -> std::io::Result<Option<u16>> {
        let s = self
            .conn
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no upload in progress"))?;
        if let Some(status) = early_answer(s)? {
            return Ok(Some(status));
        }
        let mut out = format!("{:x}\r\n", data.len()).into_bytes();
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        s.write_all(&out)?;
        Ok(None)
    }

    /// End the body begun by [`Client::begin_chunked`] and read the answer.
    pub fn end_chunked(&mut self, path: &str) -> Result<u16, String> {
        let r = match self.conn.as_mut() {
            Some(s) => s.write_all(b"0\r\n\r\n").and_then(|()| read_response(s)),
            None => Err(std::io::Error::other("no upload in progress")),
        };
        if r.as_ref().map_or(true, |(_, close)| *close) {
            self.conn = None;
        }
        r.map(|(status, _)| status)
            .map_err(|e| format!("PUT {path}: {e}"))
    }

    /// Give up the request in progress: the connection is closed without ending the body,
    /// so the origin sees an incomplete upload and does not store it.
    pub fn abort(&mut self) {
        if let Some(s) = self.conn.take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// An answer the origin sent before the request ended (an upload it refused): its status,
/// or `None` when nothing has arrived. Does not block.
fn early_answer(s: &mut TcpStream) -> std::io::Result<Option<u16>> {
    s.set_nonblocking(true)?;
    let mut probe = [0u8; 1];
    let peeked = s.peek(&mut probe);
    s.set_nonblocking(false)?;
    match peeked {
        Ok(0) => Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "the origin closed the connection during the upload",
        )),
        Ok(_) => read_response(s).map(|(status, _)| Some(status)),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// Read one response; `(status, the origin will close)`.
fn read_response(s: &mut TcpStream) -> std::io::Result<(u16, bool)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(&buf) {
            Ok(httparse::Status::Complete(used)) => {
                let status = resp.code.unwrap_or(0);
                let mut len = 0usize;
                let mut close = resp.version == Some(0);
                for h in resp.headers.iter() {
                    let v = String::from_utf8_lossy(h.value);
                    if h.name.eq_ignore_ascii_case("content-length") {
                        len = v.trim().parse().unwrap_or(0);
                    } else if h.name.eq_ignore_ascii_case("connection") {
                        close = v.trim().eq_ignore_ascii_case("close");
                    }
                }
                if status == 100 {
                    buf.drain(..used);
                    continue;
                }
                if len > MAX_RESPONSE {
                    return Ok((status, true));
                }
                let mut have = buf.len() - used;
                while have < len {
                    let n = s.read(&mut chunk)?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    have += n;
                }
                return Ok((status, close || status == 408));
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_RESPONSE => {}
            Ok(httparse::Status::Partial) => {
                return Err(std::io::Error::other("response head too large"))
            }
            Err(e) => return Err(std::io::Error::other(format!("bad response: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        let o = Origin::parse("http://127.0.0.1:8080/x").unwrap();
        assert_eq!(o.addr.port(), 8080);
        assert_eq!(o.host, "127.0.0.1:8080");
        assert_eq!(Origin::parse("http://127.0.0.1").unwrap().addr.port(), 80);
        assert!(Origin::parse("https://127.0.0.1")
            .unwrap_err()
            .contains("https"));
        assert!(Origin::parse("http://").is_err());
        assert!(Origin::parse("ftp://x").is_err());
    }

    /// An origin on a loopback port that reads one request until `until` appears in it,
    /// answers `answer`, and hands back what it read.
    fn origin(
        until: &'static [u8],
        answer: &'static str,
    ) -> (Origin, std::thread::JoinHandle<Vec<u8>>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let o = Origin::parse(&format!("http://{}", l.local_addr().unwrap())).unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            while !got.windows(until.len()).any(|w| w == until) {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(answer.as_bytes()).unwrap();
            // Wait for the client to close, so an answer is never lost to a reset.
            let _ = s.read(&mut buf);
            got
        });
        (o, t)
    }

    #[test]
    fn a_chunked_put_sends_each_chunk_framed_and_ends_the_body() {
        let (o, t) = origin(
            b"0\r\n\r\n",
            "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
        );
        let mut c = Client::new(o, Some("tok".into()), Duration::from_secs(5));
        c.begin_chunked("/live/s/seg-1.m4s").unwrap();
        assert_eq!(c.chunk("/p", b"hello").unwrap(), None);
        assert_eq!(
            c.chunk("/p", b"").unwrap(),
            None,
            "an empty chunk is not sent"
        );
        assert_eq!(c.chunk("/p", &[b'x'; 20]).unwrap(), None);
        assert_eq!(c.end_chunked("/p").unwrap(), 201);
        drop(c);
        let got = String::from_utf8(t.join().unwrap()).unwrap();
        let (head, body) = got.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("PUT /live/s/seg-1.m4s HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nTransfer-Encoding: chunked"), "{head}");
        assert!(head.contains("\r\nAuthorization: Bearer tok"), "{head}");
        assert!(!head.contains("Content-Length"), "{head}");
        assert_eq!(
            body,
            format!("5\r\nhello\r\n14\r\n{}\r\n0\r\n\r\n", "x".repeat(20))
        );
    }

    #[test]
    fn an_upload_the_origin_refuses_early_ends_with_its_answer() {
        let (o, t) = origin(
            b"\r\n\r\n",
            "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        let mut c = Client::new(o, None, Duration::from_secs(5));
        c.begin_chunked("/live/s/seg-1.m4s").unwrap();
        let mut answer = None;
        for _ in 0..200 {
            answer = c.chunk("/p", b"data").unwrap();
            if answer.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(answer, Some(403));
        drop(c);
        t.join().unwrap();
    }
}
