//! Layer 4: security headers on every response (tower-http `SetResponseHeaderLayer`,
//! overriding): HSTS, CSP, frame, referrer and content-type-sniffing policies.

use axum::http::{header, HeaderValue};
use tower::layer::util::{Identity, Stack};
use tower::ServiceBuilder;
use tower_http::set_header::SetResponseHeaderLayer;

type H = SetResponseHeaderLayer<HeaderValue>;

/// The five stacked header layers.
pub type SecurityHeadersLayer = Stack<H, Stack<H, Stack<H, Stack<H, Stack<H, Identity>>>>>;

/// `strict-transport-security`: one year, subdomains included.
pub const HSTS: &str = "max-age=31536000; includeSubDomains";
/// `content-security-policy` of a JSON API: nothing may load, nothing may frame it.
pub const CSP: &str = "default-src 'none'; frame-ancestors 'none'";

/// The security-headers layer.
pub fn layer() -> SecurityHeadersLayer {
    ServiceBuilder::new()
        .layer(H::overriding(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static(HSTS)))
        .layer(H::overriding(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)))
        .layer(H::overriding(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")))
        .layer(H::overriding(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")))
        .layer(H::overriding(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")))
        .into_inner()
}
