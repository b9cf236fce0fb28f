//! Ctrl-C (or SIGTERM) during `vodkit bench` and `vodkit demo`: the running point stops
//! early and is not judged, no further point or cell starts, and what the run brought up —
//! servers, the emulated disk, the memory cgroup — comes down through its owner's `Drop`,
//! so nothing is left mounted. A second signal quits at once.
//!
//! The stop token is process-wide so the CLI can hand it to the runner without threading
//! it through every call; only [`install`] (called by the CLI) ever cancels it, so tests
//! that build their own [`crate::experiment::BenchSettings`] pass their own token.

use std::sync::OnceLock;
use vodkit_load::CancellationToken;

static STOP: OnceLock<CancellationToken> = OnceLock::new();

/// The process-wide stop token: cancelled by the first SIGINT or SIGTERM once [`install`]
/// ran, never otherwise.
pub fn token() -> CancellationToken {
    STOP.get_or_init(CancellationToken::new).clone()
}

/// The reason an interrupted server's search ends with, in the report.
pub const INTERRUPTED: &str =
    "interrupted by a signal: the point under way was dropped (its run directory stays)";

/// `Err` once the run was interrupted, for the CLI's exit status after the report is out.
pub fn finished() -> Result<(), String> {
    if token().is_cancelled() {
        Err("interrupted: the report holds what was measured before the signal".into())
    } else {
        Ok(())
    }
}

/// Catch SIGINT and SIGTERM from now on: the first cancels [`token`], the second exits
/// with status 130.
pub fn install() -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("signal handler: {e}"))?;
    // Register before returning, so a Ctrl-C right after this call is caught.
    let (mut int, mut term) = {
        let _guard = rt.enter();
        let int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT handler: {e}"))?;
        let term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM handler: {e}"))?;
        (int, term)
    };
    let stop = token();
    std::thread::Builder::new()
        .name("bench-signals".into())
        .spawn(move || {
            rt.block_on(async move {
                loop {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                    if stop.is_cancelled() {
                        eprintln!("\nsecond signal: quitting now (an emulated disk may stay mounted: `vodkit hdd down --mount DIR`)");
                        std::process::exit(130);
                    }
                    eprintln!("\ninterrupted: stopping the point under way, then taking servers and the emulated disk down (signal again to quit at once)");
                    stop.cancel();
                }
            })
        })
        .map_err(|e| format!("signal thread: {e}"))?;
    Ok(())
}
