//! `datum server init` and `datum server enroll`: the fleet's CA and the
//! server's certificate (rcgen, ECDSA P-256), the admin credential, the
//! configuration, and one token per host.
//!
//! The server's folder is one of Datum's private folders
//! (`datum_host::PrivateDir`: 0700, the user's own, every file opened
//! without following a link), written whole (renamed into place, keys 0600
//! from the first byte; `init` never replaces an existing file), and the
//! credentials file `enroll --out FILE` writes goes through
//! `datum_host::named` (never through a link at the name), so this crate
//! does no raw file access of its own. The store holds only token hashes; the tokens themselves exist only
//! in the files handed out (`admin.yaml`, each host's `report.yaml`).
//!
//! Owns: [`init`], [`credentials_for`], [`ServerDir`], and what enroll
//! keeps of a `report.yaml` it replaces ([`keep_hand_set`]). Must not: start a server.

use std::path::{Path, PathBuf};

use datum_fleet::credentials::{
    ADMIN_TOKEN_PREFIX, AdminCredentials, Credentials, HOST_TOKEN_PREFIX, IdentityKind, new_token,
    token_hash,
};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::config::{self, ServerConfig};
use crate::store::StoreError;

/// Why init or enroll failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error(transparent)]
    Host(#[from] datum_host::HostError),
    #[error("cannot make the certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{}: not a datum server folder (no {}); run `datum server init --dir DIR` first", dir.display(), config::CONFIG_FILE)]
    NotInitialised { dir: PathBuf },
    #[error("`{name}` is not a usable host name ({})", datum_core::host_name::RULE)]
    BadName { name: String },
    #[error(
        "{error}; enroll writes over an existing --out file keeping the keys it does not set ({}), and cannot read this one: move it away or name another --out",
        HAND_SET.join(", ")
    )]
    Existing {
        error: datum_fleet::credentials::CredentialsError,
    },
    #[error(
        "--listen {listen} listens on every address, which is no address a host can report to: give the URL hosts reach the server by (--url https://NAME:PORT), or the name they know it by (--name NAME, which then makes the URL)"
    )]
    NoReportUrl { listen: String },
}

/// A server folder and what is in it.
#[derive(Debug, Clone)]
pub struct ServerDir {
    pub dir: PathBuf,
    pub config: ServerConfig,
}

impl ServerDir {
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// Reads `DIR/server.yaml`.
    pub fn open(dir: &Path) -> Result<Self, InitError> {
        let not_initialised = || InitError::NotInitialised {
            dir: dir.to_owned(),
        };
        let folder = datum_host::PrivateDir::open_path(dir, false)?.ok_or_else(not_initialised)?;
        let path = dir.join(config::CONFIG_FILE);
        let bytes = folder
            .read(config::CONFIG_FILE)?
            .ok_or_else(not_initialised)?;
        let text = String::from_utf8_lossy(&bytes);
        Ok(ServerDir {
            dir: dir.to_owned(),
            config: ServerConfig::parse(&path, &text)?,
        })
    }

    /// Reads `file` of the folder (a certificate, a key), which must exist.
    pub fn read(&self, file: &str) -> Result<Vec<u8>, InitError> {
        let missing = || {
            datum_host::HostError::io(
                "read",
                self.path(file),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            )
        };
        let folder = datum_host::PrivateDir::open_path(&self.dir, false)?.ok_or_else(missing)?;
        Ok(folder.read(file)?.ok_or_else(missing)?)
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> Result<String, InitError> {
        let bytes = self.read(config::CA_CERT_FILE)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// What `init` was asked for.
#[derive(Debug, Clone)]
pub struct InitOptions {
    /// `HOST:PORT` to listen on.
    pub listen: String,
    /// Names and addresses the certificate is valid for, besides the
    /// listen host, `localhost`, `127.0.0.1` and `::1`.
    pub names: Vec<String>,
    /// The URL hosts report to (default: `https://` + the listen address,
    /// or the first of `names` when that address is every address).
    pub url: Option<String>,
    /// `sqlite` or a PostgreSQL URL.
    pub store: String,
    /// Host sampling: the fraction and round length.
    pub sampling: Option<(f64, std::time::Duration)>,
}

/// What `init` made, for the caller to print.
#[derive(Debug, Clone)]
pub struct Initialised {
    pub dir: ServerDir,
    pub admin: AdminCredentials,
}

/// The host part of a `HOST:PORT` listen address, without brackets.
fn listen_host(listen: &str) -> String {
    listen
        .rsplit_once(':')
        .map_or(listen, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned()
}

/// The URL hosts report to: `--url` when given; else `https://` and the
/// listen address, or, when that address is every address (`0.0.0.0`,
/// `::`), the first `--name` and the listen port, since a host told to
/// report to `0.0.0.0` would reach itself. Refused when there is neither.
pub fn report_url(opts: &InitOptions) -> Result<String, InitError> {
    if let Some(url) = &opts.url {
        return Ok(url.clone());
    }
    let host_part = listen_host(&opts.listen);
    let port = opts.listen.rsplit_once(':').map_or("8443", |(_, p)| p);
    let host = if host_part.is_empty() || host_part == "0.0.0.0" || host_part == "::" {
        opts.names
            .first()
            .cloned()
            .ok_or_else(|| InitError::NoReportUrl {
                listen: opts.listen.clone(),
            })?
    } else {
        host_part
    };
    let shown = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    Ok(format!("https://{shown}:{port}"))
}

/// Fills `dir` (created when missing, mode 0700) with a new server. The
/// store is opened by the caller afterwards to record the admin token's
/// hash (see [`admin_token_hash`]).
pub fn init(dir: &Path, opts: &InitOptions) -> Result<Initialised, InitError> {
    let url = report_url(opts)?;
    let host_part = listen_host(&opts.listen);
    let folder =
        datum_host::PrivateDir::open_path(dir, true)?.ok_or_else(|| InitError::NotInitialised {
            dir: dir.to_owned(),
        })?;
    let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if !host_part.is_empty() && host_part != "0.0.0.0" && host_part != "::" {
        names.push(host_part.clone());
    }
    if let Some(h) = url
        .strip_prefix("https://")
        .and_then(|r| r.rsplit_once(':'))
        .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']').to_owned())
    {
        names.push(h);
    }
    names.extend(opts.names.iter().cloned());
    names.sort();
    names.dedup();

    let (ca_pem, ca_key_pem, cert_pem, key_pem) = certificates(&names)?;
    let mut config = ServerConfig::new(url.clone(), opts.listen.clone(), opts.store.clone());
    if let Some((fraction, round)) = opts.sampling {
        config.sampling = Some(config::Sampling {
            fraction,
            round,
            seed: u64::from_str_radix(&token_hash(&new_token(""))[..15], 16).unwrap_or(1),
        });
    }
    let admin = AdminCredentials {
        server: url,
        ca_pem: ca_pem.clone(),
        token: new_token(ADMIN_TOKEN_PREFIX),
    };
    let own = |file: &str, text: &str, mode: u32| folder.write_new(file, text.as_bytes(), mode);
    own(config::CA_CERT_FILE, &ca_pem, 0o644)?;
    own(config::CA_KEY_FILE, &ca_key_pem, 0o600)?;
    own(config::CERT_FILE, &cert_pem, 0o644)?;
    own(config::KEY_FILE, &key_pem, 0o600)?;
    own(config::ADMIN_FILE, &admin.render(), 0o600)?;
    own(config::CONFIG_FILE, &config.render(), 0o600)?;
    Ok(Initialised {
        dir: ServerDir {
            dir: dir.to_owned(),
            config,
        },
        admin,
    })
}

/// A new admin credential for the server of `dir` (its URL and CA).
pub fn new_admin(dir: &ServerDir) -> Result<AdminCredentials, InitError> {
    Ok(AdminCredentials {
        server: dir.config.url.to_string(),
        ca_pem: dir.ca_pem()?,
        token: new_token(ADMIN_TOKEN_PREFIX),
    })
}

/// Replaces `DIR/admin.yaml` with `admin` (0600, renamed into place).
pub fn write_admin(dir: &ServerDir, admin: &AdminCredentials) -> Result<(), InitError> {
    let folder = datum_host::PrivateDir::open_path(&dir.dir, false)?.ok_or_else(|| {
        InitError::NotInitialised {
            dir: dir.dir.clone(),
        }
    })?;
    folder.write_atomic(config::ADMIN_FILE, admin.render().as_bytes())?;
    Ok(())
}

/// The hash of the admin token in `admin`.
pub fn admin_token_hash(admin: &AdminCredentials) -> String {
    token_hash(&admin.token)
}

/// A CA and a server certificate for `names`: (CA PEM, CA key PEM, server
/// certificate PEM, server key PEM).
fn certificates(names: &[String]) -> Result<(String, String, String, String), InitError> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "Datum fleet CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.not_before = rcgen::date_time_ymd(2024, 1, 1);
    ca.not_after = rcgen::date_time_ymd(2074, 1, 1);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let mut server = CertificateParams::new(names.to_vec())?;
    server
        .distinguished_name
        .push(DnType::CommonName, "datum server");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    server.not_before = rcgen::date_time_ymd(2024, 1, 1);
    server.not_after = rcgen::date_time_ymd(2074, 1, 1);
    let key = KeyPair::generate()?;
    let issuer = Issuer::new(ca, ca_key);
    let cert = server.signed_by(&key, &issuer)?;
    let ca_key_pem = issuer.key().serialize_pem();
    Ok((ca_cert.pem(), ca_key_pem, cert.pem(), key.serialize_pem()))
}

/// Checks a name for a host or stack.
pub fn check_name(name: &str) -> Result<(), InitError> {
    if datum_core::host_name::is_valid(name) {
        Ok(())
    } else {
        Err(InitError::BadName {
            name: name.to_owned(),
        })
    }
}

/// A new token for `name`: the credentials to hand to the host, and the
/// hash to record in the store.
pub fn credentials_for(
    dir: &ServerDir,
    name: &str,
    kind: IdentityKind,
) -> Result<(Credentials, String), InitError> {
    check_name(name)?;
    let token = new_token(HOST_TOKEN_PREFIX);
    let hash = token_hash(&token);
    Ok((
        Credentials {
            server: dir.config.url.clone(),
            ca_pem: dir.ca_pem()?,
            identity: name.to_owned(),
            kind,
            token,
            interval: None,
            outbox_limit: None,
            outbox_bytes: None,
        },
        hash,
    ))
}

/// The keys of `report.yaml` that enroll does not set, which a host's
/// operator may have written by hand: `interval` (unless `--interval` is
/// given), `outbox_limit`, `outbox_bytes`.
pub const HAND_SET: [&str; 3] = ["interval", "outbox_limit", "outbox_bytes"];

/// The `report.yaml` already at `out`, which enroll is about to replace
/// (`None` when there is none). Read before anything is enrolled, so a
/// file that cannot be kept from refuses the enrolment while the host's
/// old token still works.
pub fn existing_credentials(out: &Path) -> Result<Option<Credentials>, InitError> {
    let Some(bytes) = datum_host::named::read_replaced(out)? else {
        return Ok(None);
    };
    let text = String::from_utf8(bytes).map_err(|_| InitError::Existing {
        error: datum_fleet::credentials::CredentialsError {
            path: out.to_owned(),
            line: 1,
            message: "not UTF-8 text".to_owned(),
        },
    })?;
    Credentials::parse(out, &text)
        .map(Some)
        .map_err(|error| InitError::Existing { error })
}

/// Keeps in `new` what `old` (the file it replaces) sets of [`HAND_SET`]:
/// its outbox bounds, and its interval when `new` states none. Returns the
/// keys kept.
pub fn keep_hand_set(new: &mut Credentials, old: &Credentials) -> Vec<&'static str> {
    let mut kept = Vec::new();
    if new.interval.is_none() && old.interval.is_some() {
        new.interval = old.interval;
        kept.push("interval");
    }
    if old.outbox_limit.is_some() {
        new.outbox_limit = old.outbox_limit;
        kept.push("outbox_limit");
    }
    if old.outbox_bytes.is_some() {
        new.outbox_bytes = old.outbox_bytes;
        kept.push("outbox_bytes");
    }
    kept
}

/// Writes `credentials` to `out` (mode 0600; replaces an older file).
pub fn write_credentials(out: &Path, credentials: &Credentials) -> Result<(), InitError> {
    datum_host::named::write_secret(out, credentials.render().as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(listen: &str, names: &[&str], url: Option<&str>) -> InitOptions {
        InitOptions {
            listen: listen.into(),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            url: url.map(str::to_owned),
            store: "sqlite".into(),
            sampling: None,
        }
    }

    /// docs/fleet.md's `init --listen 0.0.0.0:8443 --name
    /// fleet.example.org` must tell hosts to report to that name: a host
    /// told `https://0.0.0.0:8443` connects to itself.
    #[test]
    fn hosts_are_never_told_to_report_to_every_address() {
        let url = |l, n: &[&str], u| report_url(&opts(l, n, u)).map_err(|e| e.to_string());
        assert_eq!(
            url("0.0.0.0:8443", &["fleet.example.org"], None).as_deref(),
            Ok("https://fleet.example.org:8443")
        );
        assert_eq!(
            url("[::]:8443", &["2001:db8::1"], None).as_deref(),
            Ok("https://[2001:db8::1]:8443")
        );
        assert_eq!(
            url("127.0.0.1:8443", &["fleet.example.org"], None).as_deref(),
            Ok("https://127.0.0.1:8443")
        );
        assert_eq!(
            url("0.0.0.0:8443", &[], Some("https://f.example:443")).as_deref(),
            Ok("https://f.example:443")
        );
        for listen in ["0.0.0.0:8443", "[::]:8443", ":8443"] {
            let err = url(listen, &[], None).unwrap_err();
            assert!(err.contains("--url https://NAME:PORT"), "{err}");
        }
    }
}
