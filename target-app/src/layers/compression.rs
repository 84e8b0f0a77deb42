//! Layer 5: gzip response compression when the client sends `Accept-Encoding: gzip`
//! (tower-http `CompressionLayer` with its default predicate: bodies of 32 bytes and more).

use tower_http::compression::CompressionLayer;

/// The compression layer.
pub fn layer() -> CompressionLayer {
    CompressionLayer::new()
}
