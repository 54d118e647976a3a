//! Datum's compiler: a repository and a host's identity in, a checked,
//! rendered, dependency-ordered [`Catalogue`] out.
//!
//! This crate owns everything between reading the repository
//! (`datum-manifest`) and running a pass (the engine): resource types looked
//! up in the provider registry it is handed ([`Compiler`]), field checks, layering, content from inline
//! text, repository files or templates, `requires` and cycles, implicit
//! parent-directory ordering, and the declaration hash. It must not touch the
//! managed machine (apart from reading the host file in [`HostIdentity::load`])
//! and must not print: problems come back as [`Diagnostics`].
//!
//! The two entry points:
//! - [`lint`] checks every document of every layer (not only one host's) and
//!   returns every problem found;
//! - [`compile()`] runs the same checks and builds the catalogue for one host.
//!   It fails when *any* lint error exists, so a repository with an error is
//!   never applied.
//!
//! What providers see: `Provider::check` receives the `desired` fields as
//! written, without `validate` (for one document, and again after layering,
//! with the winning content field). A provider whose `takes_content()` is true
//! accepts `content`, `source` and `template` there and reports more than one
//! of them; the catalogue checks their paths, renders the winner into
//! `Resource::content` and removes all three from `Resource::desired`.

#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests build their fixtures on disk directly; the code under test goes through datum-host"
    )
)]

pub mod catalogue;
mod classes;
mod compile;
pub mod content;
mod graph;
pub mod hashes;
pub mod host;
mod merge;
pub mod reference;
pub mod schema;
pub mod snapshot;
pub mod summaries;
pub mod validators;

use std::path::Path;

pub use catalogue::Catalogue;
use compile::Written;
pub use datum_manifest::{Diagnostic, Diagnostics, Repository, Severity};
use datum_providers::Registry;
pub use hashes::{AfterHashing, HashCacheFile, SourceDigests, SourceHashes};
pub use host::{DEFAULT_HOST_FILE, HostError, HostIdentity, parse_label};

/// The compiler with the resource types it knows: the registry is handed in
/// (the binary passes [`datum_providers::registry()`], a test its own), and
/// every check, field layering and ordering edge is asked of the providers
/// found there. The free functions below are this with the shipped registry.
///
/// Its catalogues hold no parsed declaration unless it is made to
/// ([`Compiler::holding_declarations`]).
#[derive(Debug, Clone, Copy)]
pub struct Compiler<'r> {
    registry: &'r Registry,
    /// Whether its catalogues' resources hold their declarations.
    hold: bool,
}

impl Compiler<'static> {
    /// The compiler for the resource types this build ships.
    pub fn shipped() -> Self {
        Self::new(datum_providers::registry())
    }
}

impl<'r> Compiler<'r> {
    pub fn new(registry: &'r Registry) -> Self {
        Self {
            registry,
            hold: false,
        }
    }

    /// This compiler, making catalogues whose resources hold their parsed
    /// declarations (`datum_core::HeldDeclaration`): the compile declares
    /// every resource (a declaration that does not parse is a compile
    /// error at its resource) and every pass over the catalogue shares
    /// the one held. For a catalogue kept for many passes (the agent's);
    /// a one-shot command's compile declares nothing and its one pass
    /// parses each declaration once itself. Only the catalogues this
    /// compiler makes hold: no other catalogue of the process is affected.
    pub fn holding_declarations(self) -> Self {
        Self { hold: true, ..self }
    }

    /// The resource types this compiler knows.
    pub fn registry(&self) -> &'r Registry {
        self.registry
    }

    /// Loads the repository at `repo` ([`Repository::load`]) with the
    /// fields every kind of this registry calls sensitive by nature, so a
    /// broken line holding one is never shown.
    pub fn load(&self, repo: &Path) -> Result<Repository, Diagnostics> {
        let fields: Vec<&str> = self
            .registry
            .iter()
            .flat_map(|p| p.sensitive_fields().iter().copied())
            .collect();
        Repository::load(repo, &fields)
    }

    /// See [`lint`].
    pub fn lint(&self, repo: &Path, host: Option<&HostIdentity>) -> Diagnostics {
        match self.load(repo) {
            Ok(r) => self.lint_repository(&r, host),
            Err(diags) => diags,
        }
    }

    /// See [`lint_repository`].
    pub fn lint_repository(&self, repo: &Repository, host: Option<&HostIdentity>) -> Diagnostics {
        compile::Analysis::new(repo, Written::InDocuments, self.registry)
            .run(host)
            .1
    }

    /// See [`compile()`].
    pub fn compile(&self, repo: &Path, host: &HostIdentity) -> Result<Catalogue, Diagnostics> {
        let repository = self.load(repo)?;
        self.compile_loaded(repository, host, false, None)
    }

    /// See [`compile_explained`].
    pub fn compile_explained(
        &self,
        repo: &Path,
        host: &HostIdentity,
    ) -> Result<Catalogue, Diagnostics> {
        self.compile_cached(repo, host, true, None)
    }

    /// See [`compile_repository`].
    pub fn compile_repository(
        &self,
        repo: &Repository,
        host: &HostIdentity,
    ) -> Result<Catalogue, Diagnostics> {
        let analysis =
            compile::Analysis::new(repo, Written::InDocuments, self.registry).holding(self.hold);
        match analysis.run(Some(host)) {
            (Some(catalogue), _) => Ok(catalogue),
            (None, diags) => Err(diags),
        }
    }

    /// See [`compile_cached`].
    pub fn compile_cached(
        &self,
        repo: &Path,
        host: &HostIdentity,
        explain: bool,
        hashes: Option<&dyn SourceHashes>,
    ) -> Result<Catalogue, Diagnostics> {
        let repository = self.load(repo)?;
        self.compile_loaded(repository, host, explain, hashes)
    }

    /// See [`compile_loaded`].
    pub fn compile_loaded(
        &self,
        mut repository: Repository,
        host: &HostIdentity,
        explain: bool,
        hashes: Option<&dyn SourceHashes>,
    ) -> Result<Catalogue, Diagnostics> {
        let written = Written::Taken(repository.take_desired());
        let mut analysis = compile::Analysis::new(&repository, written, self.registry)
            .with_hashes(hashes)
            .holding(self.hold);
        if explain {
            analysis = analysis.explaining();
        }
        match analysis.run(Some(host)) {
            (Some(catalogue), _) => Ok(catalogue),
            (None, diags) => Err(diags),
        }
    }
}

/// Checks the repository at `repo`: every document of every layer. With a
/// host, also compiles that host's view (renders its templates, resolves
/// `requires` against its catalogue); without one, templates are only parsed.
/// An empty result means the repository is clean.
pub fn lint(repo: &Path, host: Option<&HostIdentity>) -> Diagnostics {
    Compiler::shipped().lint(repo, host)
}

/// Loads the repository at `repo` with the shipped kinds' sensitive
/// fields ([`Compiler::load`]).
pub fn load(repo: &Path) -> Result<Repository, Diagnostics> {
    Compiler::shipped().load(repo)
}

/// [`lint`] for a repository already loaded.
pub fn lint_repository(repo: &Repository, host: Option<&HostIdentity>) -> Diagnostics {
    Compiler::shipped().lint_repository(repo, host)
}

/// Compiles the repository at `repo` for `host`. Fails with every problem
/// found (in any layer, not only the host's) when there is at least one error.
pub fn compile(repo: &Path, host: &HostIdentity) -> Result<Catalogue, Diagnostics> {
    Compiler::shipped().compile(repo, host)
}

/// [`compile()`], recording in every resource which layer and `file:line`
/// each field came from (`Resource::field_origins`, for `--explain`).
pub fn compile_explained(repo: &Path, host: &HostIdentity) -> Result<Catalogue, Diagnostics> {
    Compiler::shipped().compile_explained(repo, host)
}

/// [`compile()`] for a repository already loaded.
pub fn compile_repository(
    repo: &Repository,
    host: &HostIdentity,
) -> Result<Catalogue, Diagnostics> {
    Compiler::shipped().compile_repository(repo, host)
}

/// [`compile()`] with remembered source hashes: a `source:` file whose size,
/// mtime, ctime, inode and device match what `hashes` remembers is not read
/// (see [`hashes`] for why that can be trusted), and every file hashed is
/// recorded there. With `explain`, like [`compile_explained`].
pub fn compile_cached(
    repo: &Path,
    host: &HostIdentity,
    explain: bool,
    hashes: Option<&dyn SourceHashes>,
) -> Result<Catalogue, Diagnostics> {
    Compiler::shipped().compile_cached(repo, host, explain, hashes)
}

/// [`compile_cached`] for a repository already loaded, which the compile
/// consumes: what it holds of each document is let go as soon as the
/// compile no longer needs it, so its peak is lower than
/// [`compile_repository`]'s (the repository's settings, such as its
/// classes, are to be copied out first).
pub fn compile_loaded(
    repo: Repository,
    host: &HostIdentity,
    explain: bool,
    hashes: Option<&dyn SourceHashes>,
) -> Result<Catalogue, Diagnostics> {
    Compiler::shipped().compile_loaded(repo, host, explain, hashes)
}
