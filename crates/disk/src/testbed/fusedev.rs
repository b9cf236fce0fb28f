//! The FUSE side of the emulated disk: a directory with the disk image (`disk.img`, backed
//! by a sparse file on the real disk) and a control file (`control`).
//!
//! Every read of the image is timed by the drive model with its byte offset as the address
//! and answered only when the modelled completion time has come. Several session threads
//! take requests off the kernel queue as soon as they arrive (so arrival times are exact),
//! but the model has one actuator: each request starts when the previous one finished, so
//! reads are still served one at a time, in the order the kernel sent them (or nearest
//! first under SPTF queueing). Writes go straight to
//! the backing file unless write timing is switched on. Reading `control` returns the
//! device counters as JSON; writing a line to it changes the fault plan or the model's
//! clock ([`ModelClock`]: `timing 8` serves every request in an eighth of its modelled
//! time, `timing 1` returns to real time).

use super::faults::{Control, FaultPlan, Faults};
use crate::model::{Drive, Queueing};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, KernelConfig,
    LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyWrite, Request, WriteFlags,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Name of the image inside the FUSE directory.
pub const IMAGE_NAME: &str = "disk.img";
/// Name of the control file inside the FUSE directory.
pub const CONTROL_NAME: &str = "control";

const ROOT: u64 = 1;
const IMAGE: u64 = 2;
const CONTROL: u64 = 3;
const TTL: Duration = Duration::from_secs(3600);
/// Largest request the kernel may send (reads and writes).
const MAX_IO: u32 = 1 << 20;
/// A request that arrives this soon after the emulator answered the last outstanding one
/// is taken to have been sent the host gap after that one completed in the model: the
/// client only waited for our (possibly late) reply, then spent the gap on its own work.
/// This keeps the emulator's own overhead and wake-up delays out of the modelled
/// timeline, so later replies catch up with it.
const TURNAROUND: Duration = Duration::from_millis(10);
/// How long before the actuator frees up the next request is chosen.
const DISPATCH_LEAD: Duration = Duration::from_micros(300);
/// Longest wait for a request the kernel sent before the oldest one queued.
const REORDER_HOLD: Duration = Duration::from_millis(10);
/// Threads taking requests off the FUSE queue.
pub const SESSION_THREADS: usize = 8;

/// Counters of the emulated device, readable through the control file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceCounters {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    /// Reads that needed a seek.
    pub seeks: u64,
    /// Modelled busy time, s.
    pub busy_secs: f64,
    /// Reads failed by fault injection.
    pub injected_errors: u64,
    pub faults: FaultPlan,
    /// How many times faster than real time the model's clock runs (`timing`).
    #[serde(default = "real_time")]
    pub timing_scale: f64,
    /// Requests the kernel sent that are queued or being served at the moment of reading.
    #[serde(default)]
    pub in_flight: u64,
}

fn real_time() -> f64 {
    1.0
}

/// The drive model's clock: model seconds as a function of real seconds since the device
/// started, running `scale` times faster than real time since the last change. Changing the
/// scale keeps the model time of that instant, so the clock never jumps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelClock {
    real0: f64,
    model0: f64,
    scale: f64,
}

impl Default for ModelClock {
    fn default() -> Self {
        ModelClock {
            real0: 0.0,
            model0: 0.0,
            scale: 1.0,
        }
    }
}

impl ModelClock {
    /// Model time at real time `real`.
    pub fn model(&self, real: f64) -> f64 {
        self.model0 + (real - self.real0) * self.scale
    }

    /// Real time at which the model reaches `model`.
    pub fn real(&self, model: f64) -> f64 {
        self.real0 + (model - self.model0) / self.scale
    }

    /// From real time `real` on, run `scale` times faster than real time.
    pub fn set_scale(&mut self, real: f64, scale: f64) {
        self.model0 = self.model(real);
        self.real0 = real;
        self.scale = scale;
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }
}

struct DeviceState {
    drive: Drive,
    faults: Faults,
    counters: DeviceCounters,
    /// Modelled completion time of the latest request, s.
    last_finish: f64,
    /// Requests waiting for the actuator.
    pending: Vec<Pending>,
    /// Requests queued or being served, not yet answered.
    in_flight: usize,
    /// When the latest answer went out.
    last_reply: Option<Instant>,
    /// Highest kernel request id dispatched so far.
    last_ticket: u64,
    /// Since when the oldest queued request has been waiting for a missing predecessor.
    gap_since: Option<Instant>,
    /// Dispatched requests not yet collected by their thread: (ticket, finish time).
    done: Vec<(u64, f64)>,
    /// Maps the model's times (arrivals, finishes) to real instants.
    clock: ModelClock,
}

/// A request waiting for the actuator.
struct Pending {
    /// Kernel request id: the order the kernel sent requests in.
    ticket: u64,
    offset: u64,
    len: u64,
    arrival: f64,
    is_read: bool,
}

/// The FUSE filesystem serving one emulated disk.
pub struct DiskFs {
    backing: File,
    size: u64,
    model_writes: bool,
    epoch: Instant,
    state: Arc<Mutex<DeviceState>>,
    /// Signalled whenever a request is dispatched.
    dispatched: Condvar,
    created: SystemTime,
    /// Modelled host turnaround, s (see [`modelled_arrival`]).
    host_gap: f64,
    /// The control file's text as each open handle first read it (see [`DiskFs::control_text`]).
    snapshots: Mutex<HashMap<u64, Arc<[u8]>>>,
    /// The next file handle handed out for the control file (0 is the image's).
    next_handle: AtomicU64,
}

impl DiskFs {
    pub fn new(
        backing: File,
        size: u64,
        drive: Drive,
        faults: FaultPlan,
        model_writes: bool,
    ) -> Self {
        let state = DeviceState {
            drive,
            faults: Faults::new(faults),
            counters: DeviceCounters::default(),
            last_finish: 0.0,
            pending: Vec::new(),
            in_flight: 0,
            last_reply: None,
            last_ticket: 0,
            gap_since: None,
            done: Vec::new(),
            clock: ModelClock::default(),
        };
        DiskFs {
            backing,
            size,
            model_writes,
            epoch: Instant::now(),
            state: Arc::new(Mutex::new(state)),
            dispatched: Condvar::new(),
            created: SystemTime::now(),
            host_gap: 0.0,
            snapshots: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
        }
    }

    /// Model the host's turnaround between a completed read and the next request it
    /// causes (see [`modelled_arrival`]); zero by default.
    pub fn with_host_gap(mut self, gap: Duration) -> Self {
        self.host_gap = gap.as_secs_f64();
        self
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, perm, size, nlink) = match ino {
            ROOT => (FileType::Directory, 0o755, 0, 2),
            IMAGE => (FileType::RegularFile, 0o600, self.size, 1),
            CONTROL => (FileType::RegularFile, 0o600, 0, 1),
            _ => return None,
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: self.created,
            mtime: self.created,
            ctime: self.created,
            crtime: self.created,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    /// The control file's text for a read at `offset` through handle `fh`: taken afresh
    /// at offset 0 and kept for the handle's later reads, so a reader that needs several
    /// reads (`read_to_string` starts with a small one) gets one consistent JSON document
    /// while the counters move, and a reader that goes back to the start sees new figures.
    fn control_text(&self, fh: u64, offset: u64) -> Arc<[u8]> {
        let mut snaps = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
        if offset > 0 {
            if let Some(body) = snaps.get(&fh) {
                return Arc::clone(body);
            }
        }
        let body: Arc<[u8]> = self.counters_json().into();
        if fh != 0 {
            snaps.insert(fh, Arc::clone(&body));
        }
        body
    }

    fn counters_json(&self) -> Vec<u8> {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut c = st.counters.clone();
        c.faults = st.faults.plan().clone();
        c.injected_errors = st.faults.injected;
        c.timing_scale = st.clock.scale();
        c.in_flight = st.in_flight as u64;
        let mut out = serde_json::to_vec_pretty(&c).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// Queue the request for the actuator and wait (in modelled time) until it is
    /// dispatched; returns when it completes and whether a read fails by injection.
    ///
    /// A request is dispatched only when the actuator is about to become free, choosing
    /// among everything queued by then: the oldest (kernel request id) under FIFO, the
    /// nearest under SPTF. Deciding late keeps the order the kernel sent, whichever
    /// session thread happened to pick a request up first.
    fn schedule(
        &self,
        ticket: u64,
        offset: u64,
        len: u64,
        is_read: bool,
        started: Instant,
    ) -> (Instant, bool) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let fail = if is_read {
            st.counters.reads += 1;
            st.counters.read_bytes += len;
            st.faults.should_fail(offset, len)
        } else {
            false
        };
        let prompt = st
            .last_reply
            .is_some_and(|at| started.saturating_duration_since(at) < TURNAROUND);
        let arrival = modelled_arrival(
            st.clock
                .model(started.duration_since(self.epoch).as_secs_f64()),
            st.last_finish,
            st.in_flight == 0 && prompt,
            self.host_gap,
        );
        st.in_flight += 1;
        st.pending.push(Pending {
            ticket,
            offset,
            len,
            arrival,
            is_read,
        });
        loop {
            if let Some(i) = st.done.iter().position(|(t, _)| *t == ticket) {
                let (_, finish) = st.done.swap_remove(i);
                return (self.real_instant(&st, finish), fail);
            }
            let free_at = self.real_instant(&st, st.last_finish);
            let now = Instant::now();
            if now + DISPATCH_LEAD >= free_at {
                if let Some(wait) = hold_for_missing(&mut st, now) {
                    st = self
                        .dispatched
                        .wait_timeout(st, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    continue;
                }
                dispatch(&mut st);
                self.dispatched.notify_all();
            } else {
                let wait = free_at - DISPATCH_LEAD - now;
                st = self
                    .dispatched
                    .wait_timeout(st, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }
}

/// When a request reaches the model. A request that follows promptly on the reply to the
/// last outstanding one (`follows_reply`) was caused by it: it arrives `host_gap` after
/// that request completed in the model, however late the emulator's reply really went out
/// — a real host turns a completion into its next request in tens of microseconds
/// (interrupt, wake-up, the program's own work), and during that gap the drive is idle
/// and reads ahead. Anything else arrives when it really did.
fn modelled_arrival(real: f64, last_finish: f64, follows_reply: bool, host_gap: f64) -> f64 {
    if follows_reply && real > last_finish {
        real.min(last_finish + host_gap)
    } else {
        real
    }
}

/// Under FIFO, if the oldest queued request is not the next one the kernel sent (kernel
/// ids go up by 2), that one is probably still on its way through a session thread that
/// has not run yet: wait for it a little (in real time; the model's clock is unaffected).
fn hold_for_missing(st: &mut DeviceState, now: Instant) -> Option<Duration> {
    if st.drive.options().queueing != Queueing::Fifo || st.last_ticket == 0 {
        return None;
    }
    let oldest = st.pending.iter().map(|p| p.ticket).min()?;
    if oldest <= st.last_ticket + 2 {
        st.gap_since = None;
        return None;
    }
    let since = *st.gap_since.get_or_insert(now);
    let deadline = since + REORDER_HOLD;
    if now >= deadline {
        st.gap_since = None;
        None
    } else {
        Some(deadline - now)
    }
}

/// Serve the next queued request on the model.
fn dispatch(st: &mut DeviceState) {
    if st.pending.is_empty() {
        return;
    }
    let head = st.drive.head();
    let pick = match st.drive.options().queueing {
        // Oldest first, except that a queued request continuing exactly at the head goes
        // first (requests split by the kernel can reach the session threads swapped).
        Queueing::Fifo => (0..st.pending.len())
            .find(|&i| st.pending[i].offset == head)
            .or_else(|| (0..st.pending.len()).min_by_key(|&i| st.pending[i].ticket)),
        Queueing::Sptf { .. } => (0..st.pending.len()).min_by(|&a, &b| {
            let cost = |p: &Pending| st.drive.service_time(head, p.offset, 0);
            cost(&st.pending[a])
                .total_cmp(&cost(&st.pending[b]))
                .then(st.pending[a].ticket.cmp(&st.pending[b].ticket))
        }),
    };
    let Some(i) = pick else { return };
    let p = st.pending.swap_remove(i);
    st.last_ticket = st.last_ticket.max(p.ticket);
    let svc = st.drive.access(p.offset, p.len, p.arrival);
    tracing::debug!(
        "{} {}+{} arrived {:.6}: start {:.6} seek {:.2}ms rot {:.2}ms xfer {:.2}ms cached {}",
        if p.is_read { "read" } else { "write" },
        p.offset,
        p.len,
        p.arrival,
        svc.start,
        svc.seek * 1e3,
        svc.rotation * 1e3,
        svc.transfer * 1e3,
        svc.cached_bytes
    );
    st.counters.busy_secs += svc.busy();
    if p.is_read && svc.seek > 0.0 {
        st.counters.seeks += 1;
    }
    st.last_finish = svc.finish;
    st.done.push((p.ticket, svc.finish));
}

thread_local! {
    static PROMOTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Give the calling session thread round-robin real-time priority (once per thread), so
/// replies go out on time on a busy machine; the threads sleep almost all the time, so
/// they cannot starve anything. Silently stays at normal priority where not permitted.
fn promote_thread() {
    PROMOTED.with(|done| {
        if !done.get() {
            done.set(true);
            let param = libc::sched_param { sched_priority: 1 };
            // SAFETY: changes only the calling thread's scheduling policy.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_RR, &param) };
        }
    });
}

impl DiskFs {
    /// The real instant at which the model's clock reads `model`.
    fn real_instant(&self, st: &DeviceState, model: f64) -> Instant {
        self.epoch + Duration::from_secs_f64(st.clock.real(model).max(0.0))
    }

    /// Apply control commands; `timing` rescales the model's clock from now on.
    fn apply_control(&self, st: &mut DeviceState, commands: Vec<Control>) {
        for c in commands {
            match c {
                Control::Timing { scale } => {
                    let now = self.epoch.elapsed().as_secs_f64();
                    st.clock.set_scale(now, scale);
                }
                other => st.faults.apply(other),
            }
        }
        // Requests waiting for the actuator re-read its free time on the new clock.
        self.dispatched.notify_all();
    }

    /// Record the kernel id of a request that bypasses the actuator, so the dispatcher
    /// does not wait for it as a missing read.
    fn note_unmodelled(&self, ticket: u64) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.last_ticket = st.last_ticket.max(ticket);
    }

    /// Note that a scheduled request has been answered.
    fn answered(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.in_flight = st.in_flight.saturating_sub(1);
        st.last_reply = Some(Instant::now());
    }
}

fn sleep_until(due: Instant) {
    let now = Instant::now();
    if due > now {
        std::thread::sleep(due - now);
    }
}

impl Filesystem for DiskFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(MAX_IO);
        let _ = config.set_max_write(MAX_IO);
        // Let the kernel keep several direct-I/O requests of one loop request in flight,
        // so the model sees them queued rather than trickling in one by one.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_ASYNC_DIO);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ino = match (u64::from(parent), name.to_str()) {
            (ROOT, Some(IMAGE_NAME)) => IMAGE,
            (ROOT, Some(CONTROL_NAME)) => CONTROL,
            _ => return reply.error(Errno::ENOENT),
        };
        let ttl = if ino == CONTROL { Duration::ZERO } else { TTL };
        match self.attr(ino) {
            Some(a) => reply.entry(&ttl, &a, fuser::Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(u64::from(ino)) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // The image has a fixed size; truncating the control file (as `echo cmd >` does)
        // is harmless. Other attribute changes are accepted and ignored.
        let ino = u64::from(ino);
        if ino == IMAGE && size.is_some_and(|s| s != self.size) {
            return reply.error(Errno::EPERM);
        }
        match self.attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // No page cache on the FUSE side: the loop device above has its own, and the
        // control file is dynamic.
        match u64::from(ino) {
            IMAGE => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            CONTROL => {
                let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO)
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if u64::from(ino) == CONTROL {
            self.snapshots
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&u64::from(fh));
        }
        reply.ok();
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match u64::from(ino) {
            CONTROL => {
                let body = self.control_text(u64::from(fh), offset);
                let start = (offset as usize).min(body.len());
                let end = (start + size as usize).min(body.len());
                reply.data(&body[start..end]);
            }
            IMAGE => {
                let started = Instant::now();
                promote_thread();
                let len = u64::from(size).min(self.size.saturating_sub(offset));
                let (due, fail) = self.schedule(req.unique().0, offset, len, true, started);
                let mut buf = vec![0u8; len as usize];
                let read = self.backing.read_exact_at(&mut buf, offset);
                sleep_until(due);
                match (fail, read) {
                    (false, Ok(())) => reply.data(&buf),
                    _ => reply.error(Errno::EIO),
                }
                self.answered();
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match u64::from(ino) {
            CONTROL => {
                let text = String::from_utf8_lossy(data);
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                // Decode every line before applying any, so a refused write changes nothing.
                let commands: Result<Vec<Control>, String> = text
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(str::parse)
                    .collect();
                match commands {
                    Ok(commands) => self.apply_control(&mut st, commands),
                    Err(e) => {
                        tracing::warn!("control: {e}");
                        return reply.error(Errno::EINVAL);
                    }
                }
                reply.written(data.len() as u32);
            }
            IMAGE => {
                if offset + data.len() as u64 > self.size {
                    return reply.error(Errno::ENOSPC);
                }
                let started = Instant::now();
                let result = self.backing.write_all_at(data, offset);
                {
                    let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                    st.counters.writes += 1;
                    st.counters.write_bytes += data.len() as u64;
                }
                if !self.model_writes {
                    self.note_unmodelled(req.unique().0);
                } else {
                    sleep_until(
                        self.schedule(req.unique().0, offset, data.len() as u64, false, started)
                            .0,
                    );
                }
                match result {
                    Ok(()) => reply.written(data.len() as u32),
                    Err(_) => reply.error(Errno::EIO),
                }
                if self.model_writes {
                    self.answered();
                }
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.backing.sync_data() {
            Ok(()) => reply.ok(),
            Err(_) => reply.error(Errno::EIO),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if u64::from(ino) != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (ROOT, FileType::Directory, "."),
            (ROOT, FileType::Directory, ".."),
            (IMAGE, FileType::RegularFile, IMAGE_NAME),
            (CONTROL, FileType::RegularFile, CONTROL_NAME),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

#[cfg(test)]
mod tests {
    use super::{modelled_arrival, ModelClock};

    #[test]
    fn a_scaled_clock_divides_service_times_and_never_jumps() {
        let mut c = ModelClock::default();
        assert_eq!(c.model(2.0), 2.0);
        // From real 2 s on, eight times faster: a 80 ms service ends 10 ms later in real time.
        c.set_scale(2.0, 8.0);
        assert_eq!(c.model(2.0), 2.0);
        assert!((c.real(2.08) - 2.01).abs() < 1e-12);
        assert!((c.model(3.0) - 10.0).abs() < 1e-12);
        // Back to real time at real 3 s: model time goes on from 10 s.
        c.set_scale(3.0, 1.0);
        assert!((c.model(3.5) - 10.5).abs() < 1e-12);
        assert!((c.real(11.0) - 4.0).abs() < 1e-12);
        assert_eq!(c.scale(), 1.0);
    }

    #[test]
    fn a_request_following_a_reply_arrives_one_host_gap_after_the_completion() {
        // Reply went out late (real clock 5.0 ms past the modelled completion at 1.0 s).
        assert_eq!(modelled_arrival(1.005, 1.0, true, 0.0), 1.0);
        assert!((modelled_arrival(1.005, 1.0, true, 100e-6) - 1.0001).abs() < 1e-12);
        // A host slower than the gap keeps its real arrival.
        assert_eq!(modelled_arrival(1.00005, 1.0, true, 100e-6), 1.00005);
    }

    #[test]
    fn unrelated_or_early_requests_keep_their_real_arrival() {
        assert_eq!(modelled_arrival(1.005, 1.0, false, 100e-6), 1.005);
        assert_eq!(modelled_arrival(0.9, 1.0, true, 100e-6), 0.9);
    }
}
