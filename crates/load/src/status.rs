//! The live status line on stderr: elapsed time, active sessions, MB/s and failures,
//! redrawn once a second when stderr is a terminal or `--progress` asks for it, never with
//! `--quiet`.

use crate::results::Sample;
use std::io::{IsTerminal, Write};

pub struct StatusLine {
    enabled: bool,
    tty: bool,
    drawn: bool,
}

impl StatusLine {
    /// `show`: always (`Some(true)`), never (`Some(false)`) or when stderr is a terminal.
    pub fn new(show: Option<bool>) -> StatusLine {
        let tty = std::io::stderr().is_terminal();
        StatusLine {
            enabled: show.unwrap_or(tty),
            tty,
            drawn: false,
        }
    }

    pub fn show(&mut self, elapsed: f64, s: &Sample, failed_sessions: u64) {
        if !self.enabled {
            return;
        }
        let line = format!(
            "[{:>6.0}s] active {:>6}  req/s {:>8.0}  MB/s {:>8.2}  failed sessions {}",
            elapsed, s.active_sessions, s.requests_per_s, s.mb_per_s, failed_sessions
        );
        let mut err = std::io::stderr().lock();
        // On a terminal the line is redrawn in place; otherwise one line per second.
        let _ = if self.tty {
            write!(err, "\r\x1b[2K{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
        self.drawn = true;
    }

    pub fn finish(&mut self) {
        if self.enabled && self.tty && self.drawn {
            let _ = writeln!(std::io::stderr());
        }
    }
}
