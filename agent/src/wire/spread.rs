//! When the HTTP requests of a capture were served: the denominator of figures counted in
//! windows of the run (the syscall counters, `collect::syscalls`).
//!
//! Counts taken while a counter is attached, scaled by time to the whole run, are biased when
//! the counter slows the target: a handler making 16,000 one-byte reads per request runs slower
//! while every syscall takes the kernel's slow path, so fewer reads happen per second inside the
//! windows than outside, and the time-scaled estimate falls short. Requests slow down with their
//! calls, so the calls counted in the windows divided by the requests completed in the same
//! windows stay true: at a window's opening the requests in flight are spread evenly over their
//! work, and they complete at the rate at which their calls are made, slow or not; at its closing
//! the calls of the requests still in flight are counted without their completion, which makes up,
//! on average, for the calls made before the opening by the requests it completed. Spreading a
//! request evenly over its time instead would not: a request that straddles an edge runs slower
//! inside the window, so its time there overstates its calls there (the calls per request read
//! 6-11% low on requests of 16,461 reads and about 100 ms against 250 ms windows). So each
//! answered request weighs 1 at its response, and an unanswered one weighs 1 at its request line;
//! [`RequestSpread::share_within`] is the weight inside the windows over all of it.

/// Width of one bucket of the spread, ns (1 ms): a window edge inside a bucket takes the
/// bucket's weight pro rata.
pub const SPREAD_BUCKET_NS: u64 = 1_000_000;

/// Most buckets kept (10 minutes, 2.4 MB); weight later than that is left out of both the
/// windows' share and the total.
pub const SPREAD_MAX_BUCKETS: usize = 600_000;

/// Least request weight a [`RequestSpread::share_within`] is given for: below it the share
/// says more about where a few requests fell than about the run.
pub const SPREAD_MIN_REQUESTS: f64 = 20.0;

/// HTTP requests' weight per [`SPREAD_BUCKET_NS`] bucket of `CLOCK_MONOTONIC`, from the first
/// request line seen.
#[derive(Debug, Default, Clone)]
pub struct RequestSpread {
    origin_ns: Option<u64>,
    buckets: Vec<f32>,
}

impl RequestSpread {
    /// A request line received at `ts_ns`: weight 1 at that time, until
    /// [`RequestSpread::answered`] spreads it.
    pub fn request(&mut self, ts_ns: u64) {
        self.add(ts_ns, 1.0);
    }

    /// The response to the request whose line came at `start_ns` was sent at `end_ns`: its
    /// weight moves from `start_ns` to `end_ns`.
    pub fn answered(&mut self, start_ns: u64, end_ns: u64) {
        if self.add(start_ns, -1.0).is_none() {
            return;
        }
        // Past the kept buckets the weight is left out of both the windows' share and the total.
        let _ = self.add(end_ns.max(start_ns), 1.0);
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
        self.buckets.iter().map(|&w| f64::from(w)).sum()
    }

    /// The share (0..=1) of the requests' weight inside `spans` (`[start, end)` in ns of
    /// `CLOCK_MONOTONIC`, not overlapping); `None` when the total weighs less than
    /// [`SPREAD_MIN_REQUESTS`].
    pub fn share_within(&self, spans: &[(u64, u64)]) -> Option<f64> {
        let total = self.total();
        let origin = self.origin_ns?;
        if total < SPREAD_MIN_REQUESTS {
            return None;
        }
        let mut inside = 0.0;
        for &(start, end) in spans {
            let (start, end) = (start.max(origin), end);
            if end <= start {
                continue;
            }
            let (first, last) = ((start - origin) / SPREAD_BUCKET_NS, (end - 1 - origin) / SPREAD_BUCKET_NS);
            for b in first..=last.min(self.buckets.len() as u64 - 1) {
                let (b_start, b_end) = (origin + b * SPREAD_BUCKET_NS, origin + (b + 1) * SPREAD_BUCKET_NS);
                let overlap = end.min(b_end) - start.max(b_start);
                inside += f64::from(self.buckets[b as usize]) * overlap as f64 / SPREAD_BUCKET_NS as f64;
            }
        }
        Some((inside / total).clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn an_answered_request_counts_where_it_completed() {
        let mut s = RequestSpread::default();
        // 40 requests of 100 ms back to back from t = 1 s: responses at 1.1, 1.2, ... 5.0 s.
        for i in 0..40 {
            let start = 1000 * MS + i * 100 * MS;
            s.request(start);
            s.answered(start, start + 100 * MS);
        }
        assert!((s.total() - 40.0).abs() < 1e-3, "{}", s.total());
        // The window [1.15 s, 1.45 s) holds the responses at 1.2, 1.3 and 1.4 s; the first
        // request, whose line came at 1.0 s, is outside.
        assert_eq!(s.share_within(&[(1150 * MS, 1450 * MS)]), Some(3.0 / 40.0));
        // A window edge inside a bucket takes the bucket pro rata: half of the 1 ms bucket that
        // holds the response at 1.2 s.
        let share = s.share_within(&[(1200 * MS + MS / 2, 1201 * MS)]).expect("40 requests");
        assert!((share - 0.5 / 40.0).abs() < 1e-6, "{share}");
    }

    /// Requests whose calls the windows slow: the calls made inside the windows over the
    /// requests completed inside them give the calls per request: 1,005.0 here, where spreading
    /// each request over its time read 978.8. A closed loop of 4 connections, each request
    /// 1,000 calls of 10 µs (25 µs inside the windows, the tracepoints' slow path); windows the
    /// first 250 ms of each second for 20 s.
    #[test]
    fn calls_per_request_in_windows_that_slow_the_calls() {
        const CALLS: u64 = 1_000;
        let in_window = |t: u64| t % (1000 * MS) < 250 * MS;
        let mut s = RequestSpread::default();
        let mut counted = 0u64;
        for conn in 0..4u64 {
            // Each connection starts at its own point of a request.
            let mut t = 1000 * MS + conn * 3 * MS;
            while t < 21_000 * MS {
                let start = t;
                s.request(start);
                for _ in 0..CALLS {
                    let slow = in_window(t);
                    t += if slow { 25_000 } else { 10_000 };
                    counted += u64::from(slow);
                }
                s.answered(start, t);
            }
        }
        let spans: Vec<(u64, u64)> = (1..21).map(|k| (k * 1000 * MS, k * 1000 * MS + 250 * MS)).collect();
        let per_request = counted as f64 / s.share_within(&spans).expect("requests") / s.total();
        assert!((per_request - CALLS as f64).abs() < 0.01 * CALLS as f64, "{per_request:.1} calls per request");
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
