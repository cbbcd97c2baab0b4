//! Request handlers, as `impl Broker` blocks grouped by API family.

mod admin;
mod cluster;
mod configs;
mod describe;
mod fetch;
mod groups;
mod produce;
mod scram;
mod txn;

pub(crate) use fetch::MaxSeen;
pub(crate) use produce::ProduceTurn;
