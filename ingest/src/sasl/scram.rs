//! SCRAM (RFC 5802, with SHA-256 and SHA-512 as RFC 7677 and Kafka's KIP-84 use them): the
//! credential a server keeps (salt, iterations, StoredKey, ServerKey; never the password or
//! the salted password), and the server's side of one authentication exchange, an I/O-free
//! state machine ([`ServerExchange`]): client-first in, server-first out, client-final in,
//! server-final out; and the client's side ([`ClientExchange`]), with which a node
//! authenticates to another (`inter_broker`).

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

/// Kafka's SCRAM mechanisms (its `ScramMechanism` codes 1 and 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    Sha256,
    Sha512,
}

/// Kafka's bounds on a credential's iterations.
pub const MIN_ITERATIONS: i32 = 4096;
pub const MAX_ITERATIONS: i32 = 16384;

impl Mechanism {
    pub fn code(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    pub fn from_code(code: i8) -> Option<Mechanism> {
        match code {
            1 => Some(Mechanism::Sha256),
            2 => Some(Mechanism::Sha512),
            _ => None,
        }
    }

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        match name {
            "SCRAM-SHA-256" => Some(Mechanism::Sha256),
            "SCRAM-SHA-512" => Some(Mechanism::Sha512),
            _ => None,
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => {
                let mut m =
                    <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
            Mechanism::Sha512 => {
                let mut m =
                    <Hmac<Sha512> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
                m.update(data);
                m.finalize().into_bytes().to_vec()
            }
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => Sha256::digest(data).to_vec(),
            Mechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// RFC 5802's `Hi`: PBKDF2 with this hash's HMAC, one block.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: i32) -> Vec<u8> {
        let mut first = salt.to_vec();
        first.extend_from_slice(&1u32.to_be_bytes());
        let mut u = self.hmac(password, &first);
        let mut out = u.clone();
        for _ in 1..iterations.max(1) {
            u = self.hmac(password, &u);
            for (o, x) in out.iter_mut().zip(&u) {
                *o ^= x;
            }
        }
        out
    }
}

/// What a server keeps of a user's password for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub mechanism: Mechanism,
    pub salt: Vec<u8>,
    pub iterations: i32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl Credential {
    /// The credential of a salted password (what AlterUserScramCredentials carries).
    pub fn from_salted(mechanism: Mechanism, salt: &[u8], iterations: i32, salted: &[u8]) -> Self {
        let client_key = mechanism.hmac(salted, b"Client Key");
        Credential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted, b"Server Key"),
        }
    }

    /// The credential of a password with a fresh random salt.
    pub fn from_password(mechanism: Mechanism, password: &str, iterations: i32) -> Self {
        let salt: [u8; 16] = inlet_common::random::bytes();
        let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
        Credential::from_salted(mechanism, &salt, iterations, &salted)
    }

    /// Whether `password` is this credential's (SASL/PLAIN checks passwords this way).
    pub fn verifies(&self, password: &str) -> bool {
        let salted =
            self.mechanism
                .salted_password(password.as_bytes(), &self.salt, self.iterations);
        let other = Credential::from_salted(self.mechanism, &self.salt, self.iterations, &salted);
        constant_time_eq(&other.stored_key, &self.stored_key)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("bad base64: {e}"))
}

/// A SCRAM username as the client sends it (`=2C` for `,` and `=3D` for `=`).
fn unescape_name(name: &str) -> Result<String, String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(format!("bad escape in user name {name:?}")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The server's side of one SCRAM exchange.
#[derive(Debug)]
pub enum ServerExchange {
    /// Waiting for client-first.
    Start { mechanism: Mechanism },
    /// Sent server-first; waiting for client-final.
    Challenged {
        user: String,
        credential: Credential,
        client_first_bare: String,
        server_first: String,
        nonce: String,
    },
    /// Done.
    Over,
}

impl ServerExchange {
    pub fn new(mechanism: Mechanism) -> Self {
        ServerExchange::Start { mechanism }
    }

    /// The user client-first names (to look the credential up), checking its form.
    pub fn user_of(client_first: &[u8]) -> Result<String, String> {
        let text = std::str::from_utf8(client_first)
            .map_err(|_| "client-first is not UTF-8".to_string())?;
        let (_, bare) = gs2_split(text)?;
        let name = bare
            .split(',')
            .find_map(|a| a.strip_prefix("n="))
            .ok_or("client-first names no user")?;
        unescape_name(name)
    }

    /// Answers client-first with server-first, given the user's credential (`None`: no such
    /// user, refused without saying so).
    pub fn first(
        &mut self,
        client_first: &[u8],
        credential: Option<Credential>,
    ) -> Result<Vec<u8>, String> {
        let ServerExchange::Start { mechanism } = *self else {
            return Err("client-first out of turn".into());
        };
        let text = std::str::from_utf8(client_first)
            .map_err(|_| "client-first is not UTF-8".to_string())?;
        let (gs2, bare) = gs2_split(text)?;
        if gs2.starts_with('p') {
            return Err("channel binding is not supported".into());
        }
        let mut user = None;
        let mut client_nonce = None;
        for attr in bare.split(',') {
            if let Some(n) = attr.strip_prefix("n=") {
                user = Some(unescape_name(n)?);
            } else if let Some(r) = attr.strip_prefix("r=") {
                client_nonce = Some(r.to_string());
            } else if attr.starts_with("m=") {
                return Err("mandatory extensions are not supported".into());
            }
        }
        let user = user.ok_or("client-first names no user")?;
        let client_nonce = client_nonce
            .filter(|n| !n.is_empty())
            .ok_or("client-first has no nonce")?;
        let credential =
            credential.ok_or_else(|| format!("authentication failed for user {user:?}"))?;
        if credential.mechanism != mechanism {
            return Err(format!("authentication failed for user {user:?}"));
        }
        let server_nonce: [u8; 18] = inlet_common::random::bytes();
        let nonce = format!("{client_nonce}{}", b64(&server_nonce));
        let server_first = format!(
            "r={nonce},s={},i={}",
            b64(&credential.salt),
            credential.iterations
        );
        *self = ServerExchange::Challenged {
            user,
            credential,
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            nonce,
        };
        Ok(server_first.into_bytes())
    }

    /// Checks client-final's proof; on success, the user and server-final.
    pub fn last(&mut self, client_final: &[u8]) -> Result<(String, Vec<u8>), String> {
        let ServerExchange::Challenged {
            user,
            credential,
            client_first_bare,
            server_first,
            nonce,
        } = std::mem::replace(self, ServerExchange::Over)
        else {
            return Err("client-final out of turn".into());
        };
        let text = std::str::from_utf8(client_final)
            .map_err(|_| "client-final is not UTF-8".to_string())?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or("client-final has no proof")?;
        let mut channel = None;
        let mut their_nonce = None;
        for attr in without_proof.split(',') {
            if let Some(c) = attr.strip_prefix("c=") {
                channel = Some(c);
            } else if let Some(r) = attr.strip_prefix("r=") {
                their_nonce = Some(r);
            }
        }
        // As Kafka's broker checks it (`endsWith`): older librdkafka (2.0.2) sends its own nonce
        // again in front of the exchange's. The proof below covers the message as sent.
        if !their_nonce.is_some_and(|n| n.ends_with(nonce.as_str())) {
            return Err("client-final's nonce is not the exchange's".into());
        }
        // No channel binding: the GS2 header is "n,," (base64 "biws"), or names an authzid.
        let gs2 = unb64(channel.ok_or("client-final has no channel binding")?)?;
        if !gs2.starts_with(b"n,") && !gs2.starts_with(b"y,") {
            return Err("channel binding is not supported".into());
        }
        let proof = unb64(proof)?;
        let m = credential.mechanism;
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = m.hmac(&credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(format!("authentication failed for user {user:?}"));
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if !constant_time_eq(&m.hash(&client_key), &credential.stored_key) {
            return Err(format!("authentication failed for user {user:?}"));
        }
        let server_signature = m.hmac(&credential.server_key, auth_message.as_bytes());
        Ok((user, format!("v={}", b64(&server_signature)).into_bytes()))
    }
}

/// The client's side of one SCRAM exchange: client-first out, server-first in, client-final
/// out, server-final checked (the server proves it knows the credential too).
#[derive(Debug)]
pub struct ClientExchange {
    mechanism: Mechanism,
    password: String,
    client_first_bare: String,
    client_nonce: String,
    /// The server signature server-final must carry, once client-final is sent.
    expected: Option<Vec<u8>>,
}

/// The most iterations a client computes for a server (four times Kafka's own bound): more
/// is refused, not spent on.
const CLIENT_MAX_ITERATIONS: i32 = 4 * MAX_ITERATIONS;

impl ClientExchange {
    /// Starts an exchange for `user`; returns it and client-first.
    pub fn start(mechanism: Mechanism, user: &str, password: &str) -> (ClientExchange, Vec<u8>) {
        let nonce: [u8; 18] = inlet_common::random::bytes();
        let client_nonce = b64(&nonce);
        let name = user.replace('=', "=3D").replace(',', "=2C");
        let client_first_bare = format!("n={name},r={client_nonce}");
        let first = format!("n,,{client_first_bare}").into_bytes();
        (
            ClientExchange {
                mechanism,
                password: password.to_string(),
                client_first_bare,
                client_nonce,
                expected: None,
            },
            first,
        )
    }

    /// Answers server-first with client-final.
    pub fn last(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let text = std::str::from_utf8(server_first)
            .map_err(|_| "server-first is not UTF-8".to_string())?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attr in text.split(',') {
            if let Some(r) = attr.strip_prefix("r=") {
                nonce = Some(r);
            } else if let Some(s) = attr.strip_prefix("s=") {
                salt = Some(unb64(s)?);
            } else if let Some(i) = attr.strip_prefix("i=") {
                iterations = i.parse::<i32>().ok();
            } else if attr.starts_with("e=") {
                return Err(format!("the server refused: {attr}"));
            }
        }
        let nonce = nonce
            .filter(|n| {
                n.starts_with(self.client_nonce.as_str()) && n.len() > self.client_nonce.len()
            })
            .ok_or("server-first's nonce does not extend ours")?;
        let salt = salt.ok_or("server-first has no salt")?;
        let iterations = iterations
            .filter(|i| (1..=CLIENT_MAX_ITERATIONS).contains(i))
            .ok_or("server-first's iteration count is missing or out of bounds")?;
        let m = self.mechanism;
        let salted = m.salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{text},{without_proof}", self.client_first_bare);
        let signature = m.hmac(&m.hash(&client_key), auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = m.hmac(&salted, b"Server Key");
        self.expected = Some(m.hmac(&server_key, auth.as_bytes()));
        Ok(format!("{without_proof},p={}", b64(&proof)).into_bytes())
    }

    /// Checks server-final: the server's signature, or its error.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(server_final)
            .map_err(|_| "server-final is not UTF-8".to_string())?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(format!("the server refused: {e}"));
        }
        let given = unb64(
            text.strip_prefix("v=")
                .ok_or("server-final has no signature")?,
        )?;
        match &self.expected {
            Some(expected) if constant_time_eq(expected, &given) => Ok(()),
            _ => Err("the server's signature is wrong: it does not hold the credential".into()),
        }
    }
}

/// Splits a client-first message into its GS2 header and the bare part.
fn gs2_split(text: &str) -> Result<(&str, &str), String> {
    let mut parts = text.splitn(3, ',');
    let flag = parts.next().ok_or("empty client-first")?;
    let authzid = parts.next().ok_or("client-first has no GS2 header")?;
    let bare = parts.next().ok_or("client-first has no body")?;
    if !matches!(flag.chars().next(), Some('n' | 'y' | 'p')) {
        return Err("client-first's GS2 header is malformed".into());
    }
    Ok((&text[..flag.len() + authzid.len() + 1], bare))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's side, written from RFC 5802 for the test.
    fn client_final(
        m: Mechanism,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
    ) -> (String, Vec<u8>) {
        client_final_with(m, password, client_first_bare, server_first, "")
    }

    /// [`client_final`] with `again` in front of the nonce (older librdkafka (2.0.2) sends its
    /// own nonce again there).
    fn client_final_with(
        m: Mechanism,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
        again: &str,
    ) -> (String, Vec<u8>) {
        let attrs: Vec<&str> = server_first.split(',').collect();
        let nonce = attrs[0].strip_prefix("r=").unwrap();
        let salt = unb64(attrs[1].strip_prefix("s=").unwrap()).unwrap();
        let iterations: i32 = attrs[2].strip_prefix("i=").unwrap().parse().unwrap();
        let salted = m.salted_password(password.as_bytes(), &salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        let stored_key = m.hash(&client_key);
        let without_proof = format!("c=biws,r={again}{nonce}");
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = m.hmac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = m.hmac(&salted, b"Server Key");
        let expected = m.hmac(&server_key, auth.as_bytes());
        (format!("{without_proof},p={}", b64(&proof)), expected)
    }

    #[test]
    fn the_rfc_7677_example_derives_its_keys() {
        // RFC 7677, section 3: user "user", password "pencil", salt and iterations as given.
        let salt = unb64("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = Mechanism::Sha256.salted_password(b"pencil", &salt, 4096);
        let c = Credential::from_salted(Mechanism::Sha256, &salt, 4096, &salted);
        let auth = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let server_signature = Mechanism::Sha256.hmac(&c.server_key, auth.as_bytes());
        assert_eq!(
            b64(&server_signature),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    #[test]
    fn an_exchange_authenticates_the_right_password_only() {
        for m in [Mechanism::Sha256, Mechanism::Sha512] {
            let credential = Credential::from_password(m, "s3cret", 4096);
            assert!(credential.verifies("s3cret") && !credential.verifies("guess"));
            for (password, ok) in [("s3cret", true), ("guess", false)] {
                let first = b"n,,n=al=2Cice,r=abcdefgh";
                assert_eq!(ServerExchange::user_of(first).unwrap(), "al,ice");
                let mut ex = ServerExchange::new(m);
                let server_first =
                    String::from_utf8(ex.first(first, Some(credential.clone())).unwrap()).unwrap();
                assert!(server_first.starts_with("r=abcdefgh"));
                let (last, expected) =
                    client_final(m, password, "n=al=2Cice,r=abcdefgh", &server_first);
                match ex.last(last.as_bytes()) {
                    Ok((user, server_final)) => {
                        assert!(ok, "{m:?}: a wrong password was accepted");
                        assert_eq!(user, "al,ice");
                        assert_eq!(server_final, format!("v={}", b64(&expected)).into_bytes());
                    }
                    Err(e) => {
                        assert!(!ok, "{m:?}: {e}");
                        assert!(e.contains("authentication failed"), "{e}");
                    }
                }
            }
        }
    }

    /// librdkafka 2.0 (kcat as Debian packages it) repeats its nonce in front of the
    /// exchange's; Kafka's broker accepts that (`endsWith`), and so does this one, as long as
    /// the proof covers the message as sent.
    #[test]
    fn a_client_final_that_repeats_the_client_nonce_authenticates() {
        let m = Mechanism::Sha512;
        let credential = Credential::from_password(m, "s3cret", 4096);
        let mut ex = ServerExchange::new(m);
        let server_first =
            String::from_utf8(ex.first(b"n,,n=admin,r=X4=^Y", Some(credential)).unwrap()).unwrap();
        let (last, _) = client_final_with(m, "s3cret", "n=admin,r=X4=^Y", &server_first, "X4=^Y");
        assert!(last.starts_with("c=biws,r=X4=^YX4=^Y"), "{last}");
        assert_eq!(ex.last(last.as_bytes()).map(|(u, _)| u), Ok("admin".into()));
    }

    #[test]
    fn the_client_side_authenticates_to_the_server_side_and_checks_it() {
        for m in [Mechanism::Sha256, Mechanism::Sha512] {
            let credential = Credential::from_password(m, "s3cret", 4096);
            for (password, ok) in [("s3cret", true), ("guess", false)] {
                let (mut client, first) = ClientExchange::start(m, "node,=1", password);
                assert_eq!(ServerExchange::user_of(&first).unwrap(), "node,=1");
                let mut server = ServerExchange::new(m);
                let server_first = server.first(&first, Some(credential.clone())).unwrap();
                let last = client.last(&server_first).unwrap();
                match server.last(&last) {
                    Ok((user, server_final)) => {
                        assert!(ok, "{m:?}: a wrong password was accepted");
                        assert_eq!(user, "node,=1");
                        assert_eq!(client.verify(&server_final), Ok(()));
                        // A server that does not hold the credential cannot sign.
                        assert!(client.verify(b"v=AAAA").is_err());
                    }
                    Err(e) => assert!(!ok, "{m:?}: {e}"),
                }
            }
        }
        // A server-first that does not extend the client's nonce, or asks absurd work.
        let (mut client, _) = ClientExchange::start(Mechanism::Sha256, "u", "p");
        assert!(client.last(b"r=other,s=QUJD,i=4096").is_err());
        let (mut client, first) = ClientExchange::start(Mechanism::Sha256, "u", "p");
        let nonce = std::str::from_utf8(&first)
            .unwrap()
            .rsplit_once("r=")
            .unwrap()
            .1
            .to_string();
        let huge = format!("r={nonce}x,s=QUJD,i=2000000000");
        assert!(client
            .last(huge.as_bytes())
            .unwrap_err()
            .contains("iteration"));
        assert!(client
            .verify(b"e=invalid-proof")
            .unwrap_err()
            .contains("invalid-proof"));
    }

    #[test]
    fn malformed_and_replayed_messages_are_refused() {
        let credential = Credential::from_password(Mechanism::Sha256, "pw", 4096);
        let mut ex = ServerExchange::new(Mechanism::Sha256);
        assert!(ex
            .first(b"p=tls-unique,,n=a,r=x", Some(credential.clone()))
            .is_err());
        let mut ex2 = ServerExchange::new(Mechanism::Sha256);
        assert!(ex2
            .first(b"n,,n=a,r=x", None)
            .is_err_and(|e| e.contains("authentication failed")));
        let mut ex3 = ServerExchange::new(Mechanism::Sha512);
        assert!(ex3.first(b"n,,n=a,r=x", Some(credential.clone())).is_err());
        ex.first(b"n,,n=a,r=x", Some(credential.clone())).ok();
        let mut ex4 = ServerExchange::new(Mechanism::Sha256);
        ex4.first(b"n,,n=a,r=x", Some(credential)).unwrap();
        assert!(ex4
            .last(b"c=biws,r=other-nonce,p=AAAA")
            .is_err_and(|e| e.contains("nonce")));
        assert!(ex4
            .last(b"c=biws,r=x,p=AAAA")
            .is_err_and(|e| e.contains("out of turn")));
    }
}
