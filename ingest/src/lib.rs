//! The Kafka wire protocol server (DESIGN.md §2).
pub mod batch;
pub mod codec;
pub mod config;
pub mod error;
pub mod producers;
pub mod topic_config;
pub mod topics;
