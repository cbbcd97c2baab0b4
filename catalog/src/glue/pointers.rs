//! The pointer swap of a Glue commit ([`GlueCatalog`] as a [`MetadataPointerStore`]):
//! `GetTable`, the pointer check, then `UpdateTable` guarded by the `VersionId` (module docs
//! of [`crate::glue`]).

use iceberg::spec::TableMetadata;
use iceberg::{Error, ErrorKind, Result};
use serde_json::{json, Map, Value};

use super::columns::storage_descriptor;
use super::{
    database, GlueCatalog, GlueErrorKind, ICEBERG, METADATA_LOCATION, PREVIOUS_METADATA_LOCATION,
    TABLE_TYPE,
};
use crate::rest::{BoxFuture, MetadataPointerStore, PointerSwap, StagedCommit};

impl GlueCatalog {
    /// Moves `swap.table`'s pointer from `swap.expected` to `swap.new` (or, when they are
    /// equal, only checks it is still `expected`), and with the new `metadata` at hand, the
    /// table's location and columns. See the module docs.
    async fn swap_one(&self, swap: &PointerSwap, metadata: Option<&TableMetadata>) -> Result<()> {
        let conflict =
            |why: String| Error::new(ErrorKind::CatalogCommitConflicts, why).with_retryable(true);
        let current = self.get_table(&swap.table).await?.ok_or_else(|| {
            conflict(format!(
                "table {} is no longer in Glue: it was dropped or renamed",
                swap.table
            ))
        })?;
        if current.metadata_location.as_deref() != Some(swap.expected.as_str()) {
            return Err(conflict(format!(
                "table {} is no longer at metadata {} in Glue (now {}): another commit won",
                swap.table,
                swap.expected,
                current.metadata_location.as_deref().unwrap_or("none")
            )));
        }
        if swap.new == swap.expected {
            return Ok(());
        }
        let mut parameters = current.parameters();
        parameters.insert(TABLE_TYPE.into(), json!(ICEBERG));
        parameters.insert(METADATA_LOCATION.into(), json!(swap.new));
        parameters.insert(PREVIOUS_METADATA_LOCATION.into(), json!(swap.expected));
        // `TableInput` takes the table's own fields; the rest of `GetTable`'s answer
        // (database, times, version, who created it) is Glue's bookkeeping.
        let mut input: Map<String, Value> = current
            .raw
            .iter()
            .filter(|(k, _)| {
                matches!(
                    k.as_str(),
                    "Name"
                        | "Description"
                        | "Owner"
                        | "Retention"
                        | "StorageDescriptor"
                        | "PartitionKeys"
                        | "TableType"
                        | "ViewOriginalText"
                        | "ViewExpandedText"
                        | "TargetTable"
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        input.insert("Name".into(), json!(swap.table.name()));
        input.insert("Parameters".into(), Value::Object(parameters));
        if let Some(metadata) = metadata {
            let current = input
                .get("StorageDescriptor")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            input.insert(
                "StorageDescriptor".into(),
                storage_descriptor(&current, metadata),
            );
        }
        let mut request = json!({
            "DatabaseName": database(swap.table.namespace())?,
            "TableInput": input,
            "SkipArchive": true,
        });
        if let Some(version) = &current.version_id {
            request["VersionId"] = json!(version);
        }
        match self.client.call("UpdateTable", request).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind == GlueErrorKind::ConcurrentModification => Err(conflict(format!(
                "table {} changed in Glue after version {}: another commit won ({e})",
                swap.table,
                current.version_id.as_deref().unwrap_or("?")
            ))),
            Err(e) if e.kind == GlueErrorKind::NotFound => Err(conflict(format!(
                "table {} was dropped from Glue during the commit",
                swap.table
            ))),
            // Refused, throttled or unreached: nothing changed, but callers treat every
            // other error as an unknown outcome and check before retrying.
            Err(e) => Err(e.into_iceberg(ErrorKind::TableNotFound)),
        }
    }
}

impl MetadataPointerStore for GlueCatalog {
    /// One table at a time: Glue cannot update several tables atomically, so a swap of more
    /// than one table fails with `FeatureUnsupported` before anything changes. Without the
    /// new metadata, the Glue table's columns stay as they were.
    fn swap<'a>(&'a self, swaps: &'a [PointerSwap]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            match swaps {
                [] => Ok(()),
                [swap] => self.swap_one(swap, None).await,
                _ => Err(several_tables(swaps.len())),
            }
        })
    }

    fn swap_staged<'a>(&'a self, staged: &'a [StagedCommit]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            match staged {
                [] => Ok(()),
                [one] => self.swap_one(&one.swap, Some(&one.metadata)).await,
                _ => Err(several_tables(staged.len())),
            }
        })
    }
}

fn several_tables(n: usize) -> Error {
    Error::new(
        ErrorKind::FeatureUnsupported,
        format!("AWS Glue cannot commit {n} tables atomically: commit them one at a time"),
    )
}
