//! The operations a client may perform on a resource, as Kafka reports them when a client asks
//! (KIP-430: Metadata's `include_*_authorized_operations`, DescribeCluster's and
//! DescribeGroups' `include_*authorized_operations`): a bit field with bit `1 << code` set for
//! each allowed ACL operation, or [`NOT_ASKED`] when the client did not ask.
//!
//! Inlet has no authorizer yet (docs/architecture.md, "What is not built"), so, as a Kafka
//! broker without one answers, every operation a resource type supports is allowed. When
//! ACLs come, these become the authorizer's answers for the client's principal.

/// What Kafka answers when the client did not ask (`Integer.MIN_VALUE`).
pub(crate) const NOT_ASKED: i32 = i32::MIN;

// Kafka's `AclOperation` codes.
const READ: u8 = 3;
const WRITE: u8 = 4;
const CREATE: u8 = 5;
const DELETE: u8 = 6;
const ALTER: u8 = 7;
const DESCRIBE: u8 = 8;
const CLUSTER_ACTION: u8 = 9;
const DESCRIBE_CONFIGS: u8 = 10;
const ALTER_CONFIGS: u8 = 11;
const IDEMPOTENT_WRITE: u8 = 12;

const fn bits(ops: &[u8]) -> i32 {
    let mut field = 0i32;
    let mut i = 0;
    while i < ops.len() {
        field |= 1 << ops[i];
        i += 1;
    }
    field
}

/// Every operation Kafka defines on a topic.
const TOPIC: i32 = bits(&[
    READ,
    WRITE,
    CREATE,
    DELETE,
    ALTER,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
]);
/// Every operation Kafka defines on the cluster.
const CLUSTER: i32 = bits(&[
    CREATE,
    ALTER,
    DESCRIBE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
]);
/// Every operation Kafka defines on a consumer group.
const GROUP: i32 = bits(&[READ, DELETE, DESCRIBE]);

/// A topic's field, if `asked`.
pub(crate) fn topic(asked: bool) -> i32 {
    if asked {
        TOPIC
    } else {
        NOT_ASKED
    }
}

/// The cluster's field, if `asked`.
pub(crate) fn cluster(asked: bool) -> i32 {
    if asked {
        CLUSTER
    } else {
        NOT_ASKED
    }
}

/// A group's field, if `asked`.
pub(crate) fn group(asked: bool) -> i32 {
    if asked {
        GROUP
    } else {
        NOT_ASKED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_hold_as_many_operations_as_kafka_defines_per_resource() {
        assert_eq!(topic(true).count_ones(), 8);
        assert_eq!(cluster(true).count_ones(), 7);
        assert_eq!(group(true).count_ones(), 3);
        // READ (3), DELETE (6) and DESCRIBE (8) for a group.
        assert_eq!(group(true), 0b1_0100_1000);
        assert_eq!(topic(false), i32::MIN);
    }
}
