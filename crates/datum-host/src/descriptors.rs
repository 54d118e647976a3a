//! How many file descriptors this process's table has room for: the one
//! setting Datum's binary makes before it starts a thread
//! ([`make_room_before_threads`]); and how many the server may open
//! ([`take_hard_open_files_limit`]). A pass does not raise its limit: it
//! keeps at most a quarter of it in folder handles (the host's folder
//! cache), and the programs it starts inherit the limit it was given.
//!
//! Owns: those settings. Must not: open, keep or close anything of its own
//! beyond the moment it takes.

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
