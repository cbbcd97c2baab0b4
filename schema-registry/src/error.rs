//! Errors of the registry, each with the Confluent error code and HTTP status its REST API
//! answers with, so clients (`SchemaRegistryError.error_code`) see what Confluent's would send.

/// The registry's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of the registry. `Display` is the message a client sees.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Subject '{0}' not found.")]
    SubjectNotFound(String),
    #[error("Version {version} not found for subject '{subject}'.")]
    VersionNotFound { subject: String, version: String },
    #[error("Schema {0} not found")]
    SchemaIdNotFound(u32),
    #[error("Schema not found under subject '{0}'")]
    SchemaNotFound(String),
    #[error("Subject '{0}' was soft deleted. Set permanent=true to delete permanently")]
    SubjectSoftDeleted(String),
    #[error("Subject '{0}' was not deleted first before being permanently deleted")]
    SubjectNotSoftDeleted(String),
    #[error("Version {version} of subject '{subject}' was soft deleted. Set permanent=true to delete permanently")]
    VersionSoftDeleted { subject: String, version: u32 },
    #[error("Version {version} of subject '{subject}' was not deleted first before being permanently deleted")]
    VersionNotSoftDeleted { subject: String, version: u32 },
    #[error("Subject '{0}' does not have subject-level compatibility configured")]
    SubjectConfigNotFound(String),
    #[error("Subject '{0}' does not have subject-level mode configured")]
    SubjectModeNotFound(String),
    #[error("Schema being registered is incompatible with an earlier schema for subject \"{subject}\": {}", messages.join("; "))]
    Incompatible {
        subject: String,
        messages: Vec<String>,
    },
    #[error("Invalid schema: {0}")]
    InvalidSchema(String),
    #[error("The specified version '{0}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"")]
    InvalidVersion(String),
    #[error("Invalid compatibility level {0:?}. Valid values are NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE")]
    InvalidCompatibility(String),
    #[error("Invalid mode {0:?}. Valid values are READWRITE, READONLY, IMPORT")]
    InvalidMode(String),
    #[error("Subject {0:?} is in read-only mode")]
    ReadOnly(String),
    #[error("{0}")]
    NotPermitted(String),
    #[error("One or more references exist to the schema {{subject={subject}, version={version}}}: referenced by schema ids {ids:?}")]
    ReferenceExists {
        subject: String,
        version: u32,
        ids: Vec<u32>,
    },
    #[error("{0}")]
    IdConflict(String),
    #[error("Unrecognized field or malformed request: {0}")]
    BadRequest(String),
    /// The metadata store failed (its message says "metadata store error: ...").
    #[error("{0}")]
    Store(#[source] inlet_storage::Error),
    /// What the registry stored does not read back (a schema that no longer parses, an
    /// unknown type, references that are not JSON).
    #[error("stored registry data is corrupt: {0}")]
    Corrupt(String),
    #[error("invalid registry config: {0}")]
    Config(String),
}

impl Error {
    /// The Confluent error code of the error body.
    pub fn error_code(&self) -> u32 {
        match self {
            Error::SubjectNotFound(_) => 40401,
            Error::VersionNotFound { .. } => 40402,
            Error::SchemaIdNotFound(_) | Error::SchemaNotFound(_) => 40403,
            Error::SubjectSoftDeleted(_) => 40404,
            Error::SubjectNotSoftDeleted(_) => 40405,
            Error::VersionSoftDeleted { .. } => 40406,
            Error::VersionNotSoftDeleted { .. } => 40407,
            Error::SubjectConfigNotFound(_) => 40408,
            Error::SubjectModeNotFound(_) => 40409,
            Error::Incompatible { .. } => 409,
            Error::InvalidSchema(_) => 42201,
            Error::InvalidVersion(_) => 42202,
            Error::InvalidCompatibility(_) => 42203,
            Error::InvalidMode(_) => 42204,
            Error::ReadOnly(_) | Error::NotPermitted(_) => 42205,
            Error::ReferenceExists { .. } => 42206,
            Error::IdConflict(_) => 42207,
            Error::BadRequest(_) => 400,
            Error::Store(_) | Error::Corrupt(_) => 50001,
            Error::Config(_) => 50003,
        }
    }

    /// The HTTP status of the answer.
    pub fn http_status(&self) -> u16 {
        match self.error_code() {
            400 => 400,
            409 => 409,
            c if (40400..40500).contains(&c) => 404,
            c if (42200..42300).contains(&c) => 422,
            _ => 500,
        }
    }

    /// What the caller may do: a store failure has the store's kind, stored data that does
    /// not read back is `Corruption`, and everything else is the request's fault.
    pub fn kind(&self) -> inlet_common::ErrorKind {
        match self {
            Error::Store(e) => e.kind(),
            Error::Corrupt(_) => inlet_common::ErrorKind::Corruption,
            _ => inlet_common::ErrorKind::BadInput,
        }
    }

    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        self.kind().is_retryable()
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::Store(inlet_storage::Error::Meta(e))
    }
}

impl From<inlet_storage::Error> for Error {
    fn from(e: inlet_storage::Error) -> Self {
        Error::Store(e)
    }
}
