//! PostgreSQL decoder tests on real captures (agent/tests/data/wire/README.md says how each
//! was recorded) and on hand-built byte sequences. Expected values were checked by hand
//! against the captures' bytes and the PostgreSQL protocol chapter (55.7 Message Formats).

use profiler::wire::capture::read_capture;
use profiler::wire::pg::{PgEvent, RoundTrip, RoundTripKind, StatementShape, TransactionOutcome, TransactionStatus};
use profiler::wire::{Chunk, Direction, Protocol, WireDecoder, WireEvent, WireOptions, WireSummary};

fn fixture(name: &str) -> Vec<Chunk> {
    let path = format!("{}/tests/data/wire/{name}.cap", env!("CARGO_MANIFEST_DIR"));
    read_capture(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn decode(chunks: &[Chunk]) -> (WireSummary, Vec<PgEvent>) {
    let mut d = WireDecoder::new(WireOptions { keep_events: true });
    d.push_all(chunks);
    let (s, ev) = d.finish();
    let pg = ev
        .into_iter()
        .map(|e| match e {
            WireEvent::Postgres(p) => p,
            WireEvent::Http(h) => panic!("unexpected HTTP event {h:?}"),
        })
        .collect();
    (s, pg)
}

fn bounded(chunks: &[Chunk], head: usize, tail: usize) -> Vec<Chunk> {
    chunks.iter().map(|c| c.bounded(head, tail)).collect()
}

fn round_trips(ev: &[PgEvent]) -> Vec<RoundTrip> {
    ev.iter()
        .filter_map(|e| match e {
            PgEvent::RoundTrip(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

fn sql(text: &str) -> StatementShape {
    StatementShape::Sql { text: text.to_string(), truncated: false }
}

/// One letter per round trip: p(ing), P(repare), E(xecute), O(ther).
fn kinds(rts: &[RoundTrip]) -> String {
    rts.iter()
        .map(|r| match r.kind {
            RoundTripKind::Ping => 'p',
            RoundTripKind::Prepare => 'P',
            RoundTripKind::Execute => 'E',
            RoundTripKind::Other => 'O',
        })
        .collect()
}

fn pg_msg(ty: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![ty];
    v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    v.extend_from_slice(body);
    v
}

fn chunk(ts: u64, dir: Direction, data: &[u8]) -> Chunk {
    Chunk::complete(ts, 7, Protocol::Postgres, dir, data)
}

fn assert_accounting(s: &WireSummary) {
    for side in [&s.pg.decode.frontend, &s.pg.decode.backend] {
        // After finish() every byte is in a framed message or undecodable.
        assert_eq!(side.message_bytes + side.undecodable_bytes, side.bytes, "{side:?}");
    }
}

#[test]
fn psql_simple_protocol_round_trips_transactions_and_ping() {
    let (s, ev) = decode(&fixture("pg_psql_simple"));
    let rts = round_trips(&ev);
    let texts: Vec<Vec<String>> = rts.iter().map(|r| r.statements.iter().map(|s| s.to_string()).collect()).collect();
    assert_eq!(
        texts,
        vec![
            vec!["SELECT * FROM world WHERE id = ?"],
            vec!["SELECT * FROM world WHERE id = ?"],
            vec!["BEGIN"],
            vec!["UPDATE world SET randomnumber = ? WHERE id = ?"],
            vec!["COMMIT"],
            vec!["BEGIN"],
            vec!["SELECT ? / ?"],
            vec!["ROLLBACK"],
            vec!["SELECT id, title, stage FROM deals ORDER BY id LIMIT ?"],
            vec![],
            vec!["SELECT ? AS s, ? AS n, ? AS d", "SELECT ?"],
        ]
    );
    assert_eq!(kinds(&rts), "EEEEEEEEEpE");
    let tags: Vec<Vec<&str>> = rts.iter().map(|r| r.command_tags.iter().map(String::as_str).collect()).collect();
    assert_eq!(
        tags,
        vec![
            vec!["SELECT 1"],
            vec!["SELECT 1"],
            vec!["BEGIN"],
            vec!["UPDATE 1"],
            vec!["COMMIT"],
            vec!["BEGIN"],
            vec![],
            vec!["ROLLBACK"],
            vec!["SELECT 20"],
            vec![],
            vec!["SELECT 1", "SELECT 1"],
        ]
    );
    // SELECT 1/0: ErrorResponse with SQLSTATE 22012 (division_by_zero), status E.
    assert_eq!(rts[6].errors, vec!["22012".to_string()]);
    assert_eq!(rts[6].status, Some(TransactionStatus::Failed));
    use TransactionStatus::*;
    let statuses: Vec<_> = rts.iter().map(|r| r.status.unwrap()).collect();
    assert_eq!(
        statuses,
        vec![Idle, Idle, InTransaction, InTransaction, Idle, InTransaction, Failed, Idle, Idle, Idle, Idle]
    );
    // First round trip: Query sent at ..376697, ReadyForQuery received at ..9070422.
    assert_eq!(rts[0].start_ns, 1_345_388_376_697);
    assert_eq!(rts[0].end_ns, Some(1_345_389_070_422));
    assert_eq!(rts[0].latency_ns(), Some(693_725));
    // ErrorResponse and ReadyForQuery came in two reads: the end is the second one.
    assert_eq!(rts[6].end_ns, Some(1_345_390_055_995));
    // Socket 1 used sslmode=prefer: SSLRequest answered 'N', then the start-up.
    let conns: Vec<u64> = ev
        .iter()
        .filter_map(|e| match e {
            PgEvent::Connected { socket, .. } => Some(*socket),
            _ => None,
        })
        .collect();
    assert_eq!(conns, vec![1, 2]);
    // Set-up times from the capture's lines: socket 1 from its SSLRequest (tx at
    // 1345381248504) to the chunk that ends in ReadyForQuery `5a 00000005 49` (rx at
    // 1345388179109); socket 2 from its StartupMessage (1345432289113) to 1345438774863.
    let setups: Vec<Option<u64>> = ev
        .iter()
        .filter_map(|e| match e {
            PgEvent::Connected { setup_ns, .. } => Some(*setup_ns),
            _ => None,
        })
        .collect();
    assert_eq!(setups, vec![Some(6_930_605), Some(6_485_750)]);
    assert_eq!((s.pg.connections_timed, s.pg.connection_setup_total_ns), (2, 13_416_355));
    let txns: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            PgEvent::Transaction(t) => Some((t.round_trips, t.statements, t.outcome, t.started_before_attach)),
            _ => None,
        })
        .collect();
    assert_eq!(
        txns,
        vec![(3, 3, TransactionOutcome::Committed, false), (3, 3, TransactionOutcome::RolledBack, false)]
    );
    assert_eq!(s.pg.connections, 2);
    assert_eq!(s.pg.round_trips, 11);
    assert_eq!(s.pg.round_trips_answered, 11);
    assert_eq!(s.pg.pings, 1);
    assert_eq!(s.pg.statement_executions, 11);
    assert_eq!(s.pg.transactions.ended, 2);
    assert_eq!(s.pg.transactions.committed, 1);
    assert_eq!(s.pg.transactions.rolled_back, 1);
    assert_eq!(s.pg.errors.get("22012"), Some(&1));
    assert_eq!(s.pg.decode.frontend.undecodable_bytes, 0);
    assert_eq!(s.pg.decode.backend.undecodable_bytes, 0);
    assert_eq!(s.pg.decode.frontend.bytes, s.pg.decode.frontend.message_bytes);
    assert_eq!(s.pg.decode.backend.bytes, s.pg.decode.backend.message_bytes);
    let world = s.pg.statements.iter().find(|x| x.shape == sql("SELECT * FROM world WHERE id = ?")).unwrap();
    assert_eq!((world.executions, world.round_trips), (2, 2));
    assert_eq!(world.latency_total_ns, 693_725 + (1_345_389_264_220 - 1_345_389_166_289));
}

/// The sqlx fixture: target-app (CRM_COSTS=all, pool of 1 connection) serving GET /json,
/// /db, /queries?queries=3, GET /api/deals?page=2&per_page=5, POST /api/deals and two 404s.
#[test]
fn sqlx_target_app_round_trips() {
    let (s, ev) = decode(&fixture("pg_sqlx_target_app"));
    let rts = round_trips(&ev);
    // Every checkout is a ping (lone Sync, test_before_acquire), the work, and a ping on
    // release (sqlx 0.8 return_to_pool); the first use of a statement adds a prepare round
    // trip. /db: pPEp; /queries?queries=3: 3 x pEp; GET /api/deals: p BEGIN (P E) x 5 COMMIT p;
    // POST /api/deals: p BEGIN set_config user P insert COMMIT p (set_config and user were
    // prepared by the GET).
    assert_eq!(kinds(&rts), "pPEppEppEppEppEPEPEPEPEPEEppEEEPEEp");
    assert_eq!(rts.len(), 35);
    // sqlx's ping is a lone Sync: no statement, no other message.
    assert!(rts.iter().filter(|r| r.kind == RoundTripKind::Ping).all(|r| r.statements.is_empty()
        && r.prepared.is_empty()
        && r.command_tags.is_empty()));
    assert_eq!(s.pg.pings, 12);
    assert_eq!(rts[1].prepared, vec![sql("SELECT id, randomnumber FROM world WHERE id = ?")]);
    assert_eq!(rts[2].statements, vec![sql("SELECT id, randomnumber FROM world WHERE id = ?")]);
    // The /api/deals unit of work: BEGIN, set_config, user, count, page, owners, COMMIT.
    let uow: Vec<String> = rts[14..26].iter().flat_map(|r| r.statements.iter().map(|s| s.to_string())).collect();
    assert_eq!(
        uow,
        vec![
            "BEGIN",
            "SELECT set_config(?, ?, true)",
            "SELECT id, email, name, password_hash, totp_secret, recovery_codes, created_at FROM users WHERE id = ?",
            "SELECT count(*) FROM deals",
            "SELECT id, owner_id, title, amount_cents, stage, created_at FROM deals ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
            "SELECT id, name, email FROM users WHERE id = ANY(?)",
            "COMMIT",
        ]
    );
    assert_eq!(rts[22].command_tags, vec!["SELECT 5".to_string()]);
    let insert = "INSERT INTO deals (owner_id, title, amount_cents, stage, created_at, updated_at) VALUES (?, ?, ?, ?, now(), now()) RETURNING id, owner_id, title, amount_cents, stage, created_at";
    assert_eq!(rts[32].statements, vec![sql(insert)]);
    assert_eq!(rts[32].command_tags, vec!["INSERT 0 1".to_string()]);
    let txns: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            PgEvent::Transaction(t) => Some((t.round_trips, t.statements, t.outcome)),
            _ => None,
        })
        .collect();
    assert_eq!(txns, vec![(12, 7, TransactionOutcome::Committed), (6, 5, TransactionOutcome::Committed)]);
    let w = s.pg.statements.iter().find(|x| x.shape == sql("SELECT id, randomnumber FROM world WHERE id = ?")).unwrap();
    assert_eq!((w.executions, w.round_trips, w.prepares), (4, 4, 1));
    assert_eq!(s.pg.by_kind.prepare, 7);
    assert_eq!(s.pg.by_kind.execute, 16);
    assert_eq!(s.pg.connections, 1);
}

/// The capture bound: with a 256-byte head and a 64-byte tail, the sqlx fixture decodes to
/// the same events but one command tag: two reads are longer than 320 bytes (start-up 457,
/// the deals page 420); in both a message header falls in the uncaptured middle, and the
/// ReadyForQuery at the end of the tail re-anchors framing (the page's CommandComplete
/// `SELECT 5`, just before it, is not decodable without framing). Without the tail, the three responses longer than 256 bytes (start-up 457 bytes, the
/// deals page 420, the owners 290) lose their ReadyForQuery: sync is lost three times and
/// regained at the next read; the two round trips they answered end unanswered; round
/// trips and statements (from the client side) stay exact.
#[test]
fn capture_bound_head_and_tail() {
    let full = fixture("pg_sqlx_target_app");
    let (s_full, ev_full) = decode(&full);
    let (s_ht, ev_ht) = decode(&bounded(&full, 256, 64));
    let mut expected = ev_full.clone();
    let page = expected
        .iter()
        .position(|e| matches!(e, PgEvent::RoundTrip(r) if r.start_ns == 1_370_100_985_868))
        .unwrap();
    match &mut expected[page] {
        PgEvent::RoundTrip(r) => {
            assert_eq!(r.command_tags, vec!["SELECT 5".to_string()]);
            r.command_tags.clear();
        }
        _ => unreachable!(),
    }
    assert_eq!(ev_ht, expected);
    assert_eq!(s_ht.pg.statements, s_full.pg.statements);
    assert_eq!(s_ht.pg.decode.backend.sync_losses, 2);
    assert_eq!(s_ht.pg.decode.backend.anchored_resyncs, 2);
    assert_eq!(s_ht.pg.decode.unanswered_round_trips, 0);
    assert!(s_ht.pg.decode.backend.captured_bytes < s_ht.pg.decode.backend.bytes);

    let (s, ev) = decode(&bounded(&full, 256, 0));
    let rts = round_trips(&ev);
    assert_eq!(kinds(&rts), kinds(&round_trips(&ev_full)));
    assert_eq!(s.pg.decode.backend.sync_losses, 3);
    assert_eq!(s.pg.decode.backend.resyncs, 3);
    assert_eq!(s.pg.decode.unanswered_round_trips, 2);
    assert_eq!(s.pg.connections, 0);
    let unanswered: Vec<String> =
        rts.iter().filter(|r| r.end_ns.is_none()).map(|r| r.statements[0].to_string()).collect();
    assert_eq!(
        unanswered,
        vec![
            "SELECT id, owner_id, title, amount_cents, stage, created_at FROM deals ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
            "SELECT id, name, email FROM users WHERE id = ANY(?)",
        ]
    );
    assert_eq!(s.pg.statements.iter().map(|x| x.executions).sum::<u64>(), s_full.pg.statement_executions);
    assert_eq!(s.pg.decode.frontend.undecodable_bytes, 0);
    // (457 - 256) + (420 - 256) + (290 - 256) bytes of the three cut reads, minus the parts
    // of messages whose length was known (framing continued through them).
    let b = s.pg.decode.backend;
    assert_eq!(b.bytes - b.captured_bytes, (457 - 256) + (420 - 256) + (290 - 256));
    assert_eq!(b.message_bytes + b.undecodable_bytes, b.bytes);
}

/// A tail lets a cut buffer end in sync: the anchored ReadyForQuery. Here the response of
/// the psql `SELECT ... LIMIT 20` (773 bytes: RowDescription, 20 DataRows, CommandComplete,
/// ReadyForQuery) is cut to a 64-byte head and 16-byte tail.
#[test]
fn anchored_ready_for_query_in_the_tail() {
    let full = fixture("pg_psql_simple");
    let (_, ev_full) = decode(&full);
    let cut: Vec<Chunk> = full.iter().map(|c| if c.total_len == 773 { c.bounded(64, 16) } else { c.clone() }).collect();
    assert_eq!(cut.iter().filter(|c| !c.is_complete()).count(), 1);
    let (s, ev) = decode(&cut);
    let rts = round_trips(&ev);
    let rts_full = round_trips(&ev_full);
    assert_eq!(rts.len(), rts_full.len());
    // Same round trip, same end; only its CommandComplete tag (in the cut part) is missing.
    assert_eq!(rts[8].end_ns, rts_full[8].end_ns);
    assert_eq!(rts[8].command_tags, Vec::<String>::new());
    assert_eq!(rts[8].statements, rts_full[8].statements);
    assert_eq!(s.pg.decode.backend.anchored_resyncs, 1);
    assert_eq!(s.pg.decode.backend.sync_losses, 1);
    assert_eq!(s.pg.decode.unanswered_round_trips, 0);
}

/// A Parse longer than the head: the SQL text is cut, the shape marked truncated; Describe
/// and Sync come from the tail (the Parse length says where they start).
#[test]
fn parse_cut_by_the_head_keeps_framing() {
    let full = fixture("pg_sqlx_target_app");
    let insert_prepare = full
        .iter()
        .position(|c| c.direction == Direction::Tx && c.total_len == 234)
        .expect("the INSERT's Parse+Describe+Sync (234 bytes)");
    let cut: Vec<Chunk> =
        full.iter().enumerate().map(|(i, c)| if i == insert_prepare { c.bounded(100, 32) } else { c.clone() }).collect();
    let (s, ev) = decode(&cut);
    let rts = round_trips(&ev);
    assert_eq!(rts.len(), 35);
    let cut_shape = StatementShape::Sql {
        text: "INSERT INTO deals (owner_id, title, amount_cents, stage, created_at, updated_at) …".to_string(),
        truncated: true,
    };
    assert_eq!(rts[31].prepared, vec![cut_shape.clone()]);
    assert_eq!(rts[31].kind, RoundTripKind::Prepare);
    assert!(rts[31].end_ns.is_some());
    // The Bind of sqlx_s_7 then executes the statement whose shape is the cut one.
    assert_eq!(rts[32].statements, vec![cut_shape]);
    assert_eq!(s.pg.decode.frontend.messages_truncated, 1);
    assert_eq!(s.pg.decode.frontend.undecodable_bytes, 0);
    assert_eq!(s.pg.decode.frontend.sync_losses, 0);
}

/// A message split across two chunks (at every position of two real round trips) decodes
/// as if it came in one.
#[test]
fn split_messages_decode_like_whole_ones() {
    let full = fixture("pg_psql_simple");
    let (_, ev_full) = decode(&full);
    // The Parse-free simple Query (40 bytes) and the ErrorResponse read (66 bytes).
    for idx in [full.iter().position(|c| c.total_len == 40).unwrap(), full.iter().position(|c| c.total_len == 66).unwrap()] {
        for at in 1..full[idx].head.len() {
            let mut chunks = full.clone();
            let c = chunks.remove(idx);
            let mut a = c.clone();
            let mut b = c.clone();
            a.head = c.head[..at].to_vec();
            a.total_len = at as u64;
            b.head = c.head[at..].to_vec();
            b.total_len = (c.head.len() - at) as u64;
            chunks.insert(idx, b);
            chunks.insert(idx, a);
            let (_, ev) = decode(&chunks);
            assert_eq!(ev, ev_full, "split of chunk {idx} at {at}");
        }
    }
}

/// Coalesced messages: pgbench's pipeline sends Parse/Bind/Describe/Execute twice and one
/// Sync in one write; the server answers all of it in one read. That is one round trip with
/// two statements.
#[test]
fn pipelined_statements_in_one_round_trip() {
    let (s, ev) = decode(&fixture("pg_pgbench_extended"));
    let rts = round_trips(&ev);
    assert_eq!(rts.len(), 3);
    for r in &rts {
        assert_eq!(
            r.statements,
            vec![sql("SELECT randomnumber FROM world WHERE id = ?"), sql("UPDATE world SET randomnumber = ? WHERE id = ?")]
        );
        assert_eq!(r.prepared.len(), 2);
        assert_eq!(r.command_tags, vec!["SELECT 1".to_string(), "UPDATE 1".to_string()]);
    }
    // pgbench opens a first connection and closes it right away, then the benchmark one.
    assert_eq!(s.pg.connections, 2);
    let w = s.pg.statements.iter().find(|x| x.shape == sql("SELECT randomnumber FROM world WHERE id = ?")).unwrap();
    assert_eq!((w.executions, w.round_trips, w.prepares), (3, 3, 3));
}

/// A named statement prepared before the capture started is reported as such, not guessed.
#[test]
fn prepared_before_attach() {
    let full = fixture("pg_pgbench_prepared");
    let (_, ev_full) = decode(&full);
    let rts_full = round_trips(&ev_full);
    assert_eq!(kinds(&rts_full), "PEEE");
    assert_eq!(rts_full[1].statements, vec![sql("SELECT randomnumber FROM world WHERE id = ?")]);

    // Attach after the Parse of P_0 was answered: skip everything up to that exchange.
    let parse_answer = full
        .iter()
        .position(|c| c.direction == Direction::Rx && c.head.first() == Some(&b'1'))
        .unwrap();
    let (s, ev) = decode(&full[parse_answer + 1..]);
    let rts = round_trips(&ev);
    assert_eq!(kinds(&rts), "EEE");
    for r in &rts {
        assert_eq!(r.statements, vec![StatementShape::PreparedBeforeAttach { name: "P_0".to_string(), connection: r.socket }]);
        assert!(r.end_ns.is_some());
    }
    assert_eq!(s.pg.prepared_before_attach_executions, 3);
    // In the summary the shape no longer names its connection (a socket id is a kernel
    // address): one row per name, whatever the connections.
    assert_eq!(
        s.pg.statements.iter().map(|x| (x.shape.clone(), x.executions)).collect::<Vec<_>>(),
        vec![(StatementShape::PreparedBeforeAttach { name: "P_0".to_string(), connection: 0 }, 3)]
    );
    assert_eq!(s.pg.connections, 0);
    // The first chunk seen was a whole Bind/Describe/Execute/Sync: framing from the start.
    assert_eq!(s.pg.decode.frontend.undecodable_bytes, 0);

    // sqlx: attach after the first /db request: sqlx_s_1 was prepared before.
    let sqlx = fixture("pg_sqlx_target_app");
    let second_db = sqlx.iter().position(|c| c.ts_ns == 1_370_097_442_507).unwrap();
    let (_, ev) = decode(&sqlx[second_db..]);
    let rts = round_trips(&ev);
    assert_eq!(
        rts[1].statements,
        vec![StatementShape::PreparedBeforeAttach { name: "sqlx_s_1".to_string(), connection: rts[1].socket }]
    );
}

/// Attaching inside a transaction: the first ReadyForQuery says `T`.
#[test]
fn transaction_started_before_attach() {
    let sqlx = fixture("pg_sqlx_target_app");
    // Start at the set_config Parse (the round trip after BEGIN).
    let after_begin = sqlx.iter().position(|c| c.ts_ns == 1_370_098_722_908).unwrap();
    let (s, ev) = decode(&sqlx[after_begin..]);
    let txns: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            PgEvent::Transaction(t) => Some((t.round_trips, t.outcome, t.started_before_attach)),
            _ => None,
        })
        .collect();
    assert_eq!(
        txns,
        vec![(11, TransactionOutcome::Committed, true), (6, TransactionOutcome::Committed, false)]
    );
    assert_eq!(s.pg.transactions.started_before_attach, 1);
}

/// Garbage: a chunk of bytes that are no message loses framing; it is counted, and the next
/// chunk (a valid chain) regains it.
#[test]
fn garbage_is_counted_and_framing_regained() {
    let full = fixture("pg_psql_simple");
    let (_, ev_full) = decode(&full);
    let at = full.iter().position(|c| c.total_len == 12 && c.direction == Direction::Tx).unwrap(); // first BEGIN
    let garbage = b"\x00\xffGET / HTTP/1.1\r\n\x13\x37 not a message at all".to_vec();
    let mut chunks = full.clone();
    let mut g = chunks[at].clone();
    g.total_len = garbage.len() as u64;
    g.head = garbage.clone();
    chunks.insert(at, g);
    let (s, ev) = decode(&chunks);
    assert_eq!(round_trips(&ev), round_trips(&ev_full));
    assert_eq!(s.pg.decode.frontend.undecodable_bytes, garbage.len() as u64);
    assert_eq!(s.pg.decode.frontend.sync_losses, 1);
    assert_eq!(s.pg.decode.frontend.resyncs, 1);

    // Garbage glued in front of a valid message in the same chunk: that whole chunk is lost
    // (no boundary can be proven inside it); the round trip it carried is missing.
    let mut chunks = full.clone();
    let mut data = b"\x01\x02\x03".to_vec();
    data.extend_from_slice(&chunks[at].head);
    chunks[at].head = data;
    chunks[at].total_len += 3;
    let (s, ev) = decode(&chunks);
    assert_eq!(round_trips(&ev).len(), round_trips(&ev_full).len() - 1);
    assert_eq!(s.pg.decode.frontend.undecodable_bytes, 3 + 12);
    assert_eq!(s.pg.decode.unmatched_ready_for_query, 1);
}

/// Extended protocol with Flush (hand-built): Parse/Describe/Flush, answers, then
/// Bind/Execute/Sync. One round trip (one ReadyForQuery) with one Flush inside.
#[test]
fn flush_does_not_close_a_round_trip() {
    let mut tx1 = pg_msg(b'P', b"\0SELECT $1::int\0\0\0");
    tx1.extend(pg_msg(b'D', b"S\0"));
    tx1.extend(pg_msg(b'H', b""));
    let mut rx1 = pg_msg(b'1', b"");
    rx1.extend(pg_msg(b't', b"\0\x01\0\0\0\x17"));
    rx1.extend(pg_msg(b'n', b""));
    let mut tx2 = pg_msg(b'B', b"\0\0\0\0\0\x01\0\0\0\x0242\0\0");
    tx2.extend(pg_msg(b'E', b"\0\0\0\0\0"));
    tx2.extend(pg_msg(b'S', b""));
    let mut rx2 = pg_msg(b'2', b"");
    rx2.extend(pg_msg(b'D', b"\0\x01\0\0\0\x0242"));
    rx2.extend(pg_msg(b'C', b"SELECT 1\0"));
    rx2.extend(pg_msg(b'Z', b"I"));
    let chunks = vec![
        chunk(100, Direction::Tx, &tx1),
        chunk(200, Direction::Rx, &rx1),
        chunk(300, Direction::Tx, &tx2),
        chunk(450, Direction::Rx, &rx2),
    ];
    let (s, ev) = decode(&chunks);
    let rts = round_trips(&ev);
    assert_eq!(rts.len(), 1);
    assert_eq!(rts[0].flushes, 1);
    assert_eq!(rts[0].start_ns, 100);
    assert_eq!(rts[0].latency_ns(), Some(350));
    assert_eq!(rts[0].statements, vec![sql("SELECT ?::int")]);
    assert_eq!(rts[0].prepared, vec![sql("SELECT ?::int")]);
    assert_eq!(s.pg.decode.frontend.undecodable_bytes + s.pg.decode.backend.undecodable_bytes, 0);
}

/// Pings: a lone Sync (sqlx 0.8), an empty query and a comment-only query.
#[test]
fn ping_forms() {
    let mut chunks = Vec::new();
    let mut t = 0;
    for q in [pg_msg(b'S', b""), pg_msg(b'Q', b"\0"), pg_msg(b'Q', b"/* SQLx ping */\0"), pg_msg(b'Q', b"SELECT 1\0")] {
        t += 10;
        chunks.push(chunk(t, Direction::Tx, &q));
        let mut a = Vec::new();
        match q.as_slice() {
            [b'S', ..] => {}
            [b'Q', .., b'1', 0] => a.extend(pg_msg(b'C', b"SELECT 1\0")),
            _ => a.extend(pg_msg(b'I', b"")), // EmptyQueryResponse
        }
        a.extend(pg_msg(b'Z', b"I"));
        t += 5;
        chunks.push(chunk(t, Direction::Rx, &a));
    }
    let (s, ev) = decode(&chunks);
    assert_eq!(kinds(&round_trips(&ev)), "pppE");
    assert_eq!(s.pg.pings, 3);
    assert_eq!(s.pg.ping_latency_total_ns, 15);
}

/// SSLRequest answered `S`: the rest of the connection is TLS, counted, not decoded.
#[test]
fn accepted_ssl_makes_the_connection_opaque() {
    let ssl = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let chunks = vec![
        chunk(1, Direction::Tx, &ssl),
        chunk(2, Direction::Rx, b"S"),
        chunk(3, Direction::Tx, &[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5]),
        chunk(4, Direction::Rx, &[0x16, 0x03, 0x03, 0x00, 0x02, 9, 9]),
    ];
    let (s, ev) = decode(&chunks);
    assert_eq!(ev, vec![PgEvent::Encrypted { socket: 7, ts_ns: 2 }]);
    assert_eq!(s.pg.decode.encrypted_connections, 1);
    assert_eq!(s.pg.decode.encrypted_bytes, 17);
    assert_eq!(s.pg.round_trips, 0);
}

/// The ground truth of the `pool-ping` switch on the wire, from two captures of five
/// GET /db requests on one pooled connection (after a first request that prepared the
/// statement): with CRM_COSTS=all sqlx pings before each checkout (test_before_acquire) and
/// after each release (sqlx 0.8 always pings on release, see README); with none, only on
/// release.
#[test]
fn pool_ping_per_request_all_vs_none() {
    let (all, ev_all) = decode(&fixture("pg_sqlx_db5_all"));
    let (none, ev_none) = decode(&fixture("pg_sqlx_db5_none"));
    // all: acquire ping, prepare, execute, release ping; then 4 x (acquire, execute, release).
    assert_eq!(kinds(&round_trips(&ev_all)), "pPEppEppEppEppEp");
    // none: prepare, execute, release ping; then 4 x (execute, release).
    assert_eq!(kinds(&round_trips(&ev_none)), "PEpEpEpEpEp");
    let per_all = all.per_request(5).unwrap();
    let per_none = none.per_request(5).unwrap();
    assert_eq!(per_all.statement_executions, 1.0);
    assert_eq!(per_none.statement_executions, 1.0);
    assert_eq!(all.pg.pings, 10);
    assert_eq!(none.pg.pings, 5);
    assert_eq!(per_all.pings, 2.0);
    assert_eq!(per_none.pings, 1.0);
    assert_eq!(per_all.round_trips, 16.0 / 5.0);
    assert_eq!(per_none.round_trips, 11.0 / 5.0);
    assert_accounting(&all);
    assert_accounting(&none);
}

/// Found by the cargo-fuzz target: an invalid header split across two chunks. Framing is
/// lost where that header began (in the previous chunk), and the trailing ReadyForQuery of
/// the second chunk still re-anchors it.
#[test]
fn invalid_header_split_across_chunks() {
    let mut c1 = pg_msg(b'Z', b"I");
    c1.extend_from_slice(&[0xff, 0]);
    let mut c2 = vec![0, 0, 5, 1, 2, 3];
    c2.extend(pg_msg(b'Z', b"I"));
    let chunks = vec![
        chunk(1, Direction::Tx, &pg_msg(b'S', b"")),
        chunk(2, Direction::Rx, &pg_msg(b'Z', b"I")),
        chunk(3, Direction::Tx, &pg_msg(b'S', b"")),
        chunk(4, Direction::Rx, &c1),
        chunk(5, Direction::Tx, &pg_msg(b'S', b"")),
        chunk(6, Direction::Rx, &c2),
    ];
    let (s, ev) = decode(&chunks);
    let b = s.pg.decode.backend;
    assert_eq!(b.sync_losses, 1);
    assert_eq!(b.anchored_resyncs, 1);
    // The 5 header bytes (2 + 3) and the 3 bytes after them; the trailing 6 are the anchor.
    assert_eq!(b.undecodable_bytes, 5 + 3);
    assert_eq!(round_trips(&ev).iter().map(|r| r.end_ns).collect::<Vec<_>>(), vec![Some(2), Some(4), Some(6)]);
}

/// A driver that prepares a named statement for one execution and closes it after
/// (tokio-postgres' `query` with SQL text: Parse/Describe/Sync, Bind/Execute/Sync,
/// Close/Sync), twice: every execution takes three round trips, and the statement's figures
/// say so (message formats from the protocol chapter, 55.7).
#[test]
fn a_statement_prepared_and_closed_around_each_execution() {
    let mut chunks = Vec::new();
    let mut t = 0;
    let mut send = |dir: Direction, data: Vec<u8>| {
        t += 100;
        chunks.push(chunk(t, dir, &data));
    };
    for name in [&b"s1"[..], b"s2"] {
        let n = |tail: &[u8]| [name, b"\0", tail].concat();
        let mut prepare = pg_msg(b'P', &n(b"SELECT name FROM items WHERE id = $1\0\0\0"));
        prepare.extend(pg_msg(b'D', &[b"S", &n(b"")[..]].concat()));
        prepare.extend(pg_msg(b'S', b""));
        send(Direction::Tx, prepare);
        let mut described = pg_msg(b'1', b"");
        described.extend(pg_msg(b't', b"\0\x01\0\0\0\x17"));
        described.extend(pg_msg(b'n', b""));
        described.extend(pg_msg(b'Z', b"I"));
        send(Direction::Rx, described);
        let mut execute = pg_msg(b'B', &[b"\0", &n(b"\0\0\0\x01\0\0\0\x0242\0\0")[..]].concat());
        execute.extend(pg_msg(b'E', b"\0\0\0\0\0"));
        execute.extend(pg_msg(b'S', b""));
        send(Direction::Tx, execute);
        let mut rows = pg_msg(b'2', b"");
        rows.extend(pg_msg(b'C', b"SELECT 0\0"));
        rows.extend(pg_msg(b'Z', b"I"));
        send(Direction::Rx, rows);
        let mut close = pg_msg(b'C', &[b"S", &n(b"")[..]].concat());
        close.extend(pg_msg(b'S', b""));
        send(Direction::Tx, close);
        let mut closed = pg_msg(b'3', b"");
        closed.extend(pg_msg(b'Z', b"I"));
        send(Direction::Rx, closed);
    }
    let (s, ev) = decode(&chunks);
    let rts = round_trips(&ev);
    assert_eq!(kinds(&rts), "PEOPEO");
    let shape = sql("SELECT name FROM items WHERE id = ?");
    assert_eq!(rts[2].closed, vec![shape.clone()]);
    let st = s.pg.statements.iter().find(|x| x.shape == shape).unwrap();
    assert_eq!((st.executions, st.round_trips, st.prepares, st.prepare_round_trips, st.close_round_trips), (2, 2, 2, 2, 2));
    assert_eq!(st.all_round_trips(), 6);
    assert_eq!(s.pg.round_trips, 6);
    assert_eq!(s.pg.decode.frontend.undecodable_bytes + s.pg.decode.backend.undecodable_bytes, 0);
}

/// tokio-postgres closes a dropped statement without waiting for the answer: its
/// `Close/Sync` goes out and the next statement's `Parse/Describe/Sync` follows before the
/// server answered the close. The prepare's latency starts at the close's answer, so the
/// round trips' latencies add up to the time the connection had one outstanding (here
/// 100..200 and 300..700 ns: 500 ns), not to the 590 ns that their send-to-answer spans add
/// up to.
#[test]
fn a_round_trip_sent_before_the_previous_answer_waits_from_that_answer() {
    let prepare = |name: &[u8]| {
        let n = |tail: &[u8]| [name, b"\0", tail].concat();
        let mut m = pg_msg(b'P', &n(b"SELECT name FROM items WHERE id = $1\0\0\0"));
        m.extend(pg_msg(b'D', &[b"S", &n(b"")[..]].concat()));
        m.extend(pg_msg(b'S', b""));
        m
    };
    let mut described = pg_msg(b'1', b"");
    described.extend(pg_msg(b't', b"\0\x01\0\0\0\x17"));
    described.extend(pg_msg(b'n', b""));
    described.extend(pg_msg(b'Z', b"I"));
    let mut close = pg_msg(b'C', b"Ss1\0");
    close.extend(pg_msg(b'S', b""));
    let mut closed = pg_msg(b'3', b"");
    closed.extend(pg_msg(b'Z', b"I"));
    let chunks = vec![
        chunk(100, Direction::Tx, &prepare(b"s1")),
        chunk(200, Direction::Rx, &described),
        chunk(300, Direction::Tx, &close),
        chunk(310, Direction::Tx, &prepare(b"s2")),
        chunk(400, Direction::Rx, &closed),
        chunk(700, Direction::Rx, &described),
    ];
    let (s, ev) = decode(&chunks);
    let rts = round_trips(&ev);
    assert_eq!(kinds(&rts), "POP");
    assert_eq!(rts.iter().map(|r| r.queued_ns).collect::<Vec<_>>(), vec![0, 0, 90]);
    assert_eq!(rts.iter().map(|r| r.latency_ns()).collect::<Vec<_>>(), vec![Some(100), Some(100), Some(300)]);
    assert_eq!(s.pg.round_trip_latency_total_ns, 500);
    assert_eq!(s.pg.round_trips, 3);
}
