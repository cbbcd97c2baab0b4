//! Records a job cannot convert: each becomes a [`DeadLetter`] with the reason, and, when the
//! table has a dead-letter table (`errors.tolerance=all`), a row of its files.
//!
//! Invariants:
//! - A dead letter never stops the job: the range's other records are converted.
//! - Dead letters below the partition's dead-letter floor (already committed to the
//!   dead-letter table by an earlier try of the range) are not written again.
//! - The dead-letter files carry the job's file prefix, as its data files do.

use std::sync::Arc;

use iceberg::spec::DataFile;

use super::read::Rec;
use super::{DeadLetter, JobSpec, TableContext};
use crate::data_file;
use crate::error::Result;

/// Writes `letters` to the dead-letter table's location, when the table has one.
pub(super) async fn write_dead_letters(
    table: &TableContext,
    job: &JobSpec,
    next_offset: u64,
    letters: &[DeadLetter],
) -> Result<Vec<DataFile>> {
    let Some(target) = &table.dead_letter_target else {
        return Ok(Vec::new());
    };
    let floor = table
        .dead_letter_floor
        .get(&job.partition)
        .copied()
        .unwrap_or(0);
    let letters: Vec<DeadLetter> = letters
        .iter()
        .filter(|l| l.offset >= floor as i64)
        .cloned()
        .collect();
    let letters = letters.as_slice();
    if letters.is_empty() {
        return Ok(Vec::new());
    }
    let mut target = target.clone();
    target.schema = Arc::new(crate::dead_letter::schema()?);
    // The dead-letter table is never partitioned.
    target.spec = Arc::new(iceberg::spec::PartitionSpec::unpartition_spec());
    let batch = crate::dead_letter::batch(letters)?;
    let prefix = table.file_prefix(job.partition, job.from, next_offset);
    data_file::write(&target, &prefix, [batch], &table.settings).await
}

pub(super) fn dead(partition: i32, r: &Rec, error: String) -> DeadLetter {
    DeadLetter {
        partition,
        offset: r.offset,
        timestamp_ms: r.timestamp_ms,
        key: r.key.clone(),
        value: r.value.clone(),
        error,
    }
}
