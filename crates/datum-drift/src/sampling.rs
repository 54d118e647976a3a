//! Host sampling: which hosts get the deep (content) check in a pass.
//!
//! `datum check --sample 0.1 --pass-seed N` deep-checks a host when a hash of
//! its name and the seed falls under the fraction, and metadata-checks it
//! otherwise. The choice is deterministic (the same host, seed and fraction
//! always decide the same way), so a fleet that shares the seed of a pass
//! spreads the content reads evenly, and changing the seed each pass rotates
//! which hosts are read.
//!
//! The caveat, from the specification: sampling assumes drift is uniform
//! across hosts, and it is not. A bad declaration rolled out everywhere is
//! found by any sample; a manual edit on one host is found only when that
//! host is sampled: at a fraction of 0.1 that takes ten passes in
//! expectation. Sampling is for spreading cost, not a substitute for a
//! `critical` class checked in full on every host.
//!
//! Owns: [`deep_check`]. Must not: read the host.

use sha2::{Digest, Sha256};

/// Whether `host` gets the full content check in the pass seeded `seed`.
/// A fraction of 1 or more always does, 0 or less never does.
pub fn deep_check(host: &str, seed: u64, fraction: f64) -> bool {
    if fraction >= 1.0 {
        return true;
    }
    if fraction <= 0.0 || fraction.is_nan() {
        return false;
    }
    let mut h = Sha256::new();
    h.update(b"datum-sample1\0");
    h.update(host.as_bytes());
    h.update(b"\0");
    h.update(seed.to_le_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // A uniform point in [0, 1).
    let point = (u64::from_be_bytes(first) >> 11) as f64 / (1u64 << 53) as f64;
    point < fraction
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_close_to_the_fraction() {
        assert_eq!(deep_check("web-1", 7, 0.3), deep_check("web-1", 7, 0.3));
        let hosts: Vec<String> = (0..2000).map(|i| format!("host-{i}")).collect();
        let picked = hosts.iter().filter(|h| deep_check(h, 42, 0.25)).count();
        assert!((400..600).contains(&picked), "{picked}");
        // Another seed picks other hosts.
        let moved = hosts
            .iter()
            .filter(|h| deep_check(h, 42, 0.25) != deep_check(h, 43, 0.25))
            .count();
        assert!(moved > 300, "{moved}");
    }

    #[test]
    fn bounds() {
        assert!(deep_check("a", 1, 1.0));
        assert!(!deep_check("a", 1, 0.0));
        assert!(!deep_check("a", 1, f64::NAN));
    }
}
