//! Editing `*.tf.json` files (JSON syntax) for codify.
//!
//! Files are read into [`OJson`], an order-preserving value, so a rewritten file keeps its
//! key order and the pull request shows only the changed lines. JSON syntax writes an
//! expression as a string with `${...}` (or a `%{...}` directive) in it; such a string is
//! never overwritten, because the value does not live there.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Document, Spot};
use crate::flatten::{Path, Step};
use crate::plan::Leaf;

/// A JSON value that keeps object keys in file order, and numbers as written: a file is
/// written back with every number it had spelled as it was (`f64` would round a big
/// integer or a long decimal elsewhere in the file).
#[derive(Debug, Clone, PartialEq)]
pub enum OJson {
    Null,
    Bool(bool),
    /// A JSON number's text.
    Number(String),
    String(String),
    Array(Vec<OJson>),
    Object(Vec<(String, OJson)>),
}

/// An object's members in file order, values not yet parsed.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Members<'a>, A::Error> {
                let mut entries = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, &'a RawValue>()? {
                    entries.push((k, v));
                }
                Ok(Members(entries))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

impl OJson {
    fn from_raw(raw: &RawValue) -> Result<OJson, serde_json::Error> {
        let text = raw.get().trim();
        Ok(match text.bytes().next() {
            Some(b'{') => OJson::Object(
                serde_json::from_str::<Members<'_>>(text)?
                    .0
                    .into_iter()
                    .map(|(k, v)| Ok((k, OJson::from_raw(v)?)))
                    .collect::<Result<_, serde_json::Error>>()?,
            ),
            Some(b'[') => OJson::Array(
                serde_json::from_str::<Vec<&RawValue>>(text)?
                    .into_iter()
                    .map(OJson::from_raw)
                    .collect::<Result<_, _>>()?,
            ),
            Some(b'"') => OJson::String(serde_json::from_str(text)?),
            Some(b't' | b'f') => OJson::Bool(serde_json::from_str(text)?),
            Some(b'n') => {
                serde_json::from_str::<()>(text)?;
                OJson::Null
            }
            // A number: its syntax was checked when the document was read.
            _ => OJson::Number(text.to_owned()),
        })
    }
}

impl<'de> Deserialize<'de> for OJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        OJson::from_raw(&raw).map_err(serde::de::Error::custom)
    }
}

impl Serialize for OJson {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            OJson::Null => s.serialize_unit(),
            OJson::Bool(b) => s.serialize_bool(*b),
            OJson::Number(n) => RawValue::from_string(n.clone())
                .map_err(serde::ser::Error::custom)?
                .serialize(s),
            OJson::String(v) => s.serialize_str(v),
            OJson::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            OJson::Object(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// A literal string as JSON syntax must spell it: every string (and object key) of a
/// `*.tf.json` file is a template, so a literal `${` or `%{` is written `$${` or `%%{`
/// (an IAM policy's `${aws:username}` would otherwise be read as an interpolation).
fn template_literal(s: &str) -> String {
    s.replace("${", "$${").replace("%{", "%%{")
}

impl OJson {
    /// The JSON-syntax spelling of a leaf to write: a number with the plan's digits.
    fn from_leaf(leaf: &Leaf) -> OJson {
        match leaf {
            Leaf::Value(v) => OJson::from_value(v),
            Leaf::Number(text) => OJson::Number(text.clone()),
        }
    }

    /// The JSON-syntax spelling of a value to write: strings and keys escaped as literals.
    fn from_value(v: &Value) -> OJson {
        match v {
            Value::Null => OJson::Null,
            Value::Bool(b) => OJson::Bool(*b),
            Value::Number(n) => OJson::Number(n.to_string()),
            Value::String(s) => OJson::String(template_literal(s)),
            Value::Array(items) => OJson::Array(items.iter().map(OJson::from_value).collect()),
            Value::Object(map) => OJson::Object(
                map.iter()
                    .map(|(k, v)| (template_literal(k), OJson::from_value(v)))
                    .collect(),
            ),
        }
    }

    fn child(&self, i: usize) -> Option<&OJson> {
        match self {
            OJson::Array(items) => items.get(i),
            OJson::Object(entries) => entries.get(i).map(|(_, v)| v),
            _ => None,
        }
    }

    fn child_mut(&mut self, i: usize) -> Option<&mut OJson> {
        match self {
            OJson::Array(items) => items.get_mut(i),
            OJson::Object(entries) => entries.get_mut(i).map(|(_, v)| v),
            _ => None,
        }
    }

    fn at(&self, route: &[usize]) -> Option<&OJson> {
        route.iter().try_fold(self, |cur, &i| cur.child(i))
    }

    fn at_mut(&mut self, route: &[usize]) -> Option<&mut OJson> {
        let mut cur = self;
        for &i in route {
            cur = cur.child_mut(i)?;
        }
        Some(cur)
    }

    fn key_index(&self, key: &str) -> Option<usize> {
        match self {
            OJson::Object(entries) => entries.iter().position(|(k, _)| k == key),
            _ => None,
        }
    }

    /// Routes to this value (if an object) or to each object in it (if an array): JSON
    /// syntax allows a block to be written either way.
    fn object_routes(&self, route: &[usize]) -> Vec<Vec<usize>> {
        match self {
            OJson::Object(_) => vec![route.to_vec()],
            OJson::Array(items) => items
                .iter()
                .enumerate()
                .filter(|(_, item)| matches!(item, OJson::Object(_)))
                .map(|(i, _)| {
                    let mut r = route.to_vec();
                    r.push(i);
                    r
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A string with an interpolation or a directive: an expression, not a literal. An
    /// escaped marker (`$${`, `%%{`, as codify writes a literal `${`) is literal text.
    fn is_template(&self) -> bool {
        let OJson::String(s) = self else {
            return false;
        };
        let bytes = s.as_bytes();
        let mut i = 0;
        while i + 1 < bytes.len() {
            let (c, next) = (bytes[i], bytes[i + 1]);
            if (c == b'$' || c == b'%') && next == c && bytes.get(i + 2) == Some(&b'{') {
                i += 3;
            } else if (c == b'$' || c == b'%') && next == b'{' {
                return true;
            } else {
                i += 1;
            }
        }
        false
    }
}

/// Route to the body of `resource.TYPE.NAME` in a `.tf.json` document.
fn find_resource(doc: &OJson, rtype: &str, rname: &str) -> Option<Vec<usize>> {
    for top in doc.object_routes(&[]) {
        let top_value = doc.at(&top)?;
        let Some(ri) = top_value.key_index("resource") else {
            continue;
        };
        let res_route = [top.clone(), vec![ri]].concat();
        for by_type in doc.at(&res_route)?.object_routes(&res_route) {
            let Some(ti) = doc.at(&by_type)?.key_index(rtype) else {
                continue;
            };
            let type_route = [by_type.clone(), vec![ti]].concat();
            for by_name in doc.at(&type_route)?.object_routes(&type_route) {
                let Some(ni) = doc.at(&by_name)?.key_index(rname) else {
                    continue;
                };
                let name_route = [by_name.clone(), vec![ni]].concat();
                if let Some(body) = doc
                    .at(&name_route)?
                    .object_routes(&name_route)
                    .into_iter()
                    .next()
                {
                    return Some(body);
                }
            }
        }
    }
    None
}

/// Where a drifted path lands in a resource body, with the route to it.
fn locate(doc: &OJson, body: &[usize], path: &Path) -> (Spot, Vec<usize>) {
    let mut route = body.to_vec();
    for (n, step) in path.0.iter().enumerate() {
        let Some(here) = doc.at(&route) else {
            return (Spot::NotSet, route);
        };
        if here.is_template() {
            return (Spot::Expression, route);
        }
        let last = n + 1 == path.0.len();
        match (here, step) {
            (OJson::Object(_), Step::Key(k)) => match here.key_index(k) {
                Some(i) => route.push(i),
                // The resource does not set the attribute at all: nothing to overwrite, and
                // perhaps nothing to write (a computed attribute such as tags_all).
                None if n == 0 => return (Spot::Absent, route),
                None if last => return (Spot::Insert, route),
                None => return (Spot::NotSet, route),
            },
            (OJson::Array(items), Step::Index(i)) => {
                match usize::try_from(*i).ok().filter(|i| *i < items.len()) {
                    Some(i) => route.push(i),
                    None => return (Spot::NotSet, route),
                }
            }
            // A block with at most one item may be written as a bare object.
            (OJson::Object(_), Step::Index(0)) => {}
            _ => return (Spot::NotSet, route),
        }
    }
    let spot = match doc.at(&route) {
        Some(leaf) if leaf.is_template() => Spot::Expression,
        Some(OJson::Array(_) | OJson::Object(_)) => Spot::Structured,
        Some(_) => Spot::Literal,
        None => Spot::NotSet,
    };
    (spot, route)
}

/// A parsed `*.tf.json` file.
pub(super) struct JsonDocument {
    doc: OJson,
}

impl JsonDocument {
    pub(super) fn parse(bytes: &[u8]) -> Result<JsonDocument, serde_json::Error> {
        Ok(JsonDocument {
            doc: serde_json::from_slice(bytes)?,
        })
    }
}

impl Document for JsonDocument {
    fn declares(&self, rtype: &str, rname: &str) -> bool {
        find_resource(&self.doc, rtype, rname).is_some()
    }

    fn locate(&self, rtype: &str, rname: &str, path: &Path) -> Spot {
        match find_resource(&self.doc, rtype, rname) {
            Some(body) => locate(&self.doc, &body, path).0,
            None => Spot::NotSet,
        }
    }

    fn write(&mut self, rtype: &str, rname: &str, path: &Path, value: &Leaf) -> bool {
        let Some(body) = find_resource(&self.doc, rtype, rname) else {
            return false;
        };
        let (spot, route) = locate(&self.doc, &body, path);
        let new = OJson::from_leaf(value);
        match spot {
            Spot::Literal => match self.doc.at_mut(&route) {
                Some(slot) => {
                    *slot = new;
                    true
                }
                None => false,
            },
            Spot::Insert => {
                let key = match path.0.last() {
                    Some(Step::Key(k)) => template_literal(k),
                    _ => return false,
                };
                match self.doc.at_mut(&route) {
                    Some(OJson::Object(entries)) => {
                        entries.push((key, new));
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }

    fn render(&self) -> Result<String, String> {
        let mut text = serde_json::to_string_pretty(&self.doc).map_err(|e| e.to_string())?;
        text.push('\n');
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> OJson {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn keeps_key_order() {
        let d = doc(r#"{"z":1,"a":{"y":[true,null],"b":"x"}}"#);
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            r#"{"z":1,"a":{"y":[true,null],"b":"x"}}"#
        );
    }

    #[test]
    fn locates_literals_expressions_and_missing() {
        let d = JsonDocument {
            doc: doc(r#"{"resource":{"kubernetes_config_map_v1":{"flags":{
                "metadata":{"name":"flags","labels":{"app":"shop"}},
                "data":{"color":"blue","size":"${var.size}"}}}}}"#),
        };
        let at = |s: &str| {
            d.locate(
                "kubernetes_config_map_v1",
                "flags",
                &Path::parse(s).unwrap(),
            )
        };
        assert_eq!(at("data.color"), Spot::Literal);
        assert_eq!(at("data.size"), Spot::Expression);
        assert_eq!(at("metadata[0].labels.owner"), Spot::Insert);
        assert_eq!(at("metadata[0].resource_version"), Spot::Insert);
        assert_eq!(at("replicas"), Spot::Absent);
        assert_eq!(at("metadata"), Spot::Structured);
        assert_eq!(at("data.color.x"), Spot::NotSet);
        assert_eq!(
            d.locate(
                "kubernetes_config_map_v1",
                "other",
                &Path::parse("data").unwrap()
            ),
            Spot::NotSet
        );
    }

    #[test]
    fn writes_and_inserts_keeping_order() {
        let mut d =
            JsonDocument::parse(br#"{"resource":{"t":{"n":{"z":"1","tags":{"b":"x"},"a":2}}}}"#)
                .unwrap();
        assert!(d.write(
            "t",
            "n",
            &Path::parse("z").unwrap(),
            &Leaf::from(Value::from("9"))
        ));
        assert!(d.write(
            "t",
            "n",
            &Path::parse("tags.a").unwrap(),
            &Leaf::from(Value::from("y"))
        ));
        assert!(!d.write(
            "t",
            "n",
            &Path::parse("missing").unwrap(),
            &Leaf::from(Value::from(1))
        ));
        let text = d.render().unwrap();
        let flat: String = text.split_whitespace().collect();
        assert_eq!(
            flat,
            r#"{"resource":{"t":{"n":{"z":"9","tags":{"b":"x","a":"y"},"a":2}}}}"#
        );
    }

    #[test]
    fn written_strings_are_template_literals() {
        // JSON syntax reads every string as a template: a drifted IAM policy's
        // `${aws:username}` must be written `$${aws:username}`, or the plan fails on it.
        let mut d =
            JsonDocument::parse(br#"{"resource":{"t":{"n":{"policy":"old","tags":{"b":"x"}}}}}"#)
                .unwrap();
        let policy = "arn:aws:s3:::b/${aws:username}/* 100%{x} $${y}";
        assert!(d.write(
            "t",
            "n",
            &Path::parse("policy").unwrap(),
            &Leaf::from(Value::from(policy))
        ));
        assert!(d.write(
            "t",
            "n",
            &Path::parse("tags[\"k${v}\"]").unwrap(),
            &Leaf::from(Value::from("${w}"))
        ));
        let text = d.render().unwrap();
        let flat: String = text.split_whitespace().collect();
        assert_eq!(
            flat,
            r#"{"resource":{"t":{"n":{"policy":"arn:aws:s3:::b/$${aws:username}/*100%%{x}$$${y}","tags":{"b":"x","k$${v}":"$${w}"}}}}}"#
        );
        // What codify wrote is a literal it can overwrite next time; `${` is not.
        let n = |path: &str| Path::parse(path).unwrap();
        assert_eq!(d.locate("t", "n", &n("policy")), Spot::Literal);
        assert!(d.write("t", "n", &n("policy"), &Leaf::from(Value::from("x"))));
        for (text, template) in [
            ("a$${b}", false),
            ("a%%{b}", false),
            ("a$$${b}", false),
            ("a${b}", true),
            ("a%{ if b }", true),
            ("$$$${b}", false),
            ("$", false),
        ] {
            assert_eq!(OJson::String(text.into()).is_template(), template, "{text}");
        }
    }
}
