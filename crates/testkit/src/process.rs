//! A server under test as a child process: started from any command (`vodkit serve`, the
//! preload daemon, a peer wrapped in a shim), its stderr lines readable while it runs, a
//! SIGTERM stop that returns the exit code and stdout; and one-shot runs bounded by a time
//! limit, where a hang fails the test as a deadlock.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long [`Daemon::wait_for`] waits for each next stderr line.
const LINE_WAIT: Duration = Duration::from_secs(20);

/// A long-running child process with its stderr lines on a channel.
pub struct Daemon {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    /// The stderr lines read so far.
    pub seen: Vec<String>,
}

impl Daemon {
    /// Starts `cmd` with stdout and stderr piped.
    pub fn spawn(mut cmd: Command) -> Daemon {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?} starts: {e}"));
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Daemon {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first word after `prefix` on the first stderr line that has it (each next line
    /// is waited for up to 20 s; the test fails with the lines seen when none comes).
    pub fn wait_for(&mut self, prefix: &str) -> String {
        if let Some(l) = self.seen.iter().find_map(|l| word_after(l, prefix)) {
            return l;
        }
        loop {
            match self.lines.recv_timeout(LINE_WAIT) {
                Ok(line) => {
                    let hit = word_after(&line, prefix);
                    self.seen.push(line);
                    if let Some(rest) = hit {
                        return rest;
                    }
                }
                Err(_) => panic!("no `{prefix}` on stderr; saw {:?}", self.seen),
            }
        }
    }

    /// SIGTERM, then the exit code (-1 for a signal) and the rest of stdout.
    pub fn stop(mut self) -> (i32, String) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits");
        // SAFETY: signalling our own child process, which has not been reaped yet.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let status = self.child.wait().expect("child exits");
        let mut out = String::new();
        if let Some(mut s) = self.child.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        (status.code().unwrap_or(-1), out)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn word_after(line: &str, prefix: &str) -> Option<String> {
    line.find(prefix).map(|i| {
        line[i + prefix.len()..]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string()
    })
}

/// Runs `cmd` to the end, killing it (and failing the test) when it takes longer than
/// `limit`: a hang is a deadlock.
pub fn run_with_limit(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?} starts: {e}"));
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{cmd:?} did not finish within {limit:?} (deadlock?)\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` to the end; it must succeed (its stderr is shown when it does not).
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} starts: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_s_stderr_is_read_while_it_runs() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo 'listening on 127.0.0.1:9' >&2; echo out; exec sleep 30",
        ]);
        let mut d = Daemon::spawn(cmd);
        assert_eq!(d.wait_for("listening on "), "127.0.0.1:9");
        let (code, _) = d.stop();
        assert_eq!(code, -1, "ended by the signal");
    }

    #[test]
    fn a_bounded_run_returns_its_output() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo hi"]);
        let out = run_with_limit(cmd, Duration::from_secs(20));
        assert_eq!(out.stdout, b"hi\n");
    }
}
