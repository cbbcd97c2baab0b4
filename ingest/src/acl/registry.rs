//! The Schema Registry's [`Access`] on a node (`[registry] authentication = "basic"`):
//! requests authenticate with HTTP basic auth as a Kafka user (the password checked against
//! the user's SCRAM credential, `sasl::credentials`), or with a bearer token of the HTTP
//! listener's token endpoint (`super::http`), and each operation is authorized by the
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

pub use super::subject_topic;
use super::{Operation, ResourceType, Session};
use crate::Broker;

/// The node's [`Access`] for the Schema Registry.
pub struct RegistryAccess {
    broker: Arc<Broker>,
    /// Authentication is the HTTP APIs': basic auth, and the bearer tokens of the catalog's
    /// token endpoint (Confluent's `bearer.auth.token`).
    http: super::http::NodeAccess,
}

impl RegistryAccess {
    /// Tokens are checked against the cluster's signing key; `token_ttl_s` only matters to
    /// tokens issued through the HTTP listener.
    pub fn new(broker: Arc<Broker>, token_ttl_s: u64) -> Self {
        RegistryAccess {
            http: super::http::NodeAccess::new(broker.clone(), token_ttl_s),
            broker,
        }
    }
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

impl Access for RegistryAccess {
    fn authenticate<'a>(
        &'a self,
        authorization: Option<&'a str>,
        peer: Option<IpAddr>,
    ) -> BoxFuture<'a, Result<String, Unauthenticated>> {
        Box::pin(async move {
            use inlet_common::access::{HttpAccess as _, Refused};
            match self.http.authenticate(authorization, peer).await {
                Ok(principal) => Ok(principal),
                Err(Refused::Unauthenticated(why) | Refused::Forbidden(why)) => {
                    Err(Unauthenticated(match authorization {
                        None => "Unauthorized: this registry requires HTTP basic authentication \
                                 (or a bearer token of the HTTP listener)"
                            .into(),
                        Some(_) => why,
                    }))
                }
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
            _ => super::CLUSTER,
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
}
