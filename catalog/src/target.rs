//! Where Inlet's own table commits go: the embedded catalog's compare-and-swap, an external
//! REST catalog's commit endpoint, or AWS Glue's `UpdateTable`. Callers build the same `TableRequirement`s and
//! `TableUpdate`s for both, and handle the same outcomes.

use std::sync::Arc;

use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};

use crate::external::RestClient;
use crate::glue::GlueCatalog;
use crate::rest::{publish, stage, Checked, MetadataPointerStore, RestError};

/// The catalog a committer commits to.
#[derive(Debug, Clone)]
pub enum CommitTarget {
    /// The embedded catalog: the commit is checked and its metadata file written here, then
    /// the table's pointer is swapped in the pointer store.
    Pointers(Arc<dyn MetadataPointerStore>),
    /// An external REST catalog: requirements and updates are posted as the spec's commit,
    /// and the catalog applies them.
    Rest(Arc<RestClient>),
    /// AWS Glue: the commit is checked and its metadata file written here, as for
    /// `Pointers`; the pointer moves with `UpdateTable`, guarded by the `VersionId` and
    /// `metadata_location` of the table the commit was based on (`crate::glue`).
    Glue(Arc<GlueCatalog>),
}

impl CommitTarget {
    /// Commits `updates` to `table` if `requirements` hold on its current metadata; returns
    /// the new metadata, or `None` when there was nothing to commit.
    ///
    /// Errors: [`RestError::CommitFailed`] when a requirement failed or another commit won
    /// (nothing changed: reload and retry); [`RestError::CommitStateUnknown`] when the commit
    /// may have landed.
    ///
    /// In the embedded catalog and in Glue, metadata files that drop off the table's metadata log are
    /// deleted afterwards unless the table sets `write.metadata.delete-after-commit.enabled`
    /// to `false` (Inlet's tables commit often). An external catalog does that by its own
    /// rules.
    pub async fn commit(
        &self,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Option<TableMetadata>, RestError> {
        match self {
            CommitTarget::Pointers(pointers) => {
                commit_and_swap(pointers.as_ref(), table, requirements, updates).await
            }
            CommitTarget::Glue(glue) => {
                commit_and_swap(glue.as_ref(), table, requirements, updates).await
            }
            CommitTarget::Rest(client) => {
                if updates.is_empty() {
                    return Ok(None);
                }
                let response = client
                    .commit(table.identifier(), requirements, updates)
                    .await?;
                inlet_common::failpoint::hit("committed");
                Ok(Some(response.metadata))
            }
        }
    }
}

/// Checks and writes the commit here, then swaps the table's pointer in `pointers`.
async fn commit_and_swap(
    pointers: &dyn MetadataPointerStore,
    table: &Table,
    requirements: Vec<TableRequirement>,
    updates: Vec<TableUpdate>,
) -> Result<Option<TableMetadata>, RestError> {
    match stage(table.clone(), &requirements, updates, &[]).await? {
        Checked::Staged(staged) => {
            inlet_common::failpoint::hit("metadata-staged");
            publish(pointers, std::slice::from_ref(staged.as_ref())).await?;
            inlet_common::failpoint::hit("committed");
            staged.delete_dropped_metadata(true).await;
            Ok(Some(staged.metadata))
        }
        Checked::Unchanged(_) => Ok(None),
    }
}
