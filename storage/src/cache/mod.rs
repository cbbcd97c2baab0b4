//! The stream store's two caches, each with a fixed byte budget:
//! - [`LogBudget`] accounts the log cache: appended data held in memory until it is uploaded
//!   (then kept for tail reads until room is needed). Appends reserve room before they are
//!   written; when the budget is full of data not yet uploaded, they wait — back pressure.
//! - [`BlockCache`] holds object blocks and object indexes for catch-up reads, least recently
//!   used first out.

mod block_cache;
mod log_budget;

pub(crate) use block_cache::{BlockCache, Cached};
pub(crate) use log_budget::{CleanUnit, LogBudget};
