//! `driftwatch codify`: make "accept" a command.
//!
//! For every changed-outside finding, write the drifted values into the `*.tf.json` file
//! that declares the resource, run `apply -refresh-only -auto-approve` so state takes
//! reality, then run a normal plan and prove it is a no-op for every codified address.
//! A finding is codified whole or not at all, and it is refused when any attribute the next
//! apply would revert is sensitive, is not a literal in the configuration (a `${...}`
//! expression, a variable reference, a value that is not set there), or when the finding is
//! a replace (accepting it would still destroy the object) or belongs to a module or a
//! `count`/`for_each` instance (the block is shared or lives elsewhere). Attributes the next
//! apply leaves alone (computed ones such as `resource_version`) are not written.
//!
//! JSON files keep their key order: they are read into [`OJson`], an order-preserving value,
//! so the pull request shows only the changed lines.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

use crate::classify::{self, Category, Finding};
use crate::cli::{CodifyArgs, Io, load_rules, masker, options, parse_pair, stack_name, tofu_of};
use crate::error::{Error, Result};
use crate::flatten::{Path, Step};
use crate::plan::{Action, ChangeEntry, PlanRole, parse_plan};
use crate::runner::Runner;

/// A JSON value that keeps object keys in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum OJson {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<OJson>),
    Object(Vec<(String, OJson)>),
}

impl<'de> Deserialize<'de> for OJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OJson;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> std::result::Result<OJson, E> {
                Ok(OJson::Null)
            }
            fn visit_none<E>(self) -> std::result::Result<OJson, E> {
                Ok(OJson::Null)
            }
            fn visit_bool<E>(self, b: bool) -> std::result::Result<OJson, E> {
                Ok(OJson::Bool(b))
            }
            fn visit_u64<E>(self, n: u64) -> std::result::Result<OJson, E> {
                Ok(OJson::Number(n.into()))
            }
            fn visit_i64<E>(self, n: i64) -> std::result::Result<OJson, E> {
                Ok(OJson::Number(n.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> std::result::Result<OJson, E> {
                serde_json::Number::from_f64(n)
                    .map(OJson::Number)
                    .ok_or_else(|| E::custom("non-finite number"))
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<OJson, E> {
                Ok(OJson::String(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> std::result::Result<OJson, E> {
                Ok(OJson::String(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<OJson, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(OJson::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<OJson, A::Error> {
                let mut entries = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, OJson>()? {
                    entries.push((k, v));
                }
                Ok(OJson::Object(entries))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for OJson {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            OJson::Null => s.serialize_unit(),
            OJson::Bool(b) => s.serialize_bool(*b),
            OJson::Number(n) => n.serialize(s),
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

impl OJson {
    fn from_value(v: &Value) -> OJson {
        match v {
            Value::Null => OJson::Null,
            Value::Bool(b) => OJson::Bool(*b),
            Value::Number(n) => OJson::Number(n.clone()),
            Value::String(s) => OJson::String(s.clone()),
            Value::Array(items) => OJson::Array(items.iter().map(OJson::from_value).collect()),
            Value::Object(map) => OJson::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), OJson::from_value(v)))
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

    fn is_template(&self) -> bool {
        matches!(self, OJson::String(s) if s.contains("${") || s.contains("%{"))
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

/// Where a drifted path lands in a resource body.
#[derive(Debug, PartialEq)]
enum Spot {
    /// A literal leaf: overwrite it.
    Literal(Vec<usize>),
    /// A missing key in a literal map that exists: insert it.
    Insert(Vec<usize>, String),
    /// Part of the path is an expression (`${...}`), so the value does not live here.
    Expression,
    /// The configuration does not set this attribute.
    NotSet,
    /// The configuration has a list or object where the plan has a single value.
    Structured,
}

fn locate(doc: &OJson, body: &[usize], path: &Path) -> Spot {
    let mut route = body.to_vec();
    for (n, step) in path.0.iter().enumerate() {
        let Some(here) = doc.at(&route) else {
            return Spot::NotSet;
        };
        if here.is_template() {
            return Spot::Expression;
        }
        let last = n + 1 == path.0.len();
        match (here, step) {
            (OJson::Object(_), Step::Key(k)) => match here.key_index(k) {
                Some(i) => route.push(i),
                None if last && n > 0 => return Spot::Insert(route, k.clone()),
                None => return Spot::NotSet,
            },
            (OJson::Array(items), Step::Index(i)) => {
                match usize::try_from(*i).ok().filter(|i| *i < items.len()) {
                    Some(i) => route.push(i),
                    None => return Spot::NotSet,
                }
            }
            // A block with at most one item may be written as a bare object.
            (OJson::Object(_), Step::Index(0)) => {}
            _ => return Spot::NotSet,
        }
    }
    match doc.at(&route) {
        Some(leaf) if leaf.is_template() => Spot::Expression,
        Some(OJson::Array(_) | OJson::Object(_)) => Spot::Structured,
        Some(_) => Spot::Literal(route),
        None => Spot::NotSet,
    }
}

struct ConfigFile {
    path: PathBuf,
    doc: OJson,
    dirty: bool,
}

/// One planned write.
struct Edit {
    file: usize,
    spot: Spot,
    path: Path,
    value: Value,
}

/// Decide what to write for one finding, or why not.
fn plan_finding(
    finding: &Finding,
    change: Option<&ChangeEntry>,
    files: &[ConfigFile],
) -> std::result::Result<Vec<Edit>, String> {
    match finding.category {
        Category::Replaced => {
            return Err(
                "replaced by the next apply; accepting the value would not stop the replacement"
                    .to_owned(),
            );
        }
        Category::DeletedOutside => {
            return Err(
                "deleted outside; import it again or remove it from the configuration".to_owned(),
            );
        }
        Category::Ignored => return Err("ignored; nothing to accept".to_owned()),
        Category::ChangedOutside => {}
    }
    if finding.address.starts_with("module.") {
        return Err("belongs to a module; its configuration lives in the module".to_owned());
    }
    if finding.address.contains('[') {
        return Err(
            "is a count/for_each instance; its block is shared by every instance".to_owned(),
        );
    }
    let Some(change) = change.filter(|c| c.action == Action::Update) else {
        return Err("the next apply does not update it".to_owned());
    };
    let Some((rtype, rname)) = finding.address.split_once('.') else {
        return Err("unrecognised address".to_owned());
    };
    let Some((file, body)) = files
        .iter()
        .enumerate()
        .find_map(|(i, f)| find_resource(&f.doc, rtype, rname).map(|b| (i, b)))
    else {
        return Err("not declared in any *.tf.json file of the root module".to_owned());
    };
    let mut writes = Vec::new();
    for diff in &finding.diffs {
        // Attributes the next apply leaves alone need no change in the configuration.
        if !change.changed_paths.contains(&diff.path) {
            continue;
        }
        if diff.shown.is_sensitive() {
            return Err(format!("{} is sensitive; accept it by hand", diff.path));
        }
        let Some(value) = diff.after.clone() else {
            return Err(format!("{} has no value to write", diff.path));
        };
        if value.is_null() {
            return Err(format!(
                "{} was removed outside; remove it from the configuration by hand",
                diff.path
            ));
        }
        match locate(&files[file].doc, &body, &diff.path) {
            spot @ (Spot::Literal(_) | Spot::Insert(..)) => writes.push(Edit {
                file,
                spot,
                path: diff.path.clone(),
                value,
            }),
            Spot::Expression => {
                return Err(format!(
                    "{} comes from an expression or variable, not a literal",
                    diff.path
                ));
            }
            Spot::NotSet => {
                return Err(format!(
                    "{} is not set as a literal in the configuration",
                    diff.path
                ));
            }
            Spot::Structured => {
                return Err(format!(
                    "{} is a nested value in the configuration",
                    diff.path
                ));
            }
        }
    }
    if writes.is_empty() {
        return Err(
            "no attribute the next apply would revert is a literal in the configuration".to_owned(),
        );
    }
    Ok(writes)
}

fn apply_write(files: &mut [ConfigFile], w: &Edit) {
    let f = &mut files[w.file];
    let new = OJson::from_value(&w.value);
    match &w.spot {
        Spot::Literal(route) => {
            if let Some(slot) = f.doc.at_mut(route) {
                *slot = new;
                f.dirty = true;
            }
        }
        Spot::Insert(route, key) => {
            if let Some(OJson::Object(entries)) = f.doc.at_mut(route) {
                entries.push((key.clone(), new));
                f.dirty = true;
            }
        }
        _ => {}
    }
}

fn load_config_files(dir: &std::path::Path) -> Result<Vec<ConfigFile>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::file(dir, "cannot read the configuration directory", e))?
        .filter_map(std::result::Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.to_string_lossy().ends_with(".tf.json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).map_err(|e| Error::file(&path, "cannot read", e))?;
            let doc: OJson = serde_json::from_slice(&bytes).map_err(|e| Error::Json {
                path: path.display().to_string(),
                line: e.line(),
                column: e.column(),
            })?;
            Ok(ConfigFile {
                path,
                doc,
                dirty: false,
            })
        })
        .collect()
}

/// Quote for a POSIX shell.
fn sh(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

fn branch_name(stack: &str, date: &str) -> String {
    let clean: String = stack
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("driftwatch/codify-{clean}-{date}")
}

pub fn cmd_codify(args: CodifyArgs, runner: &dyn Runner, io: &mut Io<'_>) -> Result<u8> {
    let masker = masker(&args.common)?;
    let options = options(&args.common)?;
    let tofu = tofu_of(&args.tofu);
    let stack = stack_name(&args.common, &args.tofu.chdir);
    let clock = crate::history::clock(args.common.now.as_deref())?;

    let refresh_json = tofu.plan_json(runner, true)?;
    let normal_json = tofu.plan_json(runner, false)?;
    let (refresh, normal) = parse_pair(
        (&refresh_json, "refresh-only plan", PlanRole::RefreshOnly),
        Some((&normal_json, "plan")),
        &masker,
    )?;
    let normal = normal.unwrap_or_default();
    let rules = load_rules(Some(&args.tofu.chdir))?;
    let report = classify::classify(&stack, &refresh, Some(&normal), &rules, &options);
    let changes: BTreeMap<&str, &ChangeEntry> = normal
        .changes
        .iter()
        .filter(|c| !c.deposed)
        .map(|c| (c.address.as_str(), c))
        .collect();

    let mut files = load_config_files(&args.tofu.chdir)?;
    let mut codified: Vec<(String, Vec<String>)> = Vec::new();
    let mut refused = 0usize;
    for finding in report
        .findings
        .iter()
        .filter(|f| f.category != Category::Ignored)
    {
        match plan_finding(
            finding,
            changes.get(finding.address.as_str()).copied(),
            &files,
        ) {
            Ok(writes) => {
                let mut paths = Vec::new();
                for w in &writes {
                    apply_write(&mut files, w);
                    let shown = serde_json::to_string(&w.value).unwrap_or_default();
                    writeln!(
                        io.stdout,
                        "codify: {}: {} = {} ({})",
                        finding.address,
                        w.path,
                        crate::report::truncate(&shown, 80),
                        files[w.file].path.display()
                    )?;
                    paths.push(w.path.to_string());
                }
                codified.push((finding.address.clone(), paths));
            }
            Err(reason) => {
                refused += 1;
                writeln!(io.stdout, "codify: refused {}: {reason}", finding.address)?;
            }
        }
    }
    if codified.is_empty() {
        if report.findings.is_empty() {
            writeln!(io.stdout, "codify: {stack}: no drift, nothing to codify")?;
            return Ok(crate::exit::CLEAN);
        }
        return Err(Error::Codify(format!(
            "{stack}: nothing could be codified ({refused} finding(s) refused)"
        )));
    }

    let mut written = Vec::new();
    for f in files.iter().filter(|f| f.dirty) {
        let mut body = serde_json::to_vec_pretty(&f.doc)
            .map_err(|e| Error::file(&f.path, "cannot encode", e.into()))?;
        body.push(b'\n');
        std::fs::write(&f.path, body).map_err(|e| Error::file(&f.path, "cannot write", e))?;
        written.push(f.path.display().to_string());
    }

    tofu.apply_refresh_only(runner)?;
    let verify_json = tofu.plan_json(runner, false)?;
    let verify = parse_plan(&verify_json, "verification plan", PlanRole::Normal, &masker)?;
    let mut still = Vec::new();
    for (address, _) in &codified {
        if let Some(c) = verify
            .changes
            .iter()
            .find(|c| &c.address == address && !c.deposed)
            && c.action != Action::NoOp
        {
            let paths: Vec<String> = c.changed_paths.iter().map(Path::to_string).collect();
            still.push(format!(
                "{address} ({}: {})",
                c.action.as_str(),
                paths.join(", ")
            ));
        }
    }
    if !still.is_empty() {
        return Err(Error::Codify(format!(
            "the configuration was updated and state refreshed, but the next apply still changes: {}",
            still.join("; ")
        )));
    }
    writeln!(
        io.stdout,
        "codify: verified: the next apply is a no-op for {} resource(s)",
        codified.len()
    )?;

    let date = clock.today().format("%Y-%m-%d").to_string();
    let branch = branch_name(&stack, &date);
    let title = format!("Accept drift in {stack} ({date})");
    let mut body = format!(
        "Drift accepted by `driftwatch codify` on {date} (values written into the configuration; state refreshed with `apply -refresh-only`):\n\n"
    );
    for (address, paths) in &codified {
        body.push_str(&format!("- `{address}`: {}\n", paths.join(", ")));
    }
    let files_arg: Vec<String> = written.iter().map(|f| sh(f)).collect();
    writeln!(io.stdout, "branch: {branch}")?;
    writeln!(io.stdout, "  git switch -c {}", sh(&branch))?;
    writeln!(io.stdout, "  git add -- {}", files_arg.join(" "))?;
    writeln!(
        io.stdout,
        "  git commit -m {}",
        sh(&format!("drift: {title}"))
    )?;
    writeln!(io.stdout, "  git push -u origin {}", sh(&branch))?;
    writeln!(
        io.stdout,
        "  gh pr create --head {} --title {} --body {}",
        sh(&branch),
        sh(&title),
        sh(&body)
    )?;
    Ok(crate::exit::CLEAN)
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
        let d = doc(r#"{"resource":{"kubernetes_config_map_v1":{"flags":{
                "metadata":{"name":"flags","labels":{"app":"shop"}},
                "data":{"color":"blue","size":"${var.size}"}}}}}"#);
        let body = find_resource(&d, "kubernetes_config_map_v1", "flags").unwrap();
        let p = |s: &str| Path::parse(s).unwrap();
        assert!(matches!(
            locate(&d, &body, &p("data.color")),
            Spot::Literal(_)
        ));
        assert_eq!(locate(&d, &body, &p("data.size")), Spot::Expression);
        assert!(
            matches!(locate(&d, &body, &p("metadata[0].labels.owner")), Spot::Insert(_, k) if k == "owner")
        );
        assert_eq!(
            locate(&d, &body, &p("metadata[0].resource_version")),
            Spot::Insert(
                body.iter().copied().chain([0]).collect(),
                "resource_version".into()
            )
        );
        assert_eq!(locate(&d, &body, &p("replicas")), Spot::NotSet);
        assert_eq!(locate(&d, &body, &p("metadata")), Spot::Structured);
    }

    #[test]
    fn branch_and_quoting() {
        assert_eq!(
            branch_name("shop prod/eu", "2026-10-28"),
            "driftwatch/codify-shop-prod-eu-2026-10-28"
        );
        assert_eq!(sh("it's"), "'it'\\''s'");
    }
}
