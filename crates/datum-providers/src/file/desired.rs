//! File's declared fields: the table `check` enforces and the typed form the
//! later phases read.

use std::path::PathBuf;

use datum_core::{Content, Resource};
use serde_json::Value;

use crate::common::entry::{EntryDesired, path_meta_ensure};
use crate::common::schema;
use crate::common::{Ensure, FieldKind, FieldSpec, MetaDesired, all_or_nothing, check_fields};
use crate::{FieldError, ProviderError};

/// The content fields; at most one may be declared. The catalogue renders
/// whichever it is into `Resource::content` and removes it from `desired`.
pub const CONTENT_FIELDS: [&str; 3] = ["content", "source", "template"];

pub const FIELDS: &[FieldSpec] = &[
    FieldSpec::required("path", FieldKind::Path),
    FieldSpec::optional("content", FieldKind::Text),
    FieldSpec::optional("source", FieldKind::NonEmptyText),
    FieldSpec::optional("template", FieldKind::NonEmptyText),
    FieldSpec::optional("owner", FieldKind::Account),
    FieldSpec::optional("group", FieldKind::Account),
    FieldSpec::optional("mode", FieldKind::Mode),
    FieldSpec::optional("ensure", FieldKind::Ensure),
    FieldSpec::VALIDATE,
];

/// A File's `desired` as written in a manifest: the type its JSON Schema is
/// derived from (the tests below hold it to `FIELDS` and to `check`).
#[derive(schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    transform = datum_core::schema::optional_never_null,
    title = "File",
    description = "A regular file: content from `content`, `source` (a file of the repository) or `template` (a minijinja template), with owner, group and mode.",
    extend("not" = {"anyOf": [
        {"required": ["content", "source"]},
        {"required": ["content", "template"]},
        {"required": ["source", "template"]},
        {"required": ["ensure", "content"], "properties": {"ensure": {"const": "absent"}}},
        {"required": ["ensure", "source"], "properties": {"ensure": {"const": "absent"}}},
        {"required": ["ensure", "template"], "properties": {"ensure": {"const": "absent"}}},
    ]})
)]
pub struct FileDeclaration {
    /// Where the file lives on the host.
    #[schemars(with = "schema::HostPath")]
    pub path: String,
    /// The content itself (at most one of content, source and template).
    pub content: Option<String>,
    /// A file of the repository, relative to the layer (`files/sshd_config`).
    #[schemars(with = "Option<schema::NonEmptyText>")]
    pub source: Option<String>,
    /// A minijinja template of the repository, rendered with the host's facts.
    #[schemars(with = "Option<schema::NonEmptyText>")]
    pub template: Option<String>,
    #[schemars(with = "Option<schema::Account>")]
    pub owner: Option<String>,
    #[schemars(with = "Option<schema::Account>")]
    pub group: Option<String>,
    #[schemars(with = "Option<schema::Mode>")]
    pub mode: Option<String>,
    #[schemars(with = "Option<schema::Ensure>")]
    pub ensure: Option<String>,
    /// The validator the staged content must pass before it goes live.
    #[schemars(with = "Option<schema::ValidatorName>")]
    pub validate: Option<String>,
}

/// Checks a raw declaration (content fields still in place).
pub fn check(desired: &Value) -> Result<(), Vec<FieldError>> {
    let mut errors = check_fields("File", desired, FIELDS);
    let declared: Vec<&str> = CONTENT_FIELDS
        .into_iter()
        .filter(|f| desired.get(f).is_some())
        .collect();
    if declared.len() > 1 {
        errors.push(FieldError::new(
            &[declared[1]],
            format!(
                "a File takes at most one of `content`, `source` and `template`, not both `{}` and `{}`",
                declared[0], declared[1]
            ),
        ));
    }
    if let Ok(Ensure::Absent) = Ensure::parse(desired.get("ensure"))
        && let Some(first) = declared.first()
    {
        errors.push(FieldError::new(
            &[first],
            format!(
                "`{first}` makes no sense with `ensure: absent`: an absent file has no content"
            ),
        ));
    }
    all_or_nothing(errors)
}

/// A File declaration in typed form. Its content is the resource's own
/// ([`FileDesired::content`]): a pass holds every declaration it parsed,
/// and a copy per File (checksums, source path, inline bytes) was most of
/// what 20,000 of them cost.
#[derive(Debug, Clone)]
pub struct FileDesired {
    pub path: PathBuf,
    pub meta: MetaDesired,
    pub ensure: Ensure,
    /// Content left inline in `desired` by a resource built by hand (the
    /// catalogue renders it into the resource's content instead).
    inline: Option<Content>,
}

impl FileDesired {
    /// The declared content of `resource` (the one this was declared
    /// from); `None`: content is not managed (metadata only; created
    /// empty).
    pub fn content<'a>(&'a self, resource: &'a Resource) -> Option<&'a Content> {
        resource.content.as_ref().or(self.inline.as_ref())
    }
}

impl EntryDesired for FileDesired {
    fn from_resource(resource: &Resource) -> Result<Self, ProviderError> {
        let desired = &resource.desired;
        let (path, meta, ensure) = path_meta_ensure(desired)?;
        // Normally the catalogue has rendered content already; inline content
        // left in `desired` (a resource built by hand) means the same thing.
        let inline = match resource.content {
            Some(_) => None,
            None => desired
                .get("content")
                .and_then(Value::as_str)
                .map(|s| Content::new(s.as_bytes().to_vec())),
        };
        Ok(FileDesired {
            path,
            meta,
            ensure,
            inline,
        })
    }

    fn path(&self) -> &std::path::Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn problems(desired: Value) -> Vec<String> {
        match check(&desired) {
            Ok(()) => Vec::new(),
            Err(errors) => errors.into_iter().map(|e| e.path.join(".")).collect(),
        }
    }

    #[test]
    fn an_unknown_field_hint_names_every_file_field() {
        let errors = check(&json!({"path": "/etc/motd", "bogus": 1})).unwrap_err();
        assert!(
            errors[0].message.contains(
                "(known: path, content, source, template, owner, group, mode, ensure, validate)"
            ),
            "{}",
            errors[0].message
        );
        let errors = check(&json!({"path": "/etc/motd", "validator": "sshd"})).unwrap_err();
        assert!(
            errors[0].message.contains("did you mean `validate`?"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn the_declaration_type_has_the_field_table_and_agrees_with_check() {
        let p = crate::file::FileProvider;
        let schema = crate::Provider::declaration_schema(&p, &mut schema::generator());
        let (names, required) = schema::fields_of(&schema);
        let mut want: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
        want.sort();
        assert_eq!(names, want);
        assert_eq!(required, ["path"]);
        let cases = [
            json!({"path": "/etc/motd"}),
            json!({"path": "/etc/motd", "content": "hi\n", "owner": "root", "group": 0, "mode": "0644"}),
            json!({"path": "/etc/motd", "source": "files/motd", "mode": "4755"}),
            json!({"path": "/etc/motd", "template": "t/motd.j2", "ensure": "present"}),
            json!({"path": "/etc/motd", "ensure": "absent"}),
            json!({"path": "/etc/motd", "content": "x", "source": "y"}),
            json!({"path": "/etc/motd", "source": "y", "template": "z"}),
            json!({"path": "/etc/motd", "content": "x", "ensure": "absent"}),
            json!({"path": "/etc/motd", "mode": 644}),
            json!({"path": "/etc/motd", "mode": "999"}),
            json!({"path": "/etc/motd", "mode": "17777"}),
            json!({"path": "/etc/motd", "mode": "00644"}),
            json!({"path": "/etc/motd", "mode": "44"}),
            json!({"path": "/etc/motd", "content": 5}),
            json!({"path": "/etc/motd", "content": null}),
            json!({"path": "/etc/motd", "source": ""}),
            json!({"path": "/etc/motd", "owner": "a b"}),
            json!({"path": "/etc/motd", "owner": "a:b"}),
            json!({"path": "/etc/motd", "owner": -1}),
            json!({"path": "/etc/motd", "owner": 4294967296u64}),
            json!({"path": "/etc/motd", "ensure": "gone"}),
            json!({"path": "/etc/motd", "colour": "red"}),
            json!({"path": "motd"}),
            json!({"path": "/etc/../motd"}),
            json!({"path": "/etc//motd"}),
            json!({"path": "/etc/motd/"}),
            json!({"path": "/etc/.motd"}),
            json!({"path": "/etc/..motd"}),
            json!({"path": "/"}),
            json!({"content": "x"}),
            json!("a string"),
        ];
        schema::agrees_with_check(&p, &cases).unwrap();
    }

    #[test]
    fn check_accepts_and_rejects_as_documented() {
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (json!({"path": "/etc/motd"}), vec![]),
            (
                json!({"path": "/etc/motd", "content": "hi\n", "owner": "root", "group": 0, "mode": "0644"}),
                vec![],
            ),
            (json!({"path": "/etc/motd", "source": "files/motd"}), vec![]),
            (
                json!({"path": "/etc/motd", "template": "t/motd.j2", "ensure": "present"}),
                vec![],
            ),
            (json!({"path": "/etc/motd", "ensure": "absent"}), vec![]),
            (
                json!({"path": "/etc/motd", "content": "x", "source": "y"}),
                vec!["source"],
            ),
            (
                json!({"path": "/etc/motd", "content": "x", "ensure": "absent"}),
                vec!["content"],
            ),
            (json!({"path": "/etc/motd", "mode": 644}), vec!["mode"]),
            (json!({"path": "/etc/motd", "content": 5}), vec!["content"]),
            (json!({"path": "/etc/motd", "source": ""}), vec!["source"]),
            (json!({"path": "motd"}), vec!["path"]),
            (json!({"content": "x"}), vec![""]),
            (
                json!({"path": "/etc/motd", "validate": ""}),
                vec!["validate"],
            ),
            (
                json!({"path": "/etc/motd", "owner": "a b", "group": [], "mode": "999"}),
                vec!["group", "mode", "owner"],
            ),
        ];
        for (desired, mut want) in cases {
            let mut got = problems(desired.clone());
            got.sort();
            want.sort();
            assert_eq!(got, want, "{desired}");
        }
    }

    #[test]
    fn inline_content_in_desired_is_used_when_the_catalogue_did_not_render() {
        let resource =
            crate::testing::resource("File", json!({"path": "/x", "content": "hi"}), None);
        let d = FileDesired::from_resource(&resource).unwrap();
        assert_eq!(&d.content(&resource).unwrap().bytes[..], b"hi");
    }

    #[test]
    fn rendered_content_is_the_resources_own_never_a_copy() {
        let mut resource = crate::testing::resource("File", json!({"path": "/x"}), None);
        resource.content = Some(Content::new(b"rendered".to_vec()));
        let d = FileDesired::from_resource(&resource).unwrap();
        let content = d.content(&resource).unwrap();
        assert!(std::ptr::eq(content, resource.content.as_ref().unwrap()));
        assert!(d.inline.is_none());
    }
}
