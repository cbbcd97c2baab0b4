//! Inlet's foundation: what every other crate shares and nothing in it knows Kafka, Iceberg or
//! a storage format (docs/architecture.md, "Crates").
//!
//! - [`clock`]: wall-clock time as a component. A node builds one [`SystemClock`] and hands it
//!   to every part; tests hand a [`ManualClock`] instead. Nothing else reads the system clock
//!   (`clippy.toml` refuses `SystemTime::now` elsewhere).
//! - [`retry`]: the one retry loop, with bounded, jittered exponential backoff. It decides from
//!   an error's [`ErrorKind`] alone.
//! - [`ErrorKind`]: what a caller may do about an error (retry it, report it as the client's
//!   fault, stop), which every crate's error type answers with `kind()`.
//! - [`failpoint`]: test hooks that abort the process at a named step (crash tests).
//! - [`random`]: the one place production code draws random bytes and numbers from
//!   (`clippy.toml` refuses `rand` elsewhere).
//! - [`civil`] and [`text`]: date arithmetic and percent-decoding, written once; [`jaas`]: the
//!   user name and password of a Java JAAS config line.
//! - [`history`]: a recent history of named series in a byte budget (the console's charts).
//! - [`access`]: the questions the HTTP APIs ask of whoever authenticates and authorizes
//!   their requests.

pub mod access;
pub mod civil;
pub mod clock;
mod error;
pub mod failpoint;
pub mod history;
pub mod jaas;
pub mod random;
pub mod retry;
pub mod text;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::ErrorKind;
pub use retry::{retry, RetryPolicy};
