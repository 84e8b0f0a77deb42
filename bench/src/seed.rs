//! The schema and the deterministic seed data of the CRM benchmark (`bench/SPEC.md`, "Database").
//!
//! [`seed_sql`] renders the whole data set as `psql` input (`COPY ... FROM STDIN` blocks in
//! text format plus a `setval` for `deals_id_seq`), drawn from one
//! `rand_chacha::ChaCha8Rng::seed_from_u64(`[`SEED`]`)` stream in a fixed order (world, users,
//! deals). Nothing depends on the clock: timestamps are offsets before [`BASE_TIME_UNIX_S`]
//! (2026-01-01T00:00:00Z). The output is byte-identical on every run and machine as long as
//! `rand` 0.8 and `rand_chacha` 0.3 keep their documented value-stability; `tests/pg.rs` pins
//! an MD5 of every table as PostgreSQL computes it, so a change shows up as a test failure.
//!
//! What is generated:
//! - `world`: 10,000 rows, `id` 1..=10000, `randomnumber` uniform in 1..=10000.
//! - `users`: 100 rows, `id` 1..=100, `email` `user{id}@example.com`, a first + last `name`,
//!   a bcrypt-shaped `password_hash` (`$2b$12$` + 53 characters of bcrypt's base64 alphabet,
//!   60 in all), a 32-character base32 `totp_secret` and `recovery_codes` as a JSON array of 10
//!   codes `xxxxx-xxxxx`: these are the "wide" columns the `wide-user-lookup` cost loads.
//!   `created_at` between 2 years and 1 year before the base time.
//! - `deals`: 1,000 rows, `id` 1..=1000 (the sequence continues at 1001), owners uniform
//!   among the users, all six stages (uniform), `amount_cents` uniform in 0..=10^12, `created_at`
//!   distinct (microsecond resolution) within the year before the base time, `updated_at`
//!   between `created_at` and the base time.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `bench/sql/schema.sql`: the three tables and the `deals (created_at DESC, id DESC)` index.
pub const SCHEMA_SQL: &str = include_str!("../sql/schema.sql");

/// The seed of the data generator's ChaCha8 stream.
pub const SEED: u64 = 0x00C0_FFEE_2026_0001;

/// All seeded timestamps lie before this instant: 2026-01-01T00:00:00Z, Unix seconds.
pub const BASE_TIME_UNIX_S: i64 = 1_767_225_600;

/// The HS256 secret shared by `profiler bench`, the target app in tests (env `JWT_SECRET`)
/// and the conformance suite. Not a secret: benchmark use only.
pub const DEFAULT_JWT_SECRET: &str = "crm-bench-hs256-secret-for-benchmarks-only-0123456789";

/// Rows of `world`.
pub const WORLD_ROWS: i64 = 10_000;
/// Rows of `users`.
pub const USER_ROWS: i64 = 100;
/// Rows of `deals` before any insert.
pub const DEAL_ROWS: i64 = 1_000;
/// Largest valid `amount_cents` (10^12), inclusive.
pub const MAX_AMOUNT_CENTS: i64 = 1_000_000_000_000;
/// The six deal stages, in pipeline order.
pub const STAGES: [&str; 6] = ["lead", "qualified", "proposal", "negotiation", "won", "lost"];

const FIRST: [&str; 20] = [
    "Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Margaret", "Dennis", "Radia", "Leslie", "Sophie",
    "Niklaus", "Hedy", "Linus", "Katherine", "John", "Shafi", "Tim",
];
const LAST: [&str; 20] = [
    "Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson", "Hamilton", "Ritchie", "Perlman",
    "Lamport", "Wilson", "Wirth", "Lamarr", "Torvalds", "Johnson", "Backus", "Goldwasser", "Berners-Lee",
];
const ADJECTIVES: [&str; 12] =
    ["Annual", "Enterprise", "Pilot", "Renewal", "Expansion", "Global", "Regional", "Premium", "Starter", "Custom", "Bulk", "Strategic"];
const PRODUCTS: [&str; 10] =
    ["licence", "support plan", "migration", "onboarding", "API tier", "storage", "analytics", "training", "audit", "integration"];
const COMPANIES: [&str; 15] = [
    "Acme Corp", "Globex", "Initech", "Umbrella", "Stark Industries", "Wayne Enterprises", "Hooli", "Vandelay Industries",
    "Soylent", "Tyrell", "Cyberdyne", "Wonka", "Aperture", "Black Mesa", "Oscorp",
];

const BCRYPT_ALPHABET: &[u8] = b"./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const BASE32_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const CODE_ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyz23456789";

const US_PER_DAY: i64 = 86_400 * 1_000_000;

fn pick_chars(rng: &mut ChaCha8Rng, alphabet: &[u8], n: usize) -> String {
    (0..n).map(|_| char::from(alphabet[rng.gen_range(0..alphabet.len())])).collect()
}

/// Formats Unix microseconds as a PostgreSQL `timestamptz` literal in UTC
/// (`2025-03-04 05:06:07.123456+00`).
fn ts(unix_us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(unix_us)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string())
        .unwrap_or_else(|| unreachable!("seed timestamps are within 2024..2026"))
}

/// Escapes a value for `COPY ... FROM STDIN` text format (backslash, tab, newline, CR).
fn copy_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// The whole seed as `psql` input: three `COPY ... FROM STDIN` blocks (world, users, deals)
/// and `SELECT setval('deals_id_seq', 1000)`. Run it after [`SCHEMA_SQL`] in an empty
/// database; about 1.2 MB of text. Deterministic: see the module docs.
pub fn seed_sql() -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let base_us = BASE_TIME_UNIX_S * 1_000_000;
    let mut out = String::with_capacity(1_300_000);

    out.push_str("COPY world (id, randomnumber) FROM STDIN;\n");
    for id in 1..=WORLD_ROWS {
        let n: i32 = rng.gen_range(1..=10_000);
        let _ = writeln!(out, "{id}\t{n}");
    }
    out.push_str("\\.\n");

    out.push_str("COPY users (id, email, name, password_hash, totp_secret, recovery_codes, created_at) FROM STDIN;\n");
    for id in 1..=USER_ROWS {
        let name = format!("{} {}", FIRST.choose(&mut rng).copied().unwrap_or("Ada"), LAST.choose(&mut rng).copied().unwrap_or("Lovelace"));
        let hash = format!("$2b$12${}", pick_chars(&mut rng, BCRYPT_ALPHABET, 53));
        let totp = pick_chars(&mut rng, BASE32_ALPHABET, 32);
        let codes: Vec<String> =
            (0..10).map(|_| format!("{}-{}", pick_chars(&mut rng, CODE_ALPHABET, 5), pick_chars(&mut rng, CODE_ALPHABET, 5))).collect();
        let codes = serde_json::to_string(&codes).unwrap_or_default();
        let created = base_us - 365 * US_PER_DAY - rng.gen_range(0..365 * US_PER_DAY);
        let _ = writeln!(
            out,
            "{id}\tuser{id}@example.com\t{}\t{}\t{}\t{}\t{}",
            copy_text(&name),
            copy_text(&hash),
            copy_text(&totp),
            copy_text(&codes),
            ts(created)
        );
    }
    out.push_str("\\.\n");

    out.push_str("COPY deals (id, owner_id, title, amount_cents, stage, created_at, updated_at) FROM STDIN;\n");
    let mut used = BTreeSet::new();
    for id in 1..=DEAL_ROWS {
        let owner = rng.gen_range(1..=USER_ROWS);
        let title = format!(
            "{} {} for {}",
            ADJECTIVES.choose(&mut rng).copied().unwrap_or("Annual"),
            PRODUCTS.choose(&mut rng).copied().unwrap_or("licence"),
            COMPANIES.choose(&mut rng).copied().unwrap_or("Acme Corp")
        );
        let amount: i64 = rng.gen_range(0..=MAX_AMOUNT_CENTS);
        let stage = STAGES[rng.gen_range(0..STAGES.len())];
        // Distinct created_at: draw again on the (rare) collision.
        let created = loop {
            let c = base_us - rng.gen_range(1..=365 * US_PER_DAY);
            if used.insert(c) {
                break c;
            }
        };
        let updated = created + rng.gen_range(0..base_us - created);
        let _ = writeln!(out, "{id}\t{owner}\t{}\t{amount}\t{stage}\t{}\t{}", copy_text(&title), ts(created), ts(updated));
    }
    out.push_str("\\.\n");
    let _ = writeln!(out, "SELECT setval('deals_id_seq', {DEAL_ROWS});");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_format_as_utc_literals() {
        assert_eq!(ts(BASE_TIME_UNIX_S * 1_000_000), "2026-01-01 00:00:00.000000+00");
        assert_eq!(ts(1_000_000 * 86_400 + 1), "1970-01-02 00:00:00.000001+00");
    }

    #[test]
    fn copy_text_escapes_control_characters() {
        assert_eq!(copy_text("a\tb\\c\nd"), "a\\tb\\\\c\\nd");
    }
}
