//! Loads a Datum repository: `datum.yaml`, its layers, and every resource
//! document, each value remembering the file, line and column it came from.
//!
//! This crate owns the repository *format* and reading it. It must not know
//! which resource types exist or what their fields mean (that is
//! `datum-catalog`, which asks the providers), and it must not touch the
//! managed machine: it reads the repository folder only.
//!
//! # Repository format (`v1alpha1`)
//!
//! A repository is a folder with a `datum.yaml` at its root:
//!
//! ```yaml
//! datum: v1alpha1
//! layers:                 # ordered: later layers override earlier ones
//!   - name: base
//!     path: base          # a folder in the repository
//!     match: {}           # empty (or absent): every host
//!   - name: web
//!     path: web
//!     match: {role: web}  # every key must equal the host's label;
//!                         # a list value (`role: [web, api]`) means any of
//! classes: {}             # resource classes (kept as written for now)
//! ```
//!
//! Any other key in `datum.yaml` or in a layer is an error. A layer's `path`
//! must be a folder inside the repository.
//!
//! **Manifest files** are every `*.yaml` and `*.yml` file under a layer's
//! folder, recursively, in byte order of their paths, except under the
//! layer's top-level `files/`, `templates/` and `trees/` folders (those hold content)
//! and hidden entries (names starting with `.`). A file may hold several
//! documents separated by `---`; empty documents are skipped. Each document
//! declares one resource:
//!
//! ```yaml
//! datum: v1alpha1
//! type: File                  # a resource type (provider)
//! name: sshd-config           # unique per type; written File[sshd-config]
//! desired:                    # the provider's fields
//!   path: /etc/ssh/sshd_config
//!   mode: "0600"
//!   source: files/sshd_config # or content: "...", or template: templates/x.j2
//!   validate: sshd            # a validator's name (an engine setting, lifted
//!                             # out of desired); never a command line
//! requires: [Directory/ssh]   # optional: Kind/name or Kind[name]
//! class: normal               # optional, default `normal`
//! sensitive: false            # optional: true hides content in every output
//! ```
//!
//! `datum`, `type`, `name` and `desired` are required (`desired: {}` for an
//! override that only changes `requires`); any other top-level key is an
//! error. Names may not contain brackets or control characters. Values follow
//! YAML 1.2: `mode: 0600` is the *integer* 600, so modes are written as quoted
//! strings (`"0600"`).
//!
//! **Content** (for types that take it): at most one of `content:` (inline
//! text), `source:` (a file path relative to the *layer* folder, such as
//! `files/sshd_config`) or `template:` (a minijinja template relative to the
//! layer folder, with variables `host.name`, `host.labels.KEY`, and the same
//! as `name` and `labels`; an undefined variable is an error). Source and
//! template paths must stay inside the repository: absolute paths, `..`
//! leaving the repository and symbolic links resolving outside it are errors.
//! A File with none of the three manages metadata only.
//!
//! **Layering**: for a host, the layers whose matcher holds are applied in
//! order. A later document with the same type and name overrides the earlier
//! one field by field at the top level of `desired` (fields it does not
//! mention are kept; a field set to `null` is removed, so `ensure: absent`
//! plus `source: null` retires a file an earlier layer gave content) and
//! replaces `requires`, `class`, `sensitive` and `validate` when it sets them.
//! A later content field replaces the earlier one (a `template` in `web`
//! replaces a `source` in `base`). Two documents with the same type and name
//! in the same layer are an error. `datum catalogue --explain` shows, per
//! field, the layer and `file:line:column` it came from.
//!
//! **Dependencies**: `requires` orders resources and blocks dependents of a
//! failure. Besides what is written, a File, Directory or Symlink requires
//! the Directory resource that declares its nearest parent folder (unless
//! either is `ensure: absent`, or the edge would close a cycle; something
//! declared present inside a folder declared absent is an error). Resources
//! are applied in dependency order, ties kept in declaration order. A cycle is
//! an error that names it: `File[a] -> File[b] -> File[a]`.
//!
//! # Host file
//!
//! `/etc/datum/host.yaml` under `--root` (or `--host-file PATH`):
//!
//! ```yaml
//! name: web-01          # default: <root>/etc/hostname, then the machine's name
//! labels: {role: web, env: prod}
//! ```
//!
//! `--label key=value` overrides a label. Layers match on labels only.

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

pub mod diagnostic;
pub mod document;
pub mod paths;
pub mod repository;
pub mod settings;
pub mod span;
pub mod yaml;

/// "Did you mean ...?" (kept in `datum-core`, which the providers share).
pub use datum_core::suggest;

pub use diagnostic::{Diagnostic, Diagnostics, Severity, SourceMap};
pub use document::{DEFAULT_CLASS, Document, ENVELOPE_KEYS};
pub use paths::{PathProblem, Resolver, resolve_inside};
pub use repository::{CONTENT_DIRS, Repository, SETTINGS_FILE};
pub use settings::{Layer, MatchTerm, Matcher, Settings};
pub use span::{Place, Spanned};

/// The format version every document carries (`datum: v1alpha1`).
pub const API_VERSION: &str = "v1alpha1";
