//! When the HTTP requests of a capture were served: the denominator of figures counted in
//! windows of the run (the syscall counters, `collect::syscalls`).
//!
//! Counts taken while a counter is attached, scaled by time to the whole run, are biased when
//! the counter slows the target: a handler making 16,000 one-byte reads per request runs slower
//! while every syscall takes the kernel's slow path, so fewer reads happen per second inside the
//! windows than outside, and the time-scaled estimate falls short. What the windows need is the
//! share of the requests' work done inside them: [`RequestSpread::share_within`].
//!
//! - A request shorter than [`SPREAD_LONG_NS`] weighs 1 at its response (an unanswered one at its
//!   request line): whether it straddles an edge changes little.
//! - A longer one is kept whole (up to [`SPREAD_MAX_LONG`] of them) and weighs inside the windows
//!   the share of its work done there, with the windows taken to slow its progress by a factor
//!   `k`: `(t_in/k) / (t_in/k + t_out)` for `t_in` of its time inside and `t_out` outside.
//!   `k` is fitted over the kept requests ([`RequestSpread::slow_down`]).
//! - Without `k` (requests longer than the windows, or too few), a kept request weighs 1 at its
//!   response. That is unbiased too: requests slow down with their calls, so at a window's
//!   opening the requests in flight complete at the rate at which their calls are made, slow or
//!   not, and at its closing the calls of those still in flight are counted without their
//!   completion, which makes up for the calls made before the opening. But only on average, and
//!   only once a window is long enough for its requests to settle: each edge counts its requests
//!   in flight whole on one side: in the simulation of the tests below (requests of 100 ms,
//!   windows of 250 ms, 12 s) it strays up to 8%, where weighing the long requests' work strays
//!   1.4%.
//!
//! Spreading a request evenly over its time (`k` = 1) would be biased: a request that straddles
//! an edge runs slower inside the window, so its time there overstates its calls there (the
//! calls per request read 6-11% low on requests of 16,461 reads, 25-30 ms served, 100 ms by the
//! client).

/// Width of one bucket of the spread, ns (1 ms): a window edge inside a bucket takes the
/// bucket's weight pro rata.
pub const SPREAD_BUCKET_NS: u64 = 1_000_000;

/// Most buckets kept (10 minutes, 2.4 MB); weight later than that is left out of both the
/// windows' share and the total.
pub const SPREAD_MAX_BUCKETS: usize = 600_000;

/// Least request weight a [`RequestSpread::share_within`] is given for: below it the share
/// says more about where a few requests fell than about the run.
pub const SPREAD_MIN_REQUESTS: f64 = 20.0;

/// Requests answered this long after their request line or longer are kept whole, ns (1 ms):
/// shorter ones straddle a window edge for too little of their work to matter.
pub const SPREAD_LONG_NS: u64 = 1_000_000;

/// Most long requests kept whole (16 bytes each: 16 MB); later ones weigh 1 at their response.
pub const SPREAD_MAX_LONG: usize = 1_000_000;

/// Least kept requests partly inside the windows, and wholly outside them, for a [`SlowDown`].
pub const SPREAD_MIN_LONG: usize = 10;

/// HTTP requests' weight per [`SPREAD_BUCKET_NS`] bucket of `CLOCK_MONOTONIC`, from the first
/// request line seen, and the long requests' spans.
#[derive(Debug, Default, Clone)]
pub struct RequestSpread {
    origin_ns: Option<u64>,
    buckets: Vec<f32>,
    /// Answered requests of at least [`SPREAD_LONG_NS`], `(request line, response)` in ns of
    /// `CLOCK_MONOTONIC`: not in `buckets`.
    long: Vec<(u64, u64)>,
}

/// How much the windows slowed the long requests' progress ([`RequestSpread::slow_down`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowDown {
    /// The factor, > 0 (1.6: a request took 1.6 times as long inside the windows).
    pub factor: f64,
    /// Kept requests partly or wholly inside the windows.
    pub inside: usize,
    /// Kept requests wholly outside the windows.
    pub outside: usize,
}

impl RequestSpread {
    /// A request line received at `ts_ns`: weight 1 at that time, until
    /// [`RequestSpread::answered`] places it.
    pub fn request(&mut self, ts_ns: u64) {
        self.add(ts_ns, 1.0);
    }

    /// The response to the request whose line came at `start_ns` was sent at `end_ns`: its
    /// weight moves from `start_ns` to `end_ns`, or to the long requests kept whole.
    pub fn answered(&mut self, start_ns: u64, end_ns: u64) {
        if self.add(start_ns, -1.0).is_none() {
            return;
        }
        let end_ns = end_ns.max(start_ns);
        if end_ns - start_ns >= SPREAD_LONG_NS && self.long.len() < SPREAD_MAX_LONG {
            self.long.push((start_ns, end_ns));
            return;
        }
        // Past the kept buckets the weight is left out of both the windows' share and the total.
        let _ = self.add(end_ns, 1.0);
    }

    /// Adds `w` to the bucket of `ts_ns`; `None` (nothing added) before the first request line
    /// or past [`SPREAD_MAX_BUCKETS`].
    fn add(&mut self, ts_ns: u64, w: f32) -> Option<()> {
        let origin = match self.origin_ns {
            Some(o) => o,
            None if w > 0.0 => *self.origin_ns.insert(ts_ns - ts_ns % SPREAD_BUCKET_NS),
            None => return None,
        };
        let i = (ts_ns.checked_sub(origin)? / SPREAD_BUCKET_NS) as usize;
        if i >= SPREAD_MAX_BUCKETS {
            return None;
        }
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, 0.0);
        }
        self.buckets[i] += w;
        Some(())
    }

    /// All the requests' weight (the requests seen in the first [`SPREAD_MAX_BUCKETS`]).
    pub fn total(&self) -> f64 {
        self.buckets.iter().map(|&w| f64::from(w)).sum::<f64>() + self.long.len() as f64
    }

    /// The windows' slow-down of the long requests for `spans` (`[start, end)` in ns, sorted,
    /// not overlapping): a request's work, `t_in/k + t_out`, is taken to be alike wherever it
    /// falls, so `t_out = c - t_in/k` over the requests, fitted by instrumental variables
    /// (the time a request of the mean duration starting at the same moment would spend inside
    /// the windows: it follows where a request started, not how much work it had; least
    /// squares on `t_in` itself read `k` 2% high in the tests' simulation, longer requests
    /// spending more time inside). Requests of mixed lengths fit `k` less well, which moves
    /// only the weight of those that straddle an edge. `None` with fewer than
    /// [`SPREAD_MIN_LONG`] long requests partly inside the windows or wholly outside them, or
    /// a fit without a positive slope.
    pub fn slow_down(&self, spans: &[(u64, u64)]) -> Option<SlowDown> {
        // (instrument, t_in, t_out) per request; u = 1/k = -cov(z, t_out) / cov(z, t_in).
        let n = self.long.len() as f64;
        let mean_ns = (self.long.iter().map(|&(s, e)| (e - s) as f64).sum::<f64>() / n.max(1.0)) as u64;
        let (mut inside, mut outside) = (0usize, 0usize);
        let rows: Vec<(f64, f64, f64)> = self
            .long
            .iter()
            .map(|&(start, end)| {
                let t_in = overlap(spans, start, end);
                if t_in > 0 {
                    inside += 1;
                } else {
                    outside += 1;
                }
                (overlap(spans, start, start + mean_ns) as f64, t_in as f64, (end - start - t_in) as f64)
            })
            .collect();
        if inside < SPREAD_MIN_LONG || outside < SPREAD_MIN_LONG {
            return None;
        }
        let (z, x, y) = rows.iter().fold((0.0, 0.0, 0.0), |a, r| (a.0 + r.0 / n, a.1 + r.1 / n, a.2 + r.2 / n));
        let (zy, zx) = rows.iter().fold((0.0, 0.0), |a, r| (a.0 + (r.0 - z) * (r.2 - y), a.1 + (r.0 - z) * (r.1 - x)));
        if zx <= 0.0 {
            return None;
        }
        let u = -zy / zx;
        (u > 0.0).then(|| SlowDown { factor: 1.0 / u, inside, outside })
    }

    /// The share (0..=1) of the requests' weight inside `spans` (`[start, end)` in ns of
    /// `CLOCK_MONOTONIC`, sorted, not overlapping), the long requests weighed by their work
    /// inside ([`RequestSpread::slow_down`]), else at their responses; `None` when the total
    /// weighs less than [`SPREAD_MIN_REQUESTS`].
    pub fn share_within(&self, spans: &[(u64, u64)]) -> Option<f64> {
        self.shares_within(spans).map(|shares| shares.iter().sum::<f64>().clamp(0.0, 1.0))
    }

    /// [`RequestSpread::share_within`] span by span: one share per span of `spans`, their sum
    /// the whole share. A long request's weight inside the windows is split between the spans
    /// it overlaps by its time in each. `None` as for [`RequestSpread::share_within`].
    pub fn shares_within(&self, spans: &[(u64, u64)]) -> Option<Vec<f64>> {
        let total = self.total();
        let origin = self.origin_ns?;
        if total < SPREAD_MIN_REQUESTS {
            return None;
        }
        let mut inside = vec![0.0; spans.len()];
        for (i, &(start, end)) in spans.iter().enumerate() {
            let (start, end) = (start.max(origin), end);
            if end <= start || self.buckets.is_empty() {
                continue;
            }
            let (first, last) = ((start - origin) / SPREAD_BUCKET_NS, (end - 1 - origin) / SPREAD_BUCKET_NS);
            for b in first..=last.min(self.buckets.len() as u64 - 1) {
                let (b_start, b_end) = (origin + b * SPREAD_BUCKET_NS, origin + (b + 1) * SPREAD_BUCKET_NS);
                let overlap = end.min(b_end) - start.max(b_start);
                inside[i] += f64::from(self.buckets[b as usize]) * overlap as f64 / SPREAD_BUCKET_NS as f64;
            }
        }
        match self.slow_down(spans) {
            Some(SlowDown { factor: k, .. }) => {
                for &(start, end) in &self.long {
                    let t_in = overlap(spans, start, end) as f64;
                    if t_in == 0.0 {
                        continue;
                    }
                    let t_out = (end - start) as f64 - t_in;
                    let weight = (t_in / k) / (t_in / k + t_out);
                    for (i, ns) in overlaps(spans, start, end) {
                        inside[i] += weight * ns as f64 / t_in;
                    }
                }
            }
            None => {
                for &(_, end) in &self.long {
                    if let Some((i, _)) = overlaps(spans, end, end + 1).next() {
                        inside[i] += 1.0;
                    }
                }
            }
        }
        Some(inside.into_iter().map(|w| w / total).collect())
    }
}

/// The spans of `spans` (sorted by start, not overlapping) that `[start, end)` overlaps: their
/// indices and the ns of the overlap.
fn overlaps(spans: &[(u64, u64)], start: u64, end: u64) -> impl Iterator<Item = (usize, u64)> + '_ {
    let first = spans.partition_point(|&(_, e)| e <= start);
    spans[first..]
        .iter()
        .enumerate()
        .take_while(move |(_, &(s, _))| s < end)
        .map(move |(i, &(s, e))| (first + i, end.min(e).saturating_sub(start.max(s))))
        .filter(|&(_, ns)| ns > 0)
}

/// ns of `[start, end)` inside `spans` (sorted by start, not overlapping).
fn overlap(spans: &[(u64, u64)], start: u64, end: u64) -> u64 {
    overlaps(spans, start, end).map(|(_, ns)| ns).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn an_answered_request_counts_where_it_completed() {
        let mut s = RequestSpread::default();
        // 40 requests of 0.5 ms (short: placed at their responses), one every 100 ms from
        // t = 1 s: responses at 1.0005, 1.1005, ... 4.9005 s.
        for i in 0..40 {
            let start = 1000 * MS + i * 100 * MS;
            s.request(start);
            s.answered(start, start + MS / 2);
        }
        assert!((s.total() - 40.0).abs() < 1e-3, "{}", s.total());
        // The window [1.15 s, 1.45 s) holds the responses at 1.2005, 1.3005 and 1.4005 s.
        assert_eq!(s.share_within(&[(1150 * MS, 1450 * MS)]), Some(3.0 / 40.0));
        // A window edge inside a bucket takes the bucket pro rata: half of the 1 ms bucket that
        // holds the response at 1.2005 s.
        let share = s.share_within(&[(1200 * MS + MS / 2, 1201 * MS)]).expect("40 requests");
        assert!((share - 0.5 / 40.0).abs() < 1e-6, "{share}");
    }

    #[test]
    fn long_requests_without_a_slow_down_count_at_their_responses() {
        let mut s = RequestSpread::default();
        // 40 requests of 100 ms back to back from t = 1 s: responses at 1.1, 1.2, ... 5.0 s.
        for i in 0..40 {
            let start = 1000 * MS + i * 100 * MS;
            s.request(start);
            s.answered(start, start + 100 * MS);
        }
        // One window: four requests reach into it, fewer than SPREAD_MIN_LONG, so no
        // slow-down; it holds the responses at 1.2, 1.3 and 1.4 s.
        let spans = [(1150 * MS, 1450 * MS)];
        assert_eq!(s.slow_down(&spans), None);
        assert_eq!(s.share_within(&spans), Some(3.0 / 40.0));
    }

    #[test]
    fn a_long_request_weighs_its_work_inside_the_windows() {
        let mut s = RequestSpread::default();
        // Windows [k s, k s + 500 ms) for k = 1..=20. Wholly inside them: 20 requests of
        // 40 ms; wholly outside: 20 of 20 ms. The windows slow the requests 2 times.
        let spans: Vec<(u64, u64)> = (1..=20).map(|k| (k * 1000 * MS, k * 1000 * MS + 500 * MS)).collect();
        for k in 1..=20 {
            let t = k * 1000 * MS;
            s.request(t + 100 * MS);
            s.answered(t + 100 * MS, t + 140 * MS);
            s.request(t + 600 * MS);
            s.answered(t + 600 * MS, t + 620 * MS);
        }
        assert_eq!(s.slow_down(&spans), Some(SlowDown { factor: 2.0, inside: 20, outside: 20 }));
        // One more request, from 1.48 s to 1.51 s: 20 ms inside (10 ms of work at the
        // slow-down) and 10 ms outside (10 ms of work), so half of it is inside.
        s.request(1480 * MS);
        s.answered(1480 * MS, 1510 * MS);
        let share = s.share_within(&spans).expect("41 requests");
        assert!((share - 20.5 / 41.0).abs() < 1e-9, "{share}");
        // Window by window: the first holds its 40 ms request and the half of the straddling
        // one, every other its own request.
        let shares = s.shares_within(&spans).expect("41 requests");
        assert_eq!(shares.len(), 20);
        assert!((shares[0] - 1.5 / 41.0).abs() < 1e-9, "{shares:?}");
        assert!(shares[1..].iter().all(|&w| (w - 1.0 / 41.0).abs() < 1e-9), "{shares:?}");
    }

    /// A small deterministic generator for the simulations (64-bit LCG, Knuth's MMIX
    /// constants): uniform in `[0, 1)`.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> f64 {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A closed loop of `conns` connections for `secs` s from t = 1 s, each request `calls`
    /// calls of 10 µs (25 µs inside the windows, the tracepoints' slow path) times a factor
    /// of 0.8-1.2 drawn per request; windows the first 250 ms of each second. Returns the
    /// calls per request the spread gives, and the calls inside the windows over the
    /// responses inside them.
    fn closed_loop(seed: u64, conns: u64, calls: u64, secs: u64) -> (f64, f64) {
        let in_window = |t: u64| t % (1000 * MS) < 250 * MS;
        let mut rng = Lcg(seed);
        let (mut counted, mut responses_inside) = (0u64, 0u64);
        let mut requests = Vec::new();
        for _ in 0..conns {
            // Each connection starts at its own point of a request.
            let mut t = 1000 * MS + (rng.next() * 100.0 * MS as f64) as u64;
            while t < (1 + secs) * 1000 * MS {
                let start = t;
                let factor = 0.8 + 0.4 * rng.next();
                for _ in 0..calls {
                    let slow = in_window(t);
                    t += ((if slow { 25_000.0 } else { 10_000.0 }) * factor) as u64;
                    counted += u64::from(slow);
                }
                requests.push((start, t));
                responses_inside += u64::from(in_window(t));
            }
        }
        // The wire sees the request lines in time order.
        requests.sort_unstable();
        let mut s = RequestSpread::default();
        for &(start, end) in &requests {
            s.request(start);
            s.answered(start, end);
        }
        let spans: Vec<(u64, u64)> = (1..=secs + 1).map(|k| (k * 1000 * MS, k * 1000 * MS + 250 * MS)).collect();
        let share = s.share_within(&spans).expect("requests");
        (counted as f64 / share / s.total(), counted as f64 / responses_inside as f64)
    }

    /// Requests whose calls the windows slow: the calls inside the windows over the requests'
    /// work inside them give the calls per request. 4 connections, 1,000 calls per request
    /// (about 10 ms), 20 s.
    #[test]
    fn calls_per_request_in_windows_that_slow_the_calls() {
        let (per_request, _) = closed_loop(1, 4, 1_000, 20);
        assert!((per_request - 1_000.0).abs() < 0.01 * 1_000.0, "{per_request:.1} calls per request");
    }

    /// Requests of about 100 ms against windows of 250 ms (8 connections, 10,000 calls per
    /// request, 12 s): over 20 seeds the spread stays within 2% of the true calls per request,
    /// where counting each request at its response strays further (each edge counts its
    /// requests in flight whole on one side, and a window holds little more than two
    /// requests' time). Measured here: the spread's worst error 1.35%, the responses' 7.95%.
    #[test]
    fn long_requests_weighed_by_their_work_inside_stray_less_than_their_responses() {
        let (mut worst_spread, mut worst_responses) = (0.0f64, 0.0f64);
        for seed in 1..=20 {
            let (spread, responses) = closed_loop(seed, 8, 10_000, 12);
            worst_spread = worst_spread.max((spread / 10_000.0 - 1.0).abs());
            worst_responses = worst_responses.max((responses / 10_000.0 - 1.0).abs());
        }
        println!("worst error over 20 seeds: {:.2}% by work inside, {:.2}% by responses", 100.0 * worst_spread, 100.0 * worst_responses);
        assert!(worst_spread < 0.02, "{:.2}%", 100.0 * worst_spread);
        assert!(worst_spread < worst_responses, "{worst_spread} against {worst_responses}");
    }

    #[test]
    fn unanswered_requests_weigh_at_their_request_line() {
        let mut s = RequestSpread::default();
        for i in 0..30 {
            s.request(5000 * MS + i * 10 * MS);
        }
        // Requests at 5.00, 5.01, ... 5.29 s; the window [5.1 s, 5.2 s) holds 10 of them.
        assert_eq!(s.share_within(&[(5100 * MS, 5200 * MS)]), Some(10.0 / 30.0));
        // Two windows add up; one before the first request adds nothing.
        assert_eq!(s.share_within(&[(1000 * MS, 2000 * MS), (5100 * MS, 5200 * MS), (5250 * MS, 5300 * MS)]), Some(15.0 / 30.0));
        assert_eq!(s.shares_within(&[(1000 * MS, 2000 * MS), (5100 * MS, 5200 * MS), (5250 * MS, 5300 * MS)]), Some(vec![0.0, 10.0 / 30.0, 5.0 / 30.0]));
    }

    #[test]
    fn too_few_requests_give_no_share() {
        let mut s = RequestSpread::default();
        assert_eq!(s.share_within(&[(0, u64::MAX)]), None);
        for i in 0..19 {
            s.request(MS * i);
        }
        assert_eq!(s.share_within(&[(0, u64::MAX / 2)]), None);
        s.request(MS * 19);
        assert_eq!(s.share_within(&[(0, u64::MAX / 2)]), Some(1.0));
    }

    #[test]
    fn a_response_without_its_request_line_changes_nothing() {
        let mut s = RequestSpread::default();
        s.answered(10 * MS, 20 * MS);
        assert_eq!(s.total(), 0.0);
    }
}
