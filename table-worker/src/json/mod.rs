//! JSON (stub)
