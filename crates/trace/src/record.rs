//! One parsed log line: what a request asked for, when the server saw it and what it sent.

/// Whether a request named its last byte (chunk, a closed range) or let the server send
/// until the client closed the connection (open-ended).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum RequestKind {
    Chunk,
    Open,
}

/// A request as the readers hand it over; strings borrow from the line buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct LogRequest<'a> {
    /// Completion time (seconds; any epoch, the same for the whole log).
    pub done_s: f64,
    /// Seconds the server spent on the request (`done_s - service_s` = when it arrived).
    pub service_s: f64,
    /// Session key: borrowed from the line, or built from several fields (client address
    /// and user agent for `combined` logs).
    pub session: std::borrow::Cow<'a, str>,
    pub file: &'a str,
    pub offset: u64,
    /// Bytes of the file the request covers: the range length for chunk requests, the
    /// body bytes actually sent for open-ended ones.
    pub extent: u64,
    pub kind: RequestKind,
    pub bytes_sent: u64,
    /// Connection id when the log has one.
    pub conn: Option<u64>,
}

impl LogRequest<'_> {
    pub fn recv_s(&self) -> f64 {
        self.done_s - self.service_s
    }

    pub fn end(&self) -> u64 {
        self.offset + self.extent
    }

    /// The same request with its session key and file name borrowed from elsewhere.
    pub fn with_names<'b>(&self, session: &'b str, file: &'b str) -> LogRequest<'b> {
        LogRequest {
            done_s: self.done_s,
            service_s: self.service_s,
            session: std::borrow::Cow::Borrowed(session),
            file,
            offset: self.offset,
            extent: self.extent,
            kind: self.kind,
            bytes_sent: self.bytes_sent,
            conn: self.conn,
        }
    }
}

/// What takes the requests of a log, in log order, on the calling thread. Besides each
/// request it is shown, [`LOOK_AHEAD`] requests earlier, the request it will take then, to
/// fetch what that one will touch into the cache.
pub trait Requests {
    fn take(&mut self, r: &LogRequest<'_>);

    /// `r` will be taken [`LOOK_AHEAD`] requests from now (within one block of the log).
    fn ahead(&mut self, _r: &LogRequest<'_>) {}
}

/// How far ahead [`Requests::ahead`] shows a request.
pub const LOOK_AHEAD: usize = 8;
