//! Whether the apply loop ever made a resource match (issue 14): drift is
//! what the apply loop did not produce, so `datum check` and the agent
//! report a resource never applied, whose last apply failed, or whose
//! declaration changed since its last verified apply, as `not_converged`
//! (with the reason) instead of as drift.

use datum_core::Resource;
use datum_store::{Store, StoreError};

/// Why `resource` is not converged (`None`: an apply verified its current
/// declaration). Read from the state store: an apply of this declaration
/// that failed and none verified says how it failed; otherwise no verified
/// apply at all means never applied, and a verified apply of another
/// declaration means the repository changed since (the differences are the
/// change `datum apply` still owes, not something that happened to the
/// host: a policy acting on them would accept or quarantine the
/// repository's own edit, or "revert" it into place).
///
/// A resource verified as declared now stays converged when a later apply
/// of the same declaration failed (a revert or corrective apply): what
/// differs is still drift, and its class's policy acts on it again (a
/// revert is retried, its flap limits bounding the retries) rather than
/// never again until someone runs `datum apply`.
pub fn why_not(store: &Store, resource: &Resource) -> Result<Option<String>, StoreError> {
    let verified = store.last_verified(&resource.id)?;
    if verified
        .as_ref()
        .is_some_and(|v| store.records(&v.declaration_hash, &resource.declaration_hash))
    {
        return Ok(None);
    }
    if let Some(f) = store.apply_failure(&resource.id)?
        && store.records(&f.declaration_hash, &resource.declaration_hash)
    {
        return Ok(Some(format!(
            "not converged: its last apply failed ({}): {}",
            f.phase, f.reason
        )));
    }
    // A sensitive resource's apply is recorded only by the host's keyed
    // digests (`Store::record_verified_of`): without a usable key nothing
    // of it is recorded, however often it is applied, and a record keyed
    // with another key (the key file made anew) may be of this very
    // declaration. Neither is "never applied" nor, for sure, a change.
    let keyed = |v: &datum_store::VerifiedRecord| {
        v.declaration_hash
            .starts_with(datum_core::digest::KEYED_PREFIX)
    };
    Ok(Some(match verified {
        _ if resource.sensitive && store.digest_key().is_none() => "not converged: this host's digest key cannot be read, and an apply of a sensitive resource is recorded only by its keyed digests, so none of its applies is recorded (restore `digest.key` beside the state store from a backup of this host, or remove it and run `datum apply`, which makes a new one: beside records keyed with the old one it refuses until run with --rebuild-state, which forgets them)".to_owned(),
        None => "not converged: never applied (`datum apply` converges it)".to_owned(),
        Some(v) if resource.sensitive && keyed(&v) => "not converged: its declaration changed since its last verified apply, or this host's digest key did (`datum apply` converges it)".to_owned(),
        Some(_) => "not converged: its declaration changed since its last verified apply (`datum apply` converges it)"
            .to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sensitive resource's apply is recorded only by the host's keyed
    /// digests: where the key cannot be read nothing of it is recorded, so
    /// it is not converged, but not "never applied" (an apply does not
    /// change that); the reason names the key. A record keyed with another
    /// key (the key file made anew) may be of this very declaration.
    #[test]
    fn a_sensitive_resource_without_a_usable_key_is_not_said_never_applied() {
        let mut secret = datum_testkit::fake::fake_file("s", "/s", "hunter2\n", &[]);
        secret.sensitive = true;
        secret.declaration_hash = "ef".repeat(32);
        let mut store = Store::open_in_memory().unwrap();
        store
            .record_verified_of(&secret.id, true, &secret.declaration_hash, None, 1_000)
            .unwrap();
        let why = why_not(&store, &secret).unwrap().unwrap();
        assert!(
            why.contains("digest key cannot be read") && !why.contains("never applied"),
            "{why}"
        );
        // Not sensitive, never applied: as before.
        let mut plain = secret.clone();
        plain.sensitive = false;
        let why = why_not(&store, &plain).unwrap().unwrap();
        assert!(why.contains("never applied"), "{why}");
        // Recorded under one key, read under another.
        store.set_digest_key(Some(datum_core::DigestKey::from_bytes([1; 32])));
        store
            .record_verified_of(&secret.id, true, &secret.declaration_hash, None, 1_000)
            .unwrap();
        assert_eq!(why_not(&store, &secret).unwrap(), None);
        store.set_digest_key(Some(datum_core::DigestKey::from_bytes([2; 32])));
        let why = why_not(&store, &secret).unwrap().unwrap();
        assert!(why.contains("or this host's digest key"), "{why}");
    }
}
