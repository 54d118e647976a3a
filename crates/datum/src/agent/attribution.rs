//! The agent's side of "who changed it": for the classes with
//! `attribute: true` (and `watch: true`), a thread reads fanotify events
//! through `datum_host::attribution` as they come (so the writer is read
//! while it still exists), and each check first moves what it heard into
//! the state store, keyed by resource, where `datum check` finds it for the
//! findings it reports and the class rules it applies.
//!
//! Owns: which directories are marked (the parent of each file, a tree and
//! its folders), mapping an event's path back to resources, dropping Datum's
//! own writes (never drift), and, when fanotify could not be used, the audit
//! log's writers of a changed resource or the "unknown" writer with the
//! reason. A sensitive resource's writers (every resource's, while no
//! catalogue is loaded) are logged and stored without their command line,
//! which often holds what they wrote, and the log does not name the
//! resource. Must not: decide what a writer means for a policy (`datum
//! check` does), or run for a class that did not ask.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use datum_agent::{Loaded, Scope, WatchScope, WatchTarget};
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
            started: crate::context::now(),
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
    pub fn drain(&self) -> Vec<(ResourceId, ChangedBy)> {
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
    pub fn unavailable(&self, id: &ResourceId, at: i64, lookup: &audit::Lookup) -> Vec<ChangedBy> {
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
    pub fn is_broken(&self) -> bool {
        self.broken.is_some()
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

/// The agent's attribution: started and stopped with the classes that ask,
/// drained into the state store before each check.
impl super::RepoChecker {
    /// Starts attribution for the classes that ask (`attribute: true` and
    /// watched), keeping the running one when nothing it marks changed.
    pub(super) fn restart_attribution(&mut self, classes: &Classes, loaded: &Loaded) {
        let asking: BTreeSet<String> = classes
            .classes
            .values()
            .filter(|c| c.attribute && c.watch)
            .map(|c| c.name.clone())
            .collect();
        let plan = AttributionPlan::new(&loaded.watch, &asking);
        if plan.is_empty() {
            self.attribution = None;
            return;
        }
        if self.attribution.as_ref().is_some_and(|f| *f.plan() == plan) {
            return;
        }
        // The old marks go before the new ones are made.
        self.attribution = None;
        let classes: Vec<&str> = plan.classes.iter().map(String::as_str).collect();
        (self.info)(&format!(
            "attribution: reading who changes the files of class(es) {}",
            classes.join(", ")
        ));
        self.attribution = Some(Feed::start(plan, &*self.warn));
    }

    /// Moves what attribution heard into the state store, where `datum
    /// check` (this process's or a delegated one) reports it with the
    /// findings. A watched change of an attributing class while fanotify is
    /// unusable gets the audit log's writers, or unknown with the reason.
    pub(super) fn record_writers(&mut self, scope: &Scope) {
        let Some(feed) = self.attribution.as_ref() else {
            return;
        };
        let mut writers = feed.drain();
        if let Scope::Resources { class, ids } = scope
            && feed.plan().classes.contains(class)
        {
            let at = crate::context::now();
            if feed.is_broken() {
                let lookup = datum_host::attribution::audit::Fallback::system().recent(None);
                for id in ids {
                    for w in feed.unavailable(id, at, &lookup) {
                        writers.push((id.clone(), w));
                    }
                }
            }
        }
        if writers.is_empty() {
            return;
        }
        // A writer's command line often holds what it wrote (`sed -i
        // s/old/NEW/`, `sh -c 'echo pw > FILE'`): a sensitive resource's
        // writers keep only the executable, and the log names no such
        // resource (the loop never does: its name can say what it protects).
        // Without a catalogue nothing is known to be safe to show.
        let sensitive = |id: &ResourceId| {
            self.catalogue
                .as_ref()
                .is_none_or(|c| c.resources.iter().any(|r| &r.id == id && r.sensitive))
        };
        for (id, w) in &mut writers {
            if sensitive(id) {
                w.process = None;
                (self.info)(&format!(
                    "attribution: a sensitive resource {} by {}",
                    w.event,
                    w.summary()
                ));
            } else {
                (self.info)(&format!("attribution: {id} {} by {}", w.event, w.summary()));
            }
        }
        self.open_store();
        let Some(store) = self.store.as_mut() else {
            (self.warn)(&format!(
                "attribution: {} writer(s) not recorded: no state store",
                writers.len()
            ));
            return;
        };
        if let Err(e) = store.record_writers(&writers) {
            (self.warn)(&format!("attribution: could not record writers: {e}"));
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
}
