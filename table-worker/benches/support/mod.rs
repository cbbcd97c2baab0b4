//! What the conversion benches share: a deterministic generator, best-of-N timing, the zstd
//! Parquet step of a conversion job, and a counting allocator for peak heap figures.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// A small deterministic generator (xorshift64*).
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn text(&mut self, min: usize, max: usize) -> String {
        const ALPHABET: &[u8] =
            b"abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ-.@0123456789";
        let len = min + (self.next() as usize) % (max - min + 1);
        (0..len)
            .map(|_| ALPHABET[(self.next() as usize) % ALPHABET.len()] as char)
            .collect()
    }

    pub(crate) fn long(&mut self) -> i64 {
        (self.next() >> 20) as i64
    }

    pub(crate) fn int(&mut self) -> i32 {
        (self.next() % 100_000) as i32
    }

    pub(crate) fn double(&mut self) -> f64 {
        (self.next() % 1_000_000) as f64 / 100.0
    }
}

/// The ten string fields of the 20-field flat record every format's bench uses.
pub(crate) const FLAT_STRINGS: [&str; 10] = [
    "customer", "email", "street", "city", "country", "product", "category", "currency", "channel",
    "status",
];

/// Best of `runs` passes of `f`.
pub(crate) fn best(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .min()
        .unwrap_or_default()
}

/// Writes `columns` as one zstd (level 3, the table worker's default) Parquet file in memory,
/// as a conversion job does; returns the file's size.
pub(crate) fn zstd_parquet(target: &SchemaRef, columns: Vec<ArrayRef>) -> usize {
    let batch = RecordBatch::try_new(target.clone(), columns).expect("batch");
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).expect("level")))
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, target.clone(), Some(props)).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    black_box(out.len())
}

/// Prints one stage's line of a summary.
pub(crate) fn print_stage(what: &str, t: Duration, fields: f64, input_mib: f64) {
    let s = t.as_secs_f64();
    println!(
        "  {what:<32} {:>8.1} ms  {:>7.2} M fields/s  {:>8.1} MiB/s",
        s * 1e3,
        fields / s / 1e6,
        input_mib / s
    );
}

/// The system allocator, counting live heap bytes and their peak while counting is on (off
/// during the timed passes, so they pay one relaxed load per allocation only).
pub(crate) struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(by: usize) {
    // Frees of blocks allocated before counting started may undercount; saturate at 0.
    let _ = LIVE.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(by))
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        if COUNTING.load(Ordering::Relaxed) {
            shrank(layout.size());
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            if new_size > layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The peak of heap bytes allocated while `f` ran and not freed before that peak: what one
/// conversion holds at most on top of what existed before (its input included only if `f`
/// allocates it).
pub(crate) fn peak_heap(f: impl FnOnce()) -> usize {
    LIVE.store(0, Ordering::Relaxed);
    PEAK.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    f();
    COUNTING.store(false, Ordering::Relaxed);
    PEAK.load(Ordering::Relaxed)
}

/// Bytes as MiB.
pub(crate) fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Prints a format's summary: one line per timed stage (best of `runs` passes), the Parquet
/// file's size, and the peak heap of one full pass (`full`, which returns the file's size).
pub(crate) fn report(
    title: &str,
    records: usize,
    input_bytes: usize,
    leaves: usize,
    stages: Vec<(&str, Duration)>,
    full: impl FnMut() -> usize,
) {
    let fields = (leaves * records) as f64;
    let input_mib = mib(input_bytes);
    println!(
        "summary {title}: {records} records, {:.0} bytes/record, {leaves} leaf fields/record",
        input_bytes as f64 / records as f64
    );
    for (what, t) in stages {
        print_stage(what, t, fields, input_mib);
    }
    let mut full = full;
    let mut file = 0;
    let peak = peak_heap(|| file = full());
    println!(
        "  the Parquet file is {:.1} MiB ({:.0}% of the input)",
        mib(file),
        100.0 * file as f64 / input_bytes as f64
    );
    println!(
        "  peak heap of one full pass: {:.1} MiB ({:.2}x the {input_mib:.1} MiB input)",
        mib(peak),
        peak as f64 / input_bytes as f64,
    );
}

/// A stage of a payload-conversion bench: one pass over all the payloads.
#[derive(Clone, Copy)]
pub(crate) enum Stage {
    /// Decode every payload.
    Decode,
    /// Decode and convert every payload, then finish the batch.
    Convert,
    /// Decode and convert every payload, then write one zstd Parquet file (its size the
    /// pass's result).
    Parquet,
}

/// A payload-conversion bench: a criterion group `group` of its three [`Stage`]s, then a
/// [`report`] titled `title`, its decode stage named `decode`.
pub(crate) struct StageBench<'a> {
    pub(crate) group: &'a str,
    pub(crate) title: &'a str,
    pub(crate) decode: &'a str,
    pub(crate) records: usize,
    pub(crate) input_bytes: usize,
    pub(crate) leaves: usize,
}

impl StageBench<'_> {
    /// Runs the bench, `pass` making one pass of a stage.
    pub(crate) fn run(&self, c: &mut criterion::Criterion, mut pass: impl FnMut(Stage) -> usize) {
        let mut group = c.benchmark_group(self.group);
        group.throughput(criterion::Throughput::Bytes(self.input_bytes as u64));
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(10));
        group.bench_function("decode", |b| b.iter(|| pass(Stage::Decode)));
        group.bench_function("decode_convert", |b| b.iter(|| pass(Stage::Convert)));
        group.bench_function("decode_convert_zstd_parquet", |b| {
            b.iter(|| pass(Stage::Parquet))
        });
        group.finish();

        let stages = vec![
            (
                self.decode,
                best(5, || {
                    pass(Stage::Decode);
                }),
            ),
            (
                "decode + convert",
                best(5, || {
                    pass(Stage::Convert);
                }),
            ),
            (
                "decode + convert + zstd Parquet",
                best(5, || {
                    pass(Stage::Parquet);
                }),
            ),
        ];
        let (records, leaves) = (self.records, self.leaves);
        report(
            self.title,
            records,
            self.input_bytes,
            leaves,
            stages,
            || pass(Stage::Parquet),
        );
    }
}
