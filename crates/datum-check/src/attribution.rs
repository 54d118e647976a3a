//! "Who changed it" for the agent's checks: for the classes with
//! `attribute: true` (and `watch: true`), a thread reads fanotify events
//! through `datum_host::attribution` as they come (so the writer is read
//! while it still exists), and before each check [`Feed::writers`] hands
//! the caller what it heard, keyed by resource, for the state store, where
//! `datum check` finds it for the findings it reports and the class rules
//! it applies.
//!
//! Owns: which classes ask ([`asking`]), which directories are marked (the
//! parent of each file, a tree and its folders), mapping an event's path
//! back to resources ([`AttributionPlan`]), keeping a running feed while
//! nothing it marks changed ([`restart`]), dropping Datum's own writes
//! (never drift), and, when fanotify could not be used, the audit log's
//! writers of a changed resource or the "unknown" writer with the reason.
//! A sensitive resource's writers (every resource's, while no catalogue is
//! loaded) are logged and handed back without their command line, which
//! often holds what they wrote, and the log does not name the resource.
//!
//! Must not: decide what a writer means for a policy (the check does), run
//! for a class that did not ask, or write to the state store (the caller
//! records what [`Feed::writers`] returns in the store it holds).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use datum_agent::{Scope, WatchScope, WatchTarget};
use datum_catalog::Catalogue;
use datum_core::{ChangedBy, ResourceId, WriterKind};
use datum_drift::classes::Classes;
use datum_host::attribution::{Attributed, Attributor, MAX_GROUPS, Own, audit, tree_dirs};

/// How long the reader blocks in one poll.
const POLL: Duration = Duration::from_millis(100);

/// Which resources a path belongs to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AttributionPlan {
    files: BTreeMap<PathBuf, Vec<ResourceId>>,
    trees: Vec<(PathBuf, ResourceId)>,
    /// The classes that asked.
    pub classes: BTreeSet<String>,
}

impl AttributionPlan {
    /// The targets of the classes in `attributing`.
    pub fn new(targets: &[WatchTarget], attributing: &BTreeSet<String>) -> Self {
        let mut plan = AttributionPlan {
            classes: attributing.clone(),
            ..Self::default()
        };
        for t in targets.iter().filter(|t| attributing.contains(&t.class)) {
            let path = std::path::absolute(&t.path).unwrap_or_else(|_| t.path.clone());
            if t.scope == WatchScope::Subtree {
                plan.trees.push((path, t.resource.clone()));
            } else {
                plan.files.entry(path).or_default().push(t.resource.clone());
            }
        }
        plan
    }

    /// The paths of `id` (a file, or a tree's root with `true`).
    fn paths_of(&self, id: &ResourceId) -> Vec<(PathBuf, bool)> {
        let files = self
            .files
            .iter()
            .filter(|(_, ids)| ids.contains(id))
            .map(|(p, _)| (p.clone(), false));
        let trees = self
            .trees
            .iter()
            .filter(|(_, t)| t == id)
            .map(|(p, _)| (p.clone(), true));
        files.chain(trees).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.trees.is_empty()
    }

    /// The directories to mark, and a note for each tree cut short.
    fn dirs(&self) -> (BTreeSet<PathBuf>, Vec<String>) {
        let mut dirs = BTreeSet::new();
        let mut notes = Vec::new();
        for path in self.files.keys() {
            dirs.insert(path.parent().unwrap_or(Path::new("/")).to_path_buf());
        }
        for (path, id) in &self.trees {
            let (found, cut) = tree_dirs(path, MAX_GROUPS);
            if cut {
                notes.push(format!(
                    "{id}: only the first {MAX_GROUPS} folders of {} are attributed",
                    path.display()
                ));
            }
            dirs.extend(found);
        }
        (dirs, notes)
    }

    /// The resources an event on `path` (from marked directory `dir`) may
    /// concern; an event on the directory itself (an overflow) concerns all
    /// of its files.
    fn resources_of(&self, path: &Path, dir: &Path) -> Vec<ResourceId> {
        let mut out: Vec<ResourceId> = Vec::new();
        if path == dir {
            for (file, ids) in &self.files {
                if file.parent() == Some(dir) {
                    out.extend(ids.iter().cloned());
                }
            }
        } else if let Some(ids) = self.files.get(path) {
            out.extend(ids.iter().cloned());
        }
        for (root, id) in &self.trees {
            if path.starts_with(root) || dir.starts_with(root) {
                out.push(id.clone());
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// The classes that ask for attribution: `attribute: true` and watched.
pub fn asking(classes: &Classes) -> BTreeSet<String> {
    classes
        .classes
        .values()
        .filter(|c| c.attribute && c.watch)
        .map(|c| c.name.clone())
        .collect()
}

/// Starts attribution for the classes that ask (`attribute: true` and
/// watched) over the watch `targets` of the loaded catalogue, keeping the
/// running `feed` when nothing it marks changed, and stopping it when no
/// class asks. `info` hears which classes a new feed reads, `warn` what
/// could not be marked.
pub fn restart(
    feed: &mut Option<Feed>,
    classes: &Classes,
    targets: &[WatchTarget],
    info: &dyn Fn(&str),
    warn: &dyn Fn(&str),
) {
    let plan = AttributionPlan::new(targets, &asking(classes));
    if plan.is_empty() {
        *feed = None;
        return;
    }
    if feed.as_ref().is_some_and(|f| *f.plan() == plan) {
        return;
    }
    // The old marks go before the new ones are made.
    *feed = None;
    let classes: Vec<&str> = plan.classes.iter().map(String::as_str).collect();
    info(&format!(
        "attribution: reading who changes the files of class(es) {}",
        classes.join(", ")
    ));
    *feed = Some(Feed::start(plan, warn));
}

/// The reader thread and what it has heard.
pub struct Feed {
    plan: AttributionPlan,
    /// Read by the thread as events arrive, and by [`Feed::drain`] for what
    /// is still queued when a check starts.
    attributor: Option<Arc<Mutex<Attributor>>>,
    heard: Arc<Mutex<Vec<Attributed>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Why attribution does not work at all (fanotify unavailable).
    broken: Option<String>,
    /// When the feed started (Unix seconds) and the audit events already
    /// reported, for the audit fallback while fanotify is unusable: only
    /// those the last lookup returned (its window, ten minutes).
    started: i64,
    audit_seen: Mutex<BTreeSet<u64>>,
}

impl Feed {
    /// Marks the plan's directories; `warn` hears each one that could not be.
    pub fn start(plan: AttributionPlan, warn: &dyn Fn(&str)) -> Feed {
        let (dirs, notes) = plan.dirs();
        for n in &notes {
            warn(&format!("attribution: {n}"));
        }
        let mut feed = Feed {
            plan,
            attributor: None,
            heard: Arc::default(),
            stop: Arc::default(),
            thread: None,
            broken: None,
            started: crate::now(),
            audit_seen: Mutex::default(),
        };
        let attributor = match Attributor::start(&dirs, Own::current()) {
            Ok(a) => a,
            Err(e) => {
                warn(&format!("attribution: {e}"));
                feed.broken = Some(e.to_string());
                return feed;
            }
        };
        for (dir, why) in attributor.unmarked() {
            warn(&format!(
                "attribution: {} is not marked ({why}): its writers are unknown",
                dir.display()
            ));
        }
        let waiter = match attributor.waiter() {
            Ok(w) => w,
            Err(e) => {
                warn(&format!("attribution: {e}"));
                feed.broken = Some(format!("cannot wait for fanotify events: {e}"));
                return feed;
            }
        };
        let attributor = Arc::new(Mutex::new(attributor));
        feed.attributor = Some(Arc::clone(&attributor));
        let (heard, stop) = (Arc::clone(&feed.heard), Arc::clone(&feed.stop));
        feed.thread = Some(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if !waiter.wait(POLL) {
                    continue;
                }
                read_into(&attributor, &heard);
            }
        }));
        feed
    }

    pub fn plan(&self) -> &AttributionPlan {
        &self.plan
    }

    /// Everything heard so far, by resource, without Datum's own writes
    /// (events still queued are read first, so nothing written before the
    /// check started is left for the next one).
    fn drain(&self) -> Vec<(ResourceId, ChangedBy)> {
        if let Some(a) = &self.attributor {
            read_into(a, &self.heard);
        }
        let heard = match self.heard.lock() {
            Ok(mut h) => std::mem::take(&mut *h),
            Err(_) => Vec::new(),
        };
        let mut out = Vec::new();
        for a in heard {
            if a.writer.kind == WriterKind::Datum {
                continue;
            }
            for id in self.plan.resources_of(&a.path, &a.dir) {
                out.push((id, a.writer.clone()));
            }
        }
        out
    }

    /// The writers recorded for a watched change of `id` when fanotify
    /// could not be used at all: what the audit log says wrote its paths
    /// since the agent started (Datum's own writes left out), else one
    /// unknown writer with both reasons. Empty when fanotify works.
    fn unavailable(&self, id: &ResourceId, at: i64, lookup: &audit::Lookup) -> Vec<ChangedBy> {
        let Some(why) = self.broken.as_ref() else {
            return Vec::new();
        };
        let paths = self.plan.paths_of(id);
        let own = Own::current();
        let names = datum_host::attribution::user_names();
        let mut out = Vec::new();
        if let audit::Lookup::Events(events) = lookup
            && let Ok(mut seen) = self.audit_seen.lock()
        {
            // A lookup reaches back a fixed window from now: an event no
            // longer in it is never returned again, so it need not be
            // remembered (the set stays the size of one window).
            let current: BTreeSet<u64> = events.iter().map(|e| e.serial).collect();
            seen.retain(|serial| current.contains(serial));
            for (path, subtree) in &paths {
                for e in audit::naming(events, path, *subtree, self.started) {
                    if !seen.insert(e.serial) {
                        continue;
                    }
                    let w = e.writer(
                        &own,
                        &|u| names.get(&u).cloned(),
                        &path.display().to_string(),
                        "changed",
                    );
                    if w.kind != WriterKind::Datum {
                        out.push(w);
                    }
                }
            }
        }
        if out.is_empty() {
            let shown = paths
                .first()
                .map_or_else(|| id.to_string(), |(p, _)| p.display().to_string());
            let audit = match lookup {
                audit::Lookup::NotRunning => {
                    "the audit subsystem (auditd) is not running either".to_owned()
                }
                audit::Lookup::Failed(e) => {
                    format!("auditd runs but its log could not be searched: {e}")
                }
                audit::Lookup::Events(_) => format!(
                    "auditd has no new record of a write to {shown} since the agent started (no audit watch covers it?)"
                ),
            };
            out.push(ChangedBy::unknown(
                shown,
                "changed",
                at,
                None,
                format!("{why}; {audit}"),
            ));
        }
        out
    }

    /// Whether fanotify is unusable (so the audit log is all there is).
    fn is_broken(&self) -> bool {
        self.broken.is_some()
    }

    /// What to record before a check of `scope`: everything heard so far
    /// (`drain`) and, for a watched change of an attributing class
    /// while fanotify is unusable, the audit log's writers, or unknown with
    /// the reason (`unavailable`). Each is logged to `info`; a
    /// sensitive resource's (in `catalogue`; every resource's without one)
    /// without its command line and without naming it.
    pub fn writers(
        &self,
        scope: &Scope,
        catalogue: Option<&Catalogue>,
        info: &dyn Fn(&str),
    ) -> Vec<(ResourceId, ChangedBy)> {
        self.writers_with(scope, catalogue, info, &|| {
            audit::Fallback::system().recent(None)
        })
    }

    /// [`Feed::writers`] with the audit log's `lookup` handed in.
    fn writers_with(
        &self,
        scope: &Scope,
        catalogue: Option<&Catalogue>,
        info: &dyn Fn(&str),
        lookup: &dyn Fn() -> audit::Lookup,
    ) -> Vec<(ResourceId, ChangedBy)> {
        let mut writers = self.drain();
        if let Scope::Resources { class, ids } = scope
            && self.plan.classes.contains(class)
        {
            let at = crate::now();
            if self.is_broken() {
                let lookup = lookup();
                for id in ids {
                    for w in self.unavailable(id, at, &lookup) {
                        writers.push((id.clone(), w));
                    }
                }
            }
        }
        withhold_sensitive(&mut writers, catalogue, info);
        writers
    }
}

/// Logs each writer to `info`. A writer's command line often holds what it
/// wrote (`sed -i s/old/NEW/`, `sh -c 'echo pw > FILE'`): a sensitive
/// resource's writers keep only the executable, and the log names no such
/// resource (the loop never does: its name can say what it protects).
/// Without a catalogue nothing is known to be safe to show.
fn withhold_sensitive(
    writers: &mut [(ResourceId, ChangedBy)],
    catalogue: Option<&Catalogue>,
    info: &dyn Fn(&str),
) {
    let sensitive = |id: &ResourceId| {
        catalogue.is_none_or(|c| c.resources.iter().any(|r| &r.id == id && r.sensitive))
    };
    for (id, w) in writers.iter_mut() {
        if sensitive(id) {
            w.process = None;
            info(&format!(
                "attribution: a sensitive resource {} by {}",
                w.event,
                w.summary()
            ));
        } else {
            info(&format!("attribution: {id} {} by {}", w.event, w.summary()));
        }
    }
}

/// Reads what is queued into `heard` (the lock is held for one
/// non-blocking read).
fn read_into(attributor: &Mutex<Attributor>, heard: &Mutex<Vec<Attributed>>) {
    let events = match attributor.lock() {
        Ok(mut a) => a.read_pending(),
        Err(_) => return,
    };
    if !events.is_empty()
        && let Ok(mut h) = heard.lock()
    {
        h.extend(events);
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(class: &str, name: &str, path: &str, subtree: bool) -> WatchTarget {
        WatchTarget {
            resource: ResourceId::new(if subtree { "Tree" } else { "File" }, name),
            class: class.to_owned(),
            path: PathBuf::from(path),
            scope: if subtree {
                WatchScope::Subtree
            } else {
                WatchScope::RegularFile
            },
        }
    }

    #[test]
    fn only_attributing_classes_are_planned_and_paths_map_back() {
        let targets = [
            target("critical", "sshd", "/r/etc/ssh/sshd_config", false),
            target("critical", "conf", "/r/etc/app", true),
            target("normal", "motd", "/r/etc/motd", false),
        ];
        let plan = AttributionPlan::new(&targets, &BTreeSet::from(["critical".to_owned()]));
        let sshd = ResourceId::new("File", "sshd");
        let conf = ResourceId::new("Tree", "conf");
        assert_eq!(
            plan.resources_of(Path::new("/r/etc/ssh/sshd_config"), Path::new("/r/etc/ssh")),
            vec![sshd.clone()]
        );
        assert_eq!(
            plan.resources_of(Path::new("/r/etc/ssh"), Path::new("/r/etc/ssh")),
            [sshd]
        );
        assert_eq!(
            plan.resources_of(Path::new("/r/etc/app/a/b.conf"), Path::new("/r/etc/app/a")),
            [conf]
        );
        assert!(
            plan.resources_of(Path::new("/r/etc/motd"), Path::new("/r/etc"))
                .is_empty()
        );
        let none = AttributionPlan::new(&targets, &BTreeSet::new());
        assert!(none.is_empty());
    }

    /// Without fanotify, the audit events a watched change was put down to
    /// are remembered so the next check does not report them again. Each
    /// lookup reaches back ten minutes only, so an event that left it is
    /// never found again: remembering it for the agent's whole life grew a
    /// set by one serial per write to a watched file, for weeks.
    #[test]
    fn the_audit_events_remembered_are_those_a_lookup_can_still_return() {
        let sshd = target("critical", "sshd", "/r/etc/ssh/sshd_config", false);
        let plan = AttributionPlan::new(
            std::slice::from_ref(&sshd),
            &BTreeSet::from(["critical".to_owned()]),
        );
        let feed = Feed {
            plan,
            attributor: None,
            heard: Arc::default(),
            stop: Arc::default(),
            thread: None,
            broken: Some("fanotify_init: Operation not permitted".to_owned()),
            started: 1_000,
            audit_seen: Mutex::default(),
        };
        let event = |serial: u64| audit::AuditEvent {
            serial,
            at: 1_000 + i64::try_from(serial).unwrap(),
            pid: Some(42),
            comm: Some("vi".to_owned()),
            tty: Some("pts1".to_owned()),
            names: vec!["/r/etc/ssh/sshd_config".to_owned()],
            ..audit::AuditEvent::default()
        };
        for serial in 10..1_000u64 {
            // A write per check; the lookup holds the last five.
            let events = (serial - 4..=serial).map(event).collect();
            let lookup = audit::Lookup::Events(events);
            let writers = feed.unavailable(&sshd.resource, 2_000, &lookup);
            let first = serial == 10;
            assert_eq!(writers.len(), if first { 5 } else { 1 }, "{serial}");
            assert!(
                writers
                    .last()
                    .unwrap()
                    .via
                    .ends_with(&format!("audit event {serial}"))
            );
        }
        assert!(feed.audit_seen.lock().unwrap().len() <= 5);
    }

    /// A feed that heard `heard` (no fanotify group behind it).
    fn feed_that_heard(plan: AttributionPlan, heard: Vec<Attributed>) -> Feed {
        Feed {
            plan,
            attributor: None,
            heard: Arc::new(Mutex::new(heard)),
            stop: Arc::default(),
            thread: None,
            broken: None,
            started: 1_000,
            audit_seen: Mutex::default(),
        }
    }

    fn writer(kind: WriterKind, process: &str) -> ChangedBy {
        ChangedBy {
            kind,
            via: "terminal /dev/pts/1".to_owned(),
            process: Some(process.to_owned()),
            reason: None,
            ..ChangedBy::unknown("/r/etc/x", "modified", 1_500, Some(42), "")
        }
    }

    fn heard(path: &str, dir: &str, writer: ChangedBy) -> Attributed {
        Attributed {
            path: PathBuf::from(path),
            dir: PathBuf::from(dir),
            writer,
        }
    }

    fn critical_plan() -> AttributionPlan {
        let targets = [
            target("critical", "sshd", "/r/etc/ssh/sshd_config", false),
            target("critical", "token", "/r/etc/ssh/token", false),
        ];
        AttributionPlan::new(&targets, &BTreeSet::from(["critical".to_owned()]))
    }

    fn catalogue(sensitive: &[&str]) -> Catalogue {
        let resource = |name: &str| datum_core::Resource {
            sensitive: sensitive.contains(&name),
            ..datum_core::Resource::new(ResourceId::new("File", name), serde_json::json!({}))
        };
        Catalogue {
            host: Default::default(),
            resources: vec![resource("sshd"), resource("token")],
            autorequires: Vec::new(),
            boundary: Default::default(),
        }
    }

    /// Datum's own writes (an apply, a revert) are never drift: they are
    /// dropped; everything else is handed back once, for its resource.
    #[test]
    fn datums_own_writes_are_dropped_and_the_others_map_to_their_resource() {
        let feed = feed_that_heard(
            critical_plan(),
            vec![
                heard(
                    "/r/etc/ssh/sshd_config",
                    "/r/etc/ssh",
                    writer(WriterKind::Datum, "datum apply"),
                ),
                heard(
                    "/r/etc/ssh/sshd_config",
                    "/r/etc/ssh",
                    writer(WriterKind::Person, "vi sshd_config"),
                ),
            ],
        );
        let drained = feed.drain();
        assert_eq!(drained.len(), 1, "{drained:?}");
        assert_eq!(drained[0].0, ResourceId::new("File", "sshd"));
        assert_eq!(drained[0].1.kind, WriterKind::Person);
        assert!(feed.drain().is_empty(), "handed back twice");
    }

    /// A sensitive resource's writer keeps no command line (it often holds
    /// what was written) and its log line does not name the resource;
    /// another resource's writer is shown whole. Without a catalogue every
    /// resource counts as sensitive.
    #[test]
    fn a_sensitive_resources_writers_are_handed_back_and_logged_without_their_command_line() {
        let events = || {
            vec![
                heard(
                    "/r/etc/ssh/sshd_config",
                    "/r/etc/ssh",
                    writer(WriterKind::Person, "sed -i s/a/PLAIN/ sshd_config"),
                ),
                heard(
                    "/r/etc/ssh/token",
                    "/r/etc/ssh",
                    writer(WriterKind::Person, "sed -i s/a/CANARY/ token"),
                ),
            ]
        };
        let logged = Mutex::new(Vec::<String>::new());
        let info = |line: &str| logged.lock().unwrap().push(line.to_owned());
        let no_lookup = || panic!("the audit log is only read while fanotify is unusable");

        let feed = feed_that_heard(critical_plan(), events());
        let cat = catalogue(&["token"]);
        let writers = feed.writers_with(&Scope::All, Some(&cat), &info, &no_lookup);
        let token = ResourceId::new("File", "token");
        let sshd = ResourceId::new("File", "sshd");
        let of = |id: &ResourceId| writers.iter().find(|(i, _)| i == id).map(|(_, w)| w);
        assert_eq!(of(&token).unwrap().process, None);
        assert_eq!(
            of(&sshd).unwrap().process.as_deref(),
            Some("sed -i s/a/PLAIN/ sshd_config")
        );
        let lines = std::mem::take(&mut *logged.lock().unwrap());
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines
                .iter()
                .all(|l| !l.contains("CANARY") && !l.contains("File[token]"))
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("attribution: a sensitive resource modified by "))
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("attribution: File[sshd] modified by ")
                    && l.contains("PLAIN"))
        );

        let feed = feed_that_heard(critical_plan(), events());
        let writers = feed.writers_with(&Scope::All, None, &info, &no_lookup);
        assert_eq!(writers.len(), 2);
        assert!(
            writers.iter().all(|(_, w)| w.process.is_none()),
            "{writers:?}"
        );
        let lines = logged.lock().unwrap();
        assert!(
            lines
                .iter()
                .all(|l| l.starts_with("attribution: a sensitive resource ")),
            "{lines:?}"
        );
    }

    /// While fanotify is unusable, a watched change of an attributing class
    /// is put down to what the audit log says, else to an unknown writer
    /// with both reasons; a check of another scope reads no audit log.
    #[test]
    fn without_fanotify_a_watched_change_gets_an_unknown_writer_with_the_reasons() {
        let mut feed = feed_that_heard(critical_plan(), Vec::new());
        feed.broken = Some("fanotify_init: Operation not permitted".to_owned());
        let sshd = ResourceId::new("File", "sshd");
        let looked = std::cell::Cell::new(0);
        let lookup = || {
            looked.set(looked.get() + 1);
            audit::Lookup::NotRunning
        };
        let cat = catalogue(&[]);
        let info = |_: &str| {};

        let other_class = Scope::Resources {
            class: "normal".to_owned(),
            ids: vec![sshd.clone()],
        };
        assert!(
            feed.writers_with(&other_class, Some(&cat), &info, &lookup)
                .is_empty()
        );
        assert!(
            feed.writers_with(&Scope::All, Some(&cat), &info, &lookup)
                .is_empty()
        );
        assert_eq!(looked.get(), 0);

        let watched = Scope::Resources {
            class: "critical".to_owned(),
            ids: vec![sshd.clone()],
        };
        let writers = feed.writers_with(&watched, Some(&cat), &info, &lookup);
        assert_eq!(looked.get(), 1);
        assert_eq!(writers.len(), 1, "{writers:?}");
        let (id, w) = &writers[0];
        assert_eq!(id, &sshd);
        assert_eq!(w.kind, WriterKind::Unknown);
        assert_eq!(w.path, "/r/etc/ssh/sshd_config");
        let reason = w.reason.as_deref().unwrap();
        assert!(
            reason.starts_with("fanotify_init: Operation not permitted; "),
            "{reason}"
        );
        assert!(reason.contains("auditd) is not running"), "{reason}");
    }

    /// Only classes with `attribute: true` ask (which needs `watch: true`);
    /// with none asking a running feed stops, and one whose plan is
    /// unchanged is kept.
    #[test]
    fn only_watched_classes_with_attribute_ask_and_none_asking_stops_the_feed() {
        let classes = Classes::parse(&serde_json::json!({
            "critical": {"interval": "1m", "watch": true, "attribute": true},
            "normal": {"interval": "1m", "watch": true},
        }))
        .unwrap();
        assert_eq!(asking(&classes), BTreeSet::from(["critical".to_owned()]));

        let mut feed = Some(feed_that_heard(critical_plan(), Vec::new()));
        let targets = [target("normal", "motd", "/r/etc/motd", false)];
        restart(&mut feed, &classes, &targets, &|_| {}, &|_| {});
        assert!(feed.is_none());

        // The same plan: the running feed is kept (no new marks).
        let targets = [
            target("critical", "sshd", "/r/etc/ssh/sshd_config", false),
            target("critical", "token", "/r/etc/ssh/token", false),
        ];
        let mut feed = Some(feed_that_heard(critical_plan(), Vec::new()));
        let heard = feed.as_ref().map(|f| Arc::as_ptr(&f.heard));
        let said = Mutex::new(Vec::<String>::new());
        restart(
            &mut feed,
            &classes,
            &targets,
            &|l| said.lock().unwrap().push(l.to_owned()),
            &|_| {},
        );
        assert_eq!(feed.as_ref().map(|f| Arc::as_ptr(&f.heard)), heard);
        assert!(said.lock().unwrap().is_empty());
    }
}
