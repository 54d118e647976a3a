//! HTTPS to `datum server`: a blocking client (no async runtime in a host
//! pass) that trusts only the CA named in the credentials file, sends a
//! bearer token, and bounds every wait (connect, whole call) and every
//! answer it reads.
//!
//! Owns: [`Client`], the classification of a failed delivery
//! ([`SendError`]: try again later, or refused for good), and the request
//! headers of the report endpoint. Must not: decide when to retry (that is
//! [`crate::delivery`]) or touch the outbox.

use std::sync::Arc;
use std::time::Duration;

use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};

use crate::report::Reply;

/// The report endpoint.
pub const REPORTS_PATH: &str = "/v1/reports";
/// Request header: the report's idempotency key (also in the body).
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";
/// Request header: reports waiting in the outbox behind this one.
pub const OUTBOX_DEPTH_HEADER: &str = "Datum-Outbox-Depth";
/// Request header: reports the outbox dropped (full) since the last
/// delivery.
pub const OUTBOX_DROPPED_HEADER: &str = "Datum-Outbox-Dropped";

/// Request header: the state store the report was made in (32 hex
/// digits, drawn when the store was made). A header, not a field of the
/// report, so servers that predate it take the report as before.
pub const STORE_ID_HEADER: &str = "Datum-Store-Id";

/// The largest answer read from the server.
const MAX_ANSWER: u64 = 64 * 1024 * 1024;

/// How long a client waits.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    /// One whole request, from connecting to the last byte of the answer.
    pub call: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(3),
            call: Duration::from_secs(15),
        }
    }
}

/// A client for one server and one token.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
    base: String,
    token: String,
    /// Where the trusted CA comes from, as a server certificate it did not
    /// sign is told (`ROOT/etc/datum/report.yaml`).
    ca_from: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("base", &self.base).finish()
    }
}

/// A client that cannot be made (a CA that is not PEM).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the CA certificate cannot be read: {0}")]
    Ca(String),
}

/// Why a request did not give an answer to act on.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Worth trying again later: the network, a timeout, a server error, a
    /// rate limit (with the server's `Retry-After`, when it gave one).
    #[error("{message}")]
    Transient {
        message: String,
        retry_after: Option<Duration>,
    },
    /// The server refused this request for good (HTTP 400, 413, 422...):
    /// sending the same bytes again cannot succeed.
    #[error("refused by the server (HTTP {status}): {message}")]
    Refused { status: u16, message: String },
    /// The token was refused (HTTP 401/403): nothing is lost, but nothing
    /// gets through until the credentials are fixed.
    #[error("the server refused the credentials (HTTP {status}): {message}")]
    Unauthorized { status: u16, message: String },
}

impl Client {
    /// A client for `server` (`https://host:port`) that trusts `ca_pem`
    /// only and authenticates with `token`.
    pub fn new(
        server: &str,
        ca_pem: &str,
        token: &str,
        timeouts: Timeouts,
    ) -> Result<Self, ClientError> {
        let mut roots = Vec::new();
        for item in ureq::tls::parse_pem(ca_pem.as_bytes()) {
            match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => roots.push(c),
                Ok(_) => {}
                Err(e) => return Err(ClientError::Ca(e.to_string())),
            }
        }
        if roots.is_empty() {
            return Err(ClientError::Ca("no certificate in it".to_owned()));
        }
        let roots: Vec<Certificate<'static>> = roots;
        let tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .root_certs(RootCerts::Specific(Arc::new(roots)))
            .build();
        let agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .https_only(true)
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(timeouts.connect))
            .timeout_global(Some(timeouts.call))
            .user_agent(concat!("datum/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Ok(Client {
            agent,
            base: server.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            ca_from: "the credentials".to_owned(),
        })
    }

    /// Names the file the CA was read from (`report.yaml`), for the
    /// message when the server's certificate is not signed by it.
    #[must_use]
    pub fn ca_from(mut self, file: &std::path::Path) -> Self {
        self.ca_from = file.display().to_string();
        self
    }

    /// Delivers one report (its JSON bytes). `Ok` means the server holds
    /// it (now or from an earlier delivery of the same key).
    pub fn post_report(
        &self,
        key: &str,
        body: &[u8],
        depth: u64,
        dropped: u64,
    ) -> Result<Reply, SendError> {
        self.post_report_of(key, body, depth, dropped, None)
    }

    /// [`Client::post_report`] of a report made in state store `store`
    /// (sent as [`STORE_ID_HEADER`], 32 hex digits, when known).
    pub fn post_report_of(
        &self,
        key: &str,
        body: &[u8],
        depth: u64,
        dropped: u64,
        store: Option<u128>,
    ) -> Result<Reply, SendError> {
        let url = format!("{}{REPORTS_PATH}", self.base);
        let mut request = self
            .agent
            .post(&url)
            .header("Authorization", &format!("Bearer {}", self.token))
            .header(IDEMPOTENCY_HEADER, key)
            .header(OUTBOX_DEPTH_HEADER, &depth.to_string())
            .header(OUTBOX_DROPPED_HEADER, &dropped.to_string());
        if let Some(store) = store {
            request = request.header(STORE_ID_HEADER, &format!("{store:032x}"));
        }
        let response = request.content_type("application/json").send(body);
        let text = answer(response, &self.ca_from)?;
        serde_json::from_str(&text).map_err(|e| SendError::Transient {
            message: format!("the server's answer is not a report reply: {e}"),
            retry_after: None,
        })
    }

    /// `GET path` (with its query), as JSON.
    pub fn get_json(&self, path: &str) -> Result<serde_json::Value, SendError> {
        let url = format!("{}{path}", self.base);
        let response = self
            .agent
            .get(&url)
            .header("Authorization", &format!("Bearer {}", self.token))
            .header("Accept", "application/json")
            .call();
        let text = answer(response, &self.ca_from)?;
        serde_json::from_str(&text).map_err(|e| SendError::Transient {
            message: format!("the server's answer is not JSON: {e}"),
            retry_after: None,
        })
    }
}

/// The body of a 2xx answer, or the error that the status means. `ca_from`
/// names where the trusted CA was read from.
fn answer(
    response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ca_from: &str,
) -> Result<String, SendError> {
    let mut response = response.map_err(|e| SendError::Transient {
        message: describe(&e, ca_from),
        retry_after: None,
    })?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let text = response
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER)
        .read_to_string()
        .map_err(|e| SendError::Transient {
            message: format!("cannot read the answer: {}", describe(&e, ca_from)),
            retry_after: None,
        })?;
    classify(status, text, retry_after)
}

/// What an answer's status means for the request. Only the statuses with
/// which a server says it read the request and will never take these bytes
/// (400, 413, 415, 422) refuse it for good; anything else that is not a
/// success (a redirect, 404, 405, 421: a proxy or a wrong address in front
/// of the server, which never answers so) is tried again later, so a
/// misconfiguration cannot empty the outbox report by report.
fn classify(status: u16, text: String, retry_after: Option<Duration>) -> Result<String, SendError> {
    match status {
        200..=299 => Ok(text),
        401 | 403 => Err(SendError::Unauthorized {
            status,
            message: server_message(&text),
        }),
        400 | 413 | 415 | 422 => Err(SendError::Refused {
            status,
            message: server_message(&text),
        }),
        _ => Err(SendError::Transient {
            message: format!("HTTP {status}: {}", server_message(&text)),
            retry_after,
        }),
    }
}

/// The `error` of a JSON error body, or the (bounded) text.
fn server_message(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| crate::report::bounded(text.trim(), 300))
}

fn describe(e: &ureq::Error, ca_from: &str) -> String {
    if let Some(why) = certificate_error(e) {
        return match why {
            // A certificate of another CA (another `datum server init`: its
            // CA has the same name, so rustls says BadSignature) or one
            // whose issuer is not the CA at all.
            rustls::CertificateError::BadSignature | rustls::CertificateError::UnknownIssuer => {
                format!(
                    "the server's certificate is not signed by the CA {ca_from} names (invalid peer certificate: {why:?})"
                )
            }
            _ => format!(
                "the server's certificate is refused with the CA {ca_from} names (invalid peer certificate: {why:?})"
            ),
        };
    }
    match e {
        ureq::Error::Io(io) => format!("cannot reach the server: {io}"),
        ureq::Error::Timeout(what) => format!("timed out ({what})"),
        other => other.to_string(),
    }
}

/// The reason rustls refused the server's certificate, if it did: ureq
/// passes it on as its own error or inside an I/O error.
fn certificate_error(e: &ureq::Error) -> Option<&rustls::CertificateError> {
    let tls = match e {
        ureq::Error::Rustls(tls) => tls,
        ureq::Error::Io(io) => io.get_ref()?.downcast_ref::<rustls::Error>()?,
        _ => return None,
    };
    match tls {
        rustls::Error::InvalidCertificate(why) => Some(why),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a server that read the report refuses it for good; a redirect
    /// or a 404 (a proxy, a wrong address) keeps it queued, where it was
    /// set aside and lost, one report per attempt, until the outbox was
    /// empty.
    #[test]
    fn only_a_refusal_of_the_bytes_sets_a_report_aside() {
        let kind = |status: u16| match classify(status, "{\"error\":\"x\"}".into(), None) {
            Ok(_) => "ok",
            Err(SendError::Refused { .. }) => "refused",
            Err(SendError::Unauthorized { .. }) => "unauthorized",
            Err(SendError::Transient { .. }) => "again",
        };
        assert_eq!(kind(200), "ok");
        for status in [400, 413, 415, 422] {
            assert_eq!(kind(status), "refused", "{status}");
        }
        assert_eq!((kind(401), kind(403)), ("unauthorized", "unauthorized"));
        for status in [
            301, 302, 307, 308, 404, 405, 408, 409, 421, 429, 500, 502, 503,
        ] {
            assert_eq!(kind(status), "again", "{status}");
        }
        let Err(SendError::Transient {
            message,
            retry_after,
        }) = classify(429, String::new(), Some(Duration::from_secs(7)))
        else {
            panic!("429 is tried again");
        };
        assert_eq!(retry_after, Some(Duration::from_secs(7)), "{message}");
    }

    /// A CA of the server's name (`Datum fleet CA`, as every `datum server
    /// init` makes) and a server certificate for 127.0.0.1 it signed, in
    /// PEM and DER.
    fn ca_and_server(ca_name: &str) -> (String, Vec<u8>, Vec<u8>) {
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, ca_name);
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let server = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let cert = server.signed_by(&key, &issuer).unwrap();
        (ca_cert.pem(), cert.der().to_vec(), key.serialize_der())
    }

    /// A TLS server on loopback for one handshake with `cert`: its address.
    fn serve_once(cert: Vec<u8>, key: Vec<u8>) -> String {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert)],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
        )
        .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = format!("https://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut tls = rustls::ServerConnection::new(Arc::new(config)).unwrap();
                let _ = tls.complete_io(&mut stream);
            }
        });
        address
    }

    /// A host given another server's CA (another `datum server init`, its
    /// CA of the same name) read 'cannot reach the server: invalid peer
    /// certificate: BadSignature': it now says the server's certificate is
    /// not signed by the CA the file names, naming the file, and keeps
    /// rustls' words.
    #[test]
    fn a_server_certificate_of_another_ca_is_said_so() {
        for (theirs, ours, why) in [
            ("Datum fleet CA", "Datum fleet CA", "BadSignature"),
            ("Datum fleet CA", "Another CA", "UnknownIssuer"),
        ] {
            let (_, cert, key) = ca_and_server(theirs);
            let (our_ca, _, _) = ca_and_server(ours);
            let server = serve_once(cert, key);
            let client = Client::new(&server, &our_ca, "dtm_h_x", Timeouts::default())
                .unwrap()
                .ca_from(std::path::Path::new("/srv/root/etc/datum/report.yaml"));
            let Err(SendError::Transient { message, .. }) = client.post_report("k", b"{}", 0, 0)
            else {
                panic!("{why}: a transient failure");
            };
            assert_eq!(
                message,
                format!(
                    "the server's certificate is not signed by the CA /srv/root/etc/datum/report.yaml names (invalid peer certificate: {why})"
                ),
            );
        }
    }
}
