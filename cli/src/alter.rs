//! A topic's configs changed with Kafka's IncrementalAlterConfigs (KIP-339): only the names
//! given change, in one request, and the node's reason comes back when it refuses. The `rdkafka`
//! crate's admin client offers only AlterConfigs, which replaces a topic's whole set and drops
//! the node's per-topic error (its result lists the resources without their errors), so this
//! calls librdkafka's own IncrementalAlterConfigs through its C API.
//!
//! Invariant: every librdkafka handle created here is destroyed before the function returns
//! (each is held by a [`Owned`] guard).

use std::ffi::{c_char, CStr, CString};

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};
use rdkafka::types::RDKafkaErrorCode;

use crate::kafka::TIMEOUT;
use crate::{Failure, Result};

/// One change to a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Set(String, String),
    /// Back to its default.
    Delete(String),
}

/// A librdkafka handle destroyed on drop.
struct Owned<T> {
    ptr: *mut T,
    destroy: unsafe extern "C" fn(*mut T),
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr` came from the constructor `destroy` pairs with, and is destroyed
            // once, here.
            unsafe { (self.destroy)(self.ptr) }
        }
    }
}

fn c_string(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Failure::usage(format!("{s:?} holds a NUL byte")))
}

/// # Safety
/// `p` is null or a NUL-terminated string librdkafka owns, alive for this call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: as the caller promises.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Applies `changes` to `topic`'s configs through `client`; the node's reason when it refuses.
pub fn alter_topic<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    changes: &[Change],
) -> Result<()> {
    let rk = client.native_ptr();
    let name = c_string(topic)?;
    let mut args = Vec::new();
    for change in changes {
        let (key, value, op) = match change {
            Change::Set(k, v) => (
                c_string(k)?,
                Some(c_string(v)?),
                rd::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_SET,
            ),
            Change::Delete(k) => (
                c_string(k)?,
                None,
                rd::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_DELETE,
            ),
        };
        args.push((key, value, op));
    }
    let timeout_ms = TIMEOUT.as_millis() as i32;
    // SAFETY: `rk` is the live client's handle for the whole call; every handle created below
    // is owned by a guard that destroys it once; strings passed in outlive the calls that read
    // them; pointers read back (results, error strings) belong to the event, which outlives
    // their use.
    unsafe {
        let resource = Owned {
            ptr: rd::rd_kafka_ConfigResource_new(
                rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
                name.as_ptr(),
            ),
            destroy: rd::rd_kafka_ConfigResource_destroy,
        };
        for (key, value, op) in &args {
            let value = value.as_ref().map_or(std::ptr::null(), |v| v.as_ptr());
            let error = rd::rd_kafka_ConfigResource_add_incremental_config(
                resource.ptr,
                key.as_ptr(),
                *op,
                value,
            );
            if !error.is_null() {
                let message = text(rd::rd_kafka_error_string(error));
                rd::rd_kafka_error_destroy(error);
                return Err(Failure::usage(format!(
                    "{}: {message}",
                    key.to_string_lossy()
                )));
            }
        }
        let queue = Owned {
            ptr: rd::rd_kafka_queue_new(rk),
            destroy: rd::rd_kafka_queue_destroy,
        };
        let options = Owned {
            ptr: rd::rd_kafka_AdminOptions_new(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_INCREMENTALALTERCONFIGS,
            ),
            destroy: rd::rd_kafka_AdminOptions_destroy,
        };
        let mut error_text = [0 as c_char; 512];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options.ptr,
            timeout_ms,
            error_text.as_mut_ptr(),
            error_text.len(),
        );
        let mut resources = [resource.ptr];
        rd::rd_kafka_IncrementalAlterConfigs(rk, resources.as_mut_ptr(), 1, options.ptr, queue.ptr);
        let event = Owned {
            ptr: rd::rd_kafka_queue_poll(queue.ptr, timeout_ms.saturating_mul(2)),
            destroy: rd::rd_kafka_event_destroy,
        };
        if event.ptr.is_null() {
            return Err(Failure::failed(format!(
                "no answer to IncrementalAlterConfigs for topic {topic} within {} s",
                TIMEOUT.as_secs() * 2
            )));
        }
        let code = rd::rd_kafka_event_error(event.ptr);
        if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(Failure::failed(format!(
                "topic {topic}'s configs: {}",
                text(rd::rd_kafka_event_error_string(event.ptr))
            )));
        }
        let result = rd::rd_kafka_event_IncrementalAlterConfigs_result(event.ptr);
        if result.is_null() {
            return Err(Failure::failed(
                "IncrementalAlterConfigs: an answer of another kind",
            ));
        }
        let mut n = 0;
        let answered = rd::rd_kafka_IncrementalAlterConfigs_result_resources(result, &mut n);
        for i in 0..n {
            let r = *answered.add(i);
            let code = rd::rd_kafka_ConfigResource_error(r);
            if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                let reason = text(rd::rd_kafka_ConfigResource_error_string(r));
                let code = RDKafkaErrorCode::from(code);
                return Err(if code == RDKafkaErrorCode::UnknownTopicOrPartition {
                    Failure::not_found(format!("topic {topic} does not exist"))
                } else {
                    Failure::failed(format!(
                        "topic {topic}'s configs were not changed: {reason}"
                    ))
                });
            }
        }
    }
    Ok(())
}
