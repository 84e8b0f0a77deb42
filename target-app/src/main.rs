//! target-app binary.
fn main() {}
