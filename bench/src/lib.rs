//! The CRM benchmark harness.
