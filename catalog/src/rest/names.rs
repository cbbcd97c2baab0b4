//! Checks on the names and locations clients send, applied before anything reaches the catalog.
//!
//! Invariants every namespace level and table name that passes [`check_name`] holds:
//! non-empty, at most [`MAX_NAME_BYTES`] bytes, not `.` or `..`, and free of `/`, `\`, NUL and
//! control characters (so of the 0x1F namespace separator too). Namespace levels also hold no
//! `.`: the SQL catalog stores a namespace as its levels joined by `.`, so a level `a.b` would
//! be the nested namespace `a` → `b`. Table names may hold `.` (Kafka topic names often do).
//! A whole namespace, joined by `.`, is at most [`MAX_NAME_BYTES`] bytes (the SQL catalog's
//! column width) and at most [`MAX_NAMESPACE_DEPTH`] levels deep.

use iceberg::{NamespaceIdent, TableIdent};

use super::error::{RestError, Result};

/// Longest namespace level, table name or joined namespace, in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// Most levels a namespace may have.
pub const MAX_NAMESPACE_DEPTH: usize = 16;
/// The namespace separator in URL paths and the `parent` query parameter (the spec's default).
pub const NAMESPACE_SEPARATOR: char = '\u{1f}';

/// What a name names, for error messages and the `.` rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    /// One level of a namespace.
    NamespaceLevel,
    /// A table name.
    Table,
}

impl NameKind {
    fn noun(self) -> &'static str {
        match self {
            Self::NamespaceLevel => "namespace level",
            Self::Table => "table name",
        }
    }
}

/// Checks one namespace level or table name against the module's invariants.
pub fn check_name(kind: NameKind, name: &str) -> Result<()> {
    let noun = kind.noun();
    let problem = if name.is_empty() {
        Some("must not be empty".to_string())
    } else if name.len() > MAX_NAME_BYTES {
        Some(format!(
            "is {} bytes, more than {MAX_NAME_BYTES}",
            name.len()
        ))
    } else if name == "." || name == ".." {
        Some("must not be `.` or `..`".to_string())
    } else if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '/' | '\\' | '\0') || c.is_control())
    {
        Some(format!("must not contain {c:?}"))
    } else if kind == NameKind::NamespaceLevel && name.contains('.') {
        Some("must not contain `.` (levels of nested namespaces are separate names)".to_string())
    } else {
        None
    };
    match problem {
        Some(problem) => Err(RestError::BadRequest(format!(
            "invalid {noun} {:?}: {problem}",
            truncate(name)
        ))),
        None => Ok(()),
    }
}

/// Checks every level of a namespace and the namespace as a whole.
pub fn check_namespace(levels: &[String]) -> Result<NamespaceIdent> {
    if levels.is_empty() {
        return Err(RestError::BadRequest(
            "invalid namespace: it must have at least one level".to_string(),
        ));
    }
    if levels.len() > MAX_NAMESPACE_DEPTH {
        return Err(RestError::BadRequest(format!(
            "invalid namespace: {} levels, more than {MAX_NAMESPACE_DEPTH}",
            levels.len()
        )));
    }
    for level in levels {
        check_name(NameKind::NamespaceLevel, level)?;
    }
    let joined = levels.iter().map(String::len).sum::<usize>() + levels.len() - 1;
    if joined > MAX_NAME_BYTES {
        return Err(RestError::BadRequest(format!(
            "invalid namespace: {joined} bytes when joined, more than {MAX_NAME_BYTES}"
        )));
    }
    NamespaceIdent::from_vec(levels.to_vec())
        .map_err(|e| RestError::BadRequest(format!("invalid namespace: {}", e.message())))
}

/// Parses a namespace as it appears in a URL path segment or the `parent` parameter (already
/// percent-decoded): levels separated by 0x1F.
pub fn parse_namespace(encoded: &str) -> Result<NamespaceIdent> {
    let levels: Vec<String> = encoded
        .split(NAMESPACE_SEPARATOR)
        .map(str::to_string)
        .collect();
    check_namespace(&levels)
}

/// Checks a table identifier sent in a request body.
pub fn check_table_ident(ident: &TableIdent) -> Result<TableIdent> {
    let namespace = check_namespace(ident.namespace().as_ref())?;
    check_name(NameKind::Table, ident.name())?;
    Ok(TableIdent::new(namespace, ident.name().to_string()))
}

/// Checks a location a client chose (table location, namespace `location` property,
/// `set-location` update, registered metadata file) against the configured prefixes.
///
/// An empty `allowed` list allows any location. Otherwise the location must equal a prefix or
/// continue it after a `/`, and must not contain `.` or `..` segments, which could climb out.
pub fn check_location(allowed: &[String], location: &str) -> Result<()> {
    if location.is_empty() {
        return Err(RestError::BadRequest(
            "location must not be empty".to_string(),
        ));
    }
    if location.chars().any(char::is_control) {
        return Err(RestError::BadRequest(format!(
            "location {:?} contains control characters",
            truncate(location)
        )));
    }
    if allowed.is_empty() {
        return Ok(());
    }
    let climbs = location
        .split(['/', '\\'])
        .any(|segment| segment == "." || segment == "..");
    let inside = allowed.iter().any(|prefix| {
        let prefix = prefix.trim_end_matches('/');
        location == prefix
            || location
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('/'))
    });
    if climbs || !inside {
        return Err(RestError::BadRequest(format!(
            "location {:?} is outside the locations this catalog allows",
            truncate(location)
        )));
    }
    Ok(())
}

/// At most 80 characters of a client-supplied string, for error messages.
fn truncate(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut short: String = s.chars().take(MAX).collect();
        short.push('…');
        short
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rules() {
        for good in ["orders", "orders.v1", "a-b_c", "ünïcode", &"x".repeat(255)] {
            check_name(NameKind::Table, good).unwrap();
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a\\b",
            "a\0b",
            "a\nb",
            "a\u{1f}b",
            "a\u{7f}",
            &"x".repeat(256),
        ] {
            assert!(check_name(NameKind::Table, bad).is_err(), "{bad:?}");
        }
        check_name(NameKind::NamespaceLevel, "sales").unwrap();
        assert!(check_name(NameKind::NamespaceLevel, "a.b").is_err());
    }

    #[test]
    fn namespaces_parse_from_the_unit_separator() {
        let ns = parse_namespace("a\u{1f}b").unwrap();
        assert_eq!(ns.as_ref(), &vec!["a".to_string(), "b".to_string()]);
        assert!(parse_namespace("").is_err());
        assert!(parse_namespace("a\u{1f}").is_err());
        assert!(parse_namespace(&["a"; 17].join("\u{1f}")).is_err());
        let wide = vec!["x".repeat(200), "y".repeat(60)];
        assert!(check_namespace(&wide).is_err());
    }

    #[test]
    fn locations_stay_under_allowed_prefixes() {
        let allowed = vec!["file:///data/warehouse/".to_string()];
        check_location(&allowed, "file:///data/warehouse/ns/t").unwrap();
        check_location(&allowed, "file:///data/warehouse").unwrap();
        for bad in [
            "file:///data/warehouse2/t",
            "file:///data/warehouse/../etc",
            "file:///etc/passwd",
            "",
        ] {
            assert!(check_location(&allowed, bad).is_err(), "{bad}");
        }
        check_location(&[], "s3://anywhere/t").unwrap();
    }
}
