//! The server's folder and its `server.yaml`.
//!
//! `datum server init --dir DIR` fills DIR with:
//!
//! | file | what | mode |
//! | --- | --- | --- |
//! | `server.yaml` | this configuration | 0600 |
//! | `ca.pem`, `ca.key` | the fleet's certificate authority | 0644, 0600 |
//! | `server.pem`, `server.key` | the server's certificate (signed by the CA) | 0644, 0600 |
//! | `admin.yaml` | URL, CA and admin credential for `datum fleet` | 0600 |
//! | `fleet.db` | the embedded SQLite store (when `store: sqlite`) | 0600 |
//!
//! Nothing else is kept anywhere: with `store: postgres://...` every server
//! process pointed at the same folder (or a copy of it) and database is
//! interchangeable, which is how the fleet scales out behind a load
//! balancer.
//!
//! Owns: [`ServerConfig`] (parse and render) and the file names. Must not:
//! open the store or the network.

use std::path::{Path, PathBuf};
use std::time::Duration;

use datum_manifest::yaml;
use serde::{Deserialize, Serialize};

pub const CONFIG_FILE: &str = "server.yaml";
pub const CA_CERT_FILE: &str = "ca.pem";
pub const CA_KEY_FILE: &str = "ca.key";
pub const CERT_FILE: &str = "server.pem";
pub const KEY_FILE: &str = "server.key";
pub const ADMIN_FILE: &str = "admin.yaml";
pub const SQLITE_FILE: &str = "fleet.db";

/// `server.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub datum: String,
    /// The URL hosts are told to report to (`enroll` writes it into
    /// `report.yaml`): `https://HOST:PORT`.
    pub url: String,
    /// Where `serve` listens unless `--listen` says otherwise.
    pub listen: String,
    /// `sqlite` (the embedded store in this folder) or a PostgreSQL URL
    /// (`postgres://user:password@host:port/db`).
    #[serde(default = "default_store")]
    pub store: String,
    #[serde(default)]
    pub retention: Retention,
    /// A host is stale when its last report is older than its own expected
    /// interval times this.
    #[serde(default = "default_stale_factor")]
    pub stale_factor: f64,
    /// A host enrolled but never heard from is stale after this long.
    #[serde(default = "default_first_report", with = "humantime_serde")]
    pub first_report_within: Duration,
    #[serde(default)]
    pub limits: Limits,
    /// Host sampling, when the fleet uses it.
    #[serde(default)]
    pub sampling: Option<Sampling>,
}

/// How much history is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// The last N reports of each host are kept whole.
    pub reports_per_host: u32,
    /// Daily aggregates (reports, failures, drift per host and day) are
    /// kept this many days.
    pub daily_days: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            reports_per_host: 100,
            daily_days: 400,
        }
    }
}

/// Bounds on what one client may ask of the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// The largest report accepted (HTTP 413 beyond).
    pub report_bytes: usize,
    /// Reports one identity may send per minute (HTTP 429 beyond), with a
    /// burst of as many. Per server process.
    pub reports_per_minute: u32,
    /// The longest a request may take, headers to last byte (HTTP 408).
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            report_bytes: 1024 * 1024,
            reports_per_minute: 600,
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// The fleet's sampling plan (see `datum_fleet::report::SamplingPlan`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sampling {
    /// The share of hosts deep-checked per round (0 < f <= 1).
    pub fraction: f64,
    /// The length of a round.
    #[serde(with = "humantime_serde")]
    pub round: Duration,
    /// The seed of the permutation (drawn by `init`).
    pub seed: u64,
}

fn default_store() -> String {
    "sqlite".to_owned()
}
/// The largest `stale_factor`: a host may stay silent a thousand times its
/// own interval at most. The stale view multiplies an interval (a century
/// at most, `api::INTERVAL_MAX_S`) by the factor in thousandths, which
/// stays far inside a 64-bit integer up to here; a factor of 1e300 made
/// PostgreSQL fail the whole view ('bigint out of range') and SQLite
/// compare in floats.
pub const STALE_FACTOR_MAX: f64 = 1000.0;

fn default_stale_factor() -> f64 {
    3.0
}
fn default_first_report() -> Duration {
    Duration::from_secs(3600)
}

/// A `server.yaml` that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct ConfigError {
    pub path: PathBuf,
    pub message: String,
}

impl ServerConfig {
    /// The store as a person may see it: a PostgreSQL URL's password is
    /// replaced by `***` (the URL itself stays in `server.yaml`, mode 0600).
    pub fn store_shown(&self) -> String {
        let Some((scheme, rest)) = self.store.split_once("://") else {
            return self.store.clone();
        };
        let authority_end = rest.find('/').unwrap_or(rest.len());
        let (authority, path) = rest.split_at(authority_end);
        match authority.rsplit_once('@') {
            Some((userinfo, host)) => match userinfo.split_once(':') {
                Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
                None => self.store.clone(),
            },
            None => self.store.clone(),
        }
    }

    /// A configuration for a server reached at `url`, listening on `listen`.
    pub fn new(url: String, listen: String, store: String) -> Self {
        ServerConfig {
            datum: "v1alpha1".to_owned(),
            url,
            listen,
            store,
            retention: Retention::default(),
            stale_factor: default_stale_factor(),
            first_report_within: default_first_report(),
            limits: Limits::default(),
            sampling: None,
        }
    }

    /// Parses the text of `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let err = |message: String| ConfigError {
            path: path.to_owned(),
            message,
        };
        let parsed = yaml::parse(text);
        if let Some(e) = parsed.errors.first() {
            return Err(err(format!(
                "{}:{}: {}",
                e.start.line, e.start.column, e.message
            )));
        }
        let doc = parsed
            .documents
            .iter()
            .find(|d| !d.is_null())
            .ok_or_else(|| err("empty file".to_owned()))?;
        let config: ServerConfig =
            serde_json::from_value(doc.to_json()).map_err(|e| err(e.to_string()))?;
        if config.datum != "v1alpha1" {
            return Err(err(format!("unknown version `{}`", config.datum)));
        }
        if !(1.0..=STALE_FACTOR_MAX).contains(&config.stale_factor) {
            // Only a value written can be out of range (the default is 3).
            let at = doc.get("stale_factor").map_or(doc.start, |e| e.key_start);
            return Err(err(format!(
                "{}:{}: `stale_factor` must be from 1 to {STALE_FACTOR_MAX}, not {}",
                at.line, at.column, config.stale_factor
            )));
        }
        if config.first_report_within.as_secs() > crate::api::INTERVAL_MAX_S {
            // The views take it as i64 seconds: past i64::MAX it turned negative, and every
            // host never heard from (or stating no interval) was stale at once.
            let at = doc
                .get("first_report_within")
                .map_or(doc.start, |e| e.key_start);
            return Err(err(format!(
                "{}:{}: `first_report_within` must be a century at most, not {}",
                at.line,
                at.column,
                humantime::format_duration(config.first_report_within)
            )));
        }
        if let Some(s) = &config.sampling
            && !(s.fraction > 0.0 && s.fraction <= 1.0 && !s.round.is_zero())
        {
            return Err(err(
                "`sampling.fraction` must be in (0, 1] and `sampling.round` longer than 0"
                    .to_owned(),
            ));
        }
        if config.retention.reports_per_host == 0 {
            return Err(err(
                "`retention.reports_per_host` must be at least 1".to_owned()
            ));
        }
        Ok(config)
    }

    /// The YAML text of this configuration, with comments.
    pub fn render(&self) -> String {
        let mut out = format!(
            "# datum server's configuration (see docs/fleet.md).\n\
             datum: v1alpha1\n\
             # What hosts are told to report to, and where `serve` listens.\n\
             url: {}\n\
             listen: \"{}\"\n\
             # `sqlite` (fleet.db in this folder) or postgres://user:password@host:port/db:\n\
             # several servers on one PostgreSQL take reports for the same fleet.\n\
             store: \"{}\"\n\
             retention:\n  reports_per_host: {}\n  daily_days: {}\n\
             # Stale: no report for longer than the host's own interval times this.\n\
             stale_factor: {}\n\
             first_report_within: {}\n\
             limits:\n  report_bytes: {}\n  reports_per_minute: {}\n  request_timeout: {}\n",
            self.url,
            self.listen,
            self.store,
            self.retention.reports_per_host,
            self.retention.daily_days,
            self.stale_factor,
            humantime::format_duration(self.first_report_within),
            self.limits.report_bytes,
            self.limits.reports_per_minute,
            humantime::format_duration(self.limits.request_timeout),
        );
        match &self.sampling {
            Some(s) => out.push_str(&format!(
                "# Host sampling: about `fraction` of the fleet deep-checks per round, and\n\
                 # every host at least once every ceil(1/fraction) rounds.\n\
                 sampling:\n  fraction: {}\n  round: {}\n  seed: {}\n",
                s.fraction,
                humantime::format_duration(s.round),
                s.seed
            )),
            None => out.push_str("# sampling: {fraction: 0.1, round: 1h, seed: 1}\n"),
        }
        out
    }

    /// The plan handed to hosts at `now`, when sampling is on.
    pub fn sampling_plan(&self, now: i64) -> Option<datum_fleet::SamplingPlan> {
        self.sampling.as_ref().map(|s| {
            let round_s = s.round.as_secs().max(1);
            datum_fleet::SamplingPlan {
                fraction: s.fraction,
                round_s,
                seed: s.seed,
                round: u64::try_from(now).unwrap_or(0) / round_s,
            }
        })
    }
}

/// Durations in `server.yaml` as humantime text (`30s`, `1h`).
mod humantime_serde {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_store_password_is_never_shown() {
        let mut c = super::ServerConfig::new("https://h:1".into(), "h:1".into(), "sqlite".into());
        assert_eq!(c.store_shown(), "sqlite");
        c.store = "postgres://fleet:s3cr3t-canary@db.example:5432/fleet?sslmode=require".into();
        assert_eq!(
            c.store_shown(),
            "postgres://fleet:***@db.example:5432/fleet?sslmode=require"
        );
        c.store = "postgresql://fleet@db/fleet".into();
        assert_eq!(c.store_shown(), "postgresql://fleet@db/fleet");
    }

    use super::*;

    #[test]
    fn renders_what_it_parses() {
        let mut c = ServerConfig::new(
            "https://127.0.0.1:8443".into(),
            "127.0.0.1:8443".into(),
            "sqlite".into(),
        );
        assert_eq!(ServerConfig::parse(Path::new("s"), &c.render()).unwrap(), c);
        c.sampling = Some(Sampling {
            fraction: 0.1,
            round: Duration::from_secs(600),
            seed: 42,
        });
        let back = ServerConfig::parse(Path::new("s"), &c.render()).unwrap();
        assert_eq!(back, c);
        let plan = back.sampling_plan(6_000).unwrap();
        assert_eq!((plan.round, plan.period()), (10, 10));
    }

    #[test]
    fn refuses_nonsense() {
        let base = ServerConfig::new("https://a:1".into(), "a:1".into(), "sqlite".into()).render();
        let e = ServerConfig::parse(
            Path::new("/d/server.yaml"),
            &base.replace("stale_factor: 3", "stale_factor: 0.5"),
        )
        .unwrap_err();
        let line = base
            .lines()
            .position(|l| l.starts_with("stale_factor:"))
            .unwrap()
            + 1;
        assert_eq!(
            e.to_string(),
            format!("/d/server.yaml: {line}:1: `stale_factor` must be from 1 to 1000, not 0.5")
        );
        // No upper bound let a factor through that overflows the stale
        // view's arithmetic (or made it compare floats).
        for huge in ["1000.5", "1e300", "9223372036854775807"] {
            let e = ServerConfig::parse(
                Path::new("/d/server.yaml"),
                &base.replace("stale_factor: 3", &format!("stale_factor: {huge}")),
            )
            .unwrap_err();
            assert!(
                e.to_string().starts_with(&format!(
                    "/d/server.yaml: {line}:1: `stale_factor` must be from 1 to 1000, not "
                )),
                "{huge}: {e}"
            );
        }
        let line = base
            .lines()
            .position(|l| l.starts_with("first_report_within:"))
            .unwrap()
            + 1;
        let e = ServerConfig::parse(
            Path::new("/d/server.yaml"),
            &base.replace(
                "first_report_within: 1h",
                "first_report_within: 500000000000years",
            ),
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "/d/server.yaml: {line}:1: `first_report_within` must be a century at most, not "
            )),
            "{e}"
        );
        let century = ServerConfig::parse(
            Path::new("s"),
            &base.replace("first_report_within: 1h", "first_report_within: 100years"),
        )
        .unwrap();
        assert_eq!(century.first_report_within.as_secs(), 3_155_760_000);
        let edge = ServerConfig::parse(
            Path::new("s"),
            &base.replace("stale_factor: 3", "stale_factor: 1000"),
        )
        .unwrap();
        assert_eq!(edge.stale_factor, STALE_FACTOR_MAX);
        let e = ServerConfig::parse(Path::new("s"), &format!("{base}colour: blue\n")).unwrap_err();
        assert!(e.to_string().contains("colour"), "{e}");
    }
}
