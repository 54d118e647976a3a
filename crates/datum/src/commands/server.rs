//! `datum server init | enroll | remove | rotate-admin | serve`: thin commands
//! over `datum-server`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand};
use datum_fleet::IdentityKind;
use datum_report::render::Answer;
use datum_report::style::Paint;

use crate::cli::GlobalArgs;
use crate::exit::ExitCode;

#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// Create a server folder: CA and certificate, admin credential, configuration.
    Init(ServerInitArgs),
    /// Issue a host (or stack) its token and write its report.yaml.
    Enroll(ServerEnrollArgs),
    /// Take a host (or stack) out of the fleet: its token ends, its reports and findings go.
    Remove(ServerRemoveArgs),
    /// A new admin credential (admin.yaml): every other one, and every web session, ends.
    RotateAdmin(ServerRotateAdminArgs),
    /// Serve: take reports over HTTPS and answer the fleet's queries.
    Serve(ServerServeArgs),
}

#[derive(Debug, Args)]
pub struct ServerRotateAdminArgs {
    /// The server's folder (its admin.yaml is replaced).
    #[arg(long, value_parser = crate::cli::absolute_path)]
    pub dir: PathBuf,
    /// Use this store instead of the one server.yaml names.
    #[arg(long)]
    pub store: Option<String>,
}

#[derive(Debug, Args)]
pub struct ServerRemoveArgs {
    /// The host's (or stack's) name.
    pub name: String,
    /// The server's folder.
    #[arg(long, value_parser = crate::cli::absolute_path)]
    pub dir: PathBuf,
    /// Use this store instead of the one server.yaml names.
    #[arg(long)]
    pub store: Option<String>,
}

#[derive(Debug, Args)]
pub struct ServerInitArgs {
    /// The server's folder (created, mode 0700).
    #[arg(long, value_parser = crate::cli::absolute_path)]
    pub dir: PathBuf,
    /// Where the server listens (HOST:PORT).
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: String,
    /// The URL hosts report to (default: https:// and the listen address; with every address, 0.0.0.0 or ::, the first --name).
    #[arg(long)]
    pub url: Option<String>,
    /// Another name or address the certificate is valid for (repeatable).
    #[arg(long = "name")]
    pub names: Vec<String>,
    /// `sqlite` (embedded, in DIR) or postgres://user:password@host:port/db.
    #[arg(long, default_value = "sqlite")]
    pub store: String,
    /// Host sampling: the share of hosts deep-checked per round (0..1].
    #[arg(long, value_name = "FRACTION")]
    pub sampling: Option<f64>,
    /// The length of a sampling round.
    #[arg(long, default_value = "1h", value_parser = crate::cli::duration)]
    pub round: Duration,
}

#[derive(Debug, Args)]
pub struct ServerEnrollArgs {
    /// The host's name, as its host.yaml says (or the stack's name).
    pub name: String,
    /// The server's folder.
    #[arg(long, value_parser = crate::cli::absolute_path)]
    pub dir: PathBuf,
    /// Where to write the host's report.yaml (install it as ROOT/etc/datum/report.yaml).
    #[arg(long, value_parser = crate::cli::absolute_path)]
    pub out: PathBuf,
    /// Enroll a driftwatch stack instead of a host.
    #[arg(long)]
    pub stack: bool,
    /// The longest gap between two of its reports (default: its shortest class interval).
    #[arg(long, value_parser = crate::cli::duration)]
    pub interval: Option<Duration>,
    /// Use this store instead of the one server.yaml names.
    #[arg(long)]
    pub store: Option<String>,
}

#[derive(Debug, Args)]
pub struct ServerServeArgs {
    /// The server's folder.
    #[arg(long, value_parser = crate::cli::absolute_path)]
    pub dir: PathBuf,
    /// Listen here instead of server.yaml's address (port 0: any free port).
    #[arg(long)]
    pub listen: Option<String>,
    /// Use this store instead of the one server.yaml names.
    #[arg(long)]
    pub store: Option<String>,
}

pub fn run(global: &GlobalArgs, cmd: &ServerCommand) -> Result<ExitCode> {
    match cmd {
        ServerCommand::Init(args) => {
            let made = datum_server::init_command(
                &args.dir,
                &datum_server::InitOptions {
                    listen: args.listen.clone(),
                    names: args.names.clone(),
                    url: args.url.clone(),
                    store: args.store.clone(),
                    sampling: args.sampling.map(|f| (f, args.round)),
                },
            )
            .with_context(|| format!("cannot initialise a server in {}", args.dir.display()))?;
            let answer = Initialised {
                dir: &args.dir,
                store: made.dir.config.store_shown(),
                admin_credentials: made.dir.path(datum_server::config::ADMIN_FILE),
                url: made.dir.config.url.to_string(),
            };
            crate::render::emit(&answer, global)?;
            Ok(ExitCode::Clean)
        }
        ServerCommand::Enroll(args) => {
            let kind = if args.stack {
                IdentityKind::Stack
            } else {
                IdentityKind::Host
            };
            // The file --out replaces is read first: one that cannot be
            // kept from refuses before the old token is replaced.
            let existing = datum_server::init::existing_credentials(&args.out)
                .with_context(|| format!("cannot enroll {}", args.name))?;
            let mut credentials =
                datum_server::enroll_command(&args.dir, &args.name, kind, args.store.as_deref())
                    .with_context(|| format!("cannot enroll {}", args.name))?;
            credentials.interval = args.interval;
            let kept = existing
                .map(|old| datum_server::init::keep_hand_set(&mut credentials, &old))
                .unwrap_or_default();
            datum_server::init::write_credentials(&args.out, &credentials)
                .with_context(|| format!("cannot write {}", args.out.display()))?;
            let answer = Enrolled {
                name: &args.name,
                kind,
                credentials: &args.out,
                kept,
            };
            crate::render::emit(&answer, global)?;
            Ok(ExitCode::Clean)
        }
        ServerCommand::Remove(args) => {
            let removed =
                datum_server::remove_command(&args.dir, &args.name, args.store.as_deref())
                    .with_context(|| format!("cannot remove {}", args.name))?;
            if !removed {
                anyhow::bail!(
                    "no host or stack named `{}` is enrolled in {}",
                    args.name,
                    args.dir.display()
                );
            }
            crate::render::emit(&Removed { name: &args.name }, global)?;
            Ok(ExitCode::Clean)
        }
        ServerCommand::RotateAdmin(args) => {
            let path = datum_server::rotate_admin_command(&args.dir, args.store.as_deref())
                .with_context(|| {
                    format!(
                        "cannot replace the admin credential of {}",
                        args.dir.display()
                    )
                })?;
            crate::render::emit(&Rotated { path }, global)?;
            Ok(ExitCode::Clean)
        }
        ServerCommand::Serve(args) => {
            datum_server::serve(
                &args.dir,
                &datum_server::ServeOptions {
                    listen: args.listen.clone(),
                    store: args.store.clone(),
                },
                |addr, config, store| {
                    // One line a supervisor (or a test) can wait for.
                    eprintln!(
                        "datum server listening on https://{addr} (store: {store}, hosts report to {})",
                        config.url
                    );
                },
            )
            .with_context(|| format!("datum server ({})", args.dir.display()))?;
            Ok(ExitCode::Clean)
        }
    }
}

/// `datum server init`: the folder made.
struct Initialised<'a> {
    dir: &'a Path,
    store: String,
    admin_credentials: PathBuf,
    url: String,
}

impl Answer for Initialised<'_> {
    fn what(&self) -> &'static str {
        "datum server init"
    }

    fn json_key(&self) -> &'static str {
        "server_init"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        Ok(serde_json::json!({
            "dir": self.dir,
            "store": self.store,
            "admin_credentials": self.admin_credentials,
            "url": self.url,
        }))
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        writeln!(
            out,
            "Server folder {} ready (store: {}).\n  admin credential: {} (for `datum fleet --credentials`)\n  hosts report to:  {}\nNext: `datum server enroll HOST --dir {} --out report.yaml`, then `datum server serve --dir {}`.",
            self.dir.display(),
            self.store,
            self.admin_credentials.display(),
            self.url,
            self.dir.display(),
            self.dir.display(),
        )
    }
}

/// `datum server enroll`: the credentials written.
struct Enrolled<'a> {
    name: &'a str,
    kind: IdentityKind,
    /// The report.yaml written.
    credentials: &'a Path,
    /// What was kept from the file it replaced.
    kept: Vec<&'static str>,
}

impl Answer for Enrolled<'_> {
    fn what(&self) -> &'static str {
        "datum server enroll"
    }

    fn json_key(&self) -> &'static str {
        "server_enroll"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        Ok(serde_json::json!({
            "name": self.name,
            "kind": self.kind.word(),
            "credentials": self.credentials,
            "install_as": crate::reporting::REPORT_FILE,
            "kept": self.kept,
        }))
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        writeln!(
            out,
            "Enrolled {} `{}`: its credentials are in {} (install as ROOT/{} on the host, mode 0600).",
            self.kind.word(),
            self.name,
            self.credentials.display(),
            crate::reporting::REPORT_FILE
        )?;
        if !self.kept.is_empty() {
            writeln!(
                out,
                "Kept from the {} it replaced: {}.",
                self.credentials.display(),
                self.kept.join(", ")
            )?;
        }
        Ok(())
    }
}

/// `datum server remove`: the host (or stack) gone.
struct Removed<'a> {
    name: &'a str,
}

impl Answer for Removed<'_> {
    fn what(&self) -> &'static str {
        "datum server remove"
    }

    fn json_key(&self) -> &'static str {
        "server_remove"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        Ok(serde_json::json!({"name": self.name, "removed": true}))
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        writeln!(
            out,
            "Removed `{}` from the fleet: its token no longer works (within 30 s on a server already running), and its reports, findings and history are gone; instructions asked of it stay in the audit log.",
            self.name
        )
    }
}

/// `datum server rotate-admin`: the new admin credential.
struct Rotated {
    path: PathBuf,
}

impl Answer for Rotated {
    fn what(&self) -> &'static str {
        "datum server rotate-admin"
    }

    fn json_key(&self) -> &'static str {
        "server_rotate_admin"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        Ok(serde_json::json!({"admin_credentials": self.path}))
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        writeln!(
            out,
            "New admin credential in {}: every other one, and every web session, has ended (within 30 s on a server already running).",
            self.path.display()
        )
    }
}
