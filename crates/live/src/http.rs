//! The publisher's HTTP/1.1 client: `PUT` and `DELETE` on one keep-alive connection per
//! stream (reopened when the origin closes it), responses framed by `Content-Length`,
//! every step bounded by a timeout. Plain `http://` on loopback or the namespaces a test
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

    fn exchange(&mut self, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, bool)> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: vodkit-live/{}\r\nContent-Length: {}\r\n",
            self.origin.host,
            env!("CARGO_PKG_VERSION"),
            body.len()
        );
        if let Some(t) = &self.token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(body);
        let s = self.connect()?;
        s.write_all(&out)?;
        read_response(s)
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
}
