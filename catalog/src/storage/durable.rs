//! Making files on a local-disk root durable: the local object store writes a staged file
//! and renames it into place (creating missing folders), but syncs nothing, so after a power
//! loss a file that a commit already points to could be missing or empty. After each write
//! the file is fsynced, then every folder whose entries the write changed: the file's own
//! folder and any folders the write created, up to the first that already existed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use iceberg::{Error, ErrorKind, Result};

/// Local files made durable so far, in this process.
static LOCAL_SYNCS: AtomicU64 = AtomicU64::new(0);

/// How many files on a local-disk root have been written and fsynced, with their folders,
/// since the process started: shows tests that the durable path is taken.
pub fn local_syncs() -> u64 {
    LOCAL_SYNCS.load(Ordering::Relaxed)
}

/// A local file about to be written, and the deepest of its folders that exists already.
#[derive(Debug, Clone)]
pub(crate) struct LocalSync {
    file: PathBuf,
    existing: Option<PathBuf>,
}

impl LocalSync {
    /// Notes, before `file` is written, which of its folders exist.
    pub(crate) fn before_write(file: PathBuf) -> LocalSync {
        let existing = file
            .ancestors()
            .skip(1)
            .find(|d| d.is_dir())
            .map(Path::to_path_buf);
        LocalSync { file, existing }
    }

    /// After the write: fsyncs the file, its folder, and the folders the write created with
    /// the one that holds them. `location` names the file in errors.
    pub(crate) async fn sync(self, location: &str) -> Result<()> {
        let synced = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            std::fs::File::open(&self.file)?.sync_all()?;
            for folder in self.file.ancestors().skip(1) {
                // A rename or a new entry is durable once its folder is.
                std::fs::File::open(folder)?.sync_all()?;
                if self.existing.as_deref().is_none_or(|e| e == folder) {
                    break;
                }
            }
            Ok(())
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "the fsync task failed").with_source(e))?;
        synced.map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("cannot make {location} durable (fsync)"),
            )
            .with_source(e)
        })?;
        LOCAL_SYNCS.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn new_folders_are_synced_up_to_the_first_that_existed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a/b/c.json");
        let sync = LocalSync::before_write(file.clone());
        assert_eq!(sync.existing.as_deref(), Some(dir.path()));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, b"{}").unwrap();
        let before = local_syncs();
        sync.sync("c.json").await.unwrap();
        assert!(local_syncs() > before);
        let again = LocalSync::before_write(file.clone());
        assert_eq!(again.existing.as_deref(), file.parent());
        let missing = LocalSync::before_write(dir.path().join("nope/x"));
        assert!(
            missing.sync("x").await.is_err(),
            "a missing file is not durable"
        );
    }
}
