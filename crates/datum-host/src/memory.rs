//! How this process's memory is backed: the one process-wide setting Datum's binaries
//! make before they allocate ([`avoid_huge_pages`]).
//!
//! Owns: that setting. Must not: touch anything but the calling process.

/// Asks the kernel not to back this process's memory with transparent huge pages from now
/// on (`prctl(PR_SET_THP_DISABLE)`; children inherit it). `datum` and `driftwatch` call it
/// first thing: mimalloc advises its arena for huge pages, and where THP is `madvise` (the
/// default of many distributions) each 2 MiB region it touches then stays resident whole,
/// which made most of `datum fingerprint`'s peak, a quarter of `datum check`'s and 14 MiB
/// of `driftwatch report`'s, and cost the kernel time zeroing them (docs/benchmarks.md,
/// "Small pages"). Fails only on a kernel without the flag (before 3.15), where nothing
/// changes.
pub fn avoid_huge_pages() -> Result<(), std::io::Error> {
    rustix::thread::disable_transparent_huge_pages(true).map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_flag_is_set_for_the_process() {
        super::avoid_huge_pages().expect("prctl(PR_SET_THP_DISABLE)");
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        assert!(
            status
                .lines()
                .any(|l| l.split_whitespace().eq(["THP_enabled:", "0"])),
            "{status}"
        );
    }
}
