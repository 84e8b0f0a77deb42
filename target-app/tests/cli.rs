//! The binary's start-up errors: one clear line on stderr and a non-zero exit (2 for bad
//! configuration, 1 when PostgreSQL cannot be reached), never a panic.

mod common;

use std::process::Command;

fn run(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(common::binary());
    cmd.env_clear();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run target-app");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

const URL: (&str, &str) = ("DATABASE_URL", "postgres://crm:crm@127.0.0.1:1/crm");
const SECRET: (&str, &str) = ("JWT_SECRET", "s3cret");

fn assert_one_line(stderr: &str, needle: &str) {
    assert_eq!(stderr.lines().count(), 1, "exactly one line: {stderr:?}");
    assert!(stderr.contains(needle), "{needle:?} in {stderr:?}");
    assert!(!stderr.contains("panicked"), "{stderr:?}");
}

#[test]
fn unknown_cost_is_exit_2_naming_it() {
    let (code, err) = run(&[URL, SECRET, ("CRM_COSTS", "all,-pool-ping,-bogus-cost")]);
    assert_eq!(code, Some(2));
    assert_one_line(&err, "unknown cost `bogus-cost`");
}

#[test]
fn missing_and_invalid_variables_are_exit_2() {
    let (code, err) = run(&[SECRET]);
    assert_eq!(code, Some(2));
    assert_one_line(&err, "DATABASE_URL is not set");
    let (code, err) = run(&[URL]);
    assert_eq!(code, Some(2));
    assert_one_line(&err, "JWT_SECRET is not set");
    let (code, err) = run(&[URL, SECRET, ("PORT", "http")]);
    assert_eq!(code, Some(2));
    assert_one_line(&err, "PORT=\"http\" is invalid");
    let (code, err) = run(&[URL, SECRET, ("DB_POOL_SIZE", "0")]);
    assert_eq!(code, Some(2));
    assert_one_line(&err, "DB_POOL_SIZE");
    let (code, err) = run(&[URL, SECRET, ("RUST_LOG", "target_app=notalevel")]);
    assert_eq!(code, Some(2));
    assert_one_line(&err, "RUST_LOG");
}

#[test]
fn unreachable_database_is_exit_1_with_the_cause() {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let (code, err) = run(&[URL, SECRET]);
    assert_eq!(code, Some(1));
    assert_one_line(&err, "cannot connect to PostgreSQL (DATABASE_URL)");
    assert!(err.contains("refused"), "the cause, not a pool timeout: {err:?}");
}
