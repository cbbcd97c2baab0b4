//! Errors of the Kafka endpoint, each mapped to the Kafka error code a client acts on.

use kafka_protocol::ResponseError;

/// An error answered to a Kafka client: the protocol's error code plus a message for the
/// response's `error_message` field (where the version has one) and the log.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct KafkaError {
    pub code: ResponseError,
    pub message: String,
    /// Per-record errors (index in the record set, message) for Produce v8+.
    pub record_errors: Vec<(i32, String)>,
}

impl KafkaError {
    pub fn new(code: ResponseError, message: impl Into<String>) -> Self {
        KafkaError {
            code,
            message: message.into(),
            record_errors: Vec::new(),
        }
    }

    pub fn code(&self) -> i16 {
        self.code.code()
    }

    /// What the caller may do, read off the code as a Kafka client reads it: the protocol's
    /// retriable codes are `Retryable`, the rest the request's fault (`BadInput`).
    pub fn kind(&self) -> inlet_common::ErrorKind {
        if self.code.is_retriable() {
            inlet_common::ErrorKind::Retryable
        } else {
            inlet_common::ErrorKind::BadInput
        }
    }

    pub fn invalid_config(message: impl Into<String>) -> Self {
        Self::new(ResponseError::InvalidConfig, message)
    }

    pub fn unknown_topic(topic: &str) -> Self {
        Self::new(
            ResponseError::UnknownTopicOrPartition,
            format!("topic {topic:?} does not exist"),
        )
    }
}

impl From<inlet_storage::Error> for KafkaError {
    fn from(e: inlet_storage::Error) -> Self {
        use inlet_storage::Error as S;
        let code = match &e {
            S::UnknownStream(_) => ResponseError::UnknownTopicOrPartition,
            S::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
            S::TooLarge { .. } => ResponseError::MessageTooLarge,
            S::InvalidArgument(_) => ResponseError::InvalidRequest,
            S::Corrupt { .. } => ResponseError::CorruptMessage,
            S::Shutdown | S::NotOwner(_) | S::Fenced { .. } => ResponseError::NotLeaderOrFollower,
            // The appends of a failed WAL object were not stored: the client may send them again.
            S::ObjectWal(_) => ResponseError::RequestTimedOut,
            S::WalFailed(_) | S::WalIo { .. } => ResponseError::KafkaStorageError,
            S::ObjectStore { .. } | S::Meta(_) => {
                if e.is_retryable() {
                    ResponseError::RequestTimedOut
                } else {
                    ResponseError::KafkaStorageError
                }
            }
            _ => ResponseError::UnknownServerError,
        };
        KafkaError::new(code, e.to_string())
    }
}

pub(crate) type Result<T, E = KafkaError> = std::result::Result<T, E>;
