//! What a comparison finds: Confluent's difference types ([`Kind`], named as Confluent names
//! them so that messages match), which of them are compatible changes (Confluent's
//! `SchemaDiff.COMPATIBLE_CHANGES`), and the JSON path each is found at ([`Ctx`]).
//!
//! Invariants:
//! - A schema change is compatible exactly when every difference found is of a compatible
//!   kind; a kind is compatible or not whatever the path it is found at.
//! - A difference's path is relative to the pair it was found in, so a memoized pair's
//!   differences are rebased onto wherever the pair is met again.

/// Defines [`Kind`] from Confluent's compatible and incompatible difference types.
macro_rules! kinds {
    (compatible: $($c:ident)*; incompatible: $($i:ident)*;) => {
        /// Confluent's difference types that we detect (names are Confluent's, so messages
        /// match); the numeric-bound ones are [`Kind::Bound`].
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(super) enum Kind {
            $($c,)*
            $($i,)*
            /// `<KEYWORD>_{ADDED, REMOVED, INCREASED, DECREASED}` of a numeric bound keyword.
            Bound(&'static str, Change),
        }

        impl Kind {
            /// Whether Confluent's `SchemaDiff.COMPATIBLE_CHANGES` has it. Of a bound, removing
            /// it and loosening it (raising a max*, lowering a min*) are compatible.
            pub(super) fn is_compatible(self) -> bool {
                match self {
                    $(Kind::$c)|* => true,
                    Kind::Bound(keyword, change) => match change {
                        Change::REMOVED => true,
                        Change::ADDED => false,
                        Change::INCREASED => !is_lower_bound(keyword),
                        Change::DECREASED => is_lower_bound(keyword),
                    },
                    _ => false,
                }
            }
        }

        impl std::fmt::Display for Kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $(Kind::$c => f.write_str(stringify!($c)),)*
                    $(Kind::$i => f.write_str(stringify!($i)),)*
                    Kind::Bound(keyword, change) => {
                        // camelCase keyword → SCREAMING_SNAKE, as Confluent names them.
                        for c in keyword.chars() {
                            if c.is_ascii_uppercase() {
                                f.write_str("_")?;
                            }
                            write!(f, "{}", c.to_ascii_uppercase())?;
                        }
                        write!(f, "_{change:?}")
                    }
                }
            }
        }
    };
}

kinds! {
    compatible:
        SCHEMA_REMOVED TYPE_EXTENDED PATTERN_REMOVED MULTIPLE_OF_REDUCED MULTIPLE_OF_REMOVED
        REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED REQUIRED_ATTRIBUTE_REMOVED
        DEPENDENCY_ARRAY_NARROWED DEPENDENCY_ARRAY_REMOVED DEPENDENCY_SCHEMA_REMOVED
        ADDITIONAL_PROPERTIES_ADDED ADDITIONAL_PROPERTIES_EXTENDED
        PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
        REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL
        OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL
        PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL
        PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL
        PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        UNIQUE_ITEMS_REMOVED ADDITIONAL_ITEMS_ADDED ADDITIONAL_ITEMS_EXTENDED
        ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL ITEM_ADDED_TO_CLOSED_CONTENT_MODEL
        ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL
        ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        ENUM_ARRAY_EXTENDED COMBINED_TYPE_EXTENDED PRODUCT_TYPE_NARROWED SUM_TYPE_EXTENDED
        NOT_TYPE_NARROWED;
    incompatible:
        SCHEMA_ADDED TYPE_NARROWED TYPE_CHANGED PATTERN_ADDED PATTERN_CHANGED
        MULTIPLE_OF_ADDED MULTIPLE_OF_EXPANDED MULTIPLE_OF_CHANGED REQUIRED_ATTRIBUTE_ADDED
        ADDITIONAL_PROPERTIES_REMOVED ADDITIONAL_PROPERTIES_NARROWED
        DEPENDENCY_ARRAY_ADDED DEPENDENCY_ARRAY_EXTENDED DEPENDENCY_ARRAY_CHANGED
        DEPENDENCY_SCHEMA_ADDED PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL
        REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL
        PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        UNIQUE_ITEMS_ADDED ADDITIONAL_ITEMS_REMOVED ADDITIONAL_ITEMS_NARROWED
        ITEM_ADDED_TO_OPEN_CONTENT_MODEL ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL
        ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        ENUM_ARRAY_NARROWED ENUM_ARRAY_CHANGED COMBINED_TYPE_CHANGED PRODUCT_TYPE_EXTENDED
        SUM_TYPE_NARROWED COMBINED_TYPE_SUBSCHEMAS_CHANGED NOT_TYPE_EXTENDED
        // Ours: the comparison exceeded `MAX_STEPS`.
        COMPARISON_TOO_COMPLEX;
}

fn is_lower_bound(keyword: &str) -> bool {
    keyword.starts_with("min") || keyword == "exclusiveMinimum"
}

/// How a numeric bound changed.
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    ADDED,
    REMOVED,
    INCREASED,
    DECREASED,
}

/// One difference: its kind and its JSON path relative to the comparison it was found in
/// (segments joined by '/', without the leading "#/").
#[derive(Debug, Clone)]
pub(super) struct Difference {
    pub(super) kind: Kind,
    pub(super) path: String,
}

/// The differences found under one path (Confluent's `Context`, minus the shared state).
#[derive(Debug, Default)]
pub(super) struct Ctx {
    path: Vec<String>,
    pub(super) diffs: Vec<Difference>,
}

impl Ctx {
    pub(super) fn sub(&self) -> Ctx {
        Ctx {
            path: self.path.clone(),
            diffs: Vec::new(),
        }
    }
    pub(super) fn add(&mut self, kind: Kind) {
        self.diffs.push(Difference {
            kind,
            path: self.path.join("/"),
        });
    }
    pub(super) fn add_at(&mut self, attribute: &str, kind: Kind) {
        self.path.push(attribute.to_string());
        self.add(kind);
        self.path.pop();
    }
    pub(super) fn enter(&mut self, segment: &str) {
        self.path.push(escape(segment));
    }
    pub(super) fn leave(&mut self) {
        self.path.pop();
    }
    pub(super) fn is_compatible(&self) -> bool {
        self.diffs.iter().all(|d| d.kind.is_compatible())
    }
    pub(super) fn extend(&mut self, other: Ctx) {
        self.diffs.extend(other.diffs);
    }
    /// Adds differences found relative to a nested pair, rebased onto the current path.
    pub(super) fn add_rebased(&mut self, relative: &[Difference]) {
        let prefix = self.path.join("/");
        self.diffs.extend(relative.iter().map(|d| Difference {
            kind: d.kind,
            path: match (prefix.is_empty(), d.path.is_empty()) {
                (true, _) => d.path.clone(),
                (false, true) => prefix.clone(),
                (false, false) => format!("{prefix}/{}", d.path),
            },
        }));
    }
}

/// A property name as a JSON pointer segment.
pub(super) fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}
