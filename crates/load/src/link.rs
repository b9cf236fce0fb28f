//! Client link emulation in user space: a per-session token bucket on reads (receive
//! bandwidth) and a fixed one-way delay added on the way out and on the way back.
//!
//! Reading slowly leaves data in the socket's receive buffer; once it is full, TCP flow
//! control stops the server, which then sees what a slow viewer looks like. What this
//! cannot reproduce: the congestion-window dynamics of a real long path (slow start over a
//! 100 ms RTT), packet loss, and queueing in a bottleneck router. [`crate::netns`] offers
//! the bandwidth half in the kernel instead (htb in network namespaces).

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Link parameters of one client class.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Link {
    /// Receive bandwidth in bits per second; 0 = unlimited.
    pub bandwidth_bps: u64,
    /// One-way delay added to each request and to each response.
    pub one_way_delay: Duration,
}

impl Link {
    pub fn is_unlimited(&self) -> bool {
        self.bandwidth_bps == 0 && self.one_way_delay.is_zero()
    }

    /// Socket receive buffer that keeps flow control tight for a limited link: about
    /// 100 ms worth of data, at least 16 KiB.
    pub fn recv_buffer_bytes(&self) -> Option<u32> {
        if self.bandwidth_bps == 0 {
            return None;
        }
        let bytes = self.bandwidth_bps / 8 / 10;
        Some(bytes.clamp(16 * 1024, 4 * 1024 * 1024) as u32)
    }
}

/// A receive-side token bucket shared by all connections of a session.
#[derive(Clone, Debug)]
pub struct Bucket {
    inner: Arc<Mutex<BucketState>>,
    bytes_per_s: f64,
    burst: f64,
    /// Smallest grant: 10 ms of the link, at least one 1,460-byte segment. Granting as soon
    /// as one byte is earned made every slow viewer wake up each millisecond to read ~100
    /// bytes — hundreds of thousands of `recv` calls a second that took the load generator
    /// to two full cores and starved the server under test.
    quantum: f64,
}

#[derive(Debug)]
struct BucketState {
    tokens: f64,
    refilled: Instant,
}

impl Bucket {
    /// A bucket for `bandwidth_bps` bits per second; `None` when unlimited.
    pub fn new(bandwidth_bps: u64) -> Option<Bucket> {
        if bandwidth_bps == 0 {
            return None;
        }
        let bytes_per_s = bandwidth_bps as f64 / 8.0;
        // 20 ms of burst, at least one 16 KiB read, so reads stay reasonably large.
        let burst = (bytes_per_s * 0.02).max(16.0 * 1024.0);
        let quantum = (bytes_per_s * 0.01).clamp(1460.0, burst);
        Some(Bucket {
            inner: Arc::new(Mutex::new(BucketState {
                tokens: burst,
                refilled: Instant::now(),
            })),
            bytes_per_s,
            burst,
            quantum,
        })
    }

    /// Wait until a quantum (10 ms of the link, or `want` if smaller) may be read; returns
    /// how many bytes may be read now (at most `want`).
    pub async fn grant(&self, want: usize) -> usize {
        let need = self.quantum.min(want.max(1) as f64);
        loop {
            let wait = {
                let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
                let now = Instant::now();
                let earned = now.duration_since(s.refilled).as_secs_f64() * self.bytes_per_s;
                s.tokens = (s.tokens + earned).min(self.burst);
                s.refilled = now;
                if s.tokens >= need {
                    return (s.tokens as usize).min(want).max(1);
                }
                crate::common::secs((need - s.tokens) / self.bytes_per_s)
            };
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
    }

    /// Charge `n` bytes that were read (the balance may go negative after a large read).
    pub fn charge(&self, n: usize) {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        s.tokens -= n as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn bucket_limits_average_rate() {
        // 800 kbit/s = 100,000 bytes/s; reading 300,000 bytes takes about 3 s minus burst.
        let bucket = Bucket::new(800_000).unwrap();
        let start = Instant::now();
        let mut got = 0usize;
        while got < 300_000 {
            let n = bucket.grant(8192).await;
            bucket.charge(n);
            got += n;
        }
        let secs = start.elapsed().as_secs_f64();
        let expected = (300_000.0 - bucket.burst) / 100_000.0;
        assert!(
            (secs - expected).abs() < 0.1,
            "took {secs} s, expected {expected}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn grants_come_in_quanta_not_bytes() {
        // 1 Mbit/s: 125,000 bytes/s, quantum 1,460 bytes (10 ms would be 1,250).
        let bucket = Bucket::new(1_000_000).unwrap();
        let mut grants = 0;
        let mut got = 0usize;
        // Drain the burst first, then count the grants for 250,000 bytes (2 s).
        let n = bucket.grant(64 * 1024).await;
        bucket.charge(n);
        while got < 250_000 {
            let n = bucket.grant(64 * 1024).await;
            assert!(n >= 1460, "a grant of {n} bytes");
            bucket.charge(n);
            got += n;
            grants += 1;
        }
        assert!(grants <= 250_000 / 1460 + 1, "{grants} grants");
        // A small want is granted as soon as it is earned.
        let n = bucket.grant(100).await;
        assert!((1..=100).contains(&n));
    }

    #[test]
    fn unlimited_link_has_no_bucket() {
        assert!(Bucket::new(0).is_none());
        assert!(Link::default().is_unlimited());
        assert_eq!(Link::default().recv_buffer_bytes(), None);
    }
}
