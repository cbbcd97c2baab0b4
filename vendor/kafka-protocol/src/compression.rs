//! Provides compression utilities for encoding records.
//!
//! This module has implementations of gzip, Snappy, as well as a noop compression format that
//! allows encoding and decoding records into a [`Record`](crate::records::Record).

use crate::protocol::buf::{ByteBuf, ByteBufMut};
use anyhow::Result;

#[cfg(feature = "gzip")]
mod gzip;
#[cfg(feature = "lz4")]
mod lz4;
mod none;
#[cfg(feature = "snappy")]
mod snappy;
#[cfg(feature = "zstd")]
mod zstd;

#[cfg(feature = "gzip")]
pub use gzip::Gzip;
#[cfg(feature = "lz4")]
pub use lz4::Lz4;
pub use none::None;
#[cfg(feature = "snappy")]
pub use snappy::Snappy;
#[cfg(feature = "zstd")]
pub use zstd::Zstd;

/// Inlet patch: the most bytes one record batch may decompress to. Larger output is an error
/// rather than an allocation, so a small compressed batch cannot claim gigabytes.
pub static MAX_DECOMPRESSED_BYTES: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(64 << 20);

/// The current [`MAX_DECOMPRESSED_BYTES`].
pub fn max_decompressed_bytes() -> usize {
    MAX_DECOMPRESSED_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Reads all of `reader`, failing once more than [`max_decompressed_bytes`] come out.
#[allow(dead_code)]
pub(crate) fn read_bounded<R: std::io::Read>(reader: R, what: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let limit = max_decompressed_bytes();
    let mut out = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| anyhow::anyhow!("Failed to decompress {what}: {e}"))?;
    if out.len() > limit {
        anyhow::bail!("{what} batch decompresses to more than {limit} bytes");
    }
    Ok(out)
}

/// A trait for record compression algorithms.
pub trait Compressor<B: ByteBufMut> {
    /// Target buffer type for compression.
    type BufMut: ByteBufMut;
    /// Compresses into provided [`ByteBufMut`], with records encoded by `F` into `R`.
    fn compress<R, F>(buf: &mut B, f: F) -> Result<R>
    where
        F: FnOnce(&mut Self::BufMut) -> Result<R>;
}

/// A trait for record decompression algorithms.
pub trait Decompressor<B: ByteBuf> {
    /// Target buffer type for decompression.
    type Buf: ByteBuf;
    /// Decompress records from `B` mapped using `F` into `R`.
    fn decompress<R, F>(buf: &mut B, f: F) -> Result<R>
    where
        F: FnOnce(&mut Self::Buf) -> Result<R>;
}
