//! SIGINT/SIGTERM as a flag, so the daemon and `vodkit preload` can clean up (remove the
//! socket, write final metrics) instead of dying. Handlers, unlike ignored signals, are
//! reset by `exec`, so child programs still get the default behaviour.

use std::sync::atomic::{AtomicI32, Ordering};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
}

/// Install the handlers for SIGINT and SIGTERM.
pub fn catch_termination() {
    // SAFETY: `note` is async-signal-safe (one atomic store); sigaction is set up fully.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = note as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// The signal received since the last call, if any.
pub fn take() -> Option<libc::c_int> {
    match RECEIVED.swap(0, Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}
