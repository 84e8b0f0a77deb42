//! JWT minting for the CRM benchmark (`bench/SPEC.md`, "Authentication"): HS256 access
//! tokens, and every invalid variant the contract lists, for the conformance suite.
//!
//! A token is `base64url(header) . base64url(payload) . base64url(signature)` (RFC 7519,
//! RFC 7515 compact serialization, no padding). Valid tokens come from `jsonwebtoken::encode`;
//! variants that the library refuses to produce (`alg: none`, an `RS256` header over an HMAC
//! signature, a numeric `sub`) are assembled by hand from JSON values with
//! [`mint_raw`], signed with `jsonwebtoken::crypto::sign`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The issuer every valid token carries.
pub const ISSUER: &str = "crm-bench";
/// The `typ` claim of a valid access token.
pub const ACCESS_TYPE: &str = "access";
/// Lifetime of [`Claims::valid`] tokens, s.
pub const DEFAULT_TTL_S: i64 = 3600;

/// The claims of a CRM access token. `None` fields are left out of the payload, which is how
/// the "missing claim" variants are made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Subject: the user id as a decimal string (`"42"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    /// Issuer; valid: [`ISSUER`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// Expiry, Unix seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
    /// Token type; valid: [`ACCESS_TYPE`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub typ: Option<String>,
}

impl Claims {
    /// Valid claims for `user_id`, expiring [`DEFAULT_TTL_S`] from now.
    pub fn valid(user_id: i64) -> Claims {
        Claims::valid_until(user_id, now_unix_s() + DEFAULT_TTL_S)
    }

    /// Valid claims for `user_id`, expiring at `exp` (Unix seconds).
    pub fn valid_until(user_id: i64, exp: i64) -> Claims {
        Claims { sub: Some(user_id.to_string()), iss: Some(ISSUER.into()), exp: Some(exp), typ: Some(ACCESS_TYPE.into()) }
    }
}

/// Current time, Unix seconds.
pub fn now_unix_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Signs `claims` with HS256 and `secret` (UTF-8 bytes) and returns the compact token.
pub fn mint(secret: &str, claims: &Claims) -> String {
    mint_with(Algorithm::HS256, secret, claims)
}

/// A valid access token for `user_id` ([`Claims::valid`], HS256).
pub fn mint_valid(secret: &str, user_id: i64) -> String {
    mint(secret, &Claims::valid(user_id))
}

/// Signs `claims` with an HMAC algorithm (`HS256`, `HS384` or `HS512`) and `secret`.
///
/// # Panics
/// Never for the HMAC algorithms; an RSA/EC/EdDSA `alg` would need a key of that kind, so this
/// function routes any non-HMAC `alg` through [`mint_raw`] with an HS256 signature.
pub fn mint_with(alg: Algorithm, secret: &str, claims: &Claims) -> String {
    match alg {
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
            let header = Header::new(alg);
            jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(secret.as_bytes()))
                .unwrap_or_else(|e| unreachable!("HMAC signing of plain claims cannot fail: {e}"))
        }
        other => {
            let header = json!({ "alg": format!("{other:?}"), "typ": "JWT" });
            mint_raw(&header, &serde_json::to_value(claims).unwrap_or(Value::Null), secret, Some(Algorithm::HS256))
        }
    }
}

/// Assembles a token from any header and payload JSON: the signature is `sig_alg`'s MAC
/// (an HMAC algorithm) of `header.payload` with `secret`, or empty when `sig_alg` is `None`
/// (as for `alg: none`, RFC 7519 §6.1).
pub fn mint_raw(header: &Value, payload: &Value, secret: &str, sig_alg: Option<Algorithm>) -> String {
    let h = URL_SAFE_NO_PAD.encode(header.to_string());
    let p = URL_SAFE_NO_PAD.encode(payload.to_string());
    let signing_input = format!("{h}.{p}");
    let sig = match sig_alg {
        Some(alg) => jsonwebtoken::crypto::sign(signing_input.as_bytes(), &EncodingKey::from_secret(secret.as_bytes()), alg)
            .unwrap_or_else(|e| unreachable!("HMAC signing cannot fail: {e}")),
        None => String::new(),
    };
    format!("{signing_input}.{sig}")
}

/// Every way a token can be wrong that the contract lists (plus a few close relatives). Each
/// must be answered with 401 by the app. `user_id` is a real user for the variants that are
/// wrong for another reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BadToken {
    /// Not three dot-separated parts: `not-a-jwt`.
    MalformedNoDots,
    /// Two parts only.
    MalformedTwoParts,
    /// Four parts.
    MalformedFourParts,
    /// Three parts that are not base64url.
    MalformedBadBase64,
    /// Valid base64url whose header is not JSON.
    MalformedHeaderNotJson,
    /// Valid header, payload not JSON, correctly signed.
    MalformedPayloadNotJson,
    /// Signed with another secret.
    BadSignature,
    /// The right token with the last signature character changed.
    TamperedSignature,
    /// The right token with the payload changed to another user after signing.
    TamperedPayload,
    /// `alg: none` with an empty signature.
    AlgNone,
    /// `alg: none` followed by a valid HS256 MAC.
    AlgNoneWithSignature,
    /// `alg: HS384`, correctly signed with HS384.
    AlgHs384,
    /// `alg: HS512`, correctly signed with HS512.
    AlgHs512,
    /// `alg: RS256` header over an HS256 MAC (algorithm confusion).
    AlgRs256,
    /// `exp` an hour in the past.
    Expired,
    /// No `exp`.
    MissingExp,
    /// `iss` = `someone-else`.
    WrongIssuer,
    /// No `iss`.
    MissingIssuer,
    /// `typ` = `refresh`.
    WrongType,
    /// No `typ`.
    MissingType,
    /// `sub` = `"abc"`.
    SubNotNumber,
    /// `sub` = `"42abc"`.
    SubNumberThenText,
    /// `sub` as a JSON number instead of a string.
    SubJsonNumber,
    /// No `sub`.
    MissingSub,
    /// `sub` = `"999999"`: no such user.
    UnknownUser,
    /// `sub` = `"0"`: no such user.
    UserZero,
    /// `sub` = `"-1"`: no such user.
    NegativeUser,
}

impl BadToken {
    /// Every variant, in declaration order.
    pub const ALL: [BadToken; 27] = [
        BadToken::MalformedNoDots,
        BadToken::MalformedTwoParts,
        BadToken::MalformedFourParts,
        BadToken::MalformedBadBase64,
        BadToken::MalformedHeaderNotJson,
        BadToken::MalformedPayloadNotJson,
        BadToken::BadSignature,
        BadToken::TamperedSignature,
        BadToken::TamperedPayload,
        BadToken::AlgNone,
        BadToken::AlgNoneWithSignature,
        BadToken::AlgHs384,
        BadToken::AlgHs512,
        BadToken::AlgRs256,
        BadToken::Expired,
        BadToken::MissingExp,
        BadToken::WrongIssuer,
        BadToken::MissingIssuer,
        BadToken::WrongType,
        BadToken::MissingType,
        BadToken::SubNotNumber,
        BadToken::SubNumberThenText,
        BadToken::SubJsonNumber,
        BadToken::MissingSub,
        BadToken::UnknownUser,
        BadToken::UserZero,
        BadToken::NegativeUser,
    ];

    /// A short snake_case name for reports (`alg_none`, `expired`, ...).
    pub fn name(self) -> &'static str {
        match self {
            BadToken::MalformedNoDots => "malformed_no_dots",
            BadToken::MalformedTwoParts => "malformed_two_parts",
            BadToken::MalformedFourParts => "malformed_four_parts",
            BadToken::MalformedBadBase64 => "malformed_bad_base64",
            BadToken::MalformedHeaderNotJson => "malformed_header_not_json",
            BadToken::MalformedPayloadNotJson => "malformed_payload_not_json",
            BadToken::BadSignature => "bad_signature",
            BadToken::TamperedSignature => "tampered_signature",
            BadToken::TamperedPayload => "tampered_payload",
            BadToken::AlgNone => "alg_none",
            BadToken::AlgNoneWithSignature => "alg_none_with_signature",
            BadToken::AlgHs384 => "alg_hs384",
            BadToken::AlgHs512 => "alg_hs512",
            BadToken::AlgRs256 => "alg_rs256",
            BadToken::Expired => "expired",
            BadToken::MissingExp => "missing_exp",
            BadToken::WrongIssuer => "wrong_issuer",
            BadToken::MissingIssuer => "missing_issuer",
            BadToken::WrongType => "wrong_typ",
            BadToken::MissingType => "missing_typ",
            BadToken::SubNotNumber => "sub_not_number",
            BadToken::SubNumberThenText => "sub_number_then_text",
            BadToken::SubJsonNumber => "sub_json_number",
            BadToken::MissingSub => "missing_sub",
            BadToken::UnknownUser => "unknown_user",
            BadToken::UserZero => "user_zero",
            BadToken::NegativeUser => "negative_user",
        }
    }

    /// The token string of this variant for `secret`; `user_id` is the (existing) user the
    /// otherwise-valid claims name.
    pub fn token(self, secret: &str, user_id: i64) -> String {
        let valid = Claims::valid(user_id);
        let with = |f: &dyn Fn(&mut Claims)| {
            let mut c = valid.clone();
            f(&mut c);
            mint(secret, &c)
        };
        let hs256_header = json!({"alg": "HS256", "typ": "JWT"});
        let payload = serde_json::to_value(&valid).unwrap_or(Value::Null);
        let b64 = |s: &str| URL_SAFE_NO_PAD.encode(s);
        match self {
            BadToken::MalformedNoDots => "not-a-jwt".into(),
            BadToken::MalformedTwoParts => {
                let t = mint(secret, &valid);
                t.rsplit_once('.').map(|(a, _)| a.to_string()).unwrap_or(t)
            }
            BadToken::MalformedFourParts => format!("{}.{}", mint(secret, &valid), b64("extra")),
            BadToken::MalformedBadBase64 => "%%%.***.$$$".into(),
            BadToken::MalformedHeaderNotJson => {
                let h = b64("this is not json");
                let p = b64(&payload.to_string());
                let input = format!("{h}.{p}");
                let sig = jsonwebtoken::crypto::sign(input.as_bytes(), &EncodingKey::from_secret(secret.as_bytes()), Algorithm::HS256)
                    .unwrap_or_default();
                format!("{input}.{sig}")
            }
            BadToken::MalformedPayloadNotJson => {
                let h = b64(&hs256_header.to_string());
                let p = b64("{\"sub\":\"1\",");
                let input = format!("{h}.{p}");
                let sig = jsonwebtoken::crypto::sign(input.as_bytes(), &EncodingKey::from_secret(secret.as_bytes()), Algorithm::HS256)
                    .unwrap_or_default();
                format!("{input}.{sig}")
            }
            BadToken::BadSignature => mint(&format!("{secret}-but-not-quite"), &valid),
            BadToken::TamperedSignature => {
                let mut t = mint(secret, &valid);
                // Change the first signature character (the last one may carry only padding bits).
                let pos = t.rfind('.').map_or(0, |i| i + 1);
                let old = t.as_bytes()[pos];
                let new = if old == b'A' { "B" } else { "A" };
                t.replace_range(pos..=pos, new);
                t
            }
            BadToken::TamperedPayload => {
                let t = mint(secret, &valid);
                let parts: Vec<&str> = t.split('.').collect();
                let other = Claims::valid(if user_id == 1 { 2 } else { 1 });
                let p = b64(&serde_json::to_string(&other).unwrap_or_default());
                format!("{}.{p}.{}", parts[0], parts.get(2).copied().unwrap_or(""))
            }
            BadToken::AlgNone => mint_raw(&json!({"alg": "none", "typ": "JWT"}), &payload, secret, None),
            BadToken::AlgNoneWithSignature => mint_raw(&json!({"alg": "none", "typ": "JWT"}), &payload, secret, Some(Algorithm::HS256)),
            BadToken::AlgHs384 => mint_with(Algorithm::HS384, secret, &valid),
            BadToken::AlgHs512 => mint_with(Algorithm::HS512, secret, &valid),
            BadToken::AlgRs256 => mint_raw(&json!({"alg": "RS256", "typ": "JWT"}), &payload, secret, Some(Algorithm::HS256)),
            BadToken::Expired => with(&|c| c.exp = Some(now_unix_s() - 3600)),
            BadToken::MissingExp => with(&|c| c.exp = None),
            BadToken::WrongIssuer => with(&|c| c.iss = Some("someone-else".into())),
            BadToken::MissingIssuer => with(&|c| c.iss = None),
            BadToken::WrongType => with(&|c| c.typ = Some("refresh".into())),
            BadToken::MissingType => with(&|c| c.typ = None),
            BadToken::SubNotNumber => with(&|c| c.sub = Some("abc".into())),
            BadToken::SubNumberThenText => with(&|c| c.sub = Some(format!("{user_id}abc"))),
            BadToken::SubJsonNumber => {
                let mut p = payload.clone();
                p["sub"] = json!(user_id);
                mint_raw(&hs256_header, &p, secret, Some(Algorithm::HS256))
            }
            BadToken::MissingSub => with(&|c| c.sub = None),
            BadToken::UnknownUser => with(&|c| c.sub = Some("999999".into())),
            BadToken::UserZero => with(&|c| c.sub = Some("0".into())),
            BadToken::NegativeUser => with(&|c| c.sub = Some("-1".into())),
        }
    }
}
