//! The text of statements prepared before the capture started, recovered by matching the
//! wire's round trips to what PostgreSQL itself reports per connection.
//!
//! A driver with a statement cache (sqlx, tokio-postgres, JDBC, ...) prepares each statement
//! once per connection and then only sends `Bind` with the statement's name. Attached to a
//! service that has run for a while, the wire never sees the `Parse` that gave the name its
//! text. PostgreSQL knows it: `pg_stat_activity` shows, per backend, the client's TCP port
//! (`client_port`), the text of the statement it runs or last ran (`query`, the prepared
//! statement's source text for a `Bind`) and when that statement started (`query_start`,
//! PostgreSQL's statement start timestamp, set when it received the `Bind`, `Parse` or
//! `Query`; source: PostgreSQL's `postgres.c`, `SetCurrentStatementStartTimestamp`, and the
//! documentation of `pg_stat_activity`).
//!
//! Each [`Observation`] (one row of one poll) is matched to the round trip of the same
//! connection (same client port) that started last before it: when that round trip executed
//! a statement prepared before the capture, it is one vote for (connection, name) -> text.
//! A name takes the text of a clear majority ([`MIN_VOTES`], [`MIN_AGREEMENT`]).

use std::collections::HashMap;

/// Round trips of one connection whose start a poll of `pg_stat_activity` may see.
#[derive(Debug, Default, Clone)]
struct ConnTimes {
    /// (start ns, name id of the statement prepared before the capture that it executed
    /// first, if any), in start order.
    starts: Vec<(u64, Option<u32>)>,
}

/// Most round-trip starts kept over all connections (16 bytes each: 8 MB).
pub const MAX_STARTS: usize = 500_000;

/// How much later than the wire's send a statement's `query_start` may be and still be that
/// round trip's, ns (2 ms: PostgreSQL reads a message within microseconds of its send on one
/// host; a gap that long means the round trip in between was not recorded).
pub const MAX_LAG_NS: u64 = 2_000_000;
/// How much earlier than the wire's send (the time its syscall returned) `query_start` may
/// be, ns: the server may read the bytes before the sending syscall returns.
pub const MAX_LEAD_NS: u64 = 100_000;
/// Fewest agreeing votes that give a name its text.
pub const MIN_VOTES: u32 = 2;
/// Share of a name's votes its text needs.
pub const MIN_AGREEMENT: f64 = 0.75;

/// The start times of the round trips that make PostgreSQL report a new statement (every
/// kind but a ping: a lone `Sync` starts none), per connection, in bounded memory
/// ([`MAX_STARTS`]).
#[derive(Debug, Default, Clone)]
pub struct RoundTripTimes {
    conns: super::FastMap<u64, ConnTimes>,
    names: Vec<String>,
    name_ids: super::FastMap<String, u32>,
    kept: usize,
}

impl RoundTripTimes {
    /// Records a round trip of connection `socket` that started at `start_ns`; `prepared_before`
    /// is the name of the statement prepared before the capture that it executed first.
    pub fn add(&mut self, socket: u64, start_ns: u64, prepared_before: Option<&str>) {
        if self.kept >= MAX_STARTS {
            return;
        }
        let id = prepared_before.map(|n| match self.name_ids.get(n) {
            Some(&id) => id,
            None => {
                let id = self.names.len() as u32;
                self.names.push(n.to_owned());
                self.name_ids.insert(n.to_owned(), id);
                id
            }
        });
        self.conns.entry(socket).or_default().starts.push((start_ns, id));
        self.kept += 1;
    }

    /// Whether any round trip executed a statement prepared before the capture.
    pub fn has_prepared_before(&self) -> bool {
        !self.names.is_empty()
    }
}

/// One row of one poll of `pg_stat_activity`: a backend's current or last statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// `client_port`: the TCP port of the client's end of the connection.
    pub client_port: u16,
    /// `query_start`, converted to the wire's clock (`CLOCK_MONOTONIC`), ns.
    pub start_ns: u64,
    /// Index of `query` in the texts handed to [`match_texts`].
    pub text: u32,
}

/// (connection socket id, statement name) -> text, from `observations` (whose `text` index
/// `texts`), matched to `times` through each connection's local port (`local_ports`: socket
/// id -> the target's TCP port on it). See the module docs for the rule.
pub fn match_texts(
    times: &RoundTripTimes,
    local_ports: &HashMap<u64, u16>,
    observations: &[Observation],
    texts: &[String],
) -> HashMap<(u64, String), String> {
    let mut by_port: HashMap<u16, Vec<u64>> = HashMap::new();
    for (&socket, &port) in local_ports {
        if times.conns.contains_key(&socket) {
            by_port.entry(port).or_default().push(socket);
        }
    }
    // (socket, name id) -> text index -> votes
    let mut votes: HashMap<(u64, u32), HashMap<u32, u32>> = HashMap::new();
    for o in observations {
        let Some(sockets) = by_port.get(&o.client_port) else { continue };
        // The latest round trip of these connections that started before the statement did
        // (a port reused by a later connection has later round trips).
        let mut best: Option<(u64, u64, Option<u32>)> = None;
        for &socket in sockets {
            let starts = &times.conns[&socket].starts;
            let i = starts.partition_point(|&(t, _)| t <= o.start_ns.saturating_add(MAX_LEAD_NS));
            if i == 0 {
                continue;
            }
            let (t, name) = starts[i - 1];
            if best.is_none_or(|b| t > b.1) {
                best = Some((socket, t, name));
            }
        }
        let Some((socket, t, Some(name))) = best else { continue };
        if o.start_ns > t && o.start_ns - t > MAX_LAG_NS {
            continue;
        }
        *votes.entry((socket, name)).or_default().entry(o.text).or_default() += 1;
    }
    let mut out = HashMap::new();
    for ((socket, name), by_text) in votes {
        let total: u32 = by_text.values().sum();
        let Some((&text, &n)) = by_text.iter().max_by_key(|(t, n)| (**n, std::cmp::Reverse(**t))) else { continue };
        if n >= MIN_VOTES && f64::from(n) >= MIN_AGREEMENT * f64::from(total) {
            if let Some(t) = texts.get(text as usize) {
                out.insert((socket, times.names[name as usize].clone()), t.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(port: u16, start_ns: u64, text: u32) -> Observation {
        Observation { client_port: port, start_ns, text }
    }

    #[test]
    fn names_get_the_text_postgres_reported_when_they_ran() {
        let mut t = RoundTripTimes::default();
        // Connection 1 (port 5001): s_1 at 1.000 ms, s_2 at 1.200 ms, s_1 at 1.400 ms.
        t.add(1, 1_000_000, Some("s_1"));
        t.add(1, 1_200_000, Some("s_2"));
        t.add(1, 1_400_000, Some("s_1"));
        // Connection 2 (port 5002): the same statement as s_1 under the name s_5.
        t.add(2, 1_050_000, Some("s_5"));
        t.add(2, 1_300_000, Some("s_5"));
        let ports = HashMap::from([(1, 5001), (2, 5002)]);
        let texts = vec!["SELECT * FROM a WHERE id = $1".to_owned(), "SELECT 2".to_owned()];
        let o = vec![
            obs(5001, 1_000_030, 0),
            obs(5001, 1_200_020, 1),
            obs(5001, 1_400_010, 0),
            obs(5002, 1_050_040, 0),
            obs(5002, 1_300_001, 0),
            // A statement the wire did not see start (3 ms after the last): no vote.
            obs(5002, 4_400_000, 1),
            // A port no captured connection has.
            obs(6000, 1_000_000, 1),
        ];
        let m = match_texts(&t, &ports, &o, &texts);
        assert_eq!(m.get(&(1, "s_1".to_owned())).map(String::as_str), Some("SELECT * FROM a WHERE id = $1"));
        assert_eq!(m.get(&(2, "s_5".to_owned())).map(String::as_str), Some("SELECT * FROM a WHERE id = $1"));
        // One vote is not enough.
        assert_eq!(m.get(&(1, "s_2".to_owned())), None);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn a_split_vote_gives_no_text() {
        let mut t = RoundTripTimes::default();
        for i in 0..4 {
            t.add(7, 1_000_000 * (i + 1), Some("s_1"));
        }
        let ports = HashMap::from([(7, 4000)]);
        let texts = vec!["A".to_owned(), "B".to_owned()];
        let o = vec![obs(4000, 1_000_010, 0), obs(4000, 2_000_010, 1), obs(4000, 3_000_010, 0), obs(4000, 4_000_010, 1)];
        assert!(match_texts(&t, &ports, &o, &texts).is_empty());
    }

    #[test]
    fn statements_parsed_in_view_take_no_votes() {
        let mut t = RoundTripTimes::default();
        t.add(3, 1_000_000, None);
        t.add(3, 2_000_000, None);
        let ports = HashMap::from([(3, 4001)]);
        let o = vec![obs(4001, 1_000_010, 0), obs(4001, 2_000_010, 0)];
        assert!(match_texts(&t, &ports, &o, &["X".to_owned()]).is_empty());
        assert!(!t.has_prepared_before());
    }
}
