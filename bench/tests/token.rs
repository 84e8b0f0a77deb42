//! Tokens: valid ones verify with jsonwebtoken and with an HMAC computed by `openssl`
//! (an instrument outside the code under test); each invalid variant fails a strict
//! verifier written from SPEC.md for the reason its name gives.

use std::io::Write;
use std::process::{Command, Stdio};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bench::token::{self, BadToken, Claims};
use bench::DEFAULT_JWT_SECRET;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

/// Why a token is refused by the reference verifier.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    Malformed,
    Signature,
    Algorithm,
    Expired,
    MissingClaim(&'static str),
    Issuer,
    Type,
    Subject,
    UnknownUser,
}

/// The contract's rules (SPEC.md "Authentication" and the choices section), with users 1..=100.
fn verify(t: &str) -> Result<i64, Refusal> {
    let mut v = Validation::new(Algorithm::HS256);
    v.set_issuer(&[token::ISSUER]);
    v.set_required_spec_claims(&["exp", "iss", "sub"]);
    v.leeway = 0;
    let data = jsonwebtoken::decode::<Value>(t, &DecodingKey::from_secret(DEFAULT_JWT_SECRET.as_bytes()), &v).map_err(|e| match e.kind() {
        ErrorKind::InvalidToken | ErrorKind::Base64(_) | ErrorKind::Json(_) | ErrorKind::Utf8(_) => Refusal::Malformed,
        ErrorKind::InvalidSignature => Refusal::Signature,
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => Refusal::Algorithm,
        ErrorKind::ExpiredSignature => Refusal::Expired,
        ErrorKind::MissingRequiredClaim(c) if c == "exp" => Refusal::MissingClaim("exp"),
        ErrorKind::MissingRequiredClaim(c) if c == "iss" => Refusal::MissingClaim("iss"),
        ErrorKind::MissingRequiredClaim(c) if c == "sub" => Refusal::MissingClaim("sub"),
        ErrorKind::InvalidIssuer => Refusal::Issuer,
        other => panic!("unexpected jsonwebtoken error {other:?} for {t}"),
    })?;
    let c = data.claims;
    match c.get("typ") {
        None => return Err(Refusal::MissingClaim("typ")),
        Some(Value::String(s)) if s == token::ACCESS_TYPE => {}
        Some(_) => return Err(Refusal::Type),
    }
    let Some(Value::String(sub)) = c.get("sub") else { return Err(Refusal::Subject) };
    let id: i64 = sub.parse().map_err(|_| Refusal::Subject)?;
    if !(1..=100).contains(&id) {
        return Err(Refusal::UnknownUser);
    }
    Ok(id)
}

fn openssl_hmac(alg: &str, key: &str, msg: &str) -> Vec<u8> {
    let mut child = Command::new("openssl")
        .args(["dgst", &format!("-{alg}"), "-binary", "-hmac", key])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("openssl is installed (Debian package openssl)");
    child.stdin.take().expect("stdin").write_all(msg.as_bytes()).expect("write");
    let out = child.wait_with_output().expect("openssl");
    assert!(out.status.success());
    out.stdout
}

fn parts(t: &str) -> (Value, Value, String, String) {
    let p: Vec<&str> = t.split('.').collect();
    assert_eq!(p.len(), 3, "{t}");
    let h = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p[0]).expect("b64")).expect("json");
    let c = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p[1]).expect("b64")).expect("json");
    (h, c, format!("{}.{}", p[0], p[1]), p[2].to_string())
}

#[test]
fn valid_token_round_trips_and_matches_openssl_hmac() {
    let before = token::now_unix_s();
    let t = token::mint_valid(DEFAULT_JWT_SECRET, 42);
    assert_eq!(verify(&t), Ok(42));
    let (h, c, input, sig) = parts(&t);
    assert_eq!(h["alg"], "HS256");
    assert_eq!(c["sub"], "42");
    assert_eq!(c["iss"], "crm-bench");
    assert_eq!(c["typ"], "access");
    let exp = c["exp"].as_i64().expect("exp is a number");
    assert!(exp >= before + 3600 && exp <= token::now_unix_s() + 3600, "exp {exp} one hour ahead");
    assert_eq!(URL_SAFE_NO_PAD.decode(sig).expect("sig"), openssl_hmac("sha256", DEFAULT_JWT_SECRET, &input));
    // A fixed-claims token is byte-stable (RFC 7515 compact form of exactly these claims).
    let fixed = token::mint("secret", &Claims::valid_until(7, 2_000_000_000));
    let (_, c, input, sig) = parts(&fixed);
    assert_eq!(c, serde_json::json!({"sub":"7","iss":"crm-bench","exp":2_000_000_000,"typ":"access"}));
    assert_eq!(URL_SAFE_NO_PAD.decode(sig).expect("sig"), openssl_hmac("sha256", "secret", &input));
}

#[test]
fn hand_built_tokens_are_signed_like_openssl_signs_them() {
    for (alg, name) in [(Algorithm::HS256, "sha256"), (Algorithm::HS384, "sha384"), (Algorithm::HS512, "sha512")] {
        let t = token::mint_raw(&serde_json::json!({"alg":"x"}), &serde_json::json!({"a":1}), "k", Some(alg));
        let (_, _, input, sig) = parts(&t);
        assert_eq!(URL_SAFE_NO_PAD.decode(sig).expect("sig"), openssl_hmac(name, "k", &input), "{alg:?}");
    }
    let none = token::mint_raw(&serde_json::json!({"alg":"none"}), &serde_json::json!({}), "k", None);
    assert!(none.ends_with('.') && none.matches('.').count() == 2, "{none}");
}

#[test]
fn every_bad_token_is_refused_for_its_own_reason() {
    use Refusal::*;
    let expected = |b: BadToken| match b {
        BadToken::MalformedNoDots
        | BadToken::MalformedTwoParts
        | BadToken::MalformedFourParts
        | BadToken::MalformedBadBase64
        | BadToken::MalformedHeaderNotJson
        | BadToken::MalformedPayloadNotJson => vec![Malformed],
        BadToken::BadSignature | BadToken::TamperedSignature | BadToken::TamperedPayload => vec![Signature],
        // jsonwebtoken refuses an unknown alg name while parsing the header.
        BadToken::AlgNone | BadToken::AlgNoneWithSignature => vec![Malformed, Algorithm],
        BadToken::AlgHs384 | BadToken::AlgHs512 | BadToken::AlgRs256 => vec![Algorithm],
        BadToken::Expired => vec![Expired],
        BadToken::MissingExp => vec![MissingClaim("exp")],
        BadToken::WrongIssuer => vec![Issuer],
        BadToken::MissingIssuer => vec![MissingClaim("iss")],
        BadToken::WrongType => vec![Type],
        BadToken::MissingType => vec![MissingClaim("typ")],
        BadToken::SubNotNumber | BadToken::SubNumberThenText => vec![Subject],
        // jsonwebtoken only sees a string `sub`; a JSON number counts as missing there.
        BadToken::SubJsonNumber => vec![Subject, MissingClaim("sub")],
        BadToken::MissingSub => vec![MissingClaim("sub")],
        BadToken::UnknownUser | BadToken::UserZero | BadToken::NegativeUser => vec![UnknownUser],
    };
    let mut names = std::collections::BTreeSet::new();
    for b in BadToken::ALL {
        assert!(names.insert(b.name()), "duplicate name {}", b.name());
        let t = b.token(DEFAULT_JWT_SECRET, 42);
        let got = verify(&t).expect_err(b.name());
        assert!(expected(b).contains(&got), "{}: refused as {got:?}, expected {:?}: {t}", b.name(), expected(b));
    }
    assert_eq!(names.len(), 27);
}

#[test]
fn alg_variants_carry_the_header_they_claim() {
    for (b, alg) in [(BadToken::AlgNone, "none"), (BadToken::AlgHs384, "HS384"), (BadToken::AlgHs512, "HS512"), (BadToken::AlgRs256, "RS256")] {
        let (h, c, _, sig) = parts(&b.token(DEFAULT_JWT_SECRET, 5));
        assert_eq!(h["alg"], alg, "{}", b.name());
        assert_eq!(c["sub"], "5", "{}: claims are otherwise valid", b.name());
        assert_eq!(sig.is_empty(), b == BadToken::AlgNone, "{}", b.name());
    }
    let (_, c, _, _) = parts(&BadToken::SubJsonNumber.token(DEFAULT_JWT_SECRET, 5));
    assert_eq!(c["sub"], serde_json::json!(5));
    let (_, c, _, _) = parts(&BadToken::Expired.token(DEFAULT_JWT_SECRET, 5));
    assert!(c["exp"].as_i64().expect("exp") <= token::now_unix_s() - 3599);
}
