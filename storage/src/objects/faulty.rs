//! A fault-injecting object store wrapper for tests: make a chosen kind of call fail, hang for
//! a while, or succeed on the store and then report failure (the "did my PUT land?" case), and
//! count calls so tests can assert what was (and was not) asked of the store.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use parking_lot::Mutex;

/// A kind of object store call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Put,
    Get,
    Delete,
    List,
    Copy,
}

/// What to do to the next calls of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fail without touching the store.
    Fail,
    /// Wait this long, then perform the call.
    Delay(Duration),
    /// Perform the call, then report failure.
    FailAfterWrite,
}

#[derive(Debug, Default)]
struct Plan {
    /// Per op: fault and how many more calls it applies to (`None`: every call).
    faults: HashMap<Op, (Fault, Option<u64>)>,
    calls: HashMap<Op, u64>,
}

/// Wraps a store and injects the faults it is told to.
#[derive(Debug, Clone)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    plan: Arc<Mutex<Plan>>,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        FaultyStore {
            inner,
            plan: Arc::default(),
        }
    }

    /// The wrapped store, for tests that look behind the wrapper.
    pub fn inner(&self) -> Arc<dyn ObjectStore> {
        self.inner.clone()
    }

    /// Applies `fault` to the next `times` calls of kind `op` (`None`: until cleared).
    pub fn inject(&self, op: Op, fault: Fault, times: Option<u64>) {
        self.plan.lock().faults.insert(op, (fault, times));
    }

    /// Stops injecting faults into calls of kind `op`.
    pub fn clear(&self, op: Op) {
        self.plan.lock().faults.remove(&op);
    }

    /// How many calls of kind `op` were made, faulty ones included.
    pub fn calls(&self, op: Op) -> u64 {
        self.plan.lock().calls.get(&op).copied().unwrap_or(0)
    }

    fn take_fault(&self, op: Op) -> Option<Fault> {
        let mut plan = self.plan.lock();
        *plan.calls.entry(op).or_default() += 1;
        let (fault, times) = plan.faults.get_mut(&op)?;
        let fault = *fault;
        match times {
            Some(0) => {
                plan.faults.remove(&op);
                return None;
            }
            Some(n) => *n -= 1,
            None => {}
        }
        Some(fault)
    }

    fn injected(op: Op) -> object_store::Error {
        object_store::Error::Generic {
            store: "faulty",
            source: format!("injected {op:?} failure").into(),
        }
    }

    async fn run<T, Fut>(&self, op: Op, call: Fut) -> object_store::Result<T>
    where
        Fut: std::future::Future<Output = object_store::Result<T>>,
    {
        match self.take_fault(op) {
            None => call.await,
            Some(Fault::Fail) => Err(Self::injected(op)),
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                call.await
            }
            Some(Fault::FailAfterWrite) => {
                call.await?;
                Err(Self::injected(op))
            }
        }
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Faulty({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.run(Op::Put, self.inner.put_opts(location, payload, opts))
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.run(Op::Put, self.inner.put_multipart_opts(location, opts))
            .await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.run(Op::Get, self.inner.get_opts(location, options))
            .await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.run(Op::Get, self.inner.get_ranges(location, ranges))
            .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let this = self.clone();
        locations
            .then(move |location| {
                let this = this.clone();
                async move {
                    let location = location?;
                    let inner = this.inner.clone();
                    let path = location.clone();
                    this.run(Op::Delete, async move {
                        let mut out =
                            inner.delete_stream(futures::stream::iter([Ok(path)]).boxed());
                        match out.next().await {
                            Some(r) => r.map(|_| ()),
                            None => Ok(()),
                        }
                    })
                    .await
                    .map(|_| location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        *self.plan.lock().calls.entry(Op::List).or_default() += 1;
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        *self.plan.lock().calls.entry(Op::List).or_default() += 1;
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.run(Op::List, self.inner.list_with_delimiter(prefix))
            .await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.run(Op::Copy, self.inner.copy_opts(from, to, options))
            .await
    }
}
