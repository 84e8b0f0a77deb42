//! How the HTTP requests of a capture spread over time: the denominator of figures counted in
//! windows of the run (the syscall counters, `collect::syscalls`).
//!
//! Counts taken while a counter is attached, scaled by time to the whole run, are biased when
//! the counter slows the target: a handler making 16,000 one-byte reads per request runs slower
//! while every syscall takes the kernel's slow path, so fewer reads happen per second inside the
//! windows than outside, and the time-scaled estimate falls short. Requests slow down with their
//! syscalls, so the calls counted in the windows divided by the requests served in the same
//! windows stay true. A request is not a point: one that lasts longer than a window (50 ms of
//! reads against 250 ms windows) is partly inside. So each answered request weighs 1, spread
//! evenly from its request line to its response (the time the wire saw it being served), and an
//! unanswered one weighs 1 at its request line; [`RequestSpread::share_within`] is the weight
//! inside the windows over all of it.

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
    /// weight moves from `start_ns` to the whole of `[start_ns, end_ns)`.
    pub fn answered(&mut self, start_ns: u64, end_ns: u64) {
        if self.add(start_ns, -1.0).is_none() {
            return;
        }
        let len = end_ns.saturating_sub(start_ns);
        if len == 0 {
            self.add(start_ns, 1.0);
            return;
        }
        let mut t = start_ns;
        while t < end_ns {
            let next = ((t / SPREAD_BUCKET_NS) + 1) * SPREAD_BUCKET_NS;
            let part = next.min(end_ns) - t;
            if self.add(t, (part as f64 / len as f64) as f32).is_none() {
                break;
            }
            t = next;
        }
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
    fn a_request_longer_than_a_window_counts_for_the_part_inside() {
        let mut s = RequestSpread::default();
        // 40 requests of 100 ms back to back from t = 1 s; a window over [1.2 s, 1.45 s).
        for i in 0..40 {
            let start = 1000 * MS + i * 100 * MS;
            s.request(start);
            s.answered(start, start + 100 * MS);
        }
        assert!((s.total() - 40.0).abs() < 1e-3, "{}", s.total());
        let share = s.share_within(&[(1200 * MS, 1450 * MS)]).expect("40 requests");
        // 2.5 requests' worth of 40.
        assert!((share - 2.5 / 40.0).abs() < 1e-4, "{share}");
        // A window edge inside a bucket takes the bucket pro rata: [1.2005 s, 1.2015 s) is 1 ms of
        // a 100 ms request, 0.01 of one.
        let share = s.share_within(&[(1200 * MS + MS / 2, 1201 * MS + MS / 2)]).expect("40 requests");
        assert!((share - 0.01 / 40.0).abs() < 1e-6, "{share}");
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
