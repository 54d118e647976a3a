//! The process's allocator (mimalloc) and the one setting Datum changes:
//! how soon memory the program frees goes back to the system.
//!
//! mimalloc keeps freed memory for a while before it returns it (its
//! `purge_delay`: one second in this version), right for a loop that frees and
//! allocates again, and for a command that runs a second or two the peak of
//! everything it ever held. So:
//! - for the whole run, [`configure`] makes the delay [`RUN_PURGE_DELAY_MS`];
//! - while a compile runs, [`PromptPurge`] makes it zero: a compile builds and
//!   drops large transient structures (the YAML of every manifest, a Tree's
//!   packed folder pieces while they are joined) and goes on allocating.
//!
//! Measured side by side (docs/benchmarks.md, "Issue 17, 2026-12-04
//! evening"): the check of one Tree of 200,000 files that compiles it 64 ->
//! 46 MiB, `plan --recompile` of 20,000 Files 113 -> 84 MiB, a no-op apply
//! and a full check of 20,000 Files 6-8 MiB less; for 2-5 % more time
//! (CPU: `plan --recompile` +2.4 %, the full check +2.7 %). An
//! operator's `MIMALLOC_PURGE_DELAY` (or its old name) wins over both.
//!
//! The only `unsafe` in the workspace (`unsafe_code` is denied everywhere
//! else, and a test keeps it that way): two calls into mimalloc's option
//! table, which take and return plain integers. mimalloc's API lets a program
//! set options at run time; its own threads read them without locking, so one
//! may see the old delay for a moment, which only moves when memory is
//! returned.

// A check decodes, observes and drops tens of thousands of small values
// (resources, observations, paths) on several threads; mimalloc does that
// markedly faster than the system allocator (a metadata check of 20,000
// files 65 -> 55 ms, a full one 215 -> 195 ms here) for some more resident
// memory (27 -> 37 MiB and 34 -> 52 MiB; see docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its place in `mi_option_t`; the test
/// below reads the version's default through it).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The environment variables an operator sets the delay with: when either is
/// set, Datum leaves the delay alone.
const PURGE_DELAY_ENV: [&str; 2] = ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"];

/// The delay, in milliseconds, before freed memory goes back to the system
/// for the whole run: short enough that a command's peak is what it holds,
/// long enough that memory freed and allocated again within a step is not
/// returned and faulted in again (0 for the whole run cost the checks from
/// the snapshot 2-10 % of their time).
pub const RUN_PURGE_DELAY_MS: std::ffi::c_long = 10;

/// Sets the run's purge delay (before anything large is allocated), unless
/// the operator set one in the environment.
pub fn configure() {
    if !operator_set_delay() {
        set_purge_delay(RUN_PURGE_DELAY_MS);
    }
}

fn operator_set_delay() -> bool {
    PURGE_DELAY_ENV
        .iter()
        .any(|name| std::env::var_os(name).is_some())
}

/// Just before the process exits: nothing is returned to the system any
/// more. mimalloc's exit handler otherwise hands back every page freed
/// since its last purge, one `madvise` per stretch, the moment before the
/// exit returns them all (1 % of a metadata pass of 20,000 files).
pub fn before_exit() {
    if !operator_set_delay() {
        set_purge_delay(-1);
    }
}

/// While held, memory freed is returned to the system at once; the delay
/// before it is restored when the last one held is dropped (compiles may
/// overlap on threads of one process).
#[must_use = "the delay is restored when this is dropped"]
pub struct PromptPurge {
    counted: bool,
}

/// How many [`PromptPurge`]s are held, and the delay to restore after them.
static HELD: std::sync::Mutex<(usize, std::ffi::c_long)> = std::sync::Mutex::new((0, 0));

impl PromptPurge {
    pub fn start() -> Self {
        if operator_set_delay() {
            return Self { counted: false };
        }
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        if held.0 == 0 {
            held.1 = purge_delay();
            set_purge_delay(0);
        }
        held.0 += 1;
        Self { counted: true }
    }
}

impl Drop for PromptPurge {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        held.0 = held.0.saturating_sub(1);
        if held.0 == 0 {
            set_purge_delay(held.1);
        }
    }
}

#[allow(
    unsafe_code,
    reason = "mimalloc's option table: see the module documentation"
)]
fn purge_delay() -> std::ffi::c_long {
    // SAFETY: reads one entry of mimalloc's option table by a valid index
    // (the options were read from the environment when the process loaded);
    // no pointer is involved.
    unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) }
}

#[allow(
    unsafe_code,
    reason = "mimalloc's option table: see the module documentation"
)]
fn set_purge_delay(delay: std::ffi::c_long) {
    // SAFETY: writes one entry of mimalloc's option table by a valid index
    // (any value is allowed: negative means never); no pointer is involved.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, delay) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test for every step: the option is the process's, and tests run
    /// on threads of one process.
    #[test]
    fn the_run_and_a_compile_set_the_purge_delay_and_the_compile_restores_it() {
        if operator_set_delay() {
            // The operator's setting wins: nothing changes.
            let before = purge_delay();
            configure();
            drop(PromptPurge::start());
            assert_eq!(purge_delay(), before);
            return;
        }
        // The index is mimalloc's purge delay: this version's default is
        // one second (a wrong index reads another option's value).
        assert_eq!(purge_delay(), 1000);
        configure();
        assert_eq!(purge_delay(), RUN_PURGE_DELAY_MS);
        let prompt = PromptPurge::start();
        assert_eq!(purge_delay(), 0);
        // Two compiles at once: the delay comes back after the last.
        let (first, second) = (prompt, PromptPurge::start());
        drop(first);
        assert_eq!(purge_delay(), 0);
        drop(second);
        assert_eq!(purge_delay(), RUN_PURGE_DELAY_MS);
        set_purge_delay(1000);
    }

    /// Any mention of the lint in a source file (an `allow` or `expect` of
    /// it, however formatted) outside this one fails.
    #[test]
    fn no_other_code_in_the_workspace_allows_unsafe() {
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut found = Vec::new();
        let mut folders = vec![crates];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    if path.file_name().is_some_and(|n| n != "target") {
                        folders.push(path);
                    }
                } else if path.extension().is_some_and(|e| e == "rs")
                    && std::fs::read_to_string(&path)
                        .unwrap()
                        .contains(concat!("unsafe", "_code"))
                {
                    found.push(path);
                }
            }
        }
        let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/allocator.rs")
            .canonicalize()
            .unwrap();
        let found: Vec<_> = found.iter().map(|p| p.canonicalize().unwrap()).collect();
        assert_eq!(found, [here], "unsafe allowed outside the allocator module");
    }
}
