//! How many file descriptors this process's table has room for: the one
//! setting Datum's binary makes before it starts a thread
//! ([`make_room_before_threads`]); and how many the server may open
//! ([`take_hard_open_files_limit`]); and how a pass shares the limit it was
//! given ([`Budget`]). A pass does not raise its limit: it shares it between
//! its folder handles (the host's folder cache), the folders owed an fsync
//! and the copies staged ahead, and the programs it starts inherit the
//! limit it was given.
//!
//! Owns: those settings. Must not: open, keep or close anything of its own
//! beyond the moment it takes.

/// Descriptors left out of [`Budget`] for everything a pass holds besides
/// its folder handles, folders owed an fsync, copies staged ahead and a Tree
/// walk's folders: the state store and its journal, logs, standard streams,
/// pipes to programs, the files a scan's workers are hashing.
pub const RESERVE: u64 = 64;

/// The most folders kept open by the host's folder cache: the 100,000-File
/// estate of the scaling benchmark is in about 1,000 folders.
pub const FOLDERS_MOST: usize = 4096;
/// The most folders owed a deferred fsync at once.
pub const PENDING_MOST: usize = 256;
/// The most copies staged ahead of a pass's loop at once.
pub const STAGE_AHEAD_MOST: usize = 128;
/// The most folders a Tree walk holds open at once.
pub const WALK_MOST: usize = 4096;

/// How a pass shares the descriptors its soft limit of open files allows
/// between the four things that hold many of them: the folder cache, the
/// folders owed an fsync (`crate::Durability`), the copies staged ahead
/// (the engine's `ahead.rs`, two descriptors each) and the folders a Tree
/// walk holds open (`crate::tree_scan`'s walk, the Tree provider's way down
/// its folders). Of the soft limit less [`RESERVE`], a quarter each goes to
/// the cache and the fsync backlog, an eighth of copies (a quarter in
/// descriptors) to staging ahead and an eighth to a walk, so the four
/// together stay under seven eighths of it; each has a floor (16, 16, 8, 8)
/// and the former fixed values as its ceiling. Walks nested in one another
/// on a thread share the walk's eighth: one inside another takes what the
/// outer ones left, and at least half of it (`crate::way::Way::new`), so
/// the Tree provider's three (its folders on the way, the purge's listing
/// below them, `holds_excluded` in that) hold at most twice the walk's
/// share, and the four at most the soft limit less [`RESERVE`] (each took
/// a whole share before: three, past it). At a soft limit of 1,024
/// that is 240/240/120/120, at 512 112/112/56/56, at 256 48/48/24/24, and
/// at 128, the fewest a pass is given ([`FEWEST_OPEN_FILES`]), the floors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Folders the host's folder cache keeps open.
    pub folders: usize,
    /// Folders owed an fsync at once.
    pub pending: usize,
    /// Copies staged ahead at once.
    pub stage_ahead: usize,
    /// Folders a Tree walk holds open at once.
    pub walk: usize,
}

impl Budget {
    /// The budget for a soft limit of `soft` open files (`None`: unlimited).
    pub fn for_soft_limit(soft: Option<u64>) -> Self {
        let Some(soft) = soft else {
            return Self {
                folders: FOLDERS_MOST,
                pending: PENDING_MOST,
                stage_ahead: STAGE_AHEAD_MOST,
                walk: WALK_MOST,
            };
        };
        let budget = soft.saturating_sub(RESERVE);
        let share = |divisor: u64, fewest: usize, most: usize| {
            usize::try_from(budget / divisor)
                .unwrap_or(most)
                .clamp(fewest, most)
        };
        Self {
            folders: share(4, 16, FOLDERS_MOST),
            pending: share(4, 16, PENDING_MOST),
            stage_ahead: share(8, 8, STAGE_AHEAD_MOST),
            walk: share(8, 8, WALK_MOST),
        }
    }

    /// The budget of this process: its soft limit read the first time it is
    /// asked for (a pass never changes its limit: the programs it starts
    /// inherit the one it was given).
    pub fn of_this_process() -> Self {
        static BUDGET: std::sync::OnceLock<Budget> = std::sync::OnceLock::new();
        *BUDGET.get_or_init(|| {
            let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
            Self::for_soft_limit(limit.current)
        })
    }
}

/// The fewest open files a pass may be given: [`RESERVE`] and every share's
/// floor in [`Budget`] (16 folders, 16 folders owed an fsync, 8 copies of two
/// descriptors, 8 folders of a walk: 56) fit in it. Below, the floors take
/// more than the limit leaves, and a pass ran out part-way ('Too many open
/// files' on some writes, others done: under 48, 6 of 601 resources
/// failed); [`enough_for_a_pass`] refuses it before anything is done.
pub const FEWEST_OPEN_FILES: u64 = 128;

/// A soft limit of open files too low for a pass ([`FEWEST_OPEN_FILES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the soft limit of open files is {soft}, below the {FEWEST_OPEN_FILES} a pass needs (its folder handles, the folders owed an fsync, the copies staged ahead, a Tree's walk, the state store and the programs it runs): nothing was done; raise the limit to at least {FEWEST_OPEN_FILES} (`ulimit -n {FEWEST_OPEN_FILES}`, or LimitNOFILE= in a systemd unit) and run it again"
)]
pub struct TooFewOpenFiles {
    /// The soft limit this process was given.
    pub soft: u64,
}

/// Refuses a soft limit of open files below [`FEWEST_OPEN_FILES`], so that
/// a pass fails closed before it reads or writes anything rather than part
/// of the way through its writes.
pub fn enough_for_a_pass() -> Result<(), TooFewOpenFiles> {
    enough_for(rustix::process::getrlimit(rustix::process::Resource::Nofile).current)
}

fn enough_for(soft: Option<u64>) -> Result<(), TooFewOpenFiles> {
    match soft {
        Some(soft) if soft < FEWEST_OPEN_FILES => Err(TooFewOpenFiles { soft }),
        _ => Ok(()),
    }
}

/// Descriptors a pass usually holds at most (its folder handles: one per
/// directory of a 20,000-file estate is about 200).
pub const ROOM: i32 = 1024;

/// Grows the descriptor table to hold `room` descriptors now, while the
/// process has one thread. The kernel grows the table by replacing it, and
/// once threads share it each replacement waits for an RCU grace period
/// (`expand_files` → `synchronize_rcu`): a metadata pass whose workers open
/// the 200 folders of an estate passed 64 and 128 descriptors on those
/// threads and slept 5-15 ms each time, its wall time a quarter longer
/// than its CPU time. Taking a descriptor numbered `room - 1` (a duplicate
/// of standard input, closed again at once) grows it while nobody waits.
/// Where that is refused (a descriptor limit below `room`, no standard
/// input) nothing changes: the table grows later, as before.
pub fn make_room_before_threads(room: i32) {
    use std::os::fd::AsFd as _;
    let stdin = std::io::stdin();
    // Dropped at once: only the table's size stays.
    let _ = rustix::io::fcntl_dupfd_cloexec(stdin.as_fd(), room.saturating_sub(1));
}

/// The most descriptors [`take_hard_open_files_limit`] asks for: Linux's
/// default `fs.nr_open`, above which the kernel refuses any limit.
const OPEN_FILES_MOST: u64 = 1 << 20;

/// Raises this process's soft limit of open files to its hard limit (at
/// most 2^20, Linux's default `fs.nr_open`), as a server that holds one descriptor per
/// connection must: systemd starts a service with a soft limit of 1,024
/// (and a hard one of 524,288), which a thousand idle connections use up.
/// Returns the soft limit in force afterwards; where the kernel refuses,
/// nothing changes.
pub fn take_hard_open_files_limit() -> Option<u64> {
    raise_open_files_limit(OPEN_FILES_MOST)
}

/// Raises this process's soft limit of open files to `most`, or to its hard
/// limit if that is lower; a soft limit already higher stays. Returns the soft
/// limit in force afterwards; where the kernel refuses, nothing changes.
fn raise_open_files_limit(most: u64) -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let wanted = limit.maximum.unwrap_or(u64::MAX).min(most);
    if limit.current.is_some_and(|soft| soft < wanted) {
        let raised = rustix::process::Rlimit {
            current: Some(wanted),
            maximum: limit.maximum,
        };
        let _ = setrlimit(Resource::Nofile, raised);
    }
    getrlimit(Resource::Nofile).current
}

#[cfg(test)]
mod tests {
    use super::Budget;

    #[test]
    fn the_budget_shares_the_soft_limit_less_a_reserve() {
        let at = |soft| {
            let b = Budget::for_soft_limit(soft);
            (b.folders, b.pending, b.stage_ahead, b.walk)
        };
        assert_eq!(at(Some(1024)), (240, 240, 120, 120));
        assert_eq!(at(Some(512)), (112, 112, 56, 56));
        assert_eq!(at(Some(256)), (48, 48, 24, 24));
        // Floors below a limit that leaves little or nothing after the reserve.
        assert_eq!(at(Some(128)), (16, 16, 8, 8));
        assert_eq!(at(Some(10)), (16, 16, 8, 8));
        // Ceilings: the former fixed values.
        assert_eq!(at(Some(1 << 16)), (4096, 256, 128, 4096));
        assert_eq!(at(Some(u64::MAX)), (4096, 256, 128, 4096));
        assert_eq!(at(None), (4096, 256, 128, 4096));
        // The four stay within the budget: a quarter, a quarter, an eighth
        // of copies of two descriptors each and an eighth.
        // With walks nested three deep on a thread holding at most twice
        // the walk's share (`way::tests::a_walk_inside_another_takes_what_it_left`),
        // the four stay within the limit less the reserve.
        for soft in [super::FEWEST_OPEN_FILES, 200, 256, 384, 512, 1024, 4096] {
            let b = Budget::for_soft_limit(Some(soft));
            let held = b.folders + b.pending + 2 * b.stage_ahead + b.walk;
            assert!(held as u64 <= soft - super::RESERVE, "{soft}: {b:?}");
            assert!(
                (held + b.walk) as u64 <= soft - super::RESERVE,
                "{soft}: {b:?}"
            );
        }
    }

    #[test]
    fn a_limit_below_the_reserve_and_the_floors_is_refused() {
        use super::{FEWEST_OPEN_FILES, TooFewOpenFiles, enough_for};
        // The floors are what a limit below it would be given anyway.
        let floors = Budget::for_soft_limit(Some(0));
        let held = floors.folders + floors.pending + 2 * floors.stage_ahead + floors.walk;
        assert!(super::RESERVE + held as u64 <= FEWEST_OPEN_FILES);
        assert_eq!(enough_for(Some(127)), Err(TooFewOpenFiles { soft: 127 }));
        assert_eq!(enough_for(Some(0)), Err(TooFewOpenFiles { soft: 0 }));
        assert_eq!(enough_for(Some(128)), Ok(()));
        assert_eq!(enough_for(None), Ok(()));
        let said = TooFewOpenFiles { soft: 64 }.to_string();
        assert!(
            said.contains("is 64, below the 128") && said.contains("ulimit -n 128"),
            "{said}"
        );
    }

    /// The table's size is what /proc/self/status calls FDSize.
    fn table_size() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("FDSize")
    }

    #[test]
    fn the_table_has_room_and_no_descriptor_is_left_open() {
        // The descriptors numbered `room - 1` and up: the one taken for the
        // room, had it been left open, would be there. (Not a count of all:
        // other tests open and close files on other threads meanwhile.)
        let open_from = |first: usize| -> Vec<usize> {
            std::fs::read_dir("/proc/self/fd")
                .expect("fd")
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(|&fd| fd >= first)
                .collect()
        };
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        // Twice the table's size now, within the limit (CI's is 1024 or more).
        let room = (2 * table_size())
            .max(256)
            .min(usize::try_from(limit).unwrap_or(usize::MAX));
        assert!(
            room > table_size(),
            "a descriptor limit of {limit} leaves nothing to test"
        );
        assert_eq!(open_from(room - 1), Vec::<usize>::new());
        super::make_room_before_threads(i32::try_from(room).unwrap());
        assert!(table_size() >= room, "FDSize {} for {room}", table_size());
        assert_eq!(open_from(room - 1), Vec::<usize>::new());
    }
}
