//! Where a storage is rooted, and how an Iceberg location under that root becomes an object
//! key.
//!
//! The mapping is textual and deterministic, so a location always names the same object:
//! the location's path segments must begin with the root's, and the rest, joined by `/`, is
//! the key in a store rooted at the root. Repeated slashes collapse (a folder path and a
//! key prefix both ignore them); `.` and `..` segments are refused rather than resolved, so
//! no location can name an object outside the root. Percent escapes are not decoded: the key
//! is the location's text.

use iceberg::{Error, ErrorKind, Result};
use object_store::path::Path;

/// The kinds of store a root can name; [`inlet_storage::open_object_store`] opens each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    /// A local folder: `file:///abs/path`, `file:/abs/path` or a plain path.
    File,
    /// An S3 bucket, optionally with a key prefix: `s3://bucket/prefix`.
    S3,
    /// In memory, for tests: `memory://` (a prefix, if any, is part of the location only).
    Memory,
}

/// The root of an [`ObjectStoreStorage`](super::ObjectStoreStorage): every location it
/// accepts is under this root, and key `a/b` of its store is location `<root>/a/b`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Root {
    scheme: Scheme,
    /// The S3 bucket; empty for other schemes.
    bucket: String,
    /// The root's path segments: the folder's absolute path, or the key prefix.
    prefix: Vec<String>,
    /// What to pass to `open_object_store` to open a store rooted here.
    open_url: String,
}

impl Root {
    /// Parses a base URL: `file:///abs/path`, a plain path (made absolute against the current
    /// directory), `s3://bucket[/prefix][?endpoint=…&region=…&allow_http=…]` or `memory://`.
    pub(crate) fn parse(base_url: &str) -> Result<Root> {
        let bad = |why: &str| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("object store base URL {base_url:?}: {why}"),
            )
        };
        if let Some(rest) = base_url.strip_prefix("memory:") {
            return Ok(Root {
                scheme: Scheme::Memory,
                bucket: String::new(),
                prefix: segments(rest, base_url)?,
                open_url: "memory://".to_string(),
            });
        }
        if let Some(rest) = base_url.strip_prefix("s3://") {
            let without_query = rest.split_once('?').map_or(rest, |(path, _)| path);
            let (bucket, prefix) = without_query.split_once('/').unwrap_or((without_query, ""));
            if bucket.is_empty() {
                return Err(bad("no bucket"));
            }
            return Ok(Root {
                scheme: Scheme::S3,
                bucket: bucket.to_string(),
                prefix: segments(prefix, base_url)?,
                open_url: base_url.to_string(),
            });
        }
        let path = match file_path(base_url) {
            Some(path) => path.to_string(),
            None if base_url.contains(':') && !base_url.starts_with('/') => {
                return Err(bad(
                    "expected file:///path, an absolute or relative path, s3://bucket/prefix \
                     or memory://",
                ))
            }
            None if base_url.is_empty() => return Err(bad("empty")),
            // A relative folder: fix it now, so locations (absolute) and reopening agree.
            None => std::path::absolute(base_url)
                .map_err(|e| bad(&format!("cannot make the path absolute: {e}")))?
                .to_str()
                .ok_or_else(|| bad("the absolute path is not UTF-8"))?
                .to_string(),
        };
        if !path.starts_with('/') {
            return Err(bad("a file:// URL needs an absolute path"));
        }
        Ok(Root {
            scheme: Scheme::File,
            bucket: String::new(),
            prefix: segments(&path, base_url)?,
            open_url: path,
        })
    }

    /// What to pass to `open_object_store` to open a store rooted here.
    pub(crate) fn open_url(&self) -> &str {
        &self.open_url
    }

    /// The root as a location, e.g. `file:///data/objects` or `s3://bucket/prefix`.
    pub(crate) fn location(&self) -> String {
        let prefix = self.prefix.join("/");
        match self.scheme {
            Scheme::File => format!("file:///{prefix}"),
            Scheme::S3 if prefix.is_empty() => format!("s3://{}", self.bucket),
            Scheme::S3 => format!("s3://{}/{prefix}", self.bucket),
            Scheme::Memory => format!("memory://{prefix}"),
        }
    }

    /// The location of `key` in a store rooted here.
    pub(crate) fn location_of(&self, key: &Path) -> String {
        let root = self.location();
        if key.as_ref().is_empty() {
            root
        } else if root.ends_with('/') {
            format!("{root}{key}")
        } else {
            format!("{root}/{key}")
        }
    }

    /// The local file of `key`, for a root on the local disk (`None` for other schemes).
    pub(crate) fn local_path(&self, key: &Path) -> Option<std::path::PathBuf> {
        if self.scheme != Scheme::File {
            return None;
        }
        let mut path = std::path::PathBuf::from("/");
        path.extend(&self.prefix);
        path.extend(key.parts().map(|p| p.as_ref().to_string()));
        Some(path)
    }

    /// The key that `location` names in a store rooted here; empty for the root itself.
    /// Refuses a location of another scheme or bucket, outside the root's prefix, or with a
    /// `.`/`..` segment.
    pub(crate) fn key(&self, location: &str) -> Result<Path> {
        let outside = |why: &str| {
            Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "location {location:?} is outside this storage's root {}: {why}",
                    self.location()
                ),
            )
        };
        let path = match self.scheme {
            Scheme::File => file_path(location)
                .filter(|p| p.starts_with('/'))
                .ok_or_else(|| outside("expected file:///path or an absolute path"))?,
            Scheme::Memory => location
                .strip_prefix("memory:")
                .ok_or_else(|| outside("expected memory://path"))?,
            Scheme::S3 => {
                let rest = location
                    .strip_prefix("s3://")
                    .or_else(|| location.strip_prefix("s3a://"))
                    .ok_or_else(|| outside("expected s3://bucket/key"))?;
                let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket != self.bucket {
                    return Err(outside(&format!(
                        "bucket {bucket:?} is not {:?}",
                        self.bucket
                    )));
                }
                path
            }
        };
        let segments = segments(path, location)?;
        let rest = segments
            .strip_prefix(self.prefix.as_slice())
            .ok_or_else(|| outside("not under the root's path"))?;
        Path::parse(rest.join("/")).map_err(|e| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("location {location:?} is not a valid object key"),
            )
            .with_source(e)
        })
    }
}

/// The path of a local-file location: `file:///p`, `file://localhost/p`, `file:/p` or `/p`.
/// `None` if `location` is not a file location (or a `file://` URL names another host).
fn file_path(location: &str) -> Option<&str> {
    if let Some(rest) = location.strip_prefix("file://") {
        if rest.starts_with('/') {
            return Some(rest);
        }
        return rest
            .strip_prefix("localhost")
            .filter(|p| p.starts_with('/'));
    }
    if let Some(rest) = location.strip_prefix("file:") {
        return Some(rest);
    }
    location.starts_with('/').then_some(location)
}

/// The non-empty `/`-separated segments of `path`; refuses `.`, `..` and control characters
/// (`whole` names the location in the message).
fn segments(path: &str, whole: &str) -> Result<Vec<String>> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            if s == "." || s == ".." {
                Err(Error::new(
                    ErrorKind::DataInvalid,
                    format!("location {whole:?} has a {s:?} segment; relative steps are refused"),
                ))
            } else if s.chars().any(|c| c.is_ascii_control()) {
                Err(Error::new(
                    ErrorKind::DataInvalid,
                    format!("location {whole:?} has a control character"),
                ))
            } else {
                Ok(s.to_string())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(root: &str, location: &str) -> Result<String> {
        Root::parse(root)?.key(location).map(|k| k.to_string())
    }

    #[test]
    fn file_locations_map_to_keys_under_the_root() {
        let root = "file:///data/objects";
        for location in [
            "file:///data/objects/wh/t/x.parquet",
            "file:/data/objects/wh/t/x.parquet",
            "file://localhost/data/objects/wh/t/x.parquet",
            "/data/objects/wh/t/x.parquet",
            "/data//objects/wh/t//x.parquet",
        ] {
            assert_eq!(key(root, location).expect(location), "wh/t/x.parquet");
        }
        assert_eq!(
            key("/data/objects/", "file:///data/objects").expect("root"),
            ""
        );
        let root = Root::parse("/data/objects").expect("root");
        assert_eq!(root.location(), "file:///data/objects");
        assert_eq!(root.open_url(), "/data/objects");
        assert_eq!(
            root.location_of(&Path::from("wh/x")),
            "file:///data/objects/wh/x"
        );
    }

    #[test]
    fn relative_roots_become_absolute() {
        let root = Root::parse("inlet-data/objects").expect("root");
        let cwd = std::env::current_dir().expect("cwd");
        assert_eq!(
            root.open_url(),
            cwd.join("inlet-data/objects").to_str().expect("utf8")
        );
        let inside = format!("{}/wh/x", root.open_url());
        assert_eq!(root.key(&inside).expect("inside").as_ref(), "wh/x");
    }

    #[test]
    fn s3_locations_map_to_keys_under_the_prefix() {
        let root = "s3://bucket/pre/fix?endpoint=http://127.0.0.1:5000&allow_http=true";
        assert_eq!(key(root, "s3://bucket/pre/fix/wh/x").expect("in"), "wh/x");
        assert_eq!(key(root, "s3a://bucket/pre/fix/wh/x").expect("s3a"), "wh/x");
        let parsed = Root::parse(root).expect("root");
        assert_eq!(parsed.location(), "s3://bucket/pre/fix");
        assert_eq!(parsed.open_url(), root, "the query is kept for reopening");
        assert_eq!(
            key("s3://bucket", "s3://bucket/a/b").expect("no prefix"),
            "a/b"
        );
    }

    #[test]
    fn memory_locations_map_to_keys() {
        assert_eq!(key("memory://", "memory://a/b").expect("a"), "a/b");
        assert_eq!(key("memory://", "memory:///a/b").expect("b"), "a/b");
        assert_eq!(key("memory://wh", "memory://wh/a").expect("c"), "a");
    }

    #[test]
    fn locations_outside_the_root_are_refused() {
        let cases = [
            ("file:///data/objects", "file:///data/other/x"),
            ("file:///data/objects", "file:///data/objects2/x"),
            ("file:///data/objects", "file:///data/objects/../etc/passwd"),
            ("file:///data/objects", "/data/objects/./x"),
            ("file:///data/objects", "file://otherhost/data/objects/x"),
            ("file:///data/objects", "data/objects/x"),
            ("file:///data/objects", "s3://data/objects/x"),
            ("file:///data/objects", "/data/objects/a\nb"),
            ("s3://bucket/prefix", "s3://other/prefix/x"),
            ("s3://bucket/prefix", "s3://bucket/prefix2/x"),
            ("s3://bucket/prefix", "s3://bucket/x"),
            ("s3://bucket/prefix", "s3://bucket/prefix/../x"),
            ("s3://bucket/prefix", "/prefix/x"),
            ("s3://bucket/prefix", "file:///prefix/x"),
            ("memory://", "file:///x"),
            ("memory://wh", "memory://other/x"),
        ];
        for (root, location) in cases {
            let err = key(root, location).expect_err(location);
            assert_eq!(err.kind(), ErrorKind::DataInvalid, "{location}");
            assert!(!err.retryable(), "{location}");
            assert!(err.message().contains(&format!("{location:?}")), "{err}");
        }
    }

    #[test]
    fn bad_roots_are_refused() {
        for root in ["", "gs://bucket/x", "s3:///x", "file://host/x", "/a/../b"] {
            let err = Root::parse(root).expect_err(root);
            assert_eq!(err.kind(), ErrorKind::DataInvalid, "{root}");
        }
    }
}
