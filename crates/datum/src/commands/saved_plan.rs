//! Saved plans: `datum plan --out FILE` and `datum apply FILE`.
//!
//! A saved plan is a JSON document (`format_version` "1") that records what
//! an apply of it must find to be the same apply: the Datum version, the
//! host and root, the selection (`--target`, `--class`), the catalogue's
//! digest with one hash per resource (its declaration, class and
//! requirements, so a refusal can name what changed), and per planned
//! resource its action and the fingerprint of what the plan observed
//! (the engine's, `PassOptions::fingerprints`). `datum apply FILE` compiles
//! the repository again and refuses, naming what differs, when the
//! catalogue changed; the engine then observes once, as in every pass, and
//! refuses before changing anything when an observation no longer matches
//! its fingerprint.
//!
//! The file never holds content, a desired field's value or validator
//! output: ids, actions, outcome words and hashes only, so a sensitive
//! resource's secret cannot reach it. Nor can a plain checksum of it: a
//! sensitive resource's hash covers its content's SHA-256 and so does its
//! observation's fingerprint, and whoever holds the file could hash a
//! guessed secret and compare. For a sensitive resource both are the host's
//! keyed digests (`datum_core::DigestKey`) instead, which the apply
//! computes again with the same key; a plan of a catalogue with a sensitive
//! resource is therefore not saved, nor applied, without the host's key
//! (see `commands::pass`). It is written mode 0600, atomically, never
//! through a link at its name (`datum_host::named::write_secret`).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use datum_catalog::Catalogue;
use datum_core::{DigestKey, ResourceId, sha256_hex};
use datum_engine::PassSummary;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::selection::SelectArgs;
use super::selection::Selection;

/// The format this build writes and reads.
pub const FORMAT_VERSION: &str = "1";

/// What the file says it is.
const KIND: &str = "datum-plan";

/// The largest plan file read (a catalogue of 100,000 resources is ~30 MB).
const READ_LIMIT: u64 = 256 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedPlan {
    pub format_version: String,
    pub kind: String,
    pub datum_version: String,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub host: String,
    pub root: String,
    pub selection: SavedSelection,
    pub catalogue: SavedCatalogue,
    pub planned: Vec<PlannedResource>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedSelection {
    pub partial: bool,
    pub targets: Vec<String>,
    pub class: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedCatalogue {
    pub digest: String,
    /// Resource id -> [`resource_hash`] (keyed for a sensitive resource).
    pub resources: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedResource {
    pub id: String,
    pub action: datum_core::Action,
    /// The outcome word of the plan (`would change`, `unchanged`, ...).
    pub outcome: String,
    /// The fingerprint of what was observed (`None`: it could not be);
    /// keyed for a sensitive resource (`PassOptions::digest_key`).
    pub observed: Option<String>,
}

impl SavedPlan {
    /// The plan a pass in plan mode produced, the pass given `key` as its
    /// `PassOptions::digest_key`. Refused when the catalogue has a
    /// sensitive resource and there is no key.
    pub fn new(
        catalogue: &Catalogue,
        root: &Path,
        selection: &Selection,
        summary: &PassSummary,
        now: std::time::SystemTime,
        key: Option<&DigestKey>,
    ) -> Result<SavedPlan> {
        let fingerprints: BTreeMap<&ResourceId, &Option<String>> =
            summary.observed.iter().map(|(id, f)| (id, f)).collect();
        // Group validation reports are not resources of the catalogue: the
        // catalogue's ids, gathered once (`Catalogue::get` per report scans
        // the catalogue: reports x resources).
        let declared: HashSet<&ResourceId> = catalogue.resources.iter().map(|r| &r.id).collect();
        // Only the selection: a partial plan also shows the reload of a
        // service outside it that a change notifies, which it does not
        // observe, so the apply of the plan does not either (it reloads
        // that service again only if it is still as declared then).
        let selected = |id: &ResourceId| selection.only.as_ref().is_none_or(|o| o.contains(id));
        let planned = summary
            .resources
            .iter()
            .filter(|r| declared.contains(&r.id) && selected(&r.id))
            .map(|r| PlannedResource {
                id: r.id.to_string(),
                action: r.action,
                outcome: r.outcome.word().to_owned(),
                observed: fingerprints.get(&r.id).and_then(|f| (*f).clone()),
            })
            .collect();
        let (digest, resources) = catalogue_digest(catalogue, key)?;
        Ok(SavedPlan {
            format_version: FORMAT_VERSION.to_owned(),
            kind: KIND.to_owned(),
            datum_version: env!("CARGO_PKG_VERSION").to_owned(),
            created_at: humantime::format_rfc3339_seconds(now).to_string(),
            host: catalogue.host.name.clone(),
            root: root.display().to_string(),
            selection: SavedSelection {
                partial: selection.is_partial(),
                targets: selection.targets.iter().map(ToString::to_string).collect(),
                class: selection.class.clone(),
            },
            catalogue: SavedCatalogue { digest, resources },
            planned,
        })
    }

    /// Writes the plan to `path`: 0600, atomically, never through a link.
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        datum_host::named::write_secret(path, text.as_bytes())
            .with_context(|| format!("cannot save the plan to {}", path.display()))
    }

    /// Reads a plan file, refusing anything this build did not write.
    pub fn read(path: &Path) -> Result<SavedPlan> {
        let bytes = datum_host::named::read_trusted(path, READ_LIMIT)
            .with_context(|| format!("cannot read the saved plan {}", path.display()))?
            .with_context(|| {
                format!(
                    "cannot read the saved plan {}: no such file",
                    path.display()
                )
            })?;
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .with_context(|| format!("{}: not a saved Datum plan (not JSON)", path.display()))?;
        if value.get("kind").and_then(|k| k.as_str()) != Some(KIND) {
            bail!(
                "{}: not a saved Datum plan (write one with `datum plan --out FILE`)",
                path.display()
            );
        }
        let version = value.get("format_version").and_then(|v| v.as_str());
        if version != Some(FORMAT_VERSION) {
            bail!(
                "{}: saved plan format version {} is not the one this Datum reads ({FORMAT_VERSION}); make the plan again",
                path.display(),
                version.map_or_else(|| "(none)".to_owned(), |v| format!("`{v}`"))
            );
        }
        serde_json::from_value(value)
            .with_context(|| format!("{}: a damaged saved plan", path.display()))
    }

    /// The selection flags the plan was made with.
    pub fn select_args(&self) -> Result<SelectArgs> {
        let targets = self
            .selection
            .targets
            .iter()
            .map(|t| ResourceId::parse(t))
            .collect::<Result<Vec<_>, _>>()
            .context("the saved plan names a target that is not a resource reference")?;
        Ok(SelectArgs {
            targets,
            class: self.selection.class.clone(),
        })
    }

    /// Refuses when this apply is not the one the plan was made for: another
    /// Datum, host or root, or a catalogue that changed (naming what did).
    /// `key` is the host's digest key, which a sensitive resource's hash
    /// needs (a key made since the plan was saved makes it "changed").
    pub fn check_same(
        &self,
        catalogue: &Catalogue,
        root: &Path,
        path: &Path,
        key: Option<&DigestKey>,
    ) -> Result<()> {
        let stale = |what: String| -> anyhow::Error {
            anyhow::anyhow!(
                "the saved plan {} is stale: {what}; nothing was applied. Make a new plan with `datum plan --out FILE` and review it",
                path.display()
            )
        };
        let version = env!("CARGO_PKG_VERSION");
        if self.datum_version != version {
            return Err(stale(format!(
                "it was made by Datum {}, this is Datum {version}",
                self.datum_version
            )));
        }
        if self.host != catalogue.host.name {
            return Err(stale(format!(
                "it was made for host {}, this is host {}",
                self.host, catalogue.host.name
            )));
        }
        let root = root.display().to_string();
        if self.root != root {
            return Err(stale(format!(
                "it was made for the root {}, this apply is for {root}",
                self.root
            )));
        }
        let (digest, now) = catalogue_digest(catalogue, key)?;
        if digest == self.catalogue.digest {
            return Ok(());
        }
        let mut what = Vec::new();
        for (id, hash) in &now {
            match self.catalogue.resources.get(id) {
                None => what.push(format!("{id} was added")),
                Some(then) if then != hash => what.push(format!("{id} changed")),
                Some(_) => {}
            }
        }
        for id in self.catalogue.resources.keys() {
            if !now.contains_key(id) {
                what.push(format!("{id} was removed"));
            }
        }
        if what.is_empty() {
            what.push("the repository's boundary settings changed".to_owned());
        }
        Err(stale(format!(
            "the catalogue changed since the plan was made: {}",
            what.join(", ")
        )))
    }

    /// The fingerprints the engine must observe again.
    pub fn expected(&self) -> Result<BTreeMap<ResourceId, Option<String>>> {
        self.planned
            .iter()
            .map(|p| {
                ResourceId::parse(&p.id)
                    .map(|id| (id, p.observed.clone()))
                    .with_context(|| format!("the saved plan names `{}`, not a resource", p.id))
            })
            .collect()
    }
}

/// The sensitive resources of `catalogue`: a saved plan of it needs the
/// host's digest key.
pub fn sensitive_ids(catalogue: &Catalogue) -> Vec<String> {
    catalogue
        .resources
        .iter()
        .filter(|r| r.sensitive)
        .map(|r| r.id.to_string())
        .collect()
}

/// One resource's entry in the catalogue digest: everything declared about
/// it (the declaration hash covers fields, content, validator, sensitivity
/// and explicit requirements), its class and all its requirements.
fn resource_hash(r: &datum_core::Resource) -> String {
    let requires: Vec<String> = r.requires.iter().map(ToString::to_string).collect();
    let value = json!({
        "declaration": r.declaration_hash,
        "class": r.class,
        "requires": requires,
    });
    sha256_hex(datum_catalog::catalogue::canonical_json(&value).as_bytes())
}

/// The catalogue's digest and the per-resource hashes it is made of; a
/// sensitive resource's hash is keyed with `key`, and without a key there
/// is none to give (an error naming the resource).
fn catalogue_digest(
    catalogue: &Catalogue,
    key: Option<&DigestKey>,
) -> Result<(String, BTreeMap<String, String>)> {
    let resources = catalogue
        .resources
        .iter()
        .map(|r| {
            let hash = resource_hash(r);
            let hash = match (r.sensitive, key) {
                (false, _) => hash,
                (true, Some(key)) => key.digest(&hash),
                (true, None) => bail!(
                    "{} is sensitive, and a saved plan records a sensitive resource only by the host's keyed digest: this host has no digest key",
                    r.id
                ),
            };
            Ok((r.id.to_string(), hash))
        })
        .collect::<Result<BTreeMap<String, String>>>()?;
    let boundary = serde_json::to_value(&catalogue.boundary).unwrap_or_default();
    let value = json!({
        "host": catalogue.host,
        "resources": resources,
        "boundary": boundary,
    });
    let digest = sha256_hex(datum_catalog::catalogue::canonical_json(&value).as_bytes());
    Ok((digest, resources))
}

#[cfg(test)]
mod tests {
    use datum_core::{Action, Outcome, Resource};
    use datum_engine::ResourceReport;

    use super::*;

    fn catalogue(motd_hash: &str) -> Catalogue {
        let r = |name: &str, hash: &str| Resource {
            declaration_hash: hash.to_owned(),
            ..Resource::new(ResourceId::new("File", name), json!({}))
        };
        Catalogue {
            host: datum_catalog::HostIdentity {
                name: "web-01".to_owned(),
                ..Default::default()
            },
            resources: vec![r("motd", motd_hash), r("issue", "i1")],
            autorequires: Vec::new(),
            boundary: Default::default(),
        }
    }

    fn plan(c: &Catalogue) -> SavedPlan {
        let id = ResourceId::new("File", "motd");
        let summary = PassSummary {
            resources: vec![ResourceReport {
                id: id.clone(),
                origin: Default::default(),
                target: None,
                action: Action::Update,
                diff: Default::default(),
                outcome: Outcome::WouldChange {
                    intent: datum_core::Intent::Corrective,
                },
                sensitive: false,
                detail: None,
                withheld: None,
                duration_ms: 0,
            }],
            duration_ms: 0,
            observed: vec![(id, Some("f1".to_owned()))],
            trusted_by_metadata: None,
            quarantined: Default::default(),
            warnings: Vec::new(),
        };
        SavedPlan::new(
            c,
            Path::new("/r"),
            &Selection::default(),
            &summary,
            std::time::UNIX_EPOCH,
            None,
        )
        .unwrap()
    }

    #[test]
    fn a_plan_checks_clean_against_its_own_catalogue_and_names_what_changed() {
        let c = catalogue("m1");
        let p = plan(&c);
        assert_eq!(p.created_at, "1970-01-01T00:00:00Z");
        assert_eq!(p.planned[0].observed.as_deref(), Some("f1"));
        p.check_same(&c, Path::new("/r"), Path::new("p.json"), None)
            .unwrap();
        let err = p
            .check_same(&catalogue("m2"), Path::new("/r"), Path::new("p.json"), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the catalogue changed since the plan was made: File[motd] changed;"),
            "{err}"
        );
        assert!(!err.contains("File[issue]"), "{err}");
        let err = p
            .check_same(&c, Path::new("/other"), Path::new("p.json"), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("made for the root /r"), "{err}");
    }

    /// A sensitive resource's hash is the host's keyed digest: none
    /// without a key, and another key reads as a changed resource.
    #[test]
    fn a_sensitive_resources_hash_is_keyed_and_needs_the_key() {
        let mut c = catalogue("m1");
        c.resources[0].sensitive = true;
        let key = DigestKey::from_bytes([7; 32]);
        let (_, plain) = catalogue_digest(&catalogue("m1"), None).unwrap();
        let (_, keyed) = catalogue_digest(&c, Some(&key)).unwrap();
        assert_eq!(keyed["File[issue]"], plain["File[issue]"]);
        let secret = &keyed["File[motd]"];
        assert!(
            secret.starts_with(datum_core::digest::KEYED_PREFIX),
            "{secret}"
        );
        assert_eq!(secret, &key.digest(&resource_hash(&c.resources[0])));
        let err = catalogue_digest(&c, None).unwrap_err().to_string();
        assert!(err.starts_with("File[motd] is sensitive"), "{err}");
        let mut p = plan(&catalogue("m1"));
        (p.catalogue.digest, p.catalogue.resources) = catalogue_digest(&c, Some(&key)).unwrap();
        p.check_same(&c, Path::new("/r"), Path::new("p.json"), Some(&key))
            .unwrap();
        let other = DigestKey::from_bytes([8; 32]);
        let err = p
            .check_same(&c, Path::new("/r"), Path::new("p.json"), Some(&other))
            .unwrap_err()
            .to_string();
        assert!(err.contains("File[motd] changed"), "{err}");
        assert!(
            p.check_same(&c, Path::new("/r"), Path::new("p.json"), None)
                .is_err()
        );
    }

    #[test]
    fn the_file_round_trips_and_foreign_versions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.json");
        let p = plan(&catalogue("m1"));
        p.write(&path).unwrap();
        assert_eq!(SavedPlan::read(&path).unwrap(), p);
        let mut v = serde_json::to_value(&p).unwrap();
        v["format_version"] = json!("9");
        datum_host::named::write_report(&path, v.to_string().as_bytes()).unwrap();
        let err = SavedPlan::read(&path).unwrap_err().to_string();
        assert!(err.contains("format version `9`"), "{err}");
    }

    /// Every report of a resource of the catalogue is planned, in the
    /// pass's order, and a group validator's report is not; without reading
    /// the catalogue once per report (40,000 reports against 40,000
    /// resources were 8 x 10^8 comparisons of ids).
    #[test]
    fn a_plan_of_many_resources_lists_the_catalogues_in_report_order() {
        const N: usize = 40_000;
        let report = |id: ResourceId| ResourceReport {
            id,
            origin: Default::default(),
            target: None,
            action: Action::None,
            diff: Default::default(),
            outcome: Outcome::Unchanged,
            sensitive: false,
            detail: None,
            withheld: None,
            duration_ms: 0,
        };
        let mut c = catalogue("m1");
        c.resources = (0..N)
            .map(|i| Resource::new(ResourceId::new("File", format!("f{i}")), json!({})))
            .collect();
        let mut resources: Vec<ResourceReport> = c
            .resources
            .iter()
            .rev()
            .map(|r| report(r.id.clone()))
            .collect();
        resources.insert(
            N / 2,
            report(ResourceId::new(datum_engine::GROUP_KIND, "nginx")),
        );
        let summary = PassSummary {
            resources,
            duration_ms: 0,
            observed: Vec::new(),
            trusted_by_metadata: None,
            quarantined: Default::default(),
            warnings: Vec::new(),
        };
        let p = SavedPlan::new(
            &c,
            Path::new("/r"),
            &Selection::default(),
            &summary,
            std::time::UNIX_EPOCH,
            None,
        )
        .unwrap();
        let ids: Vec<&str> = p.planned.iter().map(|r| r.id.as_str()).collect();
        let expected: Vec<String> = (0..N).rev().map(|i| format!("File[f{i}]")).collect();
        assert_eq!(ids, expected);
    }

    /// A plan of part of the catalogue (`datum plan --target ... --out`)
    /// whose change notifies a service outside the selection shows that
    /// service's reload (077237f), but observes only the selection: the
    /// saved plan must not expect the service among what the apply
    /// observes. Before, `datum apply FILE` refused every such plan as
    /// stale ("FakeUnit[web]: planned, but not in this pass").
    #[test]
    fn a_partial_plan_whose_file_notifies_a_service_outside_it_can_be_applied() {
        use datum_engine::{Mode, PassContext, SilentReporter, run_pass_with};
        use datum_testkit::fake::{FAKE_FILE, fake_file, fake_registry, fake_unit};

        let root = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let host = datum_host::Host::new(root.path().to_path_buf());
        let (registry, journal, _) = fake_registry();
        let mut store = datum_store::Store::open(&state.path().join("state.db")).unwrap();
        let site = ResourceId::new(FAKE_FILE, "site");
        let c = Catalogue {
            host: Default::default(),
            resources: vec![
                fake_file("site", "/site", "v1\n", &[]),
                Resource {
                    requires: vec![site.clone()],
                    ..fake_unit("web", std::slice::from_ref(&site))
                },
            ],
            autorequires: Vec::new(),
            boundary: Default::default(),
        };
        let mut pass = |mode: Mode, options: &datum_engine::PassOptions| {
            let mut ctx = PassContext {
                registry: &registry,
                host: &host,
                mode,
                store: Some(&mut store),
                backups: None,
                now: 1_000,
                skip: Default::default(),
                sensitive: None,
            };
            run_pass_with(&c, &mut ctx, &mut SilentReporter, options)
        };
        pass(Mode::Apply, &datum_engine::PassOptions::default()).unwrap();
        std::fs::write(root.path().join("site"), "by hand\n").unwrap();
        let selection = Selection {
            targets: vec![site.clone()],
            only: Some(std::collections::BTreeSet::from([site.clone()])),
            total: 2,
            ..Selection::default()
        };
        let mut options = selection.options();
        options.fingerprints = true;
        let planned = pass(Mode::Plan, &options).unwrap();
        let words: Vec<(String, &str)> = planned
            .resources
            .iter()
            .map(|r| (r.id.to_string(), r.outcome.word()))
            .collect();
        assert_eq!(
            words,
            [
                ("FakeFile[site]".to_owned(), "would change"),
                ("FakeUnit[web]".to_owned(), "would change")
            ]
        );
        let saved = SavedPlan::new(
            &c,
            root.path(),
            &selection,
            &planned,
            std::time::UNIX_EPOCH,
            None,
        )
        .unwrap();
        let mut options = selection.options();
        options.expect = Some(saved.expected().unwrap());
        journal.clear();
        let applied = match pass(Mode::Apply, &options) {
            Ok(summary) => summary,
            Err(e) => panic!("the saved plan was refused: {e}"),
        };
        assert!(!applied.any_failed());
        assert_eq!(journal.of("reload"), ["FakeUnit[web]"]);
        assert_eq!(
            std::fs::read_to_string(root.path().join("site")).unwrap(),
            "v1\n"
        );
    }
}
