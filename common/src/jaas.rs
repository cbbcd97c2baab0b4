//! Java JAAS config lines (what Kafka's `sasl.jaas.config` holds), as far as Inlet reads them:
//! the `username` and `password` options of a login module line, for a node calling another
//! (the inter-broker listener) and for the command line's clients.

/// The `username` and `password` of a JAAS config line
/// (`…LoginModule required username="u" password="p";`).
pub fn credentials(jaas: &str) -> Result<(String, String), String> {
    let value = |key: &str| -> Option<String> {
        let at = jaas.find(&format!("{key}="))?;
        // Only a whole option: preceded by whitespace.
        if at > 0 && !jaas[..at].ends_with(char::is_whitespace) {
            return None;
        }
        let rest = &jaas[at + key.len() + 1..];
        match rest.strip_prefix('"') {
            // A quoted value ends at the first unescaped quote; `\` escapes the next character.
            Some(quoted) => {
                let mut out = String::new();
                let mut chars = quoted.chars();
                loop {
                    match chars.next()? {
                        '"' => break Some(out),
                        '\\' => out.push(chars.next()?),
                        c => out.push(c),
                    }
                }
            }
            None => Some(
                rest.split(|c: char| c.is_whitespace() || c == ';')
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            ),
        }
    };
    match (value("username"), value("password")) {
        (Some(u), Some(p)) if !u.is_empty() => Ok((u, p)),
        _ => Err(
            "its sasl.jaas.config has no username and password (username=\"…\" password=\"…\")"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::credentials;

    #[test]
    fn jaas_lines_give_their_username_and_password() {
        let line = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="p w;\"x";"#;
        assert_eq!(
            credentials(line).unwrap(),
            ("broker".into(), "p w;\"x".into())
        );
        let bare = "org.apache.kafka.common.security.plain.PlainLoginModule required username=n1 password=s;";
        assert_eq!(credentials(bare).unwrap(), ("n1".into(), "s".into()));
        assert!(credentials("x required user_admin=\"a\";").is_err());
    }
}
