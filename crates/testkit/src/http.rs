//! A small blocking HTTP/1.1 client for tests: requests written as given, responses read
//! byte-exactly (bodies framed by `Content-Length`), so a test sees exactly what a server
//! sent, including what a full client library would hide.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

/// One keep-alive connection.
pub struct Client {
    pub reader: BufReader<TcpStream>,
}

impl Client {
    /// Connects, with a 20 s read timeout.
    pub fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("read timeout");
        Client {
            reader: BufReader::new(s),
        }
    }

    /// Writes `raw` as is.
    pub fn send(&mut self, raw: &str) {
        self.reader
            .get_mut()
            .write_all(raw.as_bytes())
            .expect("send");
    }

    /// GET (or another method) with extra header lines.
    pub fn request(&mut self, method: &str, path: &str, extra: &[(&str, &str)]) -> Resp {
        let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
        for (k, v) in extra {
            raw.push_str(&format!("{k}: {v}\r\n"));
        }
        raw.push_str("\r\n");
        self.send(&raw);
        self.read_response(method == "HEAD")
    }

    pub fn get(&mut self, path: &str, extra: &[(&str, &str)]) -> Resp {
        self.request("GET", path, extra)
    }

    /// Reads one response; bodies are framed by Content-Length only (as the server sends).
    pub fn read_response(&mut self, head_only: bool) -> Resp {
        self.try_read_response(head_only).expect("response")
    }

    pub fn try_read_response(&mut self, head_only: bool) -> std::io::Result<Resp> {
        let mut status_line = String::new();
        if self.reader.read_line(&mut status_line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line)?;
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':').expect("header line");
            assert!(
                headers
                    .insert(k.to_ascii_lowercase(), v.trim().to_string())
                    .is_none(),
                "dup {k}"
            );
        }
        let len: usize = headers
            .get("content-length")
            .map(|v: &String| v.parse().expect("a numeric Content-Length"))
            .unwrap_or(0);
        let mut body = vec![0u8; if head_only { 0 } else { len }];
        self.reader.read_exact(&mut body)?;
        Ok(Resp {
            status,
            headers,
            body,
        })
    }

    /// True when the server has closed the connection (EOF within the timeout).
    pub fn is_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.reader.read(&mut b), Ok(0) | Err(_))
    }
}

/// `GET path` from `addr` (`127.0.0.1:PORT`) on a connection closed after it: the status
/// and the body as text (bytes that are not UTF-8 replaced).
pub fn get(addr: &str, path: &str) -> (u16, String) {
    get_with(addr, path, &[])
}

/// [`get`] with `extra` header lines.
pub fn get_with(addr: &str, path: &str, extra: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut raw = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n");
    for (k, v) in extra {
        raw.push_str(&format!("{k}: {v}\r\n"));
    }
    raw.push_str("Connection: close\r\n\r\n");
    s.write_all(raw.as_bytes()).expect("send");
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).expect("response");
    let text = String::from_utf8_lossy(&bytes);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_string())
}
