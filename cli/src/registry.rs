//! The Schema Registry calls of the producer and the consumer, as Confluent's serializers make
//! them: register a schema under a subject (or look it up, with `auto.register=false`), the
//! subject's latest version (`use.latest.version`), and a schema by id with the schemas it
//! references. Parsed with the registry's own parsers ([`inlet_schema_registry::ParsedSchema`]),
//! so the command line reads a schema exactly as the node does.
//!
//! Authentication: Confluent's `basic.auth.user.info` (`USER:PASSWORD`), or the bearer token in
//! `INLET_TOKEN` (a node whose registry wants tokens).

use std::collections::HashMap;

use inlet_schema_registry::{ParsedSchema, SchemaType};
use serde_json::{json, Value};

use crate::{Failure, Result};

/// A schema as the registry holds it.
#[derive(Debug, Clone)]
pub struct Schema {
    pub id: u32,
    pub parsed: ParsedSchema,
}

/// A registry at one URL.
pub struct Registry {
    base: String,
    client: reqwest::Client,
    basic: Option<(String, String)>,
    /// Schemas by id, parsed once.
    by_id: tokio::sync::Mutex<HashMap<u32, Schema>>,
}

impl Registry {
    /// `url` is the registry's base URL; `user_info` Confluent's `basic.auth.user.info`.
    pub fn new(url: &str, user_info: Option<&str>) -> Result<Registry> {
        let basic = match user_info {
            Some(info) => {
                let (u, p) = info.split_once(':').ok_or_else(|| {
                    Failure::usage("basic.auth.user.info: expected USER:PASSWORD")
                })?;
                Some((u.to_string(), p.to_string()))
            }
            None => None,
        };
        Ok(Registry {
            base: url.trim_end_matches('/').to_string(),
            client: reqwest::Client::new(),
            basic,
            by_id: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// Calls the registry; an answer other than 2xx is a [`Failure`] with the registry's own
    /// message (not found: exit 3).
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut request = self
            .client
            .request(method.clone(), &url)
            .header("Accept", "application/vnd.schemaregistry.v1+json");
        if let Some(b) = body {
            request = request
                .header("Content-Type", "application/vnd.schemaregistry.v1+json")
                .body(b.to_string());
        }
        if let Some((u, p)) = &self.basic {
            request = request.basic_auth(u, Some(p));
        } else if let Ok(token) = std::env::var("INLET_TOKEN") {
            if !token.is_empty() {
                request = request.bearer_auth(token);
            }
        }
        let response = request
            .send()
            .await
            .map_err(|e| Failure::failed(format!("schema registry {}: {e}", self.base)))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
        if status.is_success() {
            return Ok(value);
        }
        let message = value["message"].as_str().unwrap_or(&text).to_string();
        let what = format!("schema registry {method} {path}: {message}");
        Err(match value["error_code"].as_i64() {
            Some(40401..=40403) => Failure::not_found(what),
            Some(42201) => Failure::usage(what),
            _ => Failure::failed(what),
        })
    }

    /// Registers `text` under `subject` (or finds it there already): its id.
    pub async fn register(&self, subject: &str, kind: SchemaType, text: &str) -> Result<u32> {
        let v = self
            .call(
                reqwest::Method::POST,
                &format!("/subjects/{}/versions", crate::path_segment(subject)),
                Some(request_body(kind, text)),
            )
            .await?;
        id_of(&v)
    }

    /// The id `text` has under `subject`, without registering it.
    pub async fn lookup(&self, subject: &str, kind: SchemaType, text: &str) -> Result<u32> {
        let v = self
            .call(
                reqwest::Method::POST,
                &format!("/subjects/{}", crate::path_segment(subject)),
                Some(request_body(kind, text)),
            )
            .await?;
        id_of(&v)
    }

    /// Every subject.
    pub async fn subjects(&self) -> Result<Vec<String>> {
        let v = self.call(reqwest::Method::GET, "/subjects", None).await?;
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// `subject`'s version `version` (a number or `latest`), as the registry answers it
    /// (`subject`, `version`, `id`, `schemaType`, `schema`).
    pub async fn version(&self, subject: &str, version: &str) -> Result<Value> {
        self.call(
            reqwest::Method::GET,
            &format!(
                "/subjects/{}/versions/{}",
                crate::path_segment(subject),
                crate::path_segment(version)
            ),
            None,
        )
        .await
    }

    /// `subject`'s versions, oldest first.
    pub async fn versions(&self, subject: &str) -> Result<Vec<i64>> {
        let v = self
            .call(
                reqwest::Method::GET,
                &format!("/subjects/{}/versions", crate::path_segment(subject)),
                None,
            )
            .await?;
        Ok(v.as_array()
            .map(|a| a.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default())
    }

    /// `subject`'s compatibility level (its own, or the global one).
    pub async fn compatibility(&self, subject: &str) -> Result<String> {
        let v = self
            .call(
                reqwest::Method::GET,
                &format!(
                    "/config/{}?defaultToGlobal=true",
                    crate::path_segment(subject)
                ),
                None,
            )
            .await?;
        Ok(v["compatibilityLevel"].as_str().unwrap_or("?").to_string())
    }

    /// Parses a schema the registry sent (`schemaType`, `schema`, `references`).
    pub async fn parse(&self, v: &Value) -> Result<ParsedSchema> {
        let kind = schema_type(v)?;
        let text = v["schema"].as_str().unwrap_or_default();
        let mut refs = Vec::new();
        self.references(&v["references"], &mut refs, 0).await?;
        ParsedSchema::parse(kind, text, &refs)
            .map_err(|e| Failure::failed(format!("the registry's schema does not parse here: {e}")))
    }

    /// The latest version of `subject`.
    pub async fn latest(&self, subject: &str) -> Result<Schema> {
        let v = self
            .call(
                reqwest::Method::GET,
                &format!("/subjects/{}/versions/latest", crate::path_segment(subject)),
                None,
            )
            .await?;
        let id = id_of(&v)?;
        self.by_id(id).await
    }

    /// The schema with `id`, with the schemas it references (cached).
    pub async fn by_id(&self, id: u32) -> Result<Schema> {
        if let Some(s) = self.by_id.lock().await.get(&id) {
            return Ok(s.clone());
        }
        let v = self
            .call(reqwest::Method::GET, &format!("/schemas/ids/{id}"), None)
            .await?;
        let kind = schema_type(&v)?;
        let text = v["schema"]
            .as_str()
            .ok_or_else(|| Failure::failed(format!("schema {id}: the registry sent no text")))?;
        let mut refs = Vec::new();
        self.references(&v["references"], &mut refs, 0).await?;
        let parsed = ParsedSchema::parse(kind, text, &refs)
            .map_err(|e| Failure::failed(format!("schema {id} does not parse here: {e}")))?;
        let schema = Schema { id, parsed };
        self.by_id.lock().await.insert(id, schema.clone());
        Ok(schema)
    }

    /// The (name, text) pairs of `refs` and of their references, depth first (Confluent's
    /// order: a reference's own references before it).
    async fn references(
        &self,
        refs: &Value,
        out: &mut Vec<(String, String)>,
        depth: usize,
    ) -> Result<()> {
        let Some(list) = refs.as_array() else {
            return Ok(());
        };
        if depth > 16 {
            return Err(Failure::failed("schema references nest deeper than 16"));
        }
        for r in list {
            let (Some(name), Some(subject), Some(version)) = (
                r["name"].as_str(),
                r["subject"].as_str(),
                r["version"].as_i64(),
            ) else {
                continue;
            };
            if out.iter().any(|(n, _)| n == name) {
                continue;
            }
            let v = self
                .call(
                    reqwest::Method::GET,
                    &format!(
                        "/subjects/{}/versions/{version}",
                        crate::path_segment(subject)
                    ),
                    None,
                )
                .await?;
            Box::pin(self.references(&v["references"], out, depth + 1)).await?;
            let text = v["schema"].as_str().unwrap_or_default().to_string();
            out.push((name.to_string(), text));
        }
        Ok(())
    }
}

fn request_body(kind: SchemaType, text: &str) -> Value {
    match kind {
        SchemaType::Avro => json!({ "schema": text }),
        other => json!({ "schema": text, "schemaType": other.as_str() }),
    }
}

fn id_of(v: &Value) -> Result<u32> {
    v["id"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| Failure::failed(format!("the registry answered without an id: {v}")))
}

fn schema_type(v: &Value) -> Result<SchemaType> {
    SchemaType::parse(v["schemaType"].as_str()).map_err(|e| Failure::failed(e.to_string()))
}
