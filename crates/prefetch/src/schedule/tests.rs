//! The read orders on a simulated drive and clock.

use super::*;

/// Bytes of the simulated surface.
const SPAN: f64 = 1e9;
/// Transfer rate of the simulated drive, bytes/s.
const RATE: f64 = 100e6;

/// Seconds the simulated drive takes for `r` with the head at `from`: a seek growing with
/// the square root of the distance plus half a revolution, none when `r` starts where
/// the head is; then the transfer.
fn drive(from: Option<Place>, r: &Read) -> f64 {
    let (Some(Place::Physical(h)), Place::Physical(p)) = (from, r.place) else {
        return 0.018 + r.len as f64 / RATE;
    };
    let positioning = if h == p {
        0.0
    } else {
        0.002 + 0.010 * (h.abs_diff(p) as f64 / SPAN).sqrt() + 0.004
    };
    positioning + r.len as f64 / RATE
}

fn read(place: u64, len: u64, deadline_s: f64) -> Read {
    Read {
        place: Place::Physical(place),
        len,
        deadline_s,
        queued_s: 0.0,
    }
}

/// One read as served: its index in the input, start and finish times, round, place.
#[derive(Debug, Clone, Copy)]
struct Served {
    index: usize,
    finish: f64,
    round: u64,
    place: u64,
    urgent: bool,
}

/// Serves `arrivals` (arrival second, read) in `order` on the simulated drive; the clock
/// is the simulation's.
fn simulate(order: IoOrder, arrivals: &[(f64, Read)]) -> Vec<Served> {
    let mut by_time: Vec<usize> = (0..arrivals.len()).collect();
    by_time.sort_by(|&a, &b| arrivals[a].0.total_cmp(&arrivals[b].0).then(a.cmp(&b)));
    let mut q: Queue<usize> = Queue::new(order);
    let (mut t, mut next, mut out) = (0.0f64, 0usize, Vec::new());
    while out.len() < arrivals.len() {
        while next < by_time.len() && arrivals[by_time[next]].0 <= t {
            let i = by_time[next];
            let read = Read {
                queued_s: arrivals[i].0,
                ..arrivals[i].1
            };
            q.push(read, i);
            next += 1;
        }
        if q.is_empty() {
            t = arrivals[by_time[next]].0;
            continue;
        }
        let head = q.head();
        let p = q.pick(t, drive).unwrap();
        t += drive(head, &p.read);
        let Place::Physical(place) = p.read.place else {
            unreachable!()
        };
        out.push(Served {
            index: p.item,
            finish: t,
            round: p.round,
            place,
            urgent: p.urgent,
        });
    }
    out
}

/// Whether each read finished by its deadline, by input index.
fn met(arrivals: &[(f64, Read)], served: &[Served]) -> Vec<bool> {
    let mut m = vec![false; arrivals.len()];
    for s in served {
        m[s.index] = s.finish <= arrivals[s.index].1.deadline_s + 1e-12;
    }
    m
}

/// A deterministic generator (64-bit LCG, high bits) for the simulated workloads.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `streams` viewers, each reading `len` bytes every `period` seconds from its own place
/// on the surface (moving on by `len` each time), with `slack` seconds between a read's
/// arrival and its deadline (varying per stream), for `reads` reads each.
fn steady(
    seed: u64,
    streams: usize,
    reads: usize,
    len: u64,
    period: f64,
    slack: f64,
) -> Vec<(f64, Read)> {
    let mut g = Lcg(seed);
    let mut out = Vec::new();
    for _ in 0..streams {
        let start = (g.next() * (SPAN - 1e8)) as u64;
        let phase = g.next() * period;
        let my_slack = slack * (0.5 + g.next());
        for k in 0..reads {
            let at = phase + k as f64 * period;
            out.push((at, read(start + k as u64 * len, len, at + my_slack)));
        }
    }
    out
}

#[test]
fn orders_parse_and_print_their_names() {
    for o in [IoOrder::Fifo, IoOrder::Deadline, IoOrder::Sweep] {
        assert_eq!(o.name().parse::<IoOrder>(), Ok(o));
        assert_eq!(o.to_string(), o.name());
    }
    assert_eq!(IoOrder::default(), IoOrder::Sweep);
    let e = "scan".parse::<IoOrder>().unwrap_err();
    assert!(
        e.contains("`scan`") && e.contains("fifo, deadline or sweep"),
        "{e}"
    );
}

#[test]
fn fifo_serves_in_arrival_order() {
    let mut q = Queue::new(IoOrder::Fifo);
    for (i, d) in [9.0, 1.0, 5.0].into_iter().enumerate() {
        q.push(read(1000 - i as u64 * 100, 10, d), i);
    }
    let got: Vec<usize> = std::iter::from_fn(|| q.pick(0.0, drive).map(|p| p.item)).collect();
    assert_eq!(got, [0, 1, 2]);
}

#[test]
fn deadline_order_picks_the_earliest_deadline() {
    let mut q = Queue::new(IoOrder::Deadline);
    for (i, d) in [5.0, 2.0, f64::INFINITY, 9.0, 2.0, 0.5]
        .into_iter()
        .enumerate()
    {
        q.push(read(i as u64 * 1000, 10, d), i);
    }
    let first = q.pick(0.0, drive).unwrap();
    assert_eq!((first.item, first.read.deadline_s), (5, 0.5));
    // A later request needs a queued read sooner: its deadline moves up.
    q.refresh_deadlines(|&i, d| if i == 3 { 1.0 } else { d });
    let got: Vec<usize> = std::iter::from_fn(|| q.pick(0.0, drive).map(|p| p.item)).collect();
    // Equal deadlines keep their arrival order; no deadline goes last.
    assert_eq!(got, [3, 1, 4, 0, 2]);
}

#[test]
fn a_sweep_never_moves_the_head_backwards_within_a_round() {
    for seed in 1..=20 {
        let mut g = Lcg(seed);
        // Reads at random places arriving while the drive works, with loose deadlines.
        let arrivals: Vec<(f64, Read)> = (0..200)
            .map(|i| {
                let at = i as f64 * 0.004 + g.next() * 0.01;
                (at, read((g.next() * SPAN) as u64, 256 << 10, at + 60.0))
            })
            .collect();
        let served = simulate(IoOrder::Sweep, &arrivals);
        assert_eq!(served.len(), arrivals.len());
        let mut rounds = 0;
        for w in served.chunk_by(|a, b| a.round == b.round) {
            rounds += 1;
            let up = w.windows(2).all(|p| p[0].place <= p[1].place);
            let down = w.windows(2).all(|p| p[0].place >= p[1].place);
            assert!(
                up || down,
                "seed {seed}: round {} moves both ways: {w:?}",
                w[0].round
            );
        }
        assert!(
            served.iter().all(|s| !s.urgent),
            "seed {seed}: no deadline was tight"
        );
        assert!(rounds > 1, "seed {seed}: the head turned back");
        // And the sweep's seeks are shorter: it finishes the same reads sooner than FIFO.
        let fifo = simulate(IoOrder::Fifo, &arrivals);
        let end = |s: &[Served]| s.iter().map(|x| x.finish).fold(0.0, f64::max);
        assert!(end(&served) < end(&fifo), "seed {seed}");
    }
}

#[test]
fn a_read_the_sweep_would_make_late_goes_first_and_starts_a_round() {
    let mut q = Queue::new(IoOrder::Sweep);
    // The head sweeps up from 0 through ten reads; one read far below is due soon.
    q.push(read(0, 4096, f64::INFINITY), 0);
    assert_eq!(q.pick(0.0, drive).unwrap().item, 0);
    for i in 1..=10 {
        q.push(read(i * 50_000_000, 1 << 20, 100.0), i as usize);
    }
    q.push(read(0, 1 << 20, 0.05), 99);
    let head = q.head();
    let first = q.pick(0.0, drive).unwrap();
    // Going now meets its deadline; behind ten reads it would not.
    assert!(drive(head, &first.read) <= 0.05);
    assert_eq!((first.item, first.urgent, first.round), (99, true, 1));
    let rest: Vec<(usize, u64)> =
        std::iter::from_fn(|| q.pick(0.1, drive).map(|p| (p.item, p.round))).collect();
    assert_eq!(
        rest.iter().map(|r| r.0).collect::<Vec<_>>(),
        (1..=10).collect::<Vec<_>>()
    );
    assert!(rest.iter().all(|r| r.1 == 1), "{rest:?}");
    // A read that is late whatever happens does not break the sweep.
    let mut q = Queue::new(IoOrder::Sweep);
    q.push(read(500, 10, f64::INFINITY), 0);
    q.pick(1.0, drive);
    q.push(read(900, 10, f64::INFINITY), 1);
    q.push(read(100, 10, 0.5), 2);
    let p = q.pick(1.0, drive).unwrap();
    assert_eq!((p.item, p.urgent), (1, false));
}

/// Whether `order` met every deadline FIFO met; returns (FIFO's met, missed) counts.
fn dominates_fifo(order: IoOrder, arrivals: &[(f64, Read)], case: &str) -> (usize, usize) {
    let fifo = met(arrivals, &simulate(IoOrder::Fifo, arrivals));
    let other = met(arrivals, &simulate(order, arrivals));
    for (i, (&f, &o)) in fifo.iter().zip(&other).enumerate() {
        assert!(
            !f || o,
            "{case}: {order} misses read {i} ({:?}) that fifo met",
            arrivals[i]
        );
    }
    let n = fifo.iter().filter(|&&m| m).count();
    (n, fifo.len() - n)
}

#[test]
fn no_stream_misses_a_deadline_that_fifo_would_have_met() {
    // 1 MiB reads every half second per stream; FIFO's seeks saturate the simulated drive
    // at about 23 streams, the sweep's shorter ones carry more.
    let (mut fifo_met, mut fifo_missed) = (0, 0);
    for seed in 1..=6 {
        for (streams, slack) in [(22, 0.15), (24, 0.3), (24, 0.6), (26, 0.6), (28, 0.6)] {
            let a = steady(seed * 7 + streams as u64, streams, 30, 1 << 20, 0.5, slack);
            let case = format!("seed {seed}, {streams} streams, slack {slack} s");
            let (m, x) = dominates_fifo(IoOrder::Sweep, &a, &case);
            fifo_met += m;
            fifo_missed += x;
            if streams == 22 {
                dominates_fifo(IoOrder::Deadline, &a, &case);
            }
        }
    }
    // The cases are not trivial: FIFO meets many deadlines and misses many.
    assert!(
        fifo_met > 10_000 && fifo_missed > 2_000,
        "{fifo_met} met, {fifo_missed} missed"
    );
}

#[test]
fn past_the_drive_s_capacity_the_sweep_meets_the_most_deadlines() {
    // Overloaded (32 streams): no order can meet every deadline, and a read FIFO happens
    // to meet may be late in another order; the sweep still meets the most by far, and
    // earliest-deadline-first no more than FIFO.
    for seed in 1..=4 {
        let a = steady(seed, 32, 30, 1 << 20, 0.5, 0.3);
        let count = |o| met(&a, &simulate(o, &a)).iter().filter(|&&m| m).count();
        let (fifo, deadline, sweep) = (
            count(IoOrder::Fifo),
            count(IoOrder::Deadline),
            count(IoOrder::Sweep),
        );
        assert!(
            sweep > 2 * fifo.max(deadline),
            "seed {seed}: {fifo} {deadline} {sweep}"
        );
        assert!(sweep < a.len(), "seed {seed}: the drive is overloaded");
    }
}

#[test]
fn deadlines_follow_what_a_client_was_sent_and_its_bit_rate() {
    let mut d = Deadlines::new(100);
    let rate = 1e6; // bytes/s
                    // In order: client key, file, bytes sent before and after, the time, and when the
                    // stream is due.
    let steps = [
        // A new stream holds nothing: due now.
        (Some(7), 1, 0, 2_000_000, 10.0, 10.0),
        // 2 MB sent at 10 s: it runs dry at 12 s.
        (Some(7), 1, 2_000_000, 4_000_000, 10.5, 12.0),
        // Another client of the same file is another stream.
        (Some(8), 1, 2_000_000, 3_000_000, 10.5, 10.5),
        // Asked again at 13 s for bytes from 3 MB: it ran dry at 13 s, due now...
        (Some(7), 1, 3_000_000, 4_000_000, 13.5, 13.5),
        // ...and plays on from there: 1 MB further is due a second later.
        (Some(7), 1, 4_000_000, 5_000_000, 13.6, 14.5),
        // Without a client key, streams are told apart by position.
        (None, 2, 0, 1_000_000, 0.0, 0.0),
        (None, 2, 1_000_000, 2_000_000, 0.2, 1.0),
        (None, 2, 900_000_000, 901_000_000, 0.3, 0.3),
    ];
    for (i, (client, file, from, to, now, due)) in steps.into_iter().enumerate() {
        assert_eq!(
            d.request(client, file, from, to, rate, now),
            due,
            "step {i}"
        );
    }
    assert_eq!(d.len(), 4);
    // Idle streams are forgotten.
    d.request(None, 3, 0, 1, rate, 1000.0);
    assert_eq!(d.len(), 1);
}

#[test]
fn deadlines_keep_at_most_their_limit_of_streams() {
    let mut d = Deadlines::new(10);
    for i in 0..100u64 {
        d.request(Some(i), 1, 0, 10, 1e6, i as f64 * 0.01);
        assert!(d.len() <= 10, "{}", d.len());
    }
}

#[test]
fn a_read_waits_at_most_the_longest_wait_before_it_goes_first() {
    for order in [IoOrder::Sweep, IoOrder::Deadline] {
        let mut q = Queue::new(order);
        q.push(read(500, 10, f64::INFINITY), 0);
        q.pick(0.0, drive);
        // Behind the head, and with no deadline: the order would leave it for last.
        q.push(read(100, 10, f64::INFINITY), 1);
        let mut served = Vec::new();
        for k in 0..20u64 {
            let now = k as f64 * 0.5;
            q.push(
                Read {
                    queued_s: now,
                    ..read(600 + k * 10, 10, now + 1.0)
                },
                10 + k as usize,
            );
            let p = q.pick(now, drive).unwrap();
            served.push((now, p.item, p.urgent));
        }
        let (at, _, urgent) = *served
            .iter()
            .find(|s| s.1 == 1)
            .unwrap_or_else(|| panic!("{order}: the old read was never served: {served:?}"));
        assert!(
            at > MAX_WAIT_S && at <= MAX_WAIT_S + 0.5,
            "{order}: served at {at}"
        );
        assert_eq!(urgent, order == IoOrder::Sweep, "{order}");
    }
}
