//! Layer 5: gzip response compression when the client sends `Accept-Encoding: gzip`
//! (tower-http `CompressionLayer`): bodies of 1 KiB and more, except gRPC, images and
//! server-sent events (tower-http's default exclusions; its default size floor of 32 bytes
//! only costs CPU on bodies this small).

use tower_http::compression::predicate::{And, NotForContentType, Predicate, SizeAbove};
use tower_http::compression::CompressionLayer;

/// Bodies larger than this many bytes are compressed (so 1 KiB and more).
pub const COMPRESS_ABOVE_BYTES: u16 = 1023;

/// The predicate of [`layer`].
pub type CompressPredicate = And<And<And<SizeAbove, NotForContentType>, NotForContentType>, NotForContentType>;

/// The compression layer.
pub fn layer() -> CompressionLayer<CompressPredicate> {
    CompressionLayer::new().compress_when(
        SizeAbove::new(COMPRESS_ABOVE_BYTES)
            .and(NotForContentType::GRPC)
            .and(NotForContentType::IMAGES)
            .and(NotForContentType::SSE),
    )
}
