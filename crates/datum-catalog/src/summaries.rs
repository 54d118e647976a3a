//! What a check needs of every resource before deciding which to inspect,
//! for a whole catalogue at once: kept apart from the resources so that a
//! metadata pass which trusts every file never decodes one.
//!
//! Owns: that list and its written form in a snapshot's index. Must not:
//! hold anything a resource's own record holds (its fields, its content).
//!
//! The text of every summary (class, path, declaration hash, validator)
//! lives in one string and each summary keeps where its parts are in it:
//! read from a snapshot, 20,000 summaries were 100,000 strings allocated
//! one by one (a sixth of a metadata pass's CPU with the dropping of them),
//! now they are the ids' two strings each and one string for the rest.

use datum_core::{Resource, ResourceId};
use serde::{Deserialize, Serialize};

/// One resource's summary, borrowed from its [`Summaries`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary<'a> {
    pub id: &'a ResourceId,
    pub class: &'a str,
    /// The declared `path`, for resources that have one.
    pub path: Option<&'a str>,
    pub declaration_hash: &'a str,
    /// The validator the resource names (`datum check` looks for the live
    /// configuration of groups without decoding every resource).
    pub validate: Option<&'a str>,
}

impl<'a> Summary<'a> {
    /// The summary of `r` (what a summary holds is chosen here once).
    pub fn of(r: &'a Resource) -> Self {
        Summary {
            id: &r.id,
            class: &r.class,
            path: r.desired_str("path"),
            declaration_hash: &r.declaration_hash,
            validate: r.validate.as_deref(),
        }
    }
}

/// Where one summary's text is in [`Summaries::text`]: the class, path,
/// declaration hash and validator one after another, `ends` where each
/// stops (a part that is absent is empty, and `present` says so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parts {
    start: usize,
    ends: [usize; 4],
    present: u8,
}

const PATH: u8 = 1;
const VALIDATE: u8 = 2;

/// Every resource's [`Summary`], in the catalogue's (dependency) order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summaries {
    ids: Vec<ResourceId>,
    parts: Vec<Parts>,
    text: String,
}

impl Summaries {
    /// The summaries of `resources`, in their order.
    pub fn of<'r>(resources: impl IntoIterator<Item = &'r Resource>) -> Self {
        let mut all = Summaries::default();
        for r in resources {
            all.push(Summary::of(r));
        }
        all
    }

    /// Room for `count` summaries and `text` bytes of their text.
    fn with_capacity(count: usize, text: usize) -> Self {
        Summaries {
            ids: Vec::with_capacity(count),
            parts: Vec::with_capacity(count),
            text: String::with_capacity(text),
        }
    }

    /// Adds `s` (its id copied, its text appended) at the end.
    pub fn push(&mut self, s: Summary<'_>) {
        self.push_parts(
            s.id.clone(),
            s.class,
            s.path,
            s.declaration_hash,
            s.validate,
        );
    }

    fn push_parts(
        &mut self,
        id: ResourceId,
        class: &str,
        path: Option<&str>,
        declaration_hash: &str,
        validate: Option<&str>,
    ) {
        let start = self.text.len();
        let mut ends = [0; 4];
        for (end, part) in ends.iter_mut().zip([
            class,
            path.unwrap_or_default(),
            declaration_hash,
            validate.unwrap_or_default(),
        ]) {
            self.text.push_str(part);
            *end = self.text.len();
        }
        let present =
            if path.is_some() { PATH } else { 0 } | if validate.is_some() { VALIDATE } else { 0 };
        self.ids.push(id);
        self.parts.push(Parts {
            start,
            ends,
            present,
        });
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The summary at `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<Summary<'_>> {
        let id = self.ids.get(i)?;
        let p = self.parts.get(i)?;
        let text = |from: usize, to: usize| &self.text[from..to];
        Some(Summary {
            id,
            class: text(p.start, p.ends[0]),
            path: (p.present & PATH != 0).then(|| text(p.ends[0], p.ends[1])),
            declaration_hash: text(p.ends[1], p.ends[2]),
            validate: (p.present & VALIDATE != 0).then(|| text(p.ends[2], p.ends[3])),
        })
    }

    /// The summary at `i`.
    ///
    /// # Panics
    ///
    /// When `i` is not below [`Summaries::len`], as indexing a list does.
    pub fn at(&self, i: usize) -> Summary<'_> {
        match self.get(i) {
            Some(s) => s,
            None => panic!("summary {i} of {}", self.len()),
        }
    }

    /// Sets the declaration hash of the summary at `i` (a snapshot's
    /// withheld one, filled in when it is loaded): in place when it is as
    /// long as the one it replaces, else by writing the text again.
    pub(crate) fn set_declaration_hash(&mut self, i: usize, hash: &str) -> bool {
        let Some(p) = self.parts.get(i).copied() else {
            return false;
        };
        let (from, to) = (p.ends[1], p.ends[2]);
        if to - from == hash.len() {
            self.text.replace_range(from..to, hash);
            return true;
        }
        let mut again = Summaries::with_capacity(self.len(), self.text.len() + hash.len());
        for (at, s) in self.iter().enumerate() {
            let mut s = s;
            if at == i {
                s.declaration_hash = hash;
            }
            again.push(s);
        }
        *self = again;
        true
    }

    /// Every summary, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Summary<'_>> + Clone + '_ {
        (0..self.len()).map(|i| self.at(i))
    }
}

/// At most this many summaries, and bytes of their text, are reserved
/// ahead, whatever length the index claims (a damaged file reserves no
/// more; past them the lists grow as they are read).
const MOST_RESERVED: usize = 1 << 20;
const MOST_TEXT_RESERVED: usize = 4 << 20;

/// A summary as a snapshot's index holds it: its parts in order, every
/// part written (`nil` for an absent one).
type Written<'a> = (
    &'a ResourceId,
    &'a str,
    Option<&'a str>,
    &'a str,
    Option<&'a str>,
);

/// The summaries of `resources` in a snapshot's index, written one at a
/// time from the resources themselves (no copy of them is made).
pub(crate) struct WrittenSummaries<'a>(pub(crate) &'a [Resource]);

impl Serialize for WrittenSummaries<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|r| {
            let s = Summary::of(r);
            let hash = if crate::snapshot::withheld(r) {
                crate::snapshot::WITHHELD_HASH
            } else {
                s.declaration_hash
            };
            let written: Written<'_> = (s.id, s.class, s.path, hash, s.validate);
            written
        }))
    }
}

/// Read back from a snapshot's index decoded in memory: each part borrowed
/// from the index's bytes and appended to the one string (an index read
/// from a stream, which cannot lend its text, is refused).
impl<'de> Deserialize<'de> for Summaries {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Summaries;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of resource summaries")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Summaries, A::Error> {
                let count = seq.size_hint().unwrap_or(0).min(MOST_RESERVED);
                // About a hundred bytes of text each (a class, a path, a
                // 64-digit hash).
                let mut all =
                    Summaries::with_capacity(count, (count * 100).min(MOST_TEXT_RESERVED));
                type Read<'de> = (
                    ResourceId,
                    &'de str,
                    Option<&'de str>,
                    &'de str,
                    Option<&'de str>,
                );
                while let Some((id, class, path, hash, validate)) = seq.next_element::<Read>()? {
                    all.push_parts(id, class, path, hash, validate);
                }
                Ok(all)
            }
        }
        deserializer.deserialize_seq(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(name: &str, path: Option<&str>, validate: Option<&str>) -> Resource {
        let mut desired = serde_json::Map::new();
        if let Some(p) = path {
            desired.insert("path".into(), p.into());
        }
        let mut r = Resource::new(
            ResourceId::new("File", name),
            serde_json::Value::Object(desired),
        );
        r.class = format!("class-{name}");
        r.declaration_hash = format!("hash-{name}");
        r.validate = validate.map(str::to_owned);
        r
    }

    fn resources() -> Vec<Resource> {
        vec![
            resource("a", Some("/etc/a"), None),
            resource("b", None, Some("nginx")),
            resource("c", Some(""), Some("")),
            resource("d", None, None),
        ]
    }

    #[test]
    fn each_summary_reads_back_as_its_resource_gives_it() {
        let rs = resources();
        let all = Summaries::of(&rs);
        assert_eq!(all.len(), 4);
        let want: Vec<Summary<'_>> = rs.iter().map(Summary::of).collect();
        assert_eq!(all.iter().collect::<Vec<_>>(), want);
        // An empty part is there, an absent one is not.
        assert_eq!((all.at(2).path, all.at(2).validate), (Some(""), Some("")));
        assert_eq!((all.at(3).path, all.at(3).validate), (None, None));
        assert_eq!(all.at(1).validate, Some("nginx"));
        assert_eq!(all.get(4), None);
    }

    #[test]
    fn the_written_form_reads_back_from_memory_but_not_from_a_stream() {
        let rs = resources();
        let bytes = rmp_serde::to_vec(&WrittenSummaries(&rs)).unwrap();
        let back: Summaries = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, Summaries::of(&rs));
        // A stream cannot lend its text: refused, so the snapshot is
        // compiled again rather than read half.
        assert!(rmp_serde::from_read::<_, Summaries>(&bytes[..]).is_err());
    }
}
