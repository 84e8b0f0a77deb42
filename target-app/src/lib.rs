//! The CRM API.
