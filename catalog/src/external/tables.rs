//! Reads and DDL against an external REST catalog, as iceberg's [`Catalog`]: each call is the
//! spec's route through [`RestClient`] (so it carries the catalog's authentication, SigV4
//! included), and every table it returns reads and writes its files through the node's file IO
//! (the catalog's vended credentials are not used).
//!
//! Errors: a 404 is `NamespaceNotFound` or `TableNotFound` (by the answer's `type`, else by
//! the call), a 409 on a create is `…AlreadyExists`, a 400 or 422 `DataInvalid`, a request that
//! never reached the catalog or a 429/502/503/504 is retryable `Unexpected`; anything else is
//! `Unexpected` with the catalog's message.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use iceberg::io::FileIO;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation,
    TableIdent,
};
use iceberg_catalog_rest::{
    CreateNamespaceRequest, CreateTableRequest, ListNamespaceResponse, ListTablesResponse,
    LoadTableResult, NamespaceResponse, RegisterTableRequest, RenameTableRequest,
};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::client::{error_type, message, table_path, RestClient};
use crate::rest::RestError;

/// The external catalog's tables and namespaces.
#[derive(Debug)]
pub(crate) struct RestTables {
    client: Arc<RestClient>,
    file_io: FileIO,
}

/// What a 404 or 409 answer stands for in the call that got it.
#[derive(Clone, Copy)]
enum Subject {
    Namespace,
    Table,
}

impl RestTables {
    pub(crate) fn new(client: Arc<RestClient>, file_io: FileIO) -> Self {
        RestTables { client, file_io }
    }

    /// One call; the answer's body when its status is one of `ok`.
    async fn call(
        &self,
        method: Method,
        path: &[String],
        query: &[(&str, &str)],
        body: Option<Vec<u8>>,
        subject: Subject,
        ok: &[StatusCode],
    ) -> Result<Bytes> {
        let (status, answer) = self
            .client
            .call(method, path, query, body)
            .await
            .map_err(unreached)?;
        if ok.contains(&status) {
            return Ok(answer);
        }
        Err(answer_error(status, &answer, subject))
    }

    async fn get<T: DeserializeOwned>(
        &self,
        path: &[String],
        query: &[(&str, &str)],
        subject: Subject,
    ) -> Result<T> {
        let answer = self
            .call(Method::GET, path, query, None, subject, &[StatusCode::OK])
            .await?;
        parse(&answer)
    }

    async fn post<T: DeserializeOwned>(
        &self,
        path: &[String],
        body: &impl Serialize,
        subject: Subject,
    ) -> Result<T> {
        let answer = self
            .call(
                Method::POST,
                path,
                &[],
                Some(encode(body)?),
                subject,
                &[StatusCode::OK],
            )
            .await?;
        parse(&answer)
    }

    /// Whether `path` exists (`HEAD`).
    async fn exists(&self, path: &[String], subject: Subject) -> Result<bool> {
        let (status, answer) = self
            .client
            .call(Method::HEAD, path, &[], None)
            .await
            .map_err(unreached)?;
        match status {
            StatusCode::OK | StatusCode::NO_CONTENT => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            status => Err(answer_error(status, &answer, subject)),
        }
    }

    /// A table read from the catalog's answer, on the node's file IO.
    fn table(&self, ident: TableIdent, result: LoadTableResult) -> Result<Table> {
        let builder = Table::builder()
            .identifier(ident)
            .file_io(self.file_io.clone())
            .metadata(result.metadata)
            .runtime(iceberg::Runtime::current());
        match result.metadata_location {
            Some(location) => builder.metadata_location(location).build(),
            None => builder.build(),
        }
    }
}

#[async_trait]
impl Catalog for RestTables {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        let parent = parent.map(NamespaceIdent::to_url_string);
        let mut namespaces = Vec::new();
        let mut page: Option<String> = None;
        loop {
            let mut query = Vec::new();
            if let Some(parent) = &parent {
                query.push(("parent", parent.as_str()));
            }
            if let Some(page) = &page {
                query.push(("pageToken", page.as_str()));
            }
            let answer: ListNamespaceResponse = self
                .get(&["namespaces".to_string()], &query, Subject::Namespace)
                .await?;
            namespaces.extend(answer.namespaces);
            match answer.next_page_token.filter(|t| !t.is_empty()) {
                Some(token) => page = Some(token),
                None => return Ok(namespaces),
            }
        }
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        let answer: NamespaceResponse = self
            .post(
                &["namespaces".to_string()],
                &CreateNamespaceRequest {
                    namespace: namespace.clone(),
                    properties,
                },
                Subject::Namespace,
            )
            .await?;
        Ok(Namespace::from(answer))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        let answer: NamespaceResponse = self
            .get(&namespace_path(namespace), &[], Subject::Namespace)
            .await?;
        Ok(Namespace::from(answer))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.exists(&namespace_path(namespace), Subject::Namespace)
            .await
    }

    async fn update_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> Result<()> {
        // The REST route takes removals and updates, not a whole property map: the node's
        // `/iceberg` forwards such requests as they are (`RestClient::update_namespace_properties`).
        Err(Error::new(
            ErrorKind::FeatureUnsupported,
            "replacing a namespace's properties: the REST route takes updates and removals",
        ))
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.call(
            Method::DELETE,
            &namespace_path(namespace),
            &[],
            None,
            Subject::Namespace,
            &[StatusCode::OK, StatusCode::NO_CONTENT],
        )
        .await
        .map(drop)
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        let mut path = namespace_path(namespace);
        path.push("tables".to_string());
        let mut tables = Vec::new();
        let mut page: Option<String> = None;
        loop {
            let query: Vec<(&str, &str)> = page.iter().map(|p| ("pageToken", p.as_str())).collect();
            let answer: ListTablesResponse = self.get(&path, &query, Subject::Namespace).await?;
            tables.extend(answer.identifiers);
            match answer.next_page_token.filter(|t| !t.is_empty()) {
                Some(token) => page = Some(token),
                None => return Ok(tables),
            }
        }
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        let mut path = namespace_path(namespace);
        path.push("tables".to_string());
        let request = CreateTableRequest {
            name: creation.name,
            location: creation.location,
            schema: creation.schema,
            partition_spec: creation.partition_spec,
            write_order: creation.sort_order,
            stage_create: Some(false),
            properties: creation.properties,
        };
        // A 404 here is the namespace; a 409, the table.
        let answer = self
            .call(
                Method::POST,
                &path,
                &[],
                Some(encode(&request)?),
                Subject::Table,
                &[StatusCode::OK],
            )
            .await
            .map_err(|e| match e.kind() {
                ErrorKind::TableNotFound => {
                    Error::new(ErrorKind::NamespaceNotFound, e.message().to_string())
                }
                _ => e,
            })?;
        let result: LoadTableResult = parse(&answer)?;
        if result.metadata_location.is_none() {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                "the external catalog's answer to create_table has no metadata-location",
            ));
        }
        self.table(ident, result)
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        let result: LoadTableResult = self.get(&table_path(table), &[], Subject::Table).await?;
        self.table(table.clone(), result)
    }

    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.call(
            Method::DELETE,
            &table_path(table),
            &[],
            None,
            Subject::Table,
            &[StatusCode::OK, StatusCode::NO_CONTENT],
        )
        .await
        .map(drop)
    }

    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.call(
            Method::DELETE,
            &table_path(table),
            &[("purgeRequested", "true")],
            None,
            Subject::Table,
            &[StatusCode::OK, StatusCode::NO_CONTENT],
        )
        .await
        .map(drop)
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        self.exists(&table_path(table), Subject::Table).await
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        let body = RenameTableRequest {
            source: src.clone(),
            destination: dest.clone(),
        };
        self.call(
            Method::POST,
            &["tables".to_string(), "rename".to_string()],
            &[],
            Some(encode(&body)?),
            Subject::Table,
            &[StatusCode::OK, StatusCode::NO_CONTENT],
        )
        .await
        .map(drop)
    }

    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        let mut path = namespace_path(table.namespace());
        path.push("register".to_string());
        let body = RegisterTableRequest {
            name: table.name().to_string(),
            metadata_location,
            overwrite: None,
        };
        let result: LoadTableResult = self.post(&path, &body, Subject::Table).await?;
        self.table(table.clone(), result)
    }

    async fn update_table(&self, mut commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let answer = self
            .client
            .commit(&ident, commit.take_requirements(), commit.take_updates())
            .await
            .map_err(|e| match e {
                RestError::CommitFailed(m) => Error::new(ErrorKind::CatalogCommitConflicts, m),
                RestError::NoSuchTable(m) => Error::new(ErrorKind::TableNotFound, m),
                RestError::NoSuchNamespace(m) => Error::new(ErrorKind::NamespaceNotFound, m),
                RestError::BadRequest(m) => Error::new(ErrorKind::DataInvalid, m),
                RestError::ServiceUnavailable(m) => {
                    Error::new(ErrorKind::Unexpected, m).with_retryable(true)
                }
                other => Error::new(ErrorKind::Unexpected, other.to_string()),
            })?;
        Table::builder()
            .identifier(ident)
            .file_io(self.file_io.clone())
            .metadata(answer.metadata)
            .metadata_location(answer.metadata_location)
            .runtime(iceberg::Runtime::current())
            .build()
    }
}

/// `namespaces/{ns}`.
fn namespace_path(namespace: &NamespaceIdent) -> Vec<String> {
    vec!["namespaces".to_string(), namespace.to_url_string()]
}

fn encode(body: &impl Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec(body)
        .map_err(|e| Error::new(ErrorKind::DataInvalid, "cannot encode the request").with_source(e))
}

fn parse<T: DeserializeOwned>(answer: &[u8]) -> Result<T> {
    serde_json::from_slice(answer).map_err(|e| {
        Error::new(
            ErrorKind::DataInvalid,
            "the external catalog's answer does not parse",
        )
        .with_source(e)
    })
}

/// A request that got no answer: retryable when it never reached the catalog.
fn unreached(err: RestError) -> Error {
    let retryable = matches!(err, RestError::ServiceUnavailable(_));
    Error::new(ErrorKind::Unexpected, err.to_string()).with_retryable(retryable)
}

/// What an answer's error status means for a call about `subject`.
fn answer_error(status: StatusCode, body: &[u8], subject: Subject) -> Error {
    let text = format!("external catalog answered {status}: {}", message(body));
    let kind = error_type(body);
    match status.as_u16() {
        404 if kind.contains("Namespace") => Error::new(ErrorKind::NamespaceNotFound, text),
        404 if kind.contains("Table") => Error::new(ErrorKind::TableNotFound, text),
        404 => match subject {
            Subject::Namespace => Error::new(ErrorKind::NamespaceNotFound, text),
            Subject::Table => Error::new(ErrorKind::TableNotFound, text),
        },
        409 if kind.contains("AlreadyExists") || kind.is_empty() => match subject {
            Subject::Namespace => Error::new(ErrorKind::NamespaceAlreadyExists, text),
            Subject::Table => Error::new(ErrorKind::TableAlreadyExists, text),
        },
        400 | 422 => Error::new(ErrorKind::DataInvalid, text),
        429 | 502 | 503 | 504 => Error::new(ErrorKind::Unexpected, text).with_retryable(true),
        _ => Error::new(ErrorKind::Unexpected, text),
    }
}
