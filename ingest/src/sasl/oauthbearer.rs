//! SASL/OAUTHBEARER (RFC 7628, Kafka's KIP-255 and KIP-768): a client authenticates with a JWT
//! bearer token, and the connection's principal is the token's subject.
//!
//! Two kinds of token are accepted:
//! - **An identity provider's**, checked as Kafka's `OAuthBearerValidatorCallbackHandler`
//!   checks it, with Kafka's broker configs: the signature against the provider's keys
//!   (`sasl.oauthbearer.jwks.endpoint.url`, an `https:`, `http:` or `file:` URL of a JSON Web
//!   Key Set; RS256/384/512, PS256/384/512, ES256 and ES384), the expiry (`exp`, required) and
//!   `nbf` within `sasl.oauthbearer.clock.skew.seconds`, the issuer
//!   (`sasl.oauthbearer.expected.issuer`) and an audience (`sasl.oauthbearer.expected.audience`,
//!   a list) where configured, and the subject claim (`sasl.oauthbearer.sub.claim.name`, `sub`).
//! - **Inlet's own** (HS256, issued by the HTTP listener's token endpoint, `/v1/oauth/tokens`,
//!   to a Kafka user who gave their password): so a client that fetches tokens with OAuth2
//!   client credentials (Java's `OAuthBearerLoginCallbackHandler`) needs no other provider.
//!
//! Keys are found by the token's `kid` (a set of one key serves a token without one). The set
//! is fetched at the first token, again every `sasl.oauthbearer.jwks.endpoint.refresh.ms`, and
//! at once when a token names a key it does not have (a provider's key rotation), but not more
//! often than every `sasl.oauthbearer.jwks.endpoint.retry.backoff.ms`, so tokens naming
//! unknown keys cannot make the node hammer the provider.
//!
//! A token that does not validate fails the authentication at once with the reason (Kafka
//! first sends RFC 7628's error challenge; every client reads a failed SaslAuthenticate the
//! same). With `connections.max.reauth.ms`, a session lasts until the token expires at most.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use base64::Engine as _;
use parking_lot::Mutex;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::Value;

const B64: base64::engine::general_purpose::GeneralPurpose =
    base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The broker configs this module reads (Kafka's names), as given.
pub const CONFIGS: &[&str] = &[
    "sasl.oauthbearer.jwks.endpoint.url",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
    "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer",
    "sasl.oauthbearer.clock.skew.seconds",
    "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.scope.claim.name",
];

/// How the node checks OAUTHBEARER tokens, read from [`CONFIGS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub jwks_url: Option<String>,
    pub refresh_ms: u64,
    pub retry_backoff_ms: u64,
    pub audience: Vec<String>,
    pub issuer: Option<String>,
    pub clock_skew_s: u64,
    pub sub_claim: String,
}

impl Settings {
    /// Reads the `sasl.oauthbearer.*` broker configs given (the others take Kafka's defaults).
    pub fn from_configs(given: &BTreeMap<String, String>) -> Result<Settings, String> {
        let text = |name: &str| {
            given
                .get(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let number = |name: &str, default: u64| -> Result<u64, String> {
            match text(name) {
                None => Ok(default),
                Some(v) => v
                    .parse::<u64>()
                    .map_err(|_| format!("{name}={v}: not a whole number")),
            }
        };
        let jwks_url = text("sasl.oauthbearer.jwks.endpoint.url");
        if let Some(url) = &jwks_url {
            if !["https://", "http://", "file:"]
                .iter()
                .any(|scheme| url.starts_with(scheme))
            {
                return Err(format!(
                    "sasl.oauthbearer.jwks.endpoint.url={url}: must be an https:, http: or file: URL"
                ));
            }
        }
        Ok(Settings {
            jwks_url,
            refresh_ms: number("sasl.oauthbearer.jwks.endpoint.refresh.ms", 3_600_000)?.max(1),
            retry_backoff_ms: number("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", 100)?,
            audience: text("sasl.oauthbearer.expected.audience")
                .map(|a| {
                    a.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            issuer: text("sasl.oauthbearer.expected.issuer"),
            clock_skew_s: number("sasl.oauthbearer.clock.skew.seconds", 30)?,
            sub_claim: text("sasl.oauthbearer.sub.claim.name").unwrap_or_else(|| "sub".into()),
        })
    }
}

/// Reads OAUTHBEARER's client-first message (RFC 7628 §3.1, as Kafka's
/// `OAuthBearerClientInitialResponse` reads it): `n,[a=authzid],` then `auth=Bearer <token>`
/// and any other `key=value` pairs, each ended by `0x01`, then a final `0x01`. Returns the
/// token; an authorization id other than the token's subject is refused later.
pub fn parse_client_first(bytes: &[u8]) -> Result<(String, Option<String>), String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the OAUTHBEARER message is not UTF-8")?;
    let rest = text
        .strip_prefix("n,")
        .ok_or("the OAUTHBEARER message does not start with the GS2 header n,")?;
    let (authzid, rest) = rest
        .split_once(',')
        .ok_or("the OAUTHBEARER message's GS2 header does not end")?;
    let authzid = match authzid {
        "" => None,
        a => Some(
            a.strip_prefix("a=")
                .ok_or("the OAUTHBEARER message's GS2 header is not a=authzid")?
                .to_string(),
        ),
    };
    let pairs = rest
        .strip_prefix('\u{1}')
        .and_then(|r| r.strip_suffix("\u{1}\u{1}"))
        .ok_or("the OAUTHBEARER message's key-value pairs are not framed by 0x01")?;
    let mut token = None;
    for pair in pairs.split('\u{1}') {
        let (key, value) = pair
            .split_once('=')
            .ok_or("an OAUTHBEARER key-value pair has no =")?;
        if key == "auth" {
            let (scheme, value) = value
                .split_once(' ')
                .ok_or("the OAUTHBEARER auth value is not \"Bearer <token>\"")?;
            if !scheme.eq_ignore_ascii_case("bearer") || value.trim().is_empty() {
                return Err("the OAUTHBEARER auth value is not \"Bearer <token>\"".into());
            }
            token = Some(value.trim().to_string());
        }
    }
    let token = token.ok_or("the OAUTHBEARER message has no auth=Bearer <token>")?;
    Ok((token, authzid))
}

/// A public key of the provider's set.
#[derive(Debug, Clone)]
enum Key {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed point (`0x04 || x || y`) on P-256 (`p384` false) or P-384.
    Ec {
        p384: bool,
        point: Vec<u8>,
    },
}

impl Key {
    fn verify(&self, alg: &str, message: &[u8], sig: &[u8]) -> Result<(), String> {
        let ok = match (self, alg) {
            (Key::Rsa { n, e }, _) => {
                let params: &signature::RsaParameters = match alg {
                    "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                    "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                    "RS512" => &signature::RSA_PKCS1_2048_8192_SHA512,
                    "PS256" => &signature::RSA_PSS_2048_8192_SHA256,
                    "PS384" => &signature::RSA_PSS_2048_8192_SHA384,
                    "PS512" => &signature::RSA_PSS_2048_8192_SHA512,
                    other => {
                        return Err(format!("the token's alg {other} does not fit an RSA key"))
                    }
                };
                RsaPublicKeyComponents { n, e }
                    .verify(params, message, sig)
                    .is_ok()
            }
            (Key::Ec { p384: false, point }, "ES256") => {
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, sig)
                    .is_ok()
            }
            (Key::Ec { p384: true, point }, "ES384") => {
                UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point)
                    .verify(message, sig)
                    .is_ok()
            }
            (Key::Ec { .. }, other) => {
                return Err(format!("the token's alg {other} does not fit its EC key"))
            }
        };
        if ok {
            Ok(())
        } else {
            Err("the token's signature does not verify with the provider's key".into())
        }
    }
}

/// Reads a JSON Web Key Set (RFC 7517): its signing keys by `kid` (keys without one under
/// ""). Keys of other types, curves or uses are skipped.
fn parse_jwks(text: &[u8]) -> Result<HashMap<String, Key>, String> {
    let set: Value = serde_json::from_slice(text).map_err(|e| format!("not JSON: {e}"))?;
    let keys = set
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("no \"keys\" array")?;
    let b64 = |k: &Value, field: &str| -> Option<Vec<u8>> {
        B64.decode(k.get(field)?.as_str()?.trim_end_matches('='))
            .ok()
    };
    let mut out = HashMap::new();
    for k in keys {
        if k.get("use")
            .and_then(Value::as_str)
            .is_some_and(|u| u != "sig")
        {
            continue;
        }
        let kid = k
            .get("kid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let key = match k.get("kty").and_then(Value::as_str) {
            Some("RSA") => match (b64(k, "n"), b64(k, "e")) {
                (Some(n), Some(e)) => Key::Rsa { n, e },
                _ => continue,
            },
            Some("EC") => {
                let p384 = match k.get("crv").and_then(Value::as_str) {
                    Some("P-256") => false,
                    Some("P-384") => true,
                    _ => continue,
                };
                let (Some(x), Some(y)) = (b64(k, "x"), b64(k, "y")) else {
                    continue;
                };
                let mut point = vec![4u8];
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                Key::Ec { p384, point }
            }
            _ => continue,
        };
        out.insert(kid, key);
    }
    Ok(out)
}

/// Reads a JSON number claim as whole seconds.
fn seconds(claims: &Value, name: &str) -> Result<Option<u64>, String> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|n| n.is_finite() && *n >= 0.0)
            .map(|n| Some(n as u64))
            .ok_or_else(|| format!("the token's {name} claim is not a number of seconds")),
    }
}

/// What a token that validated gives the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validated {
    /// The subject: the connection's user (`User:<subject>`).
    pub subject: String,
    /// When the token expires, in ms since the epoch.
    pub expires_ms: u64,
}

/// Checks an identity provider's claims (see the module doc) at `now_ms`.
fn check_claims(settings: &Settings, claims: &Value, now_ms: u64) -> Result<Validated, String> {
    let now_s = now_ms / 1000;
    let skew = settings.clock_skew_s;
    let exp = seconds(claims, "exp")?.ok_or("the token has no exp claim")?;
    if exp.saturating_add(skew) <= now_s {
        return Err(format!("the token expired {} s ago", now_s - exp));
    }
    if let Some(nbf) = seconds(claims, "nbf")? {
        if nbf > now_s.saturating_add(skew) {
            return Err(format!(
                "the token is not valid for {} s yet (nbf)",
                nbf - now_s
            ));
        }
    }
    if let Some(iat) = seconds(claims, "iat")? {
        if iat > now_s.saturating_add(skew) {
            return Err(format!(
                "the token was issued {} s in the future (iat)",
                iat - now_s
            ));
        }
    }
    if let Some(want) = &settings.issuer {
        let iss = claims.get("iss").and_then(Value::as_str);
        if iss != Some(want.as_str()) {
            return Err(format!(
                "the token's issuer {iss:?} is not the expected {want:?}"
            ));
        }
    }
    if !settings.audience.is_empty() {
        let aud: Vec<&str> = match claims.get("aud") {
            Some(Value::String(a)) => vec![a.as_str()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !aud.iter().any(|a| settings.audience.iter().any(|w| w == a)) {
            return Err(format!(
                "the token's audience {aud:?} has none of the expected {:?}",
                settings.audience
            ));
        }
    }
    let subject = claims
        .get(&settings.sub_claim)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| format!("the token has no {} claim", settings.sub_claim))?;
    Ok(Validated {
        subject: subject.to_string(),
        expires_ms: exp.saturating_mul(1000),
    })
}

/// The provider's key set as last fetched.
#[derive(Debug, Default)]
struct KeySet {
    keys: HashMap<String, Key>,
    /// When it was last fetched successfully, and last tried (ms since the epoch).
    fetched_ms: Option<u64>,
    tried_ms: Option<u64>,
}

/// The node's OAUTHBEARER validator: its settings and the provider's keys.
#[derive(Debug)]
pub struct Validator {
    settings: Settings,
    keys: Mutex<KeySet>,
    /// One fetch of the key set at a time.
    fetching: tokio::sync::Mutex<()>,
}

impl Validator {
    pub fn new(settings: Settings) -> Validator {
        Validator {
            settings,
            keys: Mutex::new(KeySet::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// Checks an identity provider's token (not Inlet's own: the caller sends those to the
    /// HTTP listener's key) at `now_ms`.
    pub async fn validate(&self, token: &str, now_ms: u64) -> Result<Validated, String> {
        let t = Parsed::of(token)?;
        if self.settings.jwks_url.is_none() {
            return Err(format!(
                "a token signed with {} needs the provider's keys, and sasl.oauthbearer.jwks.endpoint.url is not set",
                t.alg
            ));
        }
        let key = match self.fresh_key(&t.kid, now_ms) {
            Some(k) => k,
            None => {
                // Due for a refresh, or a key it does not have (the provider may have rotated):
                // fetch again. A failed fetch keeps the keys there were.
                let refreshed = self.refresh(now_ms).await;
                match (find_key(&self.keys.lock().keys, &t.kid).cloned(), refreshed) {
                    (Some(k), _) => k,
                    (None, Err(e)) => return Err(e),
                    (None, Ok(())) => return Err(no_key(&t.kid)),
                }
            }
        };
        t.check(&key, &self.settings, now_ms)
    }

    /// The key named `kid` (or the only key, for a token without one), if the set is not due
    /// for its refresh.
    fn fresh_key(&self, kid: &str, now_ms: u64) -> Option<Key> {
        let set = self.keys.lock();
        let fresh = set
            .fetched_ms
            .is_some_and(|at| now_ms.saturating_sub(at) < self.settings.refresh_ms);
        fresh.then(|| find_key(&set.keys, kid).cloned()).flatten()
    }

    /// Fetches the key set again, unless it was tried within the retry backoff.
    async fn refresh(&self, now_ms: u64) -> Result<(), String> {
        let _one = self.fetching.lock().await;
        {
            let set = self.keys.lock();
            if set
                .tried_ms
                .is_some_and(|t| now_ms.saturating_sub(t) < self.settings.retry_backoff_ms)
            {
                return Ok(());
            }
        }
        self.keys.lock().tried_ms = Some(now_ms);
        let url = self.settings.jwks_url.clone().unwrap_or_default();
        let keys = fetch_jwks(&url).await.and_then(|body| {
            parse_jwks(&body).map_err(|e| format!("the key set at {url} does not read: {e}"))
        });
        match keys {
            Ok(keys) => {
                let mut set = self.keys.lock();
                set.keys = keys;
                set.fetched_ms = Some(now_ms);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(url, error = %e, "fetching the OAUTHBEARER key set failed");
                Err(e)
            }
        }
    }
}

/// Validates `token` at `now_ms` against the key set `jwks` (its JSON) and `settings`, with no
/// fetch: what [`Validator::validate`] does once it has the keys (the fuzz target's entry).
pub fn validate_with_key_set(
    settings: &Settings,
    jwks: &[u8],
    token: &str,
    now_ms: u64,
) -> Result<Validated, String> {
    let keys = parse_jwks(jwks)?;
    let t = Parsed::of(token)?;
    let key = find_key(&keys, &t.kid).ok_or_else(|| no_key(&t.kid))?;
    t.check(key, settings, now_ms)
}

fn no_key(kid: &str) -> String {
    format!("the provider's key set has no key {kid:?} for the token")
}

/// The key named `kid`, or the only key of the set for a token that names none.
fn find_key<'a>(keys: &'a HashMap<String, Key>, kid: &str) -> Option<&'a Key> {
    match keys.get(kid) {
        Some(k) => Some(k),
        None if kid.is_empty() && keys.len() == 1 => keys.values().next(),
        None => None,
    }
}

/// A signed JWT, read but not yet trusted.
struct Parsed<'a> {
    alg: String,
    kid: String,
    claims: Value,
    /// What the signature signs (`header.claims`).
    message: &'a str,
    sig: Vec<u8>,
}

impl<'a> Parsed<'a> {
    /// Reads `token`; an unsigned one (`alg` none) is refused here.
    fn of(token: &'a str) -> Result<Parsed<'a>, String> {
        let (header, claims, message, sig) = split(token)?;
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or("the token's header has no alg")?
            .to_string();
        if alg == "none" {
            return Err("an unsigned token (alg none) is not accepted".into());
        }
        let kid = header
            .get("kid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        Ok(Parsed {
            alg,
            kid,
            claims,
            message,
            sig,
        })
    }

    /// The signature with `key`, then the claims.
    fn check(&self, key: &Key, settings: &Settings, now_ms: u64) -> Result<Validated, String> {
        key.verify(&self.alg, self.message.as_bytes(), &self.sig)?;
        check_claims(settings, &self.claims, now_ms)
    }
}

/// A JWT's parts: its header and claims, the signed part and the signature (read, not
/// verified; Inlet's own tokens are read the same way, `crate::acl::http::verify_token`).
pub(crate) fn split(token: &str) -> Result<(Value, Value, &str, Vec<u8>), String> {
    let mut parts = token.split('.');
    let (Some(h), Some(c), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the token is not a JWT (three dot-separated parts)".into());
    };
    let json = |part: &str, what: &str| -> Result<Value, String> {
        B64.decode(part)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| format!("the token's {what} does not read"))
    };
    let header = json(h, "header")?;
    let claims = json(c, "claims")?;
    let sig = B64
        .decode(s)
        .map_err(|_| "the token's signature does not read")?;
    Ok((header, claims, &token[..h.len() + 1 + c.len()], sig))
}

/// The alg a token's header names, if it reads.
pub fn alg_of(token: &str) -> Option<String> {
    let header = token.split('.').next()?;
    let header: Value = serde_json::from_slice(&B64.decode(header).ok()?).ok()?;
    Some(header.get("alg")?.as_str()?.to_string())
}

/// The key set's bytes from an `https:`, `http:` or `file:` URL.
async fn fetch_jwks(url: &str) -> Result<Vec<u8>, String> {
    if let Some(path) = url.strip_prefix("file:") {
        // file:///etc/keys.json and file:/etc/keys.json name the same file.
        let path = path.strip_prefix("//").unwrap_or(path).to_string();
        return tokio::fs::read(&path)
            .await
            .map_err(|e| format!("reading the key set {path} failed: {e}"));
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("an HTTP client for the key set failed: {e}"))?;
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("fetching the key set from {url} failed: {e}"))?;
    if !response.status().is_success() {
        return Err(format!(
            "fetching the key set from {url} answered {}",
            response.status()
        ));
    }
    response
        .bytes()
        .await
        .map(|b| b.to_vec())
        .map_err(|e| format!("reading the key set from {url} failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(configs: &[(&str, &str)]) -> Settings {
        Settings::from_configs(
            &configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
        .expect("valid settings")
    }

    #[test]
    fn the_client_first_message_is_read_as_rfc_7628_writes_it() {
        assert_eq!(
            parse_client_first(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01"),
            Ok(("abc.def.ghi".into(), None))
        );
        assert_eq!(
            parse_client_first(b"n,a=alice,\x01host=h\x01auth=Bearer t.o.k\x01port=9\x01\x01"),
            Ok(("t.o.k".into(), Some("alice".into())))
        );
        for bad in [
            &b"y,,\x01auth=Bearer t\x01\x01"[..],
            b"n,,\x01auth=Bearer t\x01",
            b"n,,\x01auth=Basic t\x01\x01",
            b"n,,\x01host=h\x01\x01",
            b"\x01",
        ] {
            assert!(parse_client_first(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn claims_are_checked_as_kafka_checks_them() {
        let s = settings(&[
            ("sasl.oauthbearer.expected.issuer", "https://idp"),
            ("sasl.oauthbearer.expected.audience", "kafka, other"),
        ]);
        let now_ms = 1_000_000_000;
        let good = serde_json::json!({"sub": "alice", "iss": "https://idp", "aud": ["x", "kafka"], "exp": 1_000_100, "iat": 999_990});
        assert_eq!(
            check_claims(&s, &good, now_ms),
            Ok(Validated {
                subject: "alice".into(),
                expires_ms: 1_000_100_000
            })
        );
        let with = |field: &str, value: Value| {
            let mut c = good.clone();
            c[field] = value;
            check_claims(&s, &c, now_ms)
        };
        // Expired beyond the skew, and within it.
        assert!(with("exp", 999_900.into()).unwrap_err().contains("expired"));
        assert!(with("exp", 999_980.into()).is_ok());
        assert!(with("iss", "https://evil".into())
            .unwrap_err()
            .contains("issuer"));
        assert!(with("aud", "someone".into())
            .unwrap_err()
            .contains("audience"));
        assert!(with("nbf", 1_000_100.into()).unwrap_err().contains("nbf"));
        assert!(with("sub", "".into()).unwrap_err().contains("sub"));
        let mut no_exp = good.clone();
        no_exp.as_object_mut().map(|o| o.remove("exp"));
        assert!(check_claims(&s, &no_exp, now_ms)
            .unwrap_err()
            .contains("exp"));
        // Another subject claim, by name.
        let s = settings(&[("sasl.oauthbearer.sub.claim.name", "client_id")]);
        let c = serde_json::json!({"client_id": "svc", "exp": 1_000_100});
        assert_eq!(
            check_claims(&s, &c, now_ms).map(|v| v.subject),
            Ok("svc".into())
        );
    }

    #[test]
    fn a_key_set_keeps_its_signing_keys_by_kid() {
        let set = br#"{"keys": [
            {"kty": "RSA", "kid": "r1", "use": "sig", "n": "AQAB", "e": "AQAB"},
            {"kty": "EC", "kid": "e1", "crv": "P-256", "x": "AQ", "y": "Ag"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
            {"kty": "oct", "kid": "secret", "k": "AQAB"},
            {"kty": "EC", "kid": "odd", "crv": "P-521", "x": "AQ", "y": "Ag"}
        ]}"#;
        let keys = parse_jwks(set).expect("reads");
        let mut kids: Vec<_> = keys.keys().cloned().collect();
        kids.sort();
        assert_eq!(kids, ["e1", "r1"]);
        assert!(matches!(&keys["e1"], Key::Ec { p384: false, point } if point == &[4, 1, 2]));
        assert!(parse_jwks(b"{}").is_err());
        assert!(parse_jwks(b"not json").is_err());
    }

    #[test]
    fn settings_take_kafkas_defaults_and_refuse_other_urls() {
        let s = settings(&[]);
        assert_eq!(
            (s.refresh_ms, s.clock_skew_s, s.sub_claim.as_str()),
            (3_600_000, 30, "sub")
        );
        assert!(Settings::from_configs(&BTreeMap::from([(
            "sasl.oauthbearer.jwks.endpoint.url".to_string(),
            "ftp://idp/keys".to_string()
        )]))
        .is_err());
        assert!(Settings::from_configs(&BTreeMap::from([(
            "sasl.oauthbearer.clock.skew.seconds".to_string(),
            "soon".to_string()
        )]))
        .is_err());
    }

    /// An ES256 token signed here (ring), its key published as a JWK: it validates, and the same
    /// token with one claim changed, or under another key, does not.
    #[test]
    fn an_es256_token_validates_against_its_published_key_only() {
        use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        let rng = ring::rand::SystemRandom::new();
        let pair = |rng: &ring::rand::SystemRandom| {
            let pkcs8 =
                EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, rng).expect("a key");
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), rng)
                .expect("reads")
        };
        let (key, other) = (pair(&rng), pair(&rng));
        let jwk = |k: &EcdsaKeyPair, kid: &str| {
            let point = k.public_key().as_ref();
            serde_json::json!({"kty": "EC", "crv": "P-256", "kid": kid,
                "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..65])})
        };
        let jwks = serde_json::to_vec(&serde_json::json!({"keys": [jwk(&key, "a")]})).unwrap();
        let sign = |k: &EcdsaKeyPair, claims: &Value| {
            let signed = format!(
                "{}.{}",
                B64.encode(br#"{"alg":"ES256","kid":"a"}"#),
                B64.encode(claims.to_string())
            );
            let sig = k.sign(&rng, signed.as_bytes()).expect("signs");
            format!("{signed}.{}", B64.encode(sig.as_ref()))
        };
        let s = settings(&[("sasl.oauthbearer.expected.audience", "kafka")]);
        let claims = serde_json::json!({"sub": "alice", "aud": "kafka", "exp": 2_000});
        let token = sign(&key, &claims);
        assert_eq!(
            validate_with_key_set(&s, &jwks, &token, 1_000_000).map(|v| v.subject),
            Ok("alice".into())
        );
        // Another subject under the first token's signature.
        let (head, rest) = token.split_once('.').unwrap();
        let sig = rest.rsplit_once('.').unwrap().1;
        let forged = format!(
            "{head}.{}.{sig}",
            B64.encode(
                serde_json::json!({"sub": "admin", "aud": "kafka", "exp": 2_000}).to_string()
            )
        );
        assert!(validate_with_key_set(&s, &jwks, &forged, 1_000_000)
            .unwrap_err()
            .contains("signature"));
        assert!(
            validate_with_key_set(&s, &jwks, &sign(&other, &claims), 1_000_000)
                .unwrap_err()
                .contains("signature")
        );
        // Past its expiry and the skew.
        assert!(validate_with_key_set(&s, &jwks, &token, 2_031_000)
            .unwrap_err()
            .contains("expired"));
    }

    #[tokio::test]
    async fn a_token_is_refused_without_keys_unsigned_or_malformed() {
        let v = Validator::new(settings(&[]));
        let unsigned = format!(
            "{}.{}.",
            B64.encode(br#"{"alg":"none"}"#),
            B64.encode(br#"{"sub":"a","exp":9999999999}"#)
        );
        assert!(v
            .validate(&unsigned, 0)
            .await
            .unwrap_err()
            .contains("unsigned"));
        let rs = format!(
            "{}.{}.AA",
            B64.encode(br#"{"alg":"RS256","kid":"k"}"#),
            B64.encode(br#"{"sub":"a","exp":9999999999}"#)
        );
        assert!(v
            .validate(&rs, 0)
            .await
            .unwrap_err()
            .contains("jwks.endpoint.url"));
        assert!(v.validate("not-a-jwt", 0).await.is_err());
    }
}
