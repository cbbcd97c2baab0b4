//! Compatibility levels and how each is checked from the reader/writer rule of the schema's
//! type ([`ParsedSchema::can_read`]):
//! BACKWARD means the new schema reads data of the old ones, FORWARD that the old ones read data
//! of the new one, FULL both; the transitive levels check every earlier live version instead of
//! only the latest.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;
use crate::schema::ParsedSchema;

/// A compatibility level, as Confluent names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compatibility {
    None,
    #[default]
    Backward,
    BackwardTransitive,
    Forward,
    ForwardTransitive,
    Full,
    FullTransitive,
}

impl Compatibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Compatibility::None => "NONE",
            Compatibility::Backward => "BACKWARD",
            Compatibility::BackwardTransitive => "BACKWARD_TRANSITIVE",
            Compatibility::Forward => "FORWARD",
            Compatibility::ForwardTransitive => "FORWARD_TRANSITIVE",
            Compatibility::Full => "FULL",
            Compatibility::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    fn transitive(self) -> bool {
        matches!(
            self,
            Compatibility::BackwardTransitive
                | Compatibility::ForwardTransitive
                | Compatibility::FullTransitive
        )
    }

    /// Checks `new` against `existing` (live versions, oldest first). Returns the reasons it is
    /// incompatible; empty when it is compatible.
    pub fn check(self, new: &ParsedSchema, existing: &[&ParsedSchema]) -> Vec<String> {
        let against: &[&ParsedSchema] = if self.transitive() {
            existing
        } else {
            match existing.last() {
                Some(_) => &existing[existing.len() - 1..],
                None => &[],
            }
        };
        let mut reasons = Vec::new();
        for old in against {
            reasons.extend(self.check_pair(new, old));
        }
        reasons
    }

    /// Checks `new` against one `old` schema, non-transitively.
    pub fn check_pair(self, new: &ParsedSchema, old: &ParsedSchema) -> Vec<String> {
        let backward = || {
            new.can_read(old)
                .into_iter()
                .map(|e| format!("new schema cannot read data written with the old one: {e}"))
                .collect::<Vec<_>>()
        };
        let forward = || {
            old.can_read(new)
                .into_iter()
                .map(|e| format!("old schema cannot read data written with the new one: {e}"))
                .collect::<Vec<_>>()
        };
        match self {
            Compatibility::None => Vec::new(),
            Compatibility::Backward | Compatibility::BackwardTransitive => backward(),
            Compatibility::Forward | Compatibility::ForwardTransitive => forward(),
            Compatibility::Full | Compatibility::FullTransitive => {
                let mut r = backward();
                r.extend(forward());
                r
            }
        }
    }
}

impl fmt::Display for Compatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Compatibility {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "NONE" => Compatibility::None,
            "BACKWARD" => Compatibility::Backward,
            "BACKWARD_TRANSITIVE" => Compatibility::BackwardTransitive,
            "FORWARD" => Compatibility::Forward,
            "FORWARD_TRANSITIVE" => Compatibility::ForwardTransitive,
            "FULL" => Compatibility::Full,
            "FULL_TRANSITIVE" => Compatibility::FullTransitive,
            _ => return Err(Error::InvalidCompatibility(s.to_string())),
        })
    }
}

/// The registry's mode: READONLY refuses registrations and deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    ReadWrite,
    ReadOnly,
    Import,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadWrite => "READWRITE",
            Mode::ReadOnly => "READONLY",
            Mode::Import => "IMPORT",
        }
    }
}

impl FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "READWRITE" => Mode::ReadWrite,
            "READONLY" => Mode::ReadOnly,
            "IMPORT" => Mode::Import,
            _ => return Err(Error::InvalidMode(s.to_string())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> ParsedSchema {
        ParsedSchema::Avro(crate::avro::parse(s).expect("valid"))
    }

    const V1: &str = r#"{"type":"record","name":"r","fields":[{"name":"a","type":"int"}]}"#;
    /// Gives `a` a default and adds `b` with one: compatible both ways.
    const V2: &str = r#"{"type":"record","name":"r","fields":[{"name":"a","type":"int","default":0},{"name":"b","type":"int","default":0}]}"#;
    /// Adds `c` without a default: backward-incompatible with V1 and V2, forward-compatible.
    const V3: &str = r#"{"type":"record","name":"r","fields":[{"name":"a","type":"int"},{"name":"c","type":"int"}]}"#;
    /// Drops `a` (required in V1): forward-incompatible with V1.
    const V4: &str =
        r#"{"type":"record","name":"r","fields":[{"name":"b","type":"int","default":0}]}"#;

    #[test]
    fn levels() {
        let (v1, v2, v3, v4) = (p(V1), p(V2), p(V3), p(V4));
        use Compatibility::*;
        let ok = |lvl: Compatibility, new: &ParsedSchema, old: &[&ParsedSchema]| {
            lvl.check(new, old).is_empty()
        };
        assert!(ok(Backward, &v2, &[&v1]));
        assert!(ok(Forward, &v2, &[&v1]));
        assert!(ok(Full, &v2, &[&v1]));
        assert!(!ok(Backward, &v3, &[&v1]));
        assert!(ok(Forward, &v3, &[&v1]));
        assert!(!ok(Full, &v3, &[&v1]));
        assert!(ok(None, &v3, &[&v1]));
        assert!(ok(Backward, &v4, &[&v2]));
        assert!(!ok(Forward, &v4, &[&v1]));
        // Only the latest for non-transitive levels, all for transitive ones.
        assert!(ok(Forward, &v4, &[&v1, &v2]));
        assert!(!ok(ForwardTransitive, &v4, &[&v1, &v2]));
        assert!(!ok(FullTransitive, &v4, &[&v1, &v2]));
        assert!(ok(BackwardTransitive, &v2, &[]));
    }

    #[test]
    fn names_parse() {
        for l in [
            "NONE",
            "backward",
            "BACKWARD_TRANSITIVE",
            "FORWARD",
            "FORWARD_TRANSITIVE",
            "FULL",
            "FULL_TRANSITIVE",
        ] {
            let c: Compatibility = l.parse().expect("valid");
            assert_eq!(c.as_str(), l.to_ascii_uppercase());
        }
        assert!("SIDEWAYS".parse::<Compatibility>().is_err());
        assert!("READONLY".parse::<Mode>().is_ok());
        assert!("X".parse::<Mode>().is_err());
    }
}
