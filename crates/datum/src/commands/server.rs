//! `datum server init | enroll | serve`: thin commands over `datum-server`.

use std::io::Write as _;

use anyhow::{Context as _, Result};
use datum_fleet::IdentityKind;

use crate::cli::{Format, GlobalArgs, ServerCommand};
use crate::exit::ExitCode;

pub fn run(global: &GlobalArgs, cmd: &ServerCommand) -> Result<ExitCode> {
    let json = global.output == Format::Json;
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
            if json {
                crate::render::json::print(
                    "server_init",
                    serde_json::json!({
                        "dir": args.dir,
                        "store": made.dir.config.store_shown(),
                        "admin_credentials": made.dir.path(datum_server::config::ADMIN_FILE),
                        "url": made.dir.config.url.to_string(),
                    }),
                )?;
                return Ok(ExitCode::CLEAN);
            }
            let mut out = std::io::stdout();
            writeln!(
                out,
                "Server folder {} ready (store: {}).\n  admin credential: {} (for `datum fleet --credentials`)\n  hosts report to:  {}\nNext: `datum server enroll HOST --dir {} --out report.yaml`, then `datum server serve --dir {}`.",
                args.dir.display(),
                made.dir.config.store_shown(),
                made.dir.path(datum_server::config::ADMIN_FILE).display(),
                made.dir.config.url,
                args.dir.display(),
                args.dir.display(),
            )?;
            Ok(ExitCode::CLEAN)
        }
        ServerCommand::Enroll(args) => {
            let kind = if args.stack {
                IdentityKind::Stack
            } else {
                IdentityKind::Host
            };
            let mut credentials =
                datum_server::enroll_command(&args.dir, &args.name, kind, args.store.as_deref())
                    .with_context(|| format!("cannot enroll {}", args.name))?;
            credentials.interval = args.interval;
            datum_server::init::write_credentials(&args.out, &credentials)
                .with_context(|| format!("cannot write {}", args.out.display()))?;
            if json {
                crate::render::json::print(
                    "server_enroll",
                    serde_json::json!({
                        "name": args.name,
                        "kind": kind.word(),
                        "credentials": args.out,
                        "install_as": crate::reporting::REPORT_FILE,
                    }),
                )?;
                return Ok(ExitCode::CLEAN);
            }
            writeln!(
                std::io::stdout(),
                "Enrolled {} `{}`: its credentials are in {} (install as ROOT/{} on the host, mode 0600).",
                kind.word(),
                args.name,
                args.out.display(),
                crate::reporting::REPORT_FILE
            )?;
            Ok(ExitCode::CLEAN)
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
            Ok(ExitCode::CLEAN)
        }
    }
}
