//! Whether a commit is signed by someone this host trusts.
//!
//! SSH signatures (git's `gpg.format=ssh`) are checked with `ssh-keygen -Y`
//! against an `allowed_signers` file, as `git verify-commit` does with
//! `gpg.ssh.allowedSignersFile`, in three steps that each say why they
//! refuse: the signature must match the commit at all (`check-novalidate`:
//! else the commit was altered after it was signed), its key must belong to
//! a principal of `allowed_signers` who may sign now (`find-principals`: an
//! unknown key, or one outside its `valid-after`/`valid-before` window), and
//! the full `verify` for that principal in the `git` namespace must pass
//! (namespaces, and the revocation list when one is configured). One
//! difference from git, on purpose: validity is judged at the time of the
//! pull, not at the commit's date, because the date is written by whoever
//! holds the key, and a stolen key that expired must not be able to sign a
//! commit dated before its expiry.
//!
//! OpenPGP signatures are checked, when a keyring is configured, with
//! `gpgv`, which treats every key of the keyring as trusted: the signature
//! must be good and made by a key that is neither expired nor revoked.
//!
//! The trusted files are read once (their owner and mode checked) and the
//! tools are given private copies, so what was checked is what they read.
//! This module must not decide anything but the signature: ancestry and
//! deployment are `pull`'s.

use std::ffi::OsStr;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use datum_host::PrivateDir;
use datum_host::command::{self, CommandOutput, CommandSpec};

use crate::commit::{SignatureKind, Signed};
use crate::error::{PullError, Reason};

/// How long `ssh-keygen` or `gpgv` may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// The namespace git signs commits in.
const NAMESPACE: &str = "git";

/// A file the host trusts, as read (after its owner and mode were checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustFile {
    /// Where it was read from, for messages.
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

/// What signatures the host accepts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TrustRoots {
    /// `allowed_signers`, in `ssh-keygen`'s format, for SSH signatures.
    pub allowed_signers: Option<TrustFile>,
    /// Revoked keys (a KRL or public keys), checked with SSH signatures.
    pub revoked_keys: Option<TrustFile>,
    /// An exported OpenPGP keyring (`gpg --export`), for OpenPGP signatures.
    pub openpgp_keyring: Option<TrustFile>,
}

/// Who signed a commit the host trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub kind: SignatureKind,
    /// The principal (`allowed_signers`) or user id (OpenPGP).
    pub signer: String,
    /// The key's fingerprint (`SHA256:...` for SSH).
    pub key: String,
}

/// Checks a commit's signature. `scratch` is a private folder the tools'
/// inputs are written to (and removed from).
pub fn verify(
    signed: Option<&Signed>,
    roots: &TrustRoots,
    scratch: &PrivateDir,
) -> Result<Verified, Refused> {
    let Some(signed) = signed else {
        return Err(Refused::Reason(Reason::Unsigned));
    };
    match signed.kind {
        SignatureKind::Ssh => match &roots.allowed_signers {
            Some(allowed) => ssh(signed, allowed, roots.revoked_keys.as_ref(), scratch),
            None => Err(Refused::Reason(Reason::NoTrustFor {
                kind: signed.kind.word(),
                needs: "allowed_signers",
            })),
        },
        SignatureKind::OpenPgp => match &roots.openpgp_keyring {
            Some(keyring) => openpgp(signed, keyring, scratch),
            None => Err(Refused::Reason(Reason::NoTrustFor {
                kind: signed.kind.word(),
                needs: "openpgp_keyring",
            })),
        },
        SignatureKind::X509 | SignatureKind::Unknown => Err(Refused::Reason(Reason::NoTrustFor {
            kind: signed.kind.word(),
            needs: "a supported signature (SSH or OpenPGP)",
        })),
    }
}

/// Why verification said no: a refusal of the commit, or a failure to
/// verify at all (a missing tool, an unwritable scratch folder), which is
/// not the commit's fault but is refused just the same.
#[derive(Debug)]
pub enum Refused {
    Reason(Reason),
    Failed(PullError),
}

impl From<datum_host::HostError> for Refused {
    fn from(e: datum_host::HostError) -> Self {
        Refused::Failed(PullError::Host(e))
    }
}

/// Inputs written to the scratch folder, removed when dropped.
struct Scratch<'a> {
    folder: &'a PrivateDir,
    names: Vec<&'static str>,
}

impl<'a> Scratch<'a> {
    fn new(folder: &'a PrivateDir) -> Self {
        Self {
            folder,
            names: Vec::new(),
        }
    }

    fn put(&mut self, name: &'static str, bytes: &[u8]) -> Result<PathBuf, Refused> {
        self.folder.dir().entry(OsStr::new(name)).remove_all()?;
        let mut file = self.folder.create_new(name, 0o600)?;
        let path = self.folder.file_path(name);
        file.write_all(bytes)
            .map_err(|e| datum_host::HostError::io("write", &path, e))?;
        self.names.push(name);
        Ok(path)
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = self.folder.remove(name);
        }
    }
}

fn run(spec: CommandSpec) -> Result<CommandOutput, Refused> {
    let spec = spec.timeout(TOOL_TIMEOUT);
    let out = command::run(&spec).map_err(|e| {
        Refused::Failed(PullError::Tool {
            tool: spec.program.clone(),
            detail: e.to_string(),
        })
    })?;
    if out.timed_out {
        return Err(Refused::Failed(PullError::Tool {
            tool: spec.program.clone(),
            detail: format!("it did not finish within {TOOL_TIMEOUT:?}"),
        }));
    }
    Ok(out)
}

/// The message lines of a tool's output, with the scratch copy's path
/// replaced by the trusted file's own.
fn said(out: &CommandOutput, scratch: &Path, shown: &Path) -> String {
    let mut text = format!("{}\n{}", out.stderr.text(), out.stdout.text());
    text = text.replace(&scratch.display().to_string(), &shown.display().to_string());
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "Could not verify signature.")
        .map(crate::git::defuse)
        .collect::<Vec<_>>()
        .join("; ")
}

fn ssh(
    signed: &Signed,
    allowed: &TrustFile,
    revoked: Option<&TrustFile>,
    folder: &PrivateDir,
) -> Result<Verified, Refused> {
    let mut scratch = Scratch::new(folder);
    let sig = scratch.put("commit.sig", &signed.signature)?;
    let signers = scratch.put("allowed_signers", &allowed.bytes)?;

    // 1. Does the signature match the commit at all?
    let out = run(CommandSpec::new("ssh-keygen")
        .args(["-Y", "check-novalidate", "-n", NAMESPACE, "-s"])
        .arg(&sig)
        .input(signed.payload.clone()))?;
    if !out.success() {
        return Err(Refused::Reason(Reason::BadSignature {
            detail: said(&out, &signers, &allowed.path),
        }));
    }
    let key = fingerprint(&out.stdout.text()).unwrap_or_else(|| "(unknown key)".to_owned());

    // 2. Whose key is it, and may it sign now?
    let out = run(CommandSpec::new("ssh-keygen")
        .args(["-Y", "find-principals", "-s"])
        .arg(&sig)
        .arg("-f")
        .arg(&signers))?;
    let principal = out
        .stdout
        .text()
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned);
    let Some(principal) = principal.filter(|_| out.success()) else {
        let detail = said(&out, &signers, &allowed.path);
        let reason = if detail.contains("key has expired") {
            Reason::ExpiredKey { key, detail }
        } else if detail.contains("not yet valid") {
            Reason::KeyNotYetValid { key, detail }
        } else {
            Reason::UnknownSigner {
                key,
                allowed_signers: allowed.path.clone(),
            }
        };
        return Err(Refused::Reason(reason));
    };

    // 3. The full verification for that principal.
    let verify = |revoked_path: Option<&Path>| {
        let mut spec = CommandSpec::new("ssh-keygen")
            .args(["-Y", "verify", "-n", NAMESPACE, "-f"])
            .arg(&signers)
            .arg("-I")
            .arg(&principal)
            .arg("-s")
            .arg(&sig)
            .input(signed.payload.clone());
        if let Some(r) = revoked_path {
            spec = spec.arg("-r").arg(r);
        }
        run(spec)
    };
    let revoked_path = match revoked {
        Some(r) => Some(scratch.put("revoked_keys", &r.bytes)?),
        None => None,
    };
    let out = verify(revoked_path.as_deref())?;
    if out.success() {
        return Ok(Verified {
            kind: SignatureKind::Ssh,
            signer: principal,
            key,
        });
    }
    let detail = said(&out, &signers, &allowed.path);
    let reason = if detail.contains("not permitted for use in signature namespace") {
        Reason::NotForGit {
            signer: principal,
            key,
        }
    } else if let Some((path, r)) = revoked_path.as_deref().zip(revoked)
        && verify(None)?.success()
    {
        // ssh-keygen says the same when the list revokes the key and when
        // it cannot read the list at all: a list it cannot read refuses a
        // key nobody could have revoked too.
        if !revocation_list_reads(&mut scratch, path)? {
            return Err(Refused::Failed(PullError::Config(
                crate::error::ConfigError::Missing(format!(
                    "the revocation list {} cannot be used: ssh-keygen refuses every signature with it, even one by a key made just now, so it cannot tell whether {principal}'s key ({key}) is revoked; it must be a KRL (ssh-keygen -k) or public keys, one per line as in a .pub file; nothing was changed",
                    r.path.display()
                )),
            )));
        }
        Reason::RevokedKey {
            signer: principal,
            key,
            revoked_keys: revoked.map(|r| r.path.clone()).unwrap_or_default(),
        }
    } else {
        Reason::BadSignature { detail }
    };
    Err(Refused::Reason(reason))
}

/// Whether `ssh-keygen` can read the revocation list at `revoked`: a
/// signature by a key made just now (which no list can name) must verify
/// with it.
fn revocation_list_reads(scratch: &mut Scratch<'_>, revoked: &Path) -> Result<bool, Refused> {
    const PROBE: &[u8] = b"datum pull: can the revocation list be read?\n";
    let tool = |detail: String| {
        Refused::Failed(PullError::Tool {
            tool: "ssh-keygen".to_owned(),
            detail,
        })
    };
    for name in ["probe", "probe.pub"] {
        scratch.folder.dir().entry(OsStr::new(name)).remove_all()?;
        scratch.names.push(name);
    }
    let key = scratch.folder.file_path("probe");
    let out = run(CommandSpec::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "probe", "-f"])
        .arg(&key))?;
    if !out.success() {
        return Err(tool(format!(
            "making a probe key: {}",
            said(&out, &key, &key)
        )));
    }
    let out = run(CommandSpec::new("ssh-keygen")
        .args(["-Y", "sign", "-n", NAMESPACE, "-f"])
        .arg(&key)
        .input(PROBE.to_vec()))?;
    if !out.success() {
        return Err(tool(format!(
            "signing with a probe key: {}",
            said(&out, &key, &key)
        )));
    }
    let sig = scratch.put("probe.sig", &out.stdout.bytes)?;
    let public = scratch.folder.dir().entry(OsStr::new("probe.pub")).read()?;
    let public: Vec<&str> = std::str::from_utf8(&public)
        .unwrap_or_default()
        .split_whitespace()
        .take(2)
        .collect();
    let signers = scratch.put(
        "probe_signers",
        format!("probe {}\n", public.join(" ")).as_bytes(),
    )?;
    let verify = |with: Option<&Path>| {
        let mut spec = CommandSpec::new("ssh-keygen")
            .args(["-Y", "verify", "-n", NAMESPACE, "-f"])
            .arg(&signers)
            .args(["-I", "probe", "-s"])
            .arg(&sig)
            .input(PROBE.to_vec());
        if let Some(r) = with {
            spec = spec.arg("-r").arg(r);
        }
        run(spec)
    };
    let out = verify(None)?;
    if !out.success() {
        return Err(tool(format!(
            "verifying a probe signature: {}",
            said(&out, &signers, &signers)
        )));
    }
    Ok(verify(Some(revoked))?.success())
}

/// `SHA256:...` from `Good "git" signature ... with ED25519 key SHA256:...`.
fn fingerprint(text: &str) -> Option<String> {
    let at = text.find("SHA256:")?;
    let fp: String = text[at..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    let kind = text[..at]
        .split_whitespace()
        .rev()
        .nth(1)
        .map(str::to_owned)
        .unwrap_or_default();
    Some(if kind.is_empty() {
        fp
    } else {
        format!("{kind} {fp}")
    })
}

fn openpgp(signed: &Signed, keyring: &TrustFile, folder: &PrivateDir) -> Result<Verified, Refused> {
    let mut scratch = Scratch::new(folder);
    let sig = scratch.put("commit.asc", &signed.signature)?;
    let payload = scratch.put("commit.payload", &signed.payload)?;
    let ring = scratch.put("trusted.gpg", &keyring.bytes)?;
    // gpgv wants a home of its own; an empty private one.
    folder.dir().entry(OsStr::new("gnupg")).remove_all()?;
    let home = folder.subdir("gnupg", true)?.ok_or_else(|| {
        datum_host::HostError::io(
            "create directory",
            folder.file_path("gnupg"),
            std::io::ErrorKind::NotFound.into(),
        )
    })?;
    let home_path = home.path().to_path_buf();
    let out = run(CommandSpec::new("gpgv")
        .arg("--homedir")
        .arg(&home_path)
        .arg("--keyring")
        .arg(&ring)
        .args(["--status-fd", "1"])
        .arg(&sig)
        .arg(&payload));
    let _ = folder.dir().entry(OsStr::new("gnupg")).remove_all();
    let out = out?;
    let status = out.stdout.text();
    let line = |tag: &str| {
        status
            .lines()
            .filter_map(|l| l.strip_prefix("[GNUPG:] "))
            .find(|l| l.split_whitespace().next() == Some(tag))
            .map(str::to_owned)
    };
    let rest = |l: &str, skip: usize| {
        l.split_whitespace()
            .skip(skip)
            .collect::<Vec<_>>()
            .join(" ")
    };
    let key = line("VALIDSIG")
        .and_then(|l| l.split_whitespace().last().map(str::to_owned))
        .or_else(|| line("ERRSIG").map(|l| rest(&l, 1)))
        .unwrap_or_else(|| "(unknown key)".to_owned());
    let detail = said(&out, &ring, &keyring.path);
    if let Some(l) = line("EXPKEYSIG") {
        return Err(Refused::Reason(Reason::ExpiredKey {
            key,
            detail: format!("OpenPGP key of {} has expired", rest(&l, 2)),
        }));
    }
    if let Some(l) = line("REVKEYSIG") {
        return Err(Refused::Reason(Reason::RevokedKey {
            signer: rest(&l, 2),
            key,
            revoked_keys: keyring.path.clone(),
        }));
    }
    if line("EXPSIG").is_some() || line("BADSIG").is_some() {
        return Err(Refused::Reason(Reason::BadSignature { detail }));
    }
    if line("NO_PUBKEY").is_some() || line("ERRSIG").is_some() {
        return Err(Refused::Reason(Reason::UnknownSigner {
            key,
            allowed_signers: keyring.path.clone(),
        }));
    }
    match (line("GOODSIG"), line("VALIDSIG"), out.success()) {
        (Some(good), Some(_), true) => Ok(Verified {
            kind: SignatureKind::OpenPgp,
            signer: rest(&good, 2),
            key,
        }),
        _ => Err(Refused::Reason(Reason::BadSignature { detail })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_read_from_ssh_keygen() {
        assert_eq!(
            fingerprint("Good \"git\" signature with ED25519 key SHA256:KMJefdyk/+x\n").as_deref(),
            Some("ED25519 SHA256:KMJefdyk/+x")
        );
        assert_eq!(
            fingerprint("Good \"git\" signature for a@b with RSA key SHA256:abc").as_deref(),
            Some("RSA SHA256:abc")
        );
        assert_eq!(fingerprint("nothing"), None);
    }

    #[test]
    fn a_commit_without_a_signature_or_without_a_trust_root_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let folder = PrivateDir::open_path(dir.path(), false).unwrap().unwrap();
        let roots = TrustRoots::default();
        assert!(matches!(
            verify(None, &roots, &folder),
            Err(Refused::Reason(Reason::Unsigned))
        ));
        let signed = Signed {
            kind: SignatureKind::Ssh,
            signature: b"-----BEGIN SSH SIGNATURE-----\n".to_vec(),
            payload: b"x".to_vec(),
        };
        assert!(matches!(
            verify(Some(&signed), &roots, &folder),
            Err(Refused::Reason(Reason::NoTrustFor { .. }))
        ));
        let x509 = Signed {
            kind: SignatureKind::X509,
            ..signed
        };
        assert!(matches!(
            verify(Some(&x509), &roots, &folder),
            Err(Refused::Reason(Reason::NoTrustFor { .. }))
        ));
    }
}
