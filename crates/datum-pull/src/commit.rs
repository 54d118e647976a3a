//! A raw git commit object: its headers, and its signature split from the
//! bytes the signature covers.
//!
//! A signed commit carries its signature in a `gpgsig` header (continuation
//! lines start with a space). What was signed is the object without that
//! header: the same split `git verify-commit` makes. A commit made in a
//! repository that also keeps its objects' SHA-256 form
//! (`extensions.compatObjectFormat`) is signed in both formats: `gpgsig`
//! over its SHA-1 form, `gpgsig-sha256` over the SHA-256 one, each over the
//! object without either header. As git does in a SHA-1 repository, the
//! `gpgsig` signature is the one verified and the other is left out of the
//! payload. Signature headers git never writes (two `gpgsig` or two
//! `gpgsig-sha256` headers, a `gpgsig` that is not one whole armoured
//! signature from its `-----BEGIN` line to its `-----END` line) make the
//! object [`Malformed`], refused here before any tool reads it rather than
//! passed on to look like a commit altered after it was signed. Owns only
//! this parsing; checking the signature is `verify`'s job.

/// What the signature of a commit is, from its armour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureKind {
    /// `-----BEGIN SSH SIGNATURE-----` (git's `gpg.format=ssh`).
    Ssh,
    /// `-----BEGIN PGP SIGNATURE-----`.
    OpenPgp,
    /// `-----BEGIN SIGNED MESSAGE-----` (gpgsm).
    X509,
    Unknown,
}

impl SignatureKind {
    pub fn word(self) -> &'static str {
        match self {
            SignatureKind::Ssh => "SSH",
            SignatureKind::OpenPgp => "OpenPGP",
            SignatureKind::X509 => "X.509",
            SignatureKind::Unknown => "unknown",
        }
    }
}

/// A commit's signature and the bytes it must cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub kind: SignatureKind,
    /// The armoured signature, one line per line.
    pub signature: Vec<u8>,
    /// The commit object without its `gpgsig` header.
    pub payload: Vec<u8>,
}

/// A commit object that cannot be read the way git writes them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the commit object is malformed: {0}")]
pub struct Malformed(pub String);

/// The parts of a commit's headers Datum uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub tree: String,
    pub parents: Vec<String>,
    /// The signature, when there is one.
    pub signed: Option<Signed>,
    /// Whether it also (or only) carries a signature over its SHA-256 form
    /// (`gpgsig-sha256`), which is never verified here.
    pub sha256_signature: bool,
}

/// The signature headers of SHA-1 and SHA-256 repositories.
const SIGNATURE: &[u8] = b"gpgsig";
const SIGNATURE_SHA256: &[u8] = b"gpgsig-sha256";

/// Reads a raw commit object (`git cat-file commit ID`).
pub fn parse(raw: &[u8]) -> Result<Commit, Malformed> {
    let header_end = find(raw, b"\n\n").map_or(raw.len(), |i| i + 1);
    let headers = &raw[..header_end];
    let mut tree = None;
    let mut parents = Vec::new();
    let mut signature: Option<Vec<u8>> = None;
    let mut sha256_signature = false;
    // Byte ranges of both signature headers' lines, to cut from the payload.
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    // Inside a signature header: whether its lines are the SHA-1 one's.
    let mut in_signature: Option<bool> = None;
    let mut offset = 0;
    for line in headers.split_inclusive(|b| *b == b'\n') {
        let start = offset;
        offset += line.len();
        let text = line.strip_suffix(b"\n").unwrap_or(line);
        if let Some(more) = text.strip_prefix(b" ") {
            if let Some(ours) = in_signature {
                if ours {
                    let sig = signature.get_or_insert_with(Vec::new);
                    sig.extend_from_slice(more);
                    sig.push(b'\n');
                }
                if let Some((_, end)) = cuts.last_mut() {
                    *end = offset;
                }
            }
            continue;
        }
        in_signature = None;
        let (name, value) = match find(text, b" ") {
            Some(i) => (&text[..i], &text[i + 1..]),
            None => (text, &b""[..]),
        };
        match name {
            b"tree" => tree = Some(hex_id(value, "tree")?),
            b"parent" => parents.push(hex_id(value, "parent")?),
            SIGNATURE => {
                if signature.is_some() {
                    return Err(Malformed(
                        "it has two gpgsig headers (git writes one)".to_owned(),
                    ));
                }
                let mut sig = value.to_vec();
                sig.push(b'\n');
                signature = Some(sig);
                cuts.push((start, offset));
                in_signature = Some(true);
            }
            SIGNATURE_SHA256 => {
                if sha256_signature {
                    return Err(Malformed(
                        "it has two gpgsig-sha256 headers (git writes one)".to_owned(),
                    ));
                }
                sha256_signature = true;
                cuts.push((start, offset));
                in_signature = Some(false);
            }
            _ => {}
        }
    }
    let tree = tree.ok_or_else(|| Malformed("it names no tree".to_owned()))?;
    if let Some(signature) = &signature {
        armoured(signature)?;
    }
    let signed = signature.map(|signature| {
        let mut payload = Vec::with_capacity(raw.len());
        let mut kept = 0;
        for (from, to) in &cuts {
            payload.extend_from_slice(&raw[kept..*from]);
            kept = *to;
        }
        payload.extend_from_slice(&raw[kept..]);
        Signed {
            kind: kind_of(&signature),
            signature,
            payload,
        }
    });
    Ok(Commit {
        tree,
        parents,
        signed,
        sha256_signature,
    })
}

/// Refuses a `gpgsig` header that is not one whole armoured signature, as
/// git writes it: a `-----BEGIN LABEL-----` line, and its `-----END
/// LABEL-----` line last. A header cut short (a line after the first not
/// begun with a space ends it) is said to be so, rather than left to the
/// tool, which can only say that the signature does not match.
fn armoured(signature: &[u8]) -> Result<(), Malformed> {
    let text = signature.strip_suffix(b"\n").unwrap_or(signature);
    let mut lines = text.split(|b| *b == b'\n');
    let label = lines
        .next()
        .and_then(|l| l.strip_prefix(b"-----BEGIN "))
        .and_then(|l| l.strip_suffix(b"-----"))
        .filter(|l| {
            !l.is_empty()
                && l.len() <= 64
                && l.iter()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b' ')
        })
        .ok_or_else(|| {
            Malformed(
                "its gpgsig header does not begin with an armour line (-----BEGIN ... SIGNATURE-----)"
                    .to_owned(),
            )
        })?;
    // `label` is upper-case letters, digits and blanks: shown as it is.
    let label = String::from_utf8_lossy(label);
    let end = format!("-----END {label}-----");
    // Blank lines after it, or blanks at its end, as some tools may write
    // and the signature tools read past, are no reason to refuse.
    let last = lines
        .rev()
        .map(<[u8]>::trim_ascii_end)
        .find(|l| !l.is_empty());
    if last == Some(end.as_bytes()) {
        Ok(())
    } else {
        Err(Malformed(format!(
            "its gpgsig header ends before its {end} line (every line of a signature after the first begins with a space)"
        )))
    }
}

fn kind_of(signature: &[u8]) -> SignatureKind {
    if signature.starts_with(b"-----BEGIN SSH SIGNATURE-----") {
        SignatureKind::Ssh
    } else if signature.starts_with(b"-----BEGIN PGP SIGNATURE-----") {
        SignatureKind::OpenPgp
    } else if signature.starts_with(b"-----BEGIN SIGNED MESSAGE-----") {
        SignatureKind::X509
    } else {
        SignatureKind::Unknown
    }
}

fn hex_id(value: &[u8], what: &str) -> Result<String, Malformed> {
    if value.len() == 40 && value.iter().all(u8::is_ascii_hexdigit) {
        Ok(String::from_utf8_lossy(value).to_ascii_lowercase())
    } else {
        Err(Malformed(format!("its {what} is not a SHA-1 object id")))
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Whether `text` is a full commit id (40 lowercase hex digits).
pub fn is_commit_id(text: &str) -> bool {
    text.len() == 40
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The first 12 digits of a commit id, as messages show it.
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
    const PARENT: &str = "8f3a0000000000000000000000000000000000aa";

    fn signed_object() -> Vec<u8> {
        format!(
            "tree {TREE}\nparent {PARENT}\nauthor A <a@x> 1 +0000\ncommitter A <a@x> 1 +0000\n\
             gpgsig -----BEGIN SSH SIGNATURE-----\n U1NIU0lH\n -----END SSH SIGNATURE-----\n\
             \nmessage with gpgsig in it\n gpgsig inside the message\n"
        )
        .into_bytes()
    }

    #[test]
    fn the_signature_is_cut_from_exactly_what_it_covers() {
        let c = parse(&signed_object()).unwrap();
        assert_eq!(c.tree, TREE);
        assert_eq!(c.parents, [PARENT]);
        let s = c.signed.unwrap();
        assert_eq!(s.kind, SignatureKind::Ssh);
        assert_eq!(
            s.signature,
            b"-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----\n"
        );
        let want = format!(
            "tree {TREE}\nparent {PARENT}\nauthor A <a@x> 1 +0000\ncommitter A <a@x> 1 +0000\n\
             \nmessage with gpgsig in it\n gpgsig inside the message\n"
        );
        assert_eq!(String::from_utf8(s.payload).unwrap(), want);
    }

    #[test]
    fn a_commit_signed_in_both_formats_is_verified_by_its_sha1_signature() {
        // As git 2.47 writes it with extensions.compatObjectFormat = sha256.
        let raw = format!(
            "tree {TREE}\nparent {PARENT}\nauthor A <a@x> 1 +0000\ncommitter A <a@x> 1 +0000\n\
             gpgsig -----BEGIN SSH SIGNATURE-----\n U0hBMQ==\n -----END SSH SIGNATURE-----\n\
             gpgsig-sha256 -----BEGIN SSH SIGNATURE-----\n U0hBMjU2\n -----END SSH SIGNATURE-----\n\
             \nmessage\n"
        );
        let c = parse(raw.as_bytes()).unwrap();
        assert!(c.sha256_signature);
        let s = c.signed.unwrap();
        assert_eq!(s.kind, SignatureKind::Ssh);
        assert_eq!(
            s.signature,
            b"-----BEGIN SSH SIGNATURE-----\nU0hBMQ==\n-----END SSH SIGNATURE-----\n"
        );
        // Neither signature is part of what was signed.
        let want = format!(
            "tree {TREE}\nparent {PARENT}\nauthor A <a@x> 1 +0000\ncommitter A <a@x> 1 +0000\n\nmessage\n"
        );
        assert_eq!(String::from_utf8(s.payload).unwrap(), want);
        // In the other order too.
        let swapped = format!(
            "tree {TREE}\ngpgsig-sha256 x\n y\ngpgsig -----BEGIN SSH SIGNATURE-----\n w\n \
             -----END SSH SIGNATURE-----\nauthor A <a@x> 1 +0000\n\nm\n"
        );
        let s = parse(swapped.as_bytes()).unwrap().signed.unwrap();
        assert_eq!(
            s.signature,
            b"-----BEGIN SSH SIGNATURE-----\nw\n-----END SSH SIGNATURE-----\n"
        );
        assert_eq!(
            String::from_utf8(s.payload).unwrap(),
            format!("tree {TREE}\nauthor A <a@x> 1 +0000\n\nm\n")
        );
    }

    #[test]
    fn signature_headers_git_never_writes_are_malformed() {
        let sig = "-----BEGIN SSH SIGNATURE-----\n U1NIU0lH\n -----END SSH SIGNATURE-----\n";
        let malformed = |headers: &str| {
            parse(format!("tree {TREE}\n{headers}author A <a@x> 1 +0000\n\nm\n").as_bytes())
                .unwrap_err()
                .0
        };
        for (headers, says) in [
            (
                format!("gpgsig {sig}gpgsig {sig}"),
                "it has two gpgsig headers",
            ),
            (
                format!("gpgsig {sig}gpgsig-sha256 {sig}gpgsig-sha256 {sig}"),
                "it has two gpgsig-sha256 headers",
            ),
            // Its last line not begun with a space: the header ends there.
            (
                sig.replacen(" -----END", "-----END", 1).replacen(
                    "-----BEGIN",
                    "gpgsig -----BEGIN",
                    1,
                ),
                "its gpgsig header ends before its -----END SSH SIGNATURE----- line",
            ),
            (
                "gpgsig -----BEGIN SSH SIGNATURE-----\n U1NIU0lH\n".to_owned(),
                "ends before its -----END SSH SIGNATURE----- line",
            ),
            (
                "gpgsig -----BEGIN SSH SIGNATURE-----\n U1NIU0lH\n -----END PGP SIGNATURE-----\n"
                    .to_owned(),
                "ends before its -----END SSH SIGNATURE----- line",
            ),
            (
                "gpgsig -----BEGIN SSH SIGNATURE-----\n".to_owned(),
                "ends before its -----END SSH SIGNATURE----- line",
            ),
            (
                "gpgsig U1NIU0lH\n -----END SSH SIGNATURE-----\n".to_owned(),
                "does not begin with an armour line",
            ),
            (
                "gpgsig -----BEGIN \x1b[2J-----\n x\n -----END \x1b[2J-----\n".to_owned(),
                "does not begin with an armour line",
            ),
        ] {
            let said = malformed(&headers);
            assert!(said.contains(says), "{headers:?}: {said}");
        }
        // Whole, in either order beside the SHA-256 one: taken; so is a
        // blank line after the END line, or blanks at its end.
        for headers in [
            format!("gpgsig {sig}"),
            format!("gpgsig {sig} \n \n"),
            sig.replacen("SIGNATURE-----\n", "SIGNATURE----- \n", 2)
                .replacen(
                    "-----BEGIN SSH SIGNATURE----- ",
                    "gpgsig -----BEGIN SSH SIGNATURE-----",
                    1,
                ),
            format!("gpgsig-sha256 {sig}gpgsig {sig}"),
            "gpgsig -----BEGIN SIGNED MESSAGE-----\n x\n -----END SIGNED MESSAGE-----\n".to_owned(),
        ] {
            let raw = format!("tree {TREE}\n{headers}author A <a@x> 1 +0000\n\nm\n");
            assert!(parse(raw.as_bytes()).unwrap().signed.is_some(), "{headers}");
        }
    }

    #[test]
    fn unsigned_odd_and_hostile_objects() {
        let unsigned = format!("tree {TREE}\nauthor A <a@x> 1 +0000\n\nmsg\n");
        let c = parse(unsigned.as_bytes()).unwrap();
        assert_eq!((c.signed, c.parents.len()), (None, 0));
        // A signature-looking line in the message is not a signature.
        let in_message = format!("tree {TREE}\n\ngpgsig -----BEGIN SSH SIGNATURE-----\n");
        assert_eq!(parse(in_message.as_bytes()).unwrap().signed, None);
        let twice = format!("tree {TREE}\ngpgsig a\ngpgsig b\n\nm\n");
        assert!(
            parse(twice.as_bytes())
                .unwrap_err()
                .0
                .contains("two gpgsig headers")
        );
        // A signature over the SHA-256 form alone: no signature to verify.
        let sha256 = format!("tree {TREE}\ngpgsig-sha256 a\n\nm\n");
        let c = parse(sha256.as_bytes()).unwrap();
        assert_eq!((c.signed, c.sha256_signature), (None, true));
        assert!(parse(b"author x\n\nm\n").is_err(), "no tree");
        assert!(parse(b"tree zz\n\nm\n").is_err());
        let pgp = format!(
            "tree {TREE}\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n x\n -----END PGP SIGNATURE-----\n\nm\n"
        );
        assert_eq!(
            parse(pgp.as_bytes()).unwrap().signed.unwrap().kind,
            SignatureKind::OpenPgp
        );
        assert!(is_commit_id(TREE) && !is_commit_id("ABC") && !is_commit_id(&TREE.to_uppercase()));
        assert_eq!(short(TREE), "4b825dc642cb");
    }
}
