//! Starts a throwaway PostgreSQL (bench::pg) with one seeded CRM database for manual runs
//! and load tests, prints `DATABASE_URL=...`, `JWT_SECRET=...` and `CRM_TOKEN=...` (a valid
//! token for user 1) as shell assignments, and keeps the server until stdin is closed or
//! reaches end of file; then stops it and removes its directory.
//!
//! ```sh
//! cargo run --release -p target-app --example seeded_db > /tmp/crm.env &
//! ```

use std::io::Read;

fn main() -> anyhow::Result<()> {
    use anyhow::Context as _;
    let pg = bench::pg::TempPostgres::start().context("start PostgreSQL")?;
    let url = pg.create_seeded_db("crm").context("create the seeded database")?;
    let secret = bench::seed::DEFAULT_JWT_SECRET;
    println!("DATABASE_URL={url}");
    println!("JWT_SECRET={secret}");
    println!("CRM_TOKEN={}", bench::token::mint_valid(secret, 1));
    println!("PG_PID={}", pg.pid().unwrap_or(0));
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    pg.stop().context("stop PostgreSQL")?;
    Ok(())
}
