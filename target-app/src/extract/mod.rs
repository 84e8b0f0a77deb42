//! Request extractors: the signed-in user and validated JSON bodies.

pub mod current_user;
pub mod json;

pub use current_user::CurrentUser;
pub use json::ValidJson;
