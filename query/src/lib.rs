//! Embedded DataFusion SQL over the catalog (DESIGN.md §6): `inlet query` and
//! `POST /v1/query`, read-only.
//!
//! Not built yet: the query issue builds this crate. Until then it only proves that the pinned
//! `datafusion` crate runs a query with this toolchain.

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    #[tokio::test]
    async fn datafusion_runs_a_query() {
        let ctx = SessionContext::new();
        let batches = ctx
            .sql("SELECT 40 + 2 AS answer")
            .await
            .expect("plan")
            .collect()
            .await
            .expect("run");
        let answer = batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>()
            .expect("int64")
            .value(0);
        assert_eq!(answer, 42);
    }
}
