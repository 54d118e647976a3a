//! Layering: folding the documents that declare one resource into one.
//!
//! This module owns the override rule: documents are applied in declaration
//! order (layer order, then file, then position); a later document replaces
//! the top-level `desired` fields it writes and keeps the others, removes the
//! ones it sets to null (`mode: null`, `source: null`: so a later layer can
//! say `ensure: absent` for a file whose content an earlier layer declared),
//! replaces `requires`, `class`, `sensitive` and `validate` when it sets them
//! (the compile tells it `sensitive` is set only by `true`: a secret stays
//! one in every layer),
//! and a later content field replaces an earlier one. It records which document
//! supplied every field, for `catalogue --explain` and for pointing errors at
//! the line that wrote the value.
//!
//! It must not check values or read files: it only decides who wins.

use std::collections::HashMap;

use datum_core::ResourceId;

/// One resource after layering. Document references are indices into
/// `Repository::documents`.
#[derive(Debug, Clone)]
pub(crate) struct Merged {
    pub id: ResourceId,
    /// Every document that declared the resource, in the order applied.
    pub docs: Vec<usize>,
    /// Top-level `desired` field -> (value, document that wrote it). Content
    /// fields of content-taking types are not here: see `content`.
    pub fields: Fields,
    /// The document whose content field wins.
    pub content: Option<usize>,
    pub requires: Option<usize>,
    pub class: Option<usize>,
    pub sensitive: Option<usize>,
    pub validate: Option<usize>,
}

impl Merged {
    pub fn first_doc(&self) -> usize {
        self.docs.first().copied().unwrap_or_default()
    }

    pub fn last_doc(&self) -> usize {
        self.docs.last().copied().unwrap_or_default()
    }

    /// The merged `desired` as JSON.
    pub fn desired_json(&self) -> serde_json::Value {
        serde_json::Value::Object(
            self.fields
                .iter()
                .map(|(k, (v, _))| (k.clone(), v.clone()))
                .collect(),
        )
    }
}

/// A merged resource's fields: field -> (value, document that wrote it),
/// kept sorted by field name in an exactly sized list. It iterates in the
/// order a `BTreeMap` would (the declaration hash and `--explain` depend on
/// that order) at about half a B-tree node's size: a resource has a handful
/// of fields, and a 20,000-resource catalogue held one node per resource.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fields(Vec<(String, (serde_json::Value, usize))>);

impl Fields {
    /// The fields one document writes (null ones dropped: there is nothing
    /// earlier for them to remove); of a key written twice, the later.
    fn first(fields: Vec<(String, serde_json::Value)>, doc: usize) -> Fields {
        let mut list: Vec<(String, (serde_json::Value, usize))> = fields
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k, (v, doc)))
            .collect();
        datum_core::desired::sort_keeping_last(&mut list);
        list.shrink_to_fit();
        Fields(list)
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    pub fn get(&self, key: &str) -> Option<&(serde_json::Value, usize)> {
        self.find(key)
            .ok()
            .and_then(|i| self.0.get(i))
            .map(|(_, v)| v)
    }

    pub fn insert(&mut self, key: String, value: (serde_json::Value, usize)) {
        match self.find(&key) {
            Ok(i) => {
                if let Some(slot) = self.0.get_mut(i) {
                    slot.1 = value;
                }
            }
            Err(i) => {
                // Exact room: the list lives as long as the catalogue.
                self.0.reserve_exact(1);
                self.0.insert(i, (key, value));
            }
        }
    }

    pub fn remove(&mut self, key: &str) {
        if let Ok(i) = self.find(key) {
            self.0.remove(i);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &(serde_json::Value, usize))> {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl IntoIterator for Fields {
    type Item = (String, (serde_json::Value, usize));
    type IntoIter = std::vec::IntoIter<Self::Item>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl std::ops::Index<&str> for Fields {
    type Output = (serde_json::Value, usize);

    /// Panics when the field is absent (tests only: code uses `get`).
    #[allow(clippy::panic, reason = "Index's contract, like BTreeMap's")]
    fn index(&self, key: &str) -> &Self::Output {
        match self.get(key) {
            Some(v) => v,
            None => panic!("no field `{key}`"),
        }
    }
}

/// What a document does to the resource's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ContentSet {
    /// It writes no content field: an earlier one stays.
    #[default]
    Untouched,
    /// It declares content: it replaces any earlier one.
    Declares,
    /// It sets its content fields to null: no content.
    Clears,
}

/// What the merge needs to know about each document.
pub(crate) struct DocView<'a> {
    pub id: &'a ResourceId,
    /// Top-level desired fields, content fields excluded when the type takes
    /// content. A null value removes the field.
    pub fields: Vec<(String, serde_json::Value)>,
    pub content: ContentSet,
    pub sets_requires: bool,
    pub sets_class: bool,
    pub sets_sensitive: bool,
    pub sets_validate: bool,
}

/// Folds the documents `order` (indices, ascending declaration order) into
/// resources, in the order each resource was first declared.
#[cfg(test)]
pub(crate) fn merge<'a>(
    order: impl IntoIterator<Item = usize>,
    view: impl FnMut(usize) -> DocView<'a>,
) -> Vec<Merged> {
    merge_noting_removals(order, view, |_, _, _| {})
}

/// `merge` (the tests' form of this, which notes nothing), telling
/// `removed` of every field a document removes (sets to null) that an
/// earlier one wrote: the resource, the field (`content` for content
/// cleared) and the document. A field written again later is removed no
/// longer; the caller sees that in the merged fields.
pub(crate) fn merge_noting_removals<'a>(
    order: impl IntoIterator<Item = usize>,
    mut view: impl FnMut(usize) -> DocView<'a>,
    mut removed: impl FnMut(&ResourceId, &str, usize),
) -> Vec<Merged> {
    // At most one resource per document: room for all of them at once, not
    // grown by doubling (given back below when layers declared some twice).
    let order = order.into_iter();
    let mut out: Vec<Merged> = Vec::with_capacity(order.size_hint().0);
    let mut by_id: HashMap<&'a ResourceId, usize> = HashMap::with_capacity(order.size_hint().0);
    for doc in order {
        let v = view(doc);
        let slot = *by_id.entry(v.id).or_insert_with(|| {
            out.push(Merged {
                id: v.id.clone(),
                docs: Vec::new(),
                fields: Fields::default(),
                content: None,
                requires: None,
                class: None,
                sensitive: None,
                validate: None,
            });
            out.len() - 1
        });
        let Some(m) = out.get_mut(slot) else {
            continue;
        };
        m.docs.push(doc);
        if m.docs.len() == 1 {
            // The first (most often the only) document: its fields sorted
            // once into exactly sized room, not inserted one by one.
            m.fields = Fields::first(v.fields, doc);
        } else {
            for (k, value) in v.fields {
                if value.is_null() {
                    if m.fields.get(&k).is_some() {
                        removed(&m.id, &k, doc);
                    }
                    m.fields.remove(&k);
                } else {
                    m.fields.insert(k, (value, doc));
                }
            }
        }
        match v.content {
            ContentSet::Untouched => {}
            ContentSet::Declares => m.content = Some(doc),
            ContentSet::Clears => {
                if m.content.is_some() {
                    removed(&m.id, "content", doc);
                }
                m.content = None;
            }
        }
        let replace = |slot: &mut Option<usize>, sets: bool| {
            if sets {
                *slot = Some(doc);
            }
        };
        replace(&mut m.requires, v.sets_requires);
        replace(&mut m.class, v.sets_class);
        replace(&mut m.sensitive, v.sets_sensitive);
        replace(&mut m.validate, v.sets_validate);
    }
    out.shrink_to_fit();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Doc {
        id: ResourceId,
        fields: Vec<(&'static str, serde_json::Value)>,
        content: ContentSet,
        requires: bool,
    }

    fn doc(
        name: &str,
        fields: Vec<(&'static str, serde_json::Value)>,
        content: ContentSet,
        requires: bool,
    ) -> Doc {
        Doc {
            id: ResourceId::new("File", name),
            fields,
            content,
            requires,
        }
    }

    fn run(docs: &[Doc]) -> Vec<Merged> {
        merge(0..docs.len(), |i| DocView {
            id: &docs[i].id,
            fields: docs[i]
                .fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            content: docs[i].content,
            sets_requires: docs[i].requires,
            sets_class: false,
            sets_sensitive: false,
            sets_validate: false,
        })
    }

    #[test]
    fn later_fields_win_and_unmentioned_fields_are_kept() {
        let docs = [
            doc(
                "a",
                vec![("path", json!("/a")), ("mode", json!("0644"))],
                ContentSet::Declares,
                true,
            ),
            doc(
                "b",
                vec![("path", json!("/b"))],
                ContentSet::Untouched,
                false,
            ),
            doc(
                "a",
                vec![("mode", json!("0600"))],
                ContentSet::Untouched,
                false,
            ),
        ];
        let merged = run(&docs);
        assert_eq!(merged.len(), 2);
        let a = &merged[0];
        assert_eq!(a.desired_json(), json!({"path": "/a", "mode": "0600"}));
        assert_eq!(a.fields["path"].1, 0);
        assert_eq!(a.fields["mode"].1, 2);
        // The override did not set content or requires: the first one's stay.
        assert_eq!(a.content, Some(0));
        assert_eq!(a.requires, Some(0));
        assert_eq!(a.docs, [0, 2]);
        assert_eq!(merged[1].id.name, "b");
    }

    #[test]
    fn a_later_content_field_replaces_the_earlier_one() {
        let docs = [
            doc("a", vec![], ContentSet::Declares, false),
            doc("a", vec![], ContentSet::Declares, true),
        ];
        let merged = run(&docs);
        assert_eq!(merged[0].content, Some(1));
        assert_eq!(merged[0].requires, Some(1));
    }

    #[test]
    fn null_removes_a_field_and_clears_content() {
        let docs = [
            doc(
                "a",
                vec![("path", json!("/a")), ("mode", json!("0644"))],
                ContentSet::Declares,
                false,
            ),
            doc(
                "a",
                vec![("mode", json!(null)), ("ensure", json!("absent"))],
                ContentSet::Clears,
                false,
            ),
        ];
        let merged = run(&docs);
        assert_eq!(
            merged[0].desired_json(),
            json!({"path": "/a", "ensure": "absent"})
        );
        assert_eq!(merged[0].content, None);
    }

    /// The first document's fields are sorted at once rather than inserted
    /// one by one: the result must be what inserting gives (in key order,
    /// nulls dropped, the later of a repeated key kept) and a later
    /// document must still find each field.
    #[test]
    fn a_first_documents_fields_are_what_inserting_them_gives() {
        let fields = vec![
            ("path", json!("/a")),
            ("mode", json!("0644")),
            ("group", json!(null)),
            ("owner", json!("root")),
            ("mode", json!("0600")),
            ("ensure", json!("present")),
        ];
        let mut inserted = Fields::default();
        for (k, v) in &fields {
            if !v.is_null() {
                inserted.insert((*k).to_owned(), (v.clone(), 0));
            }
        }
        let first = Fields::first(
            fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            0,
        );
        let listed = |f: &Fields| -> Vec<(String, serde_json::Value)> {
            f.iter().map(|(k, (v, _))| (k.clone(), v.clone())).collect()
        };
        assert_eq!(listed(&first), listed(&inserted));
        assert_eq!(first.get("mode").unwrap().0, json!("0600"));
        assert!(first.get("group").is_none());
        assert_eq!(first.0.len(), first.0.capacity());
        let docs = [
            doc("a", fields.clone(), ContentSet::Untouched, false),
            doc(
                "a",
                vec![("owner", json!("www"))],
                ContentSet::Untouched,
                false,
            ),
        ];
        let merged = run(&docs);
        assert_eq!(
            merged[0].desired_json(),
            json!({"ensure": "present", "mode": "0600", "owner": "www", "path": "/a"})
        );
        assert_eq!(merged[0].fields["owner"].1, 1);
        assert_eq!(merged[0].fields["path"].1, 0);
    }
}
