//! Times one unit of each route's work outside the server (no load, one thread), to size
//! the constants of `field_cases`: `cargo run --release -p field-cases --example calibrate`.
//!
//! `calibrate brotli Q SECS` compresses the brotli routes' body at quality Q in a loop for
//! SECS seconds (a target for `perf record`, to see which encoder functions a level uses).

use std::time::Instant;

fn time<T>(label: &str, n: u32, mut f: impl FnMut() -> T) {
    let _ = f();
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(f());
    }
    println!("{label:<28} {:>10.1} µs", t.elapsed().as_secs_f64() * 1e6 / f64::from(n));
}

fn main() {
    let body = field_cases::brotli_body();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("brotli") {
        let q: i32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(11);
        let secs: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5.0);
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed().as_secs_f64() < secs {
            std::hint::black_box(field_cases::brotli_compress(&body, q).unwrap());
            n += 1;
        }
        println!("brotli q{q}: {n} compressions of {} bytes in {secs} s", body.len());
        return;
    }
    println!("brotli body {} bytes", body.len());
    time("Regex::new (log line)", 200, || regex::Regex::new(field_cases::LOG_LINE_PATTERN).unwrap());
    time("pbkdf2", 20, || field_cases::hash_password(1));
    time("tally (600 rounds)", 2000, || field_cases::tally_local(7));
    let catalog = field_cases::catalog_json();
    println!("catalog {} bytes", catalog.len());
    let path = std::env::temp_dir().join(format!("calibrate-{}.json", std::process::id()));
    std::fs::write(&path, &catalog).unwrap();
    time("from_reader(File)", 50, || serde_json::from_reader::<_, field_cases::Catalog>(std::fs::File::open(&path).unwrap()).unwrap());
    time("read + from_slice", 500, || serde_json::from_slice::<field_cases::Catalog>(&std::fs::read(&path).unwrap()).unwrap());
    let _ = std::fs::remove_file(&path);
    for len in [8_000, 12_000, 16_000, 24_000] {
        let part = &body[..len.min(body.len())];
        time(&format!("brotli q11 first {len} B"), 5, || field_cases::brotli_compress(part, 11).unwrap());
    }
    let rep: Vec<u8> = body.iter().copied().take(4000).cycle().take(body.len()).collect();
    time("brotli q11 repetitive", 5, || field_cases::brotli_compress(&rep, 11).unwrap());
    for q in [5, 9, 10, 11] {
        time(&format!("brotli q{q}"), if q >= 10 { 5 } else { 50 }, || field_cases::brotli_compress(&body, q).unwrap());
    }
}
