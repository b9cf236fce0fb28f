//! The health agent HAProxy's `agent-check` asks (`vodkit cluster agent`): on every check
//! it fetches one real segment from its origin and judges it as a viewer would (seed 004's
//! first rule: server-side metrics are not enough, probe like a client). It answers one
//! line: `up ready` when the segment's first byte came within the time-to-first-byte
//! limit and the whole segment arrived at least `min_speed` times faster than it plays;
//! `drain` (no new viewers, existing ones finish) when the origin answered but too
//! slowly; `down #why` when it could not deliver the segment at all.
//!
//! [`judge`] is the pure rule, [`fetch`] the timed GET, [`serve`] the agent's loop.

use super::Origin;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// What a probe fetches and how it judges the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeSpec {
    pub origin: Origin,
    /// A real segment (or any file) of the origin's library, e.g. `/t0/v800/seg-1.m4s`.
    pub path: String,
    /// Fetch only the first this many bytes (`Range: bytes=0-N-1`): a segment of a title
    /// stored as one file. None: the whole file.
    pub range_bytes: Option<u64>,
    /// The seconds of media the segment holds.
    pub segment_s: f64,
    /// The longest acceptable time to the first byte, in seconds.
    pub max_ttfb_s: f64,
    /// How many times faster than it plays the segment must arrive (1: just in time).
    pub min_speed: f64,
}

impl ProbeSpec {
    /// The longest a fetch may take before it is judged too slow without waiting longer.
    pub fn deadline(&self) -> Duration {
        Duration::from_secs_f64((self.max_ttfb_s + self.segment_s / self.min_speed).max(0.1))
    }
}

/// One timed fetch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fetch {
    pub status: u16,
    /// Seconds from connecting to the first byte of the answer.
    pub ttfb_s: f64,
    /// Seconds from connecting to the last byte of the body.
    pub total_s: f64,
    pub body_bytes: u64,
}

/// Why a fetch did not complete.
#[derive(Debug, Clone, PartialEq)]
pub enum FetchError {
    /// The deadline passed while the origin was still answering (or had not yet answered).
    Slow(String),
    /// No connection, a broken answer, a short body.
    Failed(String),
}

/// The agent's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Up,
    Drain(String),
    Down(String),
}

impl Verdict {
    /// The line HAProxy reads: `up ready`, `drain`, `down #why`.
    pub fn line(&self) -> String {
        match self {
            Verdict::Up => "up ready\n".into(),
            Verdict::Drain(_) => "drain\n".into(),
            Verdict::Down(why) => format!("down #{}\n", why.replace(['\n', '\r'], " ")),
        }
    }
}

/// Judge a fetch of `spec.path` like a viewer.
pub fn judge(spec: &ProbeSpec, fetch: &Result<Fetch, FetchError>) -> Verdict {
    let f = match fetch {
        Err(FetchError::Slow(why)) => return Verdict::Drain(why.clone()),
        Err(FetchError::Failed(why)) => return Verdict::Down(why.clone()),
        Ok(f) => f,
    };
    if !(200..300).contains(&f.status) {
        return Verdict::Down(format!("{} answered {}", spec.path, f.status));
    }
    if f.ttfb_s > spec.max_ttfb_s {
        return Verdict::Drain(format!(
            "first byte after {:.3} s (limit {:.3} s)",
            f.ttfb_s, spec.max_ttfb_s
        ));
    }
    let speed = spec.segment_s / f.total_s.max(1e-6);
    if speed < spec.min_speed {
        return Verdict::Drain(format!(
            "{:.1} s of media in {:.3} s: {speed:.2}x real time (limit {:.2}x)",
            spec.segment_s, f.total_s, spec.min_speed
        ));
    }
    Verdict::Up
}

/// GET `spec.path` from the origin on a fresh connection, timing the first byte and the
/// whole body, giving up at [`ProbeSpec::deadline`].
pub fn fetch(spec: &ProbeSpec) -> Result<Fetch, FetchError> {
    let failed =
        |what: &str, e: std::io::Error| FetchError::Failed(format!("{what} {}: {e}", spec.origin));
    let start = Instant::now();
    let deadline = start + spec.deadline();
    let addr = spec
        .origin
        .to_string()
        .to_socket_addrs()
        .map_err(|e| failed("resolving", e))?
        .next()
        .ok_or_else(|| FetchError::Failed(format!("{} has no address", spec.origin)))?;
    let mut s = TcpStream::connect_timeout(&addr, spec.deadline())
        .map_err(|e| failed("connecting to", e))?;
    let _ = s.set_nodelay(true);
    let range = spec
        .range_bytes
        .map(|n| format!("Range: bytes=0-{}\r\n", n.max(1) - 1))
        .unwrap_or_default();
    // One write: the request leaves in one segment.
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: vodkit-agent\r\n{range}Connection: close\r\n\r\n",
        spec.path, spec.origin.host
    );
    s.write_all(request.as_bytes())
        .map_err(|e| failed("writing to", e))?;
    let slow = |got: u64| {
        FetchError::Slow(format!(
            "{} bytes of {} after {:.3} s",
            got,
            spec.path,
            start.elapsed().as_secs_f64()
        ))
    };
    let mut buf = vec![0u8; 64 << 10];
    let mut head: Vec<u8> = Vec::new();
    let mut ttfb = None;
    let mut body = 0u64;
    let mut length: Option<u64> = None;
    let mut status = 0u16;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(slow(body));
        }
        let _ = s.set_read_timeout(Some(left));
        let n = match s.read(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(slow(body))
            }
            Err(e) => return Err(failed("reading from", e)),
        };
        if ttfb.is_none() && n > 0 {
            ttfb = Some(start.elapsed().as_secs_f64());
        }
        if n == 0 {
            break;
        }
        if length.is_none() && status == 0 {
            head.extend_from_slice(&buf[..n]);
            let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                if head.len() > 64 << 10 {
                    return Err(FetchError::Failed("response head too long".into()));
                }
                continue;
            };
            let text = String::from_utf8_lossy(&head[..end]).into_owned();
            status =
                crate::status_of(text.as_bytes()).map_err(|e| FetchError::Failed(e.to_string()))?;
            length = text.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            });
            body = (head.len() - end - 4) as u64;
        } else {
            body += n as u64;
        }
        if length.is_some_and(|l| body >= l) {
            break;
        }
    }
    if status == 0 {
        return Err(FetchError::Failed(format!(
            "{} closed the connection without an answer",
            spec.origin
        )));
    }
    if let Some(l) = length.filter(|&l| body < l) {
        return Err(FetchError::Failed(format!(
            "{} ended after {body} of {l} bytes",
            spec.path
        )));
    }
    Ok(Fetch {
        status,
        ttfb_s: ttfb.unwrap_or_default(),
        total_s: start.elapsed().as_secs_f64(),
        body_bytes: body,
    })
}

/// Answer every connection on `listener` with a fresh probe's verdict, forever (until the
/// process ends). Each verdict that is not `up` is also reported through `log`.
pub fn serve(
    listener: TcpListener,
    spec: &ProbeSpec,
    log: &dyn Fn(&Verdict),
) -> std::io::Result<()> {
    for conn in listener.incoming() {
        let mut conn = match conn {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let verdict = judge(spec, &fetch(spec));
        if verdict != Verdict::Up {
            log(&verdict);
        }
        let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
        let _ = conn.write_all(verdict.line().as_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn spec(port: u16) -> ProbeSpec {
        ProbeSpec {
            origin: format!("127.0.0.1:{port}").parse().unwrap(),
            path: "/t0/v800/seg-1.m4s".into(),
            range_bytes: None,
            segment_s: 4.0,
            max_ttfb_s: 0.5,
            min_speed: 2.0,
        }
    }

    fn fetched(ttfb_s: f64, total_s: f64) -> Result<Fetch, FetchError> {
        Ok(Fetch {
            status: 200,
            ttfb_s,
            total_s,
            body_bytes: 1000,
        })
    }

    #[test]
    fn a_viewer_like_rule_decides() {
        let s = spec(1);
        assert_eq!(judge(&s, &fetched(0.01, 0.2)), Verdict::Up);
        // Just fast enough: 4 s of media in 2 s is 2x.
        assert_eq!(judge(&s, &fetched(0.01, 2.0)), Verdict::Up);
        let slow = judge(&s, &fetched(0.01, 2.5));
        assert!(
            matches!(&slow, Verdict::Drain(w) if w.contains("1.60x")),
            "{slow:?}"
        );
        assert_eq!(slow.line(), "drain\n");
        let late = judge(&s, &fetched(0.7, 0.8));
        assert!(
            matches!(&late, Verdict::Drain(w) if w.contains("first byte")),
            "{late:?}"
        );
        let missing = judge(
            &s,
            &Ok(Fetch {
                status: 404,
                ..fetched(0.0, 0.0).unwrap()
            }),
        );
        assert_eq!(missing.line(), "down #/t0/v800/seg-1.m4s answered 404\n");
        assert!(matches!(
            judge(&s, &Err(FetchError::Slow("x".into()))),
            Verdict::Drain(_)
        ));
        assert_eq!(
            judge(&s, &Err(FetchError::Failed("a\nb".into()))).line(),
            "down #a b\n"
        );
        assert_eq!(Verdict::Up.line(), "up ready\n");
    }

    /// An origin answering `reply` to every request, after `delay`.
    fn origin(reply: &'static [u8], delay: Duration) -> u16 {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                let _ = c.read(&mut [0u8; 1024]);
                std::thread::sleep(delay);
                let _ = c.write_all(reply);
            }
        });
        port
    }

    #[test]
    fn fetches_are_timed_and_checked_to_the_last_byte() {
        let ok = origin(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            Duration::ZERO,
        );
        let f = fetch(&spec(ok)).unwrap();
        assert_eq!((f.status, f.body_bytes), (200, 5));
        assert!(f.ttfb_s <= f.total_s);
        assert_eq!(judge(&spec(ok), &Ok(f)), Verdict::Up);

        let short = origin(
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello",
            Duration::ZERO,
        );
        let e = fetch(&spec(short)).unwrap_err();
        assert!(
            matches!(&e, FetchError::Failed(w) if w.contains("5 of 9")),
            "{e:?}"
        );

        let mut s = spec(origin(b"HTTP/1.1 200 OK\r\n\r\n", Duration::from_secs(3)));
        s.segment_s = 0.2;
        s.max_ttfb_s = 0.1;
        assert!(matches!(fetch(&s), Err(FetchError::Slow(_))));

        let closed = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        assert!(matches!(fetch(&spec(port)), Err(FetchError::Failed(_))));
    }

    #[test]
    fn the_agent_answers_each_connection_with_a_verdict() {
        let ok = origin(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            Duration::ZERO,
        );
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let s = spec(ok);
        std::thread::spawn(move || serve(l, &s, &|_| {}));
        for _ in 0..2 {
            let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
            let mut line = String::new();
            c.read_to_string(&mut line).unwrap();
            assert_eq!(line, "up ready\n");
        }
    }
}
