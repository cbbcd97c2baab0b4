//! The Schema Registry's [`Access`] on a node (`[registry] authentication = "basic"`):
//! requests authenticate with HTTP basic auth as a Kafka user (the password checked against
//! the user's SCRAM credential, `sasl::credentials`), and each operation is authorized by the
//! Kafka ACLs of the subject's topic, through the node's [`Authorizer`](super::Authorizer):
//! the same bindings, `super.users` and `allow.everyone.if.no.acl.found`, changed through any
//! node and enforced here as soon as this node has loaded them.
//!
//! | registry operation | Kafka operation | resource |
//! |---|---|---|
//! | SUBJECT_READ (and SCHEMA_READ, through a subject) | DESCRIBE (READ and WRITE imply it) | the subject's topic |
//! | SUBJECT_WRITE | WRITE | the subject's topic |
//! | SUBJECT_DELETE | DELETE | the subject's topic |
//! | SUBJECT_COMPATIBILITY_READ / _WRITE | DESCRIBE_CONFIGS / ALTER_CONFIGS | the subject's topic |
//! | GLOBAL_COMPATIBILITY_READ / _WRITE | DESCRIBE_CONFIGS / ALTER_CONFIGS | the cluster |
//!
//! A subject's topic is `T` for TopicNameStrategy's `T-key` and `T-value`; any other subject
//! (RecordNameStrategy's record name, TopicRecordNameStrategy's `T-record.Name`, which a
//! PREFIXED binding on `T` covers) is its own topic name. So a producer allowed to WRITE a
//! topic registers its schemas, a consumer allowed to READ it reads them, and deleting
//! subjects or changing their compatibility takes what deleting or reconfiguring the topic
//! takes. With the Kafka authorizer off, every authenticated user may do everything.

use std::net::IpAddr;
use std::sync::Arc;

use inlet_schema_registry::{access::BoxFuture, Access, Operation as RegistryOp, Unauthenticated};

use super::{Operation, ResourceType, Session};
use crate::sasl::credentials;
use crate::Broker;

/// The node's [`Access`] for the Schema Registry.
pub struct RegistryAccess {
    broker: Arc<Broker>,
}

impl RegistryAccess {
    pub fn new(broker: Arc<Broker>) -> Self {
        RegistryAccess { broker }
    }
}

/// The topic whose ACLs decide for `subject` (see the module doc).
pub fn subject_topic(subject: &str) -> &str {
    subject
        .strip_suffix("-value")
        .or_else(|| subject.strip_suffix("-key"))
        .filter(|t| !t.is_empty())
        .unwrap_or(subject)
}

/// The Kafka operation and resource type that decide for `op`.
fn kafka_operation(op: RegistryOp) -> (Operation, ResourceType) {
    match op {
        RegistryOp::SubjectRead => (Operation::Describe, ResourceType::Topic),
        RegistryOp::SubjectWrite => (Operation::Write, ResourceType::Topic),
        RegistryOp::SubjectDelete => (Operation::Delete, ResourceType::Topic),
        RegistryOp::SubjectCompatibilityRead => (Operation::DescribeConfigs, ResourceType::Topic),
        RegistryOp::SubjectCompatibilityWrite => (Operation::AlterConfigs, ResourceType::Topic),
        RegistryOp::GlobalCompatibilityRead => (Operation::DescribeConfigs, ResourceType::Cluster),
        RegistryOp::GlobalCompatibilityWrite => (Operation::AlterConfigs, ResourceType::Cluster),
    }
}

/// The user and password of a `Basic` `Authorization` header.
fn basic_credentials(authorization: &str) -> Result<(String, String), String> {
    let (scheme, encoded) = authorization
        .split_once(' ')
        .ok_or("the Authorization header is not of the form `Basic <credentials>`")?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(format!(
            "the {scheme} scheme is not accepted here: use HTTP basic authentication"
        ));
    }
    super::http::basic_credentials(encoded)
}

impl Access for RegistryAccess {
    fn authenticate<'a>(
        &'a self,
        authorization: Option<&'a str>,
        peer: Option<IpAddr>,
    ) -> BoxFuture<'a, Result<String, Unauthenticated>> {
        Box::pin(async move {
            let refuse = |why: String| {
                tracing::info!(peer = ?peer, reason = %why, "schema registry authentication failed");
                Unauthenticated(why)
            };
            let Some(authorization) = authorization else {
                return Err(Unauthenticated(
                    "Unauthorized: this registry requires HTTP basic authentication".into(),
                ));
            };
            let (user, password) = basic_credentials(authorization).map_err(refuse)?;
            match credentials::verify_password(self.broker.store().meta(), &user, &password).await {
                Ok(true) => Ok(format!("User:{user}")),
                Ok(false) => Err(refuse(format!("invalid credentials for user {user:?}"))),
                Err(e) => Err(refuse(format!(
                    "reading the credentials failed: {}",
                    e.message
                ))),
            }
        })
    }

    fn allows(
        &self,
        principal: &str,
        peer: Option<IpAddr>,
        op: RegistryOp,
        subject: Option<&str>,
    ) -> bool {
        let (operation, resource) = kafka_operation(op);
        let name = match (resource, subject) {
            (ResourceType::Topic, Some(s)) => subject_topic(s),
            (ResourceType::Topic, None) => return false,
            _ => super::enforce::CLUSTER,
        };
        let session = Session {
            principal: principal.to_owned(),
            host: peer.map(|p| p.to_string()).unwrap_or_default(),
            listener: "REGISTRY".into(),
        };
        self.broker
            .authorizer
            .allows(&session, operation, resource, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_is_decided_by_its_topic() {
        assert_eq!(subject_topic("orders-value"), "orders");
        assert_eq!(subject_topic("orders-key"), "orders");
        assert_eq!(
            subject_topic("orders-com.acme.Order"),
            "orders-com.acme.Order"
        );
        assert_eq!(subject_topic("com.acme.Order"), "com.acme.Order");
        assert_eq!(subject_topic("-value"), "-value");
    }

    #[test]
    fn basic_credentials_are_read_or_refused_with_the_reason() {
        use base64::Engine as _;
        let header = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("alice:s3cr:et")
        );
        assert_eq!(
            basic_credentials(&header),
            Ok(("alice".into(), "s3cr:et".into()))
        );
        assert!(basic_credentials("Bearer abc")
            .unwrap_err()
            .contains("Bearer"));
        assert!(basic_credentials("Basic !!!")
            .unwrap_err()
            .contains("base64"));
        assert!(basic_credentials("Basic").is_err());
        let no_colon = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("alice")
        );
        assert!(basic_credentials(&no_colon)
            .unwrap_err()
            .contains("user:password"));
    }
}
