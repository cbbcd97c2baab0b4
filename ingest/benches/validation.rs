//! What full record-batch validation (reading every record as Kafka's LogValidator does,
//! `records::walk`) costs the broker, against the header-and-CRC check alone (`batch::split`).
//!
//! ```text
//! cargo bench -p inlet-ingest --bench validation
//! ```
//!
//! Batches of 1 MiB (1,000 records of ~1 KiB with 16-byte keys, deterministic content with
//! some repetition so codecs compress) with no compression, lz4 and zstd, generated before
//! timing. Criterion reports input bytes per second per case; a summary line per codec then
//! gives the best of 5 passes over 64 batches as CPU milliseconds per MiB of produce for the
//! header check and for the full check, and their difference.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a test: a failed step fails it, and its deadlines are real time

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use inlet_ingest::batch;
use inlet_ingest::records::{walk, Limits};
use inlet_test_support::wire::{encode_batch, BatchOptions};
use kafka_protocol::records::Compression;

const RECORDS: usize = 1_000;

fn batch(compression: Compression, seed: u64) -> Bytes {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let records: Vec<(Option<Bytes>, Option<Bytes>)> = (0..RECORDS)
        .map(|_| {
            let words: Vec<u8> = (0..128)
                .flat_map(|_| {
                    let w = next();
                    // Half the words repeat from a small vocabulary: text-like, compressible.
                    if w % 2 == 0 {
                        (w % 64).to_le_bytes()
                    } else {
                        w.to_le_bytes()
                    }
                })
                .collect();
            (
                Some(Bytes::from(format!("key-{:012}", next() % 1_000_000))),
                Some(Bytes::from(words)),
            )
        })
        .collect();
    encode_batch(
        &records,
        &BatchOptions {
            producer_id: 7,
            producer_epoch: 0,
            compression,
            ..BatchOptions::default()
        },
    )
}

fn header_only(b: &Bytes) -> usize {
    batch::split(b).expect("valid").len()
}

fn full(b: &Bytes, limits: Limits) -> usize {
    let batches = batch::split(b).expect("valid");
    let mut n = 0;
    for one in &batches {
        walk(one, limits, |r| n += r.value.map_or(0, <[u8]>::len)).expect("valid records");
    }
    n
}

fn bench(c: &mut Criterion) {
    let limits = Limits::default();
    let mut group = c.benchmark_group("validation");
    group.measurement_time(Duration::from_secs(3));
    for (name, codec) in [
        ("none", Compression::None),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        let batches: Vec<Bytes> = (0..64).map(|s| batch(codec, s + 1)).collect();
        let raw: usize = RECORDS * (16 + 1024);
        group.throughput(Throughput::Bytes(raw as u64));
        group.bench_function(format!("{name}/header"), |b| {
            b.iter(|| black_box(header_only(&batches[0])))
        });
        group.bench_function(format!("{name}/full"), |b| {
            b.iter(|| black_box(full(&batches[0], limits)))
        });
        // The summary: best of 5 passes over all 64 batches, per MiB of records.
        let mib = (raw * batches.len()) as f64 / (1 << 20) as f64;
        let best = |f: &dyn Fn() -> usize| {
            (0..5)
                .map(|_| {
                    let t = Instant::now();
                    black_box(f());
                    t.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        let header = best(&|| batches.iter().map(header_only).sum());
        let whole = best(&|| batches.iter().map(|b| full(b, limits)).sum());
        println!(
            "summary {name}: header check {:.3} ms/MiB, full check {:.3} ms/MiB, validation adds {:.3} ms of CPU per MiB produced ({:.1}x)",
            header * 1e3 / mib,
            whole * 1e3 / mib,
            (whole - header) * 1e3 / mib,
            whole / header
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
