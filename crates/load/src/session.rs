//! One viewing session as a task: requests in log order, each on its connection, paced
//! start-to-start, each bounded by its timeout; the first failure ends the session.

use crate::http::{Ask, Conn};
use crate::record::{RequestRecord, SessionEnd, SessionRecord};
use crate::viewer::{fetch, Viewer};
pub use crate::viewer::{Live, Plan, Shared};
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::time::Instant;

/// A connection slot of a session.
#[derive(Default)]
struct Slot {
    conn: Option<Conn>,
    busy: bool,
    /// The previous connection of this slot was closed by the server.
    server_closed: bool,
}

/// What an in-flight request hands back.
struct Finished {
    index: usize,
    conn: Option<Conn>,
    record: RequestRecord,
    server_closed: bool,
    opened: u32,
    reconnects: u32,
}

/// Run a session to its end and return what happened.
pub async fn run(plan: Plan, shared: Arc<Shared>) -> SessionRecord {
    shared.live.active_sessions.fetch_add(1, Ordering::Relaxed);
    let record = match (&plan.session.live, &plan.player) {
        (Some(view), _) => crate::player::live::watch(&plan, &shared, *view).await,
        (None, Some(cfg)) => crate::player::play::play(&plan, &shared, cfg).await,
        (None, None) => drive(&plan, &shared).await,
    };
    shared.live.active_sessions.fetch_sub(1, Ordering::Relaxed);
    if let Some(w) = &shared.watch {
        w.ended(&record);
    }
    match record.end {
        SessionEnd::Completed => shared
            .live
            .completed_sessions
            .fetch_add(1, Ordering::Relaxed),
        SessionEnd::Failed(_) => shared.live.failed_sessions.fetch_add(1, Ordering::Relaxed),
        SessionEnd::Refused | SessionEnd::Cancelled => 0,
    };
    record
}

async fn drive(plan: &Plan, shared: &Arc<Shared>) -> SessionRecord {
    let session = &plan.session;
    // The lease keeps the session's client address (its htb leaf) until the session ends.
    let (viewer, _lease) = Viewer::of(plan, shared);
    let slots_needed = session
        .requests
        .iter()
        .map(|r| r.conn as usize + 1)
        .max()
        .unwrap_or(1);
    let mut slots: Vec<Slot> = (0..slots_needed).map(|_| Slot::default()).collect();
    let mut records: Vec<Option<RequestRecord>> = vec![None; session.requests.len()];
    let mut inflight = FuturesUnordered::new();
    let mut prev_start: Option<Instant> = None;
    let mut end: Option<SessionEnd> = None;
    let (mut opened, mut reconnects) = (0u32, 0u32);
    let mut issued = 0usize;
    let mut issued_at: Vec<f64> = Vec::with_capacity(session.requests.len());

    let mut settle = |done: Finished, slots: &mut Vec<Slot>, end: &mut Option<SessionEnd>| {
        let slot = &mut slots[done.record.conn as usize];
        slot.busy = false;
        slot.conn = done.conn;
        slot.server_closed = done.server_closed;
        opened += done.opened;
        reconnects += done.reconnects;
        if let Some(f) = &done.record.failure {
            end.get_or_insert(SessionEnd::after(f));
        } else {
            shared
                .live
                .completed_requests
                .fetch_add(1, Ordering::Relaxed);
        }
        records[done.index] = Some(done.record);
    };

    'requests: for (i, req) in session.requests.iter().enumerate() {
        let c = req.conn as usize;
        let due = prev_start.map(|p| p + crate::config::secs(req.pacing_s));
        loop {
            if end.is_some() {
                break 'requests;
            }
            let ready = !slots[c].busy && due.is_none_or(|d| Instant::now() >= d);
            if ready {
                break;
            }
            if !slots[c].busy {
                if let Some(conn) = slots[c].conn.as_mut() {
                    conn.release_buffer();
                }
            }
            tokio::select! {
                Some(done) = inflight.next(), if !inflight.is_empty() => settle(done, &mut slots, &mut end),
                _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if !slots[c].busy => {},
                _ = shared.cancel.cancelled() => { end = Some(SessionEnd::Cancelled); }
            }
        }
        let start = Instant::now();
        prev_start = Some(start);
        issued_at.push(start.duration_since(shared.t0).as_secs_f64());
        if let (0, Some(w)) = (i, &shared.watch) {
            w.started(plan.index, issued_at[0]);
        }
        let slot = &mut slots[c];
        slot.busy = true;
        let conn = slot.conn.take();
        let reconnect = conn.is_none() && slot.server_closed;
        inflight.push(perform(
            i,
            conn,
            reconnect,
            plan,
            shared.clone(),
            viewer.clone(),
            start,
        ));
        issued += 1;
    }
    while end.is_none() && !inflight.is_empty() {
        tokio::select! {
            Some(done) = inflight.next() => settle(done, &mut slots, &mut end),
            _ = shared.cancel.cancelled() => { end = Some(SessionEnd::Cancelled); }
        }
    }
    drop(inflight);
    // Requests that were in flight when the session ended are kept as sent but unfinished.
    let requests = records
        .into_iter()
        .enumerate()
        .take(issued)
        .map(|(i, r)| {
            r.unwrap_or_else(|| {
                let req = &session.requests[i];
                RequestRecord {
                    index: i as u32,
                    conn: req.conn,
                    started: issued_at[i],
                    ttfb: None,
                    ttlb: None,
                    elapsed: 0.0,
                    bytes: 0,
                    status: 0,
                    failure: None,
                    media_s: req.media_s,
                    pacing_s: req.pacing_s,
                }
            })
        })
        .collect();
    SessionRecord {
        index: plan.index,
        session: session.clone(),
        arrival: plan.arrival,
        end: end.unwrap_or(SessionEnd::Completed),
        requests,
        skipped: (session.requests.len() - issued) as u32,
        connections_opened: opened,
        reconnects,
        player: None,
        prefilled: plan.prefilled,
        probe: plan.probe,
    }
}

/// Send one request of the session's log and turn the fetch into its record.
async fn perform(
    index: usize,
    conn: Option<Conn>,
    reconnect: bool,
    plan: &Plan,
    shared: Arc<Shared>,
    viewer: Viewer,
    start: Instant,
) -> Finished {
    let req = &plan.session.requests[index];
    let ask = Ask {
        path: &req.path,
        range: req.range,
        host: &shared.host,
        session_id: plan.session.id,
        verify: shared.verify,
        sign: shared.sign.as_ref(),
    };
    let attempt = |conn, reconnect| {
        fetch(
            conn,
            reconnect,
            &ask,
            req.timeout_s,
            plan,
            &shared,
            &viewer,
            start,
            None,
        )
    };
    let mut f = attempt(conn, reconnect).await;
    let (mut opened, mut reconnects) = (f.opened, f.reconnects);
    if shared.retry
        && !shared.cancel.is_cancelled()
        && f.failure
            .as_ref()
            .is_some_and(|x| worth_retrying(x.reason, f.progress.status))
    {
        // Once, on a fresh connection, within what is left of the request's timeout.
        shared.live.retried_requests.fetch_add(1, Ordering::Relaxed);
        f = attempt(None, false).await;
        opened += f.opened;
        reconnects += f.reconnects;
        if f.failure.is_none() {
            shared
                .live
                .recovered_requests
                .fetch_add(1, Ordering::Relaxed);
        }
    }
    let failure = f.failure.take();
    let started = start.duration_since(shared.t0).as_secs_f64();
    let record = f.record(
        index as u32,
        req.conn,
        started,
        failure,
        req.media_s,
        req.pacing_s,
    );
    Finished {
        index,
        conn: f.conn,
        record,
        server_closed: f.server_closed,
        opened,
        reconnects,
    }
}

/// Whether a request that failed for `reason` (with response status `status`, 0 when none
/// arrived) is one a player retries on a fresh connection: the connection failed (no
/// connection, a reset, a body cut short) or the server answered with a 5xx error. A `503`
/// refusal tells the viewer to go elsewhere and a timeout has no time left; neither is
/// retried, nor is a wrong answer.
pub fn worth_retrying(reason: crate::record::FailureReason, status: u16) -> bool {
    use crate::record::FailureReason as R;
    match reason {
        R::Connect | R::Reset | R::ShortBody => true,
        R::Status => (500..600).contains(&status) && status != 503,
        R::Timeout | R::Refused | R::OversizedBody | R::Mismatch | R::Protocol => false,
    }
}

#[cfg(test)]
mod tests {
    use super::worth_retrying;
    use crate::record::FailureReason as R;

    #[test]
    fn connection_failures_and_server_errors_are_retried_once_refusals_are_not() {
        assert!(worth_retrying(R::Connect, 0));
        assert!(worth_retrying(R::Reset, 0));
        assert!(worth_retrying(R::ShortBody, 200));
        assert!(worth_retrying(R::Status, 502));
        assert!(worth_retrying(R::Status, 500));
        assert!(!worth_retrying(R::Status, 503));
        assert!(!worth_retrying(R::Status, 404));
        assert!(!worth_retrying(R::Refused, 503));
        assert!(!worth_retrying(R::Timeout, 0));
        assert!(!worth_retrying(R::Mismatch, 200));
    }
}
