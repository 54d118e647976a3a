//! Staging ahead of the pass's loop (issue 17; see `pass`'s module header).
//!
//! Worker threads stage the resources the loop will reach next, in pass
//! order, while the loop activates the ones before them: each staged copy
//! written, given its owner and mode and fsynced on its own thread, so the
//! file system commits many fsyncs together and the loop's renames overlap
//! the next copies' writes. Which resources, and when:
//!
//! - only a kind whose staging touches nothing live
//!   ([`datum_providers::Capabilities::stages_ahead`]: File), for a resource that
//!   requires nothing, has no validator, and is neither held, quarantined,
//!   refused by its group, applied by a batch nor accepted as it is;
//! - never past a resource of another kind the loop has not finished (a
//!   User, a Directory or a Package may change what a later file's staging
//!   reads: an owner, a parent folder), nor past a File writing an account
//!   file (`/etc/passwd`: an owner's number);
//! - at most [`stage_ahead`] positions ahead of the loop, so the copies that
//!   exist at once (open, their content kept for the validator) stay bounded.
//!
//! The loop takes a resource's copy when it reaches it ([`Ahead::take`]) and
//! runs its phases exactly as before; a copy it does not use is dropped,
//! which removes it. A resource a worker did not get to first, or whose
//! staging failed here, is staged by the loop itself, which reports what
//! fails then.

use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Condvar, Mutex, MutexGuard};

use datum_core::{Action, Observed, Resource, ResourceId};
use datum_host::Host;
use datum_providers::{Registry, Staging};
use datum_store::Accepted;

use crate::group::GroupChecks;
use crate::observe::Observations;
use crate::select::PassOptions;

/// How many positions ahead of the loop a resource may be staged: the
/// copies staged and not yet taken exist together, two descriptors each, so
/// this is this process's share of its open files for them
/// ([`datum_host::descriptors::Budget::stage_ahead`]: an eighth of the soft
/// limit less a reserve, 8 to 128; 120 at a soft limit of 1,024).
pub(crate) fn stage_ahead() -> usize {
    datum_host::descriptors::Budget::of_this_process().stage_ahead
}

/// How many threads stage ahead: fsync waits for the disk, not the CPU, and
/// a file system commits fsyncs that arrive together at once (on this
/// machine class, 16 threads fsync 2,000 new files 10-20x faster than one).
pub(crate) const STAGE_AHEAD_THREADS: usize = 16;

/// What decides which resources may be staged ahead.
pub(crate) struct AheadInputs<'p, 'a> {
    pub selected: &'p [&'a Resource],
    pub observations: &'p Observations<'a>,
    pub options: &'p PassOptions,
    pub groups: &'p GroupChecks,
    pub accepted: &'p HashMap<String, Accepted>,
    pub batched: &'p HashMap<ResourceId, Observed>,
    /// The pass's kinds, asked what a write changes for a later staging.
    pub registry: &'p Registry,
}

/// The staging ahead of one pass, shared by the loop and the workers.
pub(crate) struct Ahead<'p, 'a> {
    observations: &'p Observations<'a>,
    host: &'p Host,
    /// The resources that may be staged ahead, in pass order, each with the
    /// position the loop must have reached first (one past the last
    /// resource before it of a kind that does not stage ahead).
    plan: Vec<(usize, usize)>,
    planned: HashSet<usize>,
    state: Mutex<State>,
    /// Workers wait here for the loop to open the window; woken one at a
    /// time (a worker that claims a resource wakes the next), so a step of
    /// the loop does not wake all of them.
    window: Condvar,
    /// The loop waits here for a copy a worker is staging.
    staged: Condvar,
}

#[derive(Default)]
struct State {
    /// The position the loop is at (every resource before it finished).
    current: usize,
    /// The next entry of `plan` a worker looks at.
    next: usize,
    slots: HashMap<usize, Slot>,
    /// The resource the loop waits for, if it does.
    waiting: Option<usize>,
    done: bool,
}

enum Slot {
    /// A worker is staging it.
    Claimed,
    /// Staged (`None`: not staged, the loop stages it itself).
    Ready(Option<Staging>),
}

impl<'p, 'a> Ahead<'p, 'a> {
    /// Plans the staging ahead of a pass (nothing for a plan-only pass);
    /// `skip` are the quarantined resources.
    pub(crate) fn new(
        inputs: &AheadInputs<'p, 'a>,
        skip: &HashSet<ResourceId>,
        host: &'p Host,
        apply: bool,
    ) -> Self {
        let mut plan = Vec::new();
        let mut gate = 0;
        for (index, resource) in inputs.selected.iter().enumerate() {
            let Some(bound) = inputs.observations.bound(index) else {
                gate = index + 1;
                continue;
            };
            if !bound.provider.stages_ahead() {
                gate = index + 1;
                continue;
            }
            // A File writing an account file changes what a later file's
            // staging resolves its owner and group from (the pass reads the
            // files again after it: `Registry::after_writing`); every kind
            // that watches writes is asked, none named here.
            if apply
                && bound.provider.paths().is_some_and(|p| {
                    inputs.registry.changes_what_staging_reads(
                        host.boundary(),
                        &p.managed_paths(&bound.declared),
                    )
                })
            {
                gate = index + 1;
                continue;
            }
            let id = &resource.id;
            if apply
                && resource.requires.is_empty()
                && resource.validate.is_none()
                && !skip.contains(id)
                && !inputs.options.hold.contains(id)
                && !inputs.groups.refuses(id)
                && !inputs.batched.contains_key(id)
                && !inputs.accepted.contains_key(&id.to_string())
                && will_write(inputs.observations, index)
            {
                plan.push((index, gate));
            }
        }
        Self {
            observations: inputs.observations,
            host,
            planned: plan.iter().map(|&(index, _)| index).collect(),
            plan,
            state: Mutex::new(State::default()),
            window: Condvar::new(),
            staged: Condvar::new(),
        }
    }

    /// How many resources may be staged ahead (none in a converged pass).
    #[cfg(test)]
    pub(crate) fn planned(&self) -> usize {
        self.plan.len()
    }

    /// How many worker threads are worth starting.
    pub(crate) fn threads(&self) -> usize {
        if self.plan.len() < 2 {
            0
        } else {
            STAGE_AHEAD_THREADS.min(self.plan.len())
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'g>(&self, on: &Condvar, guard: MutexGuard<'g, State>) -> MutexGuard<'g, State> {
        on.wait(guard).unwrap_or_else(|p| p.into_inner())
    }

    /// Whether plan entry `k` may be claimed now.
    fn open(&self, state: &State, k: usize) -> bool {
        self.plan.get(k).is_some_and(|&(index, gate)| {
            state.current >= gate && index < state.current + stage_ahead()
        })
    }

    /// A worker: stages planned resources in order, within the window,
    /// until the plan is done or the loop has finished.
    pub(crate) fn work(&self) {
        loop {
            let mut state = self.lock();
            let index = loop {
                if state.done {
                    return;
                }
                let Some(&(index, gate)) = self.plan.get(state.next) else {
                    return;
                };
                if index < state.current || state.slots.contains_key(&index) {
                    // The loop got there first.
                    state.next += 1;
                    continue;
                }
                if state.current >= gate && index < state.current + stage_ahead() {
                    state.next += 1;
                    break index;
                }
                state = self.wait(&self.window, state);
            };
            state.slots.insert(index, Slot::Claimed);
            // The next entry may be open too: pass the turn on.
            let more = self.open(&state, state.next);
            drop(state);
            if more {
                self.window.notify_one();
            }
            // A panic in a provider must not leave the loop waiting.
            let staged = catch_unwind(AssertUnwindSafe(|| self.stage(index)))
                .ok()
                .flatten();
            let mut state = self.lock();
            state.slots.insert(index, Slot::Ready(staged));
            let waiting = state.waiting == Some(index);
            drop(state);
            if waiting {
                self.staged.notify_one();
            }
        }
    }

    fn stage(&self, index: usize) -> Option<Staging> {
        let bound = self.observations.bound(index)?;
        self.observations
            .peek(index, |observed| {
                let diff = bound.provider.plan(&bound.declared, observed);
                match diff.action() {
                    Action::Create | Action::Update | Action::Replace => bound
                        .provider
                        .stage(self.host, &bound.declared, observed, &diff)
                        .ok(),
                    Action::None | Action::Remove => None,
                }
            })
            .flatten()
    }

    /// The loop is at `index` (everything before it finished): the copy
    /// staged for it, if any (waiting for a worker that is staging it).
    pub(crate) fn take(&self, index: usize) -> Option<Staging> {
        let mut state = self.lock();
        state.current = index;
        // The window moved by one: one more entry may be open.
        if self.open(&state, state.next) {
            self.window.notify_one();
        }
        if !self.planned.contains(&index) {
            return None;
        }
        loop {
            match state.slots.remove(&index) {
                None => {
                    // No worker has it: the loop stages it (and the
                    // workers skip it).
                    state.slots.insert(index, Slot::Ready(None));
                    return None;
                }
                Some(Slot::Ready(staged)) => {
                    // Left behind so a worker does not claim it again.
                    state.slots.insert(index, Slot::Ready(None));
                    return staged;
                }
                Some(Slot::Claimed) => {
                    state.slots.insert(index, Slot::Claimed);
                    state.waiting = Some(index);
                    state = self.wait(&self.staged, state);
                    state.waiting = None;
                }
            }
        }
    }

    /// Stops the workers when dropped (the loop has finished, or
    /// unwinds); copies nobody took are dropped, so removed, with `self`.
    pub(crate) fn stop_on_drop(&self) -> StopOnDrop<'_, 'p, 'a> {
        StopOnDrop(self)
    }
}

/// See [`Ahead::stop_on_drop`].
pub(crate) struct StopOnDrop<'x, 'p, 'a>(&'x Ahead<'p, 'a>);

impl Drop for StopOnDrop<'_, '_, '_> {
    fn drop(&mut self) {
        self.0.lock().done = true;
        self.0.window.notify_all();
        self.0.staged.notify_all();
    }
}

/// Whether the resource at `index` writes something as observed: only
/// those are worth a worker (a converged pass, most passes on a quiet
/// host, starts none and plans nothing twice).
fn will_write(observations: &Observations<'_>, index: usize) -> bool {
    let Some(bound) = observations.bound(index) else {
        return false;
    };
    observations
        .peek(index, |observed| {
            matches!(
                bound.provider.plan(&bound.declared, observed).action(),
                Action::Create | Action::Update | Action::Replace
            )
        })
        .unwrap_or(false)
}
