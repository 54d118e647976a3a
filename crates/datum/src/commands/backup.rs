//! `datum backup list|show|restore`: the content saved before a file was
//! replaced or removed.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use clap::Subcommand;
use datum_core::ResourceId;
use datum_host::lock::RootLock;
use datum_host::{FileKind, HostError};
use datum_report::render::Answer;
use datum_report::style::{self, Paint};
use datum_store::backup::{BackupEntry, BackupReason, Retention, SavedFrom};

use crate::cli::GlobalArgs;
use crate::context;
use crate::exit::ExitCode;

#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// List saved versions, newest first.
    List {
        /// Only versions of this path (as declared, e.g. /etc/ssh/sshd_config).
        path: Option<PathBuf>,
    },
    /// Print one saved version.
    Show {
        /// The version's id, as `datum backup list` shows it.
        #[arg(value_parser = backup_id)]
        id: u64,
    },
    /// Put a saved version back in place (atomically), saving the file it replaces first.
    Restore {
        /// The version's id, as `datum backup list` shows it.
        #[arg(value_parser = backup_id)]
        id: u64,
    },
}

/// A backup id, with an error that says where ids come from.
fn backup_id(text: &str) -> Result<u64, String> {
    text.parse().map_err(|_| {
        format!("`{text}` is not a backup id: a number as `datum backup list` shows it")
    })
}

pub fn run(global: &GlobalArgs, cmd: &BackupCommand) -> Result<ExitCode> {
    // Listing and showing only read: on a root with no backup store yet
    // they make none (no folder, no index), they say there is nothing.
    let store = match cmd {
        BackupCommand::Restore { .. } => Some(context::open_backups(global)?),
        BackupCommand::List { .. } | BackupCommand::Show { .. } => {
            context::open_backups_if_present(global)?
        }
    };
    let Some(mut store) = store else {
        return match cmd {
            BackupCommand::Show { id } => {
                bail!("no backup entry with id {id}: there are no backups")
            }
            // An empty listing (a restore always has a store).
            BackupCommand::List { .. } | BackupCommand::Restore { .. } => {
                crate::render::emit(
                    &Listed {
                        entries: Vec::new(),
                        global,
                    },
                    global,
                )?;
                Ok(ExitCode::Clean)
            }
        };
    };
    match cmd {
        BackupCommand::List { path } => {
            let entries = store.list(path.as_deref())?;
            crate::render::emit(&Listed { entries, global }, global)?;
        }
        BackupCommand::Show { id } => {
            let (entry, bytes) = store.get(*id)?;
            crate::render::emit(
                &Shown {
                    entry,
                    bytes,
                    global,
                },
                global,
            )?;
        }
        BackupCommand::Restore { id } => {
            let (entry, bytes) = store.get(*id)?;
            let host = datum_host::Host::new(global.root.clone());
            let _lock = RootLock::acquire(&host, global.lock_timeout)?;
            // Through the boundary like any write: a parent that is a link
            // now (or an unsafe ownership transition) is refused, not
            // followed, and the staged copy is renamed relative to the
            // parent's handle.
            let at = match host.locate(&entry.path) {
                Ok(at) => at,
                Err(e) if e.is_missing_parent() => {
                    bail!("{}: its directory no longer exists", entry.path.display())
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("cannot restore {}", entry.path.display()));
                }
            };
            let live = at.lstat()?;
            if live.as_ref().is_some_and(|s| s.kind == FileKind::Directory) {
                return Err(HostError::InTheWay {
                    path: at.path().to_path_buf(),
                    found: "directory".to_owned(),
                }
                .into());
            }
            // Evidence first, as before every replacement: the file the
            // restore replaces is saved (unless it holds these very bytes),
            // so a restore of the wrong version can be undone; a save that
            // fails stops the restore, the file untouched.
            // Compared by size, then by a streamed SHA-256, and saved
            // streamed: the live file is never read whole (it may be huge).
            if let Some(live) = live.filter(|s| s.kind == FileKind::File) {
                let same =
                    live.meta.size == bytes.len() as u64 && at.hash()?.sha256 == entry.sha256;
                if !same {
                    let resource = ResourceId::parse(&entry.resource).unwrap_or_else(|_| {
                        ResourceId::new("Restore", entry.path.display().to_string())
                    });
                    // Owner and mode of the file opened, whose bytes are
                    // saved (the name may hold another since the look).
                    let (mut current, opened) = at.open_file_stat()?;
                    store
                        .save_from(
                            &SavedFrom {
                            resource: &resource,
                            declared_path: &entry.path,
                            len: opened.meta.size,
                            mode: opened.meta.mode,
                            uid: opened.meta.uid,
                            gid: opened.meta.gid,
                            reason: BackupReason::Update,
                            // What the file holds now may be a secret the
                            // entry being restored predates (a resource
                            // declared sensitive since): a restore does not
                            // compile the repository to know, so the copy
                            // is kept as sensitive (`backup show` prints
                            // the placeholder; a restore brings it back).
                            sensitive: true,
                            at: context::now(),
                        },
                            &mut current,
                        )
                        .with_context(|| {
                            format!(
                                "cannot restore {}: the file it would replace could not be saved first",
                                entry.path.display()
                            )
                        })?;
                    // Housekeeping: the evidence is kept already.
                    let _ = store.prune(&Retention::default(), context::now());
                }
            }
            host.sweep_stale_staging(at.parent())?;
            let mut staged = at.stage_file()?;
            staged.write_all(&bytes)?;
            staged.set_owner(Some(entry.uid), Some(entry.gid))?;
            staged.set_mode(entry.mode)?;
            staged.sync()?;
            staged
                .commit()
                .with_context(|| format!("cannot restore {}", entry.path.display()))?;
            crate::render::emit(&Restored(entry), global)?;
        }
    }
    Ok(ExitCode::Clean)
}

/// `backup list`: the entries, newest first.
struct Listed<'a> {
    entries: Vec<BackupEntry>,
    /// Where the digest key is, read (or made) only for the JSON of a
    /// sensitive entry.
    global: &'a GlobalArgs,
}

impl Answer for Listed<'_> {
    fn what(&self) -> &'static str {
        "datum backup list"
    }

    fn json_key(&self) -> &'static str {
        "backups"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        // The key is read (or made) only when some entry needs it.
        let key = if self.entries.iter().any(|e| e.sensitive) {
            context::digest_key(self.global)
        } else {
            None
        };
        let shown = self
            .entries
            .iter()
            .map(|e| entry_json(e, key.as_ref()))
            .collect::<serde_json::Result<Vec<_>>>()?;
        Ok(serde_json::Value::Array(shown))
    }

    fn human(&self, out: &mut dyn Write, paint: Paint) -> std::io::Result<()> {
        if self.entries.is_empty() {
            return writeln!(out, "no backups");
        }
        let header = format!(
            "{:<10} {:<20} {:<8} {:>9}  {:<28} PATH",
            "ID", "SAVED", "REASON", "BYTES", "RESOURCE"
        );
        writeln!(out, "{}", paint.wrap(style::BOLD, &header))?;
        for e in &self.entries {
            let reason = e.reason.as_str();
            let sgr = match reason {
                "remove" => style::RED,
                "drift" | "revert" => style::YELLOW,
                _ => style::CYAN,
            };
            writeln!(
                out,
                "{} {:<20} {} {:>9}  {:<28} {}{}",
                paint.padded(style::BOLD, &e.id.to_string(), 10),
                datum_report::time::rfc3339(e.saved_at),
                paint.padded(sgr, reason, 8),
                e.size,
                e.resource,
                e.path.display(),
                if e.content_kept {
                    ""
                } else {
                    "  (too large to keep: size and checksum only)"
                }
            )?;
        }
        Ok(())
    }
}

/// `backup show`: one entry and its content.
struct Shown<'a> {
    entry: BackupEntry,
    bytes: Vec<u8>,
    /// Where the digest key is, read only for the JSON of a sensitive entry.
    global: &'a GlobalArgs,
}

impl Answer for Shown<'_> {
    fn what(&self) -> &'static str {
        "datum backup show"
    }

    fn json_key(&self) -> &'static str {
        "backup"
    }

    /// The entry as `list` shows it, and the content as text when it is
    /// UTF-8 (else null, with `binary`: the human form prints the bytes); a
    /// sensitive entry's content never.
    fn json(&self) -> serde_json::Result<serde_json::Value> {
        let entry = &self.entry;
        let key = entry
            .sensitive
            .then(|| context::digest_key(self.global))
            .flatten();
        let mut doc = entry_json(entry, key.as_ref())?;
        let text = std::str::from_utf8(&self.bytes).ok();
        doc["content"] = match (entry.sensitive, text) {
            (false, Some(text)) => serde_json::json!(text),
            _ => serde_json::Value::Null,
        };
        doc["binary"] = serde_json::json!(!entry.sensitive && text.is_none());
        Ok(doc)
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        if self.entry.sensitive {
            writeln!(out, "{}", datum_core::SENSITIVE_PLACEHOLDER)
        } else {
            out.write_all(&self.bytes)
        }
    }
}

/// `backup restore`: the entry put back.
struct Restored(BackupEntry);

impl Answer for Restored {
    fn what(&self) -> &'static str {
        "datum backup restore"
    }

    fn json_key(&self) -> &'static str {
        "restored"
    }

    fn json(&self) -> serde_json::Result<serde_json::Value> {
        let entry = &self.0;
        let mut doc = serde_json::json!({
            "restored": true,
            "id": entry.id,
            "path": entry.path.to_string_lossy(),
            "resource": entry.resource,
        });
        add_path_bytes(&mut doc, &entry.path);
        Ok(doc)
    }

    fn human(&self, out: &mut dyn Write, _paint: Paint) -> std::io::Result<()> {
        writeln!(
            out,
            "restored {} from backup {}",
            self.0.path.display(),
            self.0.id
        )
    }
}

/// `path_bytes` beside a `path` that is not UTF-8 (its exact bytes).
fn add_path_bytes(doc: &mut serde_json::Value, path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    if path.to_str().is_none()
        && let Some(obj) = doc.as_object_mut()
    {
        obj.insert(
            "path_bytes".to_owned(),
            serde_json::json!(path.as_os_str().as_bytes()),
        );
    }
}

/// One entry of `backup list --json`. A sensitive entry has no `sha256`
/// (null): a plain checksum of a secret lets anyone confirm a guess. It has
/// `content_digest` instead, the host's keyed digest of the saved content
/// (the one `datum catalogue` shows for the same content), or null where
/// there is no key.
fn entry_json(
    entry: &BackupEntry,
    key: Option<&datum_core::DigestKey>,
) -> serde_json::Result<serde_json::Value> {
    // A path that is not UTF-8 (a Tree entry's name can be any bytes) reads
    // lossily in `path`, its bytes in `path_bytes`: before, serialising it
    // failed the whole listing.
    let mut v = match entry.path.to_str() {
        Some(_) => serde_json::to_value(entry)?,
        None => serde_json::to_value(BackupEntry {
            path: PathBuf::from(entry.path.to_string_lossy().into_owned()),
            ..entry.clone()
        })?,
    };
    add_path_bytes(&mut v, &entry.path);
    if entry.sensitive
        && let Some(obj) = v.as_object_mut()
    {
        obj.insert("sha256".to_owned(), serde_json::Value::Null);
        let digest = key.map(|k| k.digest(&entry.sha256));
        obj.insert("content_digest".to_owned(), serde_json::json!(digest));
    }
    Ok(v)
}
