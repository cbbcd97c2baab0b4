//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) over the users'
//! credentials in the metadata store (`sasl::credentials`).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::broker::{str, Broker};
use crate::error::{KafkaError, Result};
use crate::sasl::credentials;
use crate::sasl::scram::{Credential, Mechanism, MAX_ITERATIONS, MIN_ITERATIONS};

/// One user's alterations in an AlterUserScramCredentials request.
#[derive(Default)]
struct Alterations {
    deletions: Vec<i8>,
    upsertions: Vec<(i8, i32, Vec<u8>, Vec<u8>)>,
}

fn refuse(code: ResponseError, why: impl Into<String>) -> KafkaError {
    KafkaError::new(code, why.into())
}

impl Broker {
    pub(crate) async fn describe_user_scram_credentials(
        &self,
        r: DescribeUserScramCredentialsRequest,
        _version: i16,
    ) -> DescribeUserScramCredentialsResponse {
        let known = match credentials::list(self.store.meta()).await {
            Ok(k) => k,
            Err(e) => {
                return DescribeUserScramCredentialsResponse::default()
                    .with_error_code(e.code())
                    .with_error_message(Some(str(e.message)))
            }
        };
        let infos = |creds: &Vec<(Mechanism, i32)>| {
            creds
                .iter()
                .map(|(m, i)| {
                    CredentialInfo::default()
                        .with_mechanism(m.code())
                        .with_iterations(*i)
                })
                .collect()
        };
        let asked: Vec<String> = r
            .users
            .unwrap_or_default()
            .into_iter()
            .map(|u| u.name.to_string())
            .collect();
        let results = if asked.is_empty() {
            known
                .iter()
                .map(|(user, creds)| {
                    DescribeUserScramCredentialsResult::default()
                        .with_user(str(user.clone()))
                        .with_error_message(None)
                        .with_credential_infos(infos(creds))
                })
                .collect()
        } else {
            let mut seen = BTreeSet::new();
            let duplicated: BTreeSet<&String> = asked.iter().filter(|u| !seen.insert(*u)).collect();
            let mut done = BTreeSet::new();
            asked
                .iter()
                .filter(|u| done.insert(*u))
                .map(|user| {
                    let result = DescribeUserScramCredentialsResult::default()
                        .with_user(str(user.clone()))
                        .with_error_message(None);
                    if duplicated.contains(user) {
                        return result
                            .with_error_code(ResponseError::DuplicateResource.code())
                            .with_error_message(Some(str(format!("user {user:?} is named more than once"))));
                    }
                    match known.get(user) {
                        Some(creds) => result.with_credential_infos(infos(creds)),
                        None => result
                            .with_error_code(ResponseError::ResourceNotFound.code())
                            .with_error_message(Some(str(format!(
                                "attempt to describe a user credential that does not exist: {user:?}"
                            )))),
                    }
                })
                .collect()
        };
        DescribeUserScramCredentialsResponse::default()
            .with_error_message(None)
            .with_results(results)
    }

    pub(crate) async fn alter_user_scram_credentials(
        &self,
        r: AlterUserScramCredentialsRequest,
        _version: i16,
    ) -> AlterUserScramCredentialsResponse {
        let mut by_user: BTreeMap<String, Alterations> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        let note = |name: &str, order: &mut Vec<String>| {
            if !order.iter().any(|n| n == name) {
                order.push(name.to_string());
            }
        };
        for d in &r.deletions {
            note(&d.name, &mut order);
            by_user
                .entry(d.name.to_string())
                .or_default()
                .deletions
                .push(d.mechanism);
        }
        for u in &r.upsertions {
            note(&u.name, &mut order);
            by_user
                .entry(u.name.to_string())
                .or_default()
                .upsertions
                .push((
                    u.mechanism,
                    u.iterations,
                    u.salt.to_vec(),
                    u.salted_password.to_vec(),
                ));
        }
        let mut results = Vec::new();
        for user in order {
            let alterations = by_user.remove(&user).unwrap_or_default();
            let outcome = self.alter_one_user(&user, alterations).await;
            let mut result = AlterUserScramCredentialsResult::default()
                .with_user(str(user))
                .with_error_message(None);
            if let Err(e) = outcome {
                result.error_code = e.code();
                result.error_message = Some(str(e.message));
            }
            results.push(result);
        }
        AlterUserScramCredentialsResponse::default().with_results(results)
    }

    /// Checks all of one user's alterations, then applies them; a user with a refused one gets
    /// none applied (Kafka's rule).
    async fn alter_one_user(&self, user: &str, a: Alterations) -> Result<()> {
        if user.is_empty() {
            return Err(refuse(
                ResponseError::UnacceptableCredential,
                "the user name is empty",
            ));
        }
        let mut mechanisms = BTreeSet::new();
        for m in a.deletions.iter().chain(a.upsertions.iter().map(|u| &u.0)) {
            if !mechanisms.insert(*m) {
                return Err(refuse(
                    ResponseError::DuplicateResource,
                    format!(
                        "a credential of user {user:?} is altered more than once in one request"
                    ),
                ));
            }
        }
        let mut deletions = Vec::new();
        for code in &a.deletions {
            let m = Mechanism::from_code(*code).ok_or_else(|| {
                refuse(
                    ResponseError::UnsupportedSaslMechanism,
                    format!("unknown SCRAM mechanism {code}"),
                )
            })?;
            if credentials::credential(self.store.meta(), user, m)
                .await?
                .is_none()
            {
                return Err(refuse(
                    ResponseError::ResourceNotFound,
                    format!(
                        "attempt to delete a user credential that does not exist: {user:?} {}",
                        m.name()
                    ),
                ));
            }
            deletions.push(m);
        }
        let mut upsertions = Vec::new();
        for (code, iterations, salt, salted) in a.upsertions {
            let m = Mechanism::from_code(code).ok_or_else(|| {
                refuse(
                    ResponseError::UnsupportedSaslMechanism,
                    format!("unknown SCRAM mechanism {code}"),
                )
            })?;
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
                return Err(refuse(
                    ResponseError::UnacceptableCredential,
                    format!(
                        "iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}, not {iterations}"
                    ),
                ));
            }
            if salt.is_empty() || salted.is_empty() {
                return Err(refuse(
                    ResponseError::UnacceptableCredential,
                    "the salt and the salted password must not be empty",
                ));
            }
            upsertions.push(Credential::from_salted(m, &salt, iterations, &salted));
        }
        for m in deletions {
            credentials::delete(self.store.meta(), user, Some(m)).await?;
        }
        for c in &upsertions {
            credentials::upsert(self.store.meta(), user, c).await?;
        }
        Ok(())
    }
}
