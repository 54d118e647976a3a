//! A resource's own declared fields ([`Desired`]) and the read access a
//! kind's checks need ([`DeclaredFields`]), whether the fields are the
//! catalogue's or a JSON value (a check during compile, a test).
//!
//! Pure data: no kind's field names or rules live here (each kind's folder
//! owns those), and nothing here parses YAML or touches the machine.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A resource's fields after layering, sorted by name, in one exactly sized
/// list. A `serde_json` map per resource (one 632-byte B-tree node for about
/// five fields) was the largest single thing a pass over 20,000 resources
/// held: 12.6 MB of a 50 MB heap. Serialized as a map in the same sorted
/// order, so JSON output, the catalogue snapshot and declaration hashes are
/// the bytes they were. Field names are shared (see `shared_name`): 20,000
/// Files name the same five fields.
#[derive(Clone, Default, PartialEq)]
pub struct Desired(Box<[(Arc<str>, Value)]>);

/// How many distinct field names a thread shares at most; names past it get
/// their own copy (a repository cannot grow the table without bound).
const SHARED_NAMES: usize = 256;

/// `text` as a field name shared with every other field of that name this
/// thread has built (a table per thread, no lock: catalogues are decoded and
/// compiled on a few threads at a time).
fn shared_name(text: &str) -> Arc<str> {
    thread_local! {
        static NAMES: RefCell<Vec<Arc<str>>> = const { RefCell::new(Vec::new()) };
    }
    NAMES.with(|names| {
        let Ok(mut names) = names.try_borrow_mut() else {
            return Arc::from(text);
        };
        match names.binary_search_by(|n| (**n).cmp(text)) {
            Ok(at) => names.get(at).cloned().unwrap_or_else(|| Arc::from(text)),
            Err(at) if names.len() < SHARED_NAMES => {
                let name: Arc<str> = Arc::from(text);
                names.insert(at, Arc::clone(&name));
                name
            }
            Err(_) => Arc::from(text),
        }
    })
}

/// Read access to declared fields: what a kind's parsing and checks use, so
/// the same code reads a resource's [`Desired`] and a JSON value.
pub trait DeclaredFields {
    /// `Err` with the JSON type's name ([`type_name`]) when the fields are
    /// not a mapping (only a JSON value can be anything else).
    fn mapping(&self) -> Result<(), &'static str>;
    /// Whether no fields were written at all (`desired:` with nothing, a
    /// JSON null), which some kinds read as "no fields".
    fn is_null(&self) -> bool {
        false
    }
    /// The field `name`, if declared.
    fn get(&self, name: &str) -> Option<&Value>;
    /// Every field's name (boxed: the kinds that list them do it once per
    /// parse, for unknown-field errors).
    fn keys(&self) -> Box<dyn Iterator<Item = &str> + '_>;
}

/// Sorts `(key, value)` pairs by key and keeps, of a key given twice, the
/// value given last: the pairs a map built from the same ones would hold, in
/// its order. Stable, so of equal keys the later stays after the earlier; the
/// dedup moves the later value into the earlier's place and drops the rest.
/// Pairs that come sorted and unique are neither moved nor copied.
pub fn sort_keeping_last<K: Ord, V>(pairs: &mut Vec<(K, V)>) {
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    pairs.dedup_by(|later, earlier| {
        let same = later.0 == earlier.0;
        if same {
            std::mem::swap(later, earlier);
        }
        same
    });
}

impl Desired {
    /// The fields, sorted by name; of a name given twice the last stands
    /// (as in a map built from the same pairs).
    pub fn from_fields(fields: impl IntoIterator<Item = (String, Value)>) -> Self {
        Self::from_named(
            fields
                .into_iter()
                .map(|(k, v)| (shared_name(&k), v))
                .collect(),
        )
    }

    fn from_named(mut all: Vec<(Arc<str>, Value)>) -> Self {
        sort_keeping_last(&mut all);
        Desired(all.into_boxed_slice())
    }

    /// The field `name`, if declared.
    pub fn get(&self, name: &str) -> Option<&Value> {
        let at = self.0.binary_search_by(|(k, _)| (**k).cmp(name)).ok()?;
        self.0.get(at).map(|(_, v)| v)
    }

    /// The field `name` to change in place, if declared.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Value> {
        let at = self.0.binary_search_by(|(k, _)| (**k).cmp(name)).ok()?;
        self.0.get_mut(at).map(|(_, v)| v)
    }

    /// Every field in name order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (&**k, v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl DeclaredFields for Desired {
    fn mapping(&self) -> Result<(), &'static str> {
        Ok(())
    }
    fn get(&self, name: &str) -> Option<&Value> {
        Desired::get(self, name)
    }
    fn keys(&self) -> Box<dyn Iterator<Item = &str> + '_> {
        Box::new(self.iter().map(|(k, _)| k))
    }
}

/// How a JSON value's type is named in messages ("found a list").
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

impl DeclaredFields for Value {
    fn mapping(&self) -> Result<(), &'static str> {
        match self {
            Value::Object(_) => Ok(()),
            other => Err(type_name(other)),
        }
    }
    fn is_null(&self) -> bool {
        Value::is_null(self)
    }
    fn get(&self, name: &str) -> Option<&Value> {
        self.as_object().and_then(|m| m.get(name))
    }
    fn keys(&self) -> Box<dyn Iterator<Item = &str> + '_> {
        match self.as_object() {
            Some(m) => Box::new(m.keys().map(String::as_str)),
            None => Box::new(std::iter::empty()),
        }
    }
}

impl From<Map<String, Value>> for Desired {
    fn from(map: Map<String, Value>) -> Self {
        Desired::from_fields(map)
    }
}

/// A JSON object's fields; any other value has none (the shorthand tests and
/// hand-built catalogues use: `json!({...})`; the catalogue builds a
/// [`Desired`] from its merged fields, never from a value).
impl From<Value> for Desired {
    fn from(value: Value) -> Self {
        match value {
            Value::Object(map) => map.into(),
            _ => Desired::default(),
        }
    }
}

impl PartialEq<Value> for Desired {
    fn eq(&self, other: &Value) -> bool {
        other
            .as_object()
            .is_some_and(|m| m.len() == self.len() && self.iter().all(|(k, v)| m.get(k) == Some(v)))
    }
}

impl std::ops::Index<&str> for Desired {
    type Output = Value;
    /// The field, or `null` when not declared (as indexing a JSON object).
    fn index(&self, name: &str) -> &Value {
        static NULL: Value = Value::Null;
        self.get(name).unwrap_or(&NULL)
    }
}

impl fmt::Debug for Desired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Desired {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// A field name as decoded: shared from the text, never a `String` first.
struct Name(Arc<str>);

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl Visitor<'_> for Text {
            type Value = Name;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Name, E> {
                Ok(Name(shared_name(v)))
            }
        }
        deserializer.deserialize_str(Text)
    }
}

impl<'de> Deserialize<'de> for Desired {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Desired;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of declared fields")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Desired, A::Error> {
                // Sized from the map's length where the format says it (a
                // MessagePack snapshot does; JSON does not, and the list
                // grows), capped so a hostile length cannot reserve much.
                let mut all = Vec::with_capacity(access.size_hint().unwrap_or(0).min(4096));
                while let Some((Name(k), v)) = access.next_entry::<Name, Value>()? {
                    all.push((k, v));
                }
                Ok(Desired::from_named(all))
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn fields_are_sorted_and_the_last_of_a_name_stands() {
        let d = Desired::from_fields([
            ("path".to_owned(), json!("/b")),
            ("mode".to_owned(), json!("0644")),
            ("path".to_owned(), json!("/a")),
            ("path".to_owned(), json!("/c")),
        ]);
        assert_eq!(
            d.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["mode", "path"]
        );
        assert_eq!(d.get("path"), Some(&json!("/c")));
        assert_eq!(d["missing"], Value::Null);
        assert!(d.get("owner").is_none());
        assert_eq!(d, json!({"mode": "0644", "path": "/c"}));
        assert_ne!(d, json!({"mode": "0644"}));
    }

    #[test]
    fn it_encodes_as_the_map_it_replaces() {
        let value = json!({"z": 1, "a": {"y": [1, 2], "b": null}, "m": "x"});
        let d = Desired::from(value.clone());
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            serde_json::to_string(&value).unwrap()
        );
        assert_eq!(
            rmp_serde::to_vec(&d).unwrap(),
            rmp_serde::to_vec(&value).unwrap()
        );
        let back: Desired = rmp_serde::from_slice(&rmp_serde::to_vec(&d).unwrap()).unwrap();
        assert_eq!(back, d);
        assert_eq!(back, value);
        let from_json: Desired = serde_json::from_str(r#"{"b": 1, "a": 2}"#).unwrap();
        assert_eq!(
            from_json.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(serde_json::from_str::<Desired>("[1]").is_err());
    }

    #[test]
    fn field_names_are_shared_between_resources_and_the_table_is_bounded() {
        let a = Desired::from(json!({"path": "/a", "mode": "0644"}));
        let encoded = rmp_serde::to_vec(&json!({"path": "/b"})).unwrap();
        let b: Desired = rmp_serde::from_slice(&encoded).unwrap();
        assert_eq!(&*a.0[1].0, "path");
        assert!(Arc::ptr_eq(&a.0[1].0, &b.0[0].0), "one `path` for both");
        // A thread of its own: a fresh table, filled to its bound.
        std::thread::spawn(|| {
            for i in 0..SHARED_NAMES {
                shared_name(&format!("f{i}"));
            }
            assert!(Arc::ptr_eq(&shared_name("f7"), &shared_name("f7")));
            assert!(!Arc::ptr_eq(&shared_name("more"), &shared_name("more")));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_json_value_reads_like_the_fields_it_holds() {
        let value = json!({"b": 2, "a": 1});
        let fields: &dyn DeclaredFields = &value;
        assert_eq!(fields.mapping(), Ok(()));
        assert_eq!(fields.get("a"), Some(&json!(1)));
        let mut keys: Vec<&str> = fields.keys().collect();
        keys.sort_unstable();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(DeclaredFields::mapping(&json!([1])), Err("a list"));
        assert!(DeclaredFields::is_null(&Value::Null));
        assert!(!DeclaredFields::is_null(&Desired::default()));
        assert_eq!(DeclaredFields::keys(&json!("x")).count(), 0);
        let d = Desired::from(value);
        let fields: &dyn DeclaredFields = &d;
        assert_eq!(fields.keys().collect::<Vec<_>>(), ["a", "b"]);
    }
}
