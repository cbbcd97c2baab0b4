//! Request handlers, as `impl Broker` blocks grouped by API family.

mod admin;
mod cluster;
mod describe;
mod fetch;
mod groups;
mod produce;
mod txn;

pub(crate) use fetch::MaxSeen;
pub(crate) use produce::ProduceTurn;
