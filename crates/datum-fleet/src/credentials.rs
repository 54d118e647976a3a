//! The two files that connect a reporter to a server:
//!
//! - `report.yaml` (a host's `/etc/datum/report.yaml` under the root, or
//!   driftwatch's `--report-to FILE`), written by `datum server enroll`:
//!   the server's URL, the CA that signed its certificate, the identity and
//!   its token;
//! - `admin.yaml`, written by `datum server init`: the URL, the CA and the
//!   admin credential `datum fleet` reads with.
//!
//! Both are YAML mappings with a `datum: v1alpha1` marker; an unknown key, a
//! missing one or a value of the wrong type is an error naming the file,
//! line and key. Both hold a secret (a token): [`Credentials`] never shows
//! it in `Debug`.
//!
//! Owns: parsing and rendering those files, and [`new_token`]. Must not:
//! read or write files (the callers pass text in and out).

use std::path::{Path, PathBuf};
use std::time::Duration;

use datum_manifest::yaml::{self, Node, Value};

/// A token's prefix: `dtm_h_` for a host (or stack), `dtm_a_` for the
/// admin credential, so a token in a log says what it opens.
pub const HOST_TOKEN_PREFIX: &str = "dtm_h_";
pub const ADMIN_TOKEN_PREFIX: &str = "dtm_a_";

/// A new secret token: the prefix and 64 hex digits (256 random bits).
pub fn new_token(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    crate::random::fill(&mut bytes);
    format!("{prefix}{}", hex::encode(bytes))
}

/// The hash a server stores instead of a token: SHA-256, hex. Tokens are
/// 256 random bits, so a fast hash is enough (nothing to brute-force).
pub fn token_hash(token: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// What reports are (`host` or `stack`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityKind {
    Host,
    Stack,
}

impl IdentityKind {
    pub fn word(self) -> &'static str {
        match self {
            IdentityKind::Host => "host",
            IdentityKind::Stack => "stack",
        }
    }
}

/// A reporter's connection to the server (`report.yaml`).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// `https://host:port` (no path).
    pub server: String,
    /// PEM of the CA certificate the server's certificate must chain to.
    pub ca_pem: String,
    /// The host (or stack) name the token was issued for.
    pub identity: String,
    pub kind: IdentityKind,
    pub token: String,
    /// The longest expected gap between two reports, when stated.
    pub interval: Option<Duration>,
    /// Reports kept in the outbox at most while the server is unreachable
    /// (the oldest are dropped beyond, and counted).
    pub outbox_limit: Option<u64>,
    /// Bytes of reports kept in the outbox at most, beside `outbox_limit`
    /// (the oldest are dropped beyond, and counted).
    pub outbox_bytes: Option<u64>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("server", &self.server)
            .field("identity", &self.identity)
            .field("kind", &self.kind)
            .field("token", &"(sensitive)")
            .finish()
    }
}

/// The admin's connection (`admin.yaml`).
#[derive(Clone, PartialEq, Eq)]
pub struct AdminCredentials {
    pub server: String,
    pub ca_pem: String,
    pub token: String,
}

impl std::fmt::Debug for AdminCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminCredentials")
            .field("server", &self.server)
            .field("token", &"(sensitive)")
            .finish()
    }
}

/// A credentials file that cannot be used, with where.
#[derive(Debug, thiserror::Error)]
#[error("{}:{line}: {message}", path.display())]
pub struct CredentialsError {
    pub path: PathBuf,
    pub line: u32,
    pub message: String,
}

struct Fields<'a> {
    path: &'a Path,
    entries: &'a [yaml::Entry],
    line: u32,
}

impl<'a> Fields<'a> {
    fn parse(
        path: &'a Path,
        parsed: &'a yaml::Parsed,
        allowed: &[&str],
    ) -> Result<Self, CredentialsError> {
        let err = |line: u32, message: String| CredentialsError {
            path: path.to_owned(),
            line,
            message,
        };
        if let Some(e) = parsed.errors.first() {
            return Err(err(e.start.line, e.message.clone()));
        }
        let doc: Option<&Node> = parsed.documents.iter().find(|d| !d.is_null());
        let Some(doc) = doc else {
            return Err(err(1, "empty file: expected a mapping".to_owned()));
        };
        let Some(entries) = doc.as_map() else {
            return Err(err(doc.start.line, "expected a mapping".to_owned()));
        };
        for e in entries {
            if !allowed.contains(&e.key.as_str()) {
                return Err(err(
                    e.key_start.line,
                    format!(
                        "unknown key `{}` (expected one of {})",
                        e.key,
                        allowed.join(", ")
                    ),
                ));
            }
        }
        let fields = Fields {
            path,
            entries,
            line: doc.start.line,
        };
        match fields.text("datum")?.as_deref() {
            Some("v1alpha1") => Ok(fields),
            Some(other) => Err(fields.error("datum", format!("unknown version `{other}`"))),
            None => Err(err(fields.line, "missing `datum: v1alpha1`".to_owned())),
        }
    }

    fn entry(&self, key: &str) -> Option<&'a yaml::Entry> {
        self.entries.iter().find(|e| e.key == key)
    }

    fn error(&self, key: &str, message: String) -> CredentialsError {
        CredentialsError {
            path: self.path.to_owned(),
            line: self.entry(key).map_or(self.line, |e| e.key_start.line),
            message: format!("`{key}`: {message}"),
        }
    }

    fn text(&self, key: &str) -> Result<Option<String>, CredentialsError> {
        match self.entry(key) {
            None => Ok(None),
            Some(e) => match &e.value.value {
                Value::Str(s) => Ok(Some(s.clone())),
                Value::Null => Ok(None),
                _ => Err(self.error(key, format!("expected text, found {}", e.value.type_name()))),
            },
        }
    }

    fn required(&self, key: &str) -> Result<String, CredentialsError> {
        match self.text(key)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            _ => Err(CredentialsError {
                path: self.path.to_owned(),
                line: self.line,
                message: format!("missing `{key}`"),
            }),
        }
    }

    fn server(&self) -> Result<String, CredentialsError> {
        let url = self.required("server")?;
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| self.error("server", format!("`{url}` is not an https:// URL")))?;
        if rest.is_empty() || rest.trim_end_matches('/').contains('/') {
            return Err(self.error(
                "server",
                format!("`{url}` must be https://HOST:PORT, without a path"),
            ));
        }
        Ok(url.trim_end_matches('/').to_owned())
    }

    fn ca(&self) -> Result<String, CredentialsError> {
        let ca = self.required("ca")?;
        if !ca.contains("-----BEGIN CERTIFICATE-----") {
            return Err(self.error("ca", "expected a PEM certificate".to_owned()));
        }
        Ok(ca)
    }

    fn token(&self, prefix: &str) -> Result<String, CredentialsError> {
        let token = self.required("token")?;
        if !token.starts_with(prefix) {
            return Err(self.error("token", format!("expected a token starting {prefix}")));
        }
        Ok(token)
    }
}

impl Credentials {
    /// Parses `report.yaml` (`path` is for messages).
    pub fn parse(path: &Path, text: &str) -> Result<Self, CredentialsError> {
        let parsed = yaml::parse(text);
        let f = Fields::parse(
            path,
            &parsed,
            &[
                "datum",
                "server",
                "ca",
                "identity",
                "kind",
                "token",
                "interval",
                "outbox_limit",
                "outbox_bytes",
            ],
        )?;
        let kind = match f.text("kind")?.as_deref() {
            None | Some("host") => IdentityKind::Host,
            Some("stack") => IdentityKind::Stack,
            Some(other) => {
                return Err(f.error("kind", format!("`{other}` is neither host nor stack")));
            }
        };
        let interval = match f.text("interval")? {
            None => None,
            Some(text) => Some(
                humantime::parse_duration(&text)
                    .map_err(|e| f.error("interval", format!("`{text}`: {e}")))?,
            ),
        };
        let outbox_limit = match f.entry("outbox_limit").map(|e| &e.value.value) {
            None | Some(Value::Null) => None,
            Some(Value::Int(n)) if *n > 0 => Some(*n as u64),
            Some(_) => {
                return Err(f.error("outbox_limit", "expected a positive number".to_owned()));
            }
        };
        let outbox_bytes = match f.entry("outbox_bytes").map(|e| &e.value.value) {
            None | Some(Value::Null) => None,
            Some(Value::Int(n)) if *n > 0 => Some(*n as u64),
            Some(_) => {
                return Err(f.error(
                    "outbox_bytes",
                    "expected a positive number of bytes".to_owned(),
                ));
            }
        };
        Ok(Credentials {
            server: f.server()?,
            ca_pem: f.ca()?,
            identity: f.required("identity")?,
            kind,
            token: f.token(HOST_TOKEN_PREFIX)?,
            interval,
            outbox_limit,
            outbox_bytes,
        })
    }

    /// The text of `report.yaml` for these credentials.
    pub fn render(&self) -> String {
        let mut out = format!(
            "# Written by `datum server enroll`: where this {kind}'s reports go.\n\
             # Holds a secret token: keep it mode 0600, owned by root.\n\
             datum: v1alpha1\n\
             server: {server}\n\
             identity: {identity}\n\
             kind: {kind}\n\
             token: {token}\n",
            kind = self.kind.word(),
            server = self.server,
            identity = quote(&self.identity),
            token = self.token,
        );
        if let Some(i) = self.interval {
            out.push_str(&format!("interval: {}\n", humantime::format_duration(i)));
        }
        if let Some(n) = self.outbox_limit {
            out.push_str(&format!("outbox_limit: {n}\n"));
        }
        if let Some(n) = self.outbox_bytes {
            out.push_str(&format!("outbox_bytes: {n}\n"));
        }
        out.push_str(&block("ca", &self.ca_pem));
        out
    }
}

impl AdminCredentials {
    /// Parses `admin.yaml`.
    pub fn parse(path: &Path, text: &str) -> Result<Self, CredentialsError> {
        let parsed = yaml::parse(text);
        let f = Fields::parse(path, &parsed, &["datum", "server", "ca", "token"])?;
        Ok(AdminCredentials {
            server: f.server()?,
            ca_pem: f.ca()?,
            token: f.token(ADMIN_TOKEN_PREFIX)?,
        })
    }

    pub fn render(&self) -> String {
        format!(
            "# Written by `datum server init`: the admin credential `datum fleet` reads with.\n\
             # Holds a secret token: keep it mode 0600.\n\
             datum: v1alpha1\n\
             server: {}\n\
             token: {}\n{}",
            self.server,
            self.token,
            block("ca", &self.ca_pem)
        )
    }
}

/// A YAML literal block for `key`.
fn block(key: &str, text: &str) -> String {
    let mut out = format!("{key}: |\n");
    for line in text.lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `text` as a YAML scalar: quoted unless plainly safe.
fn quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !matches!(
            text,
            "true" | "false" | "null" | "yes" | "no" | "on" | "off"
        )
        && text.parse::<f64>().is_err();
    if plain {
        text.to_owned()
    } else {
        serde_json::to_string(text).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn creds() -> Credentials {
        Credentials {
            server: "https://127.0.0.1:8443".into(),
            ca_pem: CA.into(),
            identity: "web-01".into(),
            kind: IdentityKind::Host,
            token: new_token(HOST_TOKEN_PREFIX),
            interval: Some(Duration::from_secs(1800)),
            outbox_limit: Some(500),
            outbox_bytes: Some(64 * 1024 * 1024),
        }
    }

    #[test]
    fn report_yaml_round_trips_and_hides_its_token() {
        let c = creds();
        let text = c.render();
        let back = Credentials::parse(Path::new("report.yaml"), &text).unwrap();
        assert_eq!(back, c);
        assert!(!format!("{c:?}").contains(&c.token));
        // A name that YAML would read as a number stays a name.
        let odd = Credentials {
            identity: "1234".into(),
            ..creds()
        };
        let back = Credentials::parse(Path::new("r"), &odd.render()).unwrap();
        assert_eq!(back.identity, "1234");
    }

    #[test]
    fn an_outbox_budget_is_a_positive_number_of_bytes() {
        for bad in ["0", "-1", "64MiB"] {
            let text = creds()
                .render()
                .replace("outbox_bytes: 67108864", &format!("outbox_bytes: {bad}"));
            let e = Credentials::parse(Path::new("r"), &text).unwrap_err();
            assert!(e.to_string().contains("outbox_bytes"), "{bad}: {e}");
        }
    }

    #[test]
    fn errors_name_the_line_and_key() {
        let text = creds()
            .render()
            .replace("server: https://", "server: http://");
        let e = Credentials::parse(Path::new("/etc/datum/report.yaml"), &text).unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert!(
            e.to_string()
                .starts_with("/etc/datum/report.yaml:4: `server`"),
            "{e}"
        );
        let e = Credentials::parse(Path::new("r"), "datum: v1alpha1\nservre: x\n").unwrap_err();
        assert!(e.to_string().contains("unknown key `servre`"), "{e}");
        let e = Credentials::parse(Path::new("r"), "datum: v1alpha1\nserver: https://a:1\n")
            .unwrap_err();
        assert!(e.to_string().contains("missing `ca`"), "{e}");
        let admin = creds().render();
        let e = AdminCredentials::parse(Path::new("a"), &admin).unwrap_err();
        assert!(e.to_string().contains("unknown key"), "{e}");
    }

    #[test]
    fn admin_yaml_round_trips() {
        let a = AdminCredentials {
            server: "https://[::1]:9000".into(),
            ca_pem: CA.into(),
            token: new_token(ADMIN_TOKEN_PREFIX),
        };
        assert_eq!(
            AdminCredentials::parse(Path::new("a"), &a.render()).unwrap(),
            a
        );
        assert_ne!(token_hash(&a.token), a.token);
    }
}
