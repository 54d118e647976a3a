//! The User resource type: an account in the root's passwd and shadow files.
//!
//! ```yaml
//! datum: v1alpha1
//! type: User
//! name: deploy
//! desired:
//!   comment: Deploy bot     # optional: passwd's fifth field (GECOS, `useradd -c`)
//!   uid: 2000               # optional: useradd's next free number otherwise
//!   gid: deploy             # primary group, a name or a number (optional)
//!   groups: [ops, www-data] # supplementary groups, exactly these (optional)
//!   home: /srv/deploy       # optional
//!   shell: /bin/bash        # optional
//!   system: false           # optional, when created: a system account (-r)
//!   expiry: 2027-03-31      # optional: the day the account expires
//!                           # (shadow's eighth field, chage -E), or never
//!   ensure: present         # or absent
//!   password_hash: "$6$..." # optional, sensitive: a crypt(3) hash, never a password
//!   update_password: always # or on_create: the hash is set when Datum
//!                           # creates the account, never compared after
//! ```
//!
//! Observed from `ROOT/etc/passwd` and `ROOT/etc/group` (and `shadow`,
//! required only when `password_hash` is declared), parsed once per pass
//! (`common::account_files`); changed with `useradd`, `usermod` and
//! `userdel --root ROOT`, the hash with `chpasswd -e` on standard input.
//! Fields not declared are not managed, but an account with no shadow entry
//! (useradd renames passwd into place before shadow, and one killed in
//! between leaves it so) is a change of `shadow`, completed with
//! `usermod -p !` (locked, as useradd leaves it) or by chpasswd. A home directory is never created
//! or deleted (`useradd -M`, `userdel` without `-r`): declare a Directory
//! for it, so that what appears on the host is what a manifest names.
//!
//! # An account removed by hand
//!
//! A User without `uid` whose account is missing while its home directory
//! (`home`, or `/home/NAME`) is there, owned by a number no account holds
//! (`userdel` without `-r`; on the machine's own root the name service
//! is asked too, as useradd asks it), is made again with that number: useradd's
//! next one would leave the files orphaned. The plan shows it as `uid`
//! and a warning of the pass says why; when another account holds the
//! number now, the account is made as before and the warning names the
//! account that owns the files. A number `/etc/subuid` gives another
//! account's user namespaces (their root owns what it makes as it) is never
//! taken, nor any while that file cannot be read: an account of it would
//! be one they act as. (The number is read from the host, not
//! from a record of Datum's: it is found for accounts Datum never made and
//! on a host whose state store is new, and not at all once the home
//! directory is gone.)
//!
//! # The password hash is sensitive
//!
//! Its value never leaves this module: the observation records only whether
//! the live hash is the declared one (`password_hash: declared` or
//! `other`), a change shows `(sensitive)` on both sides, and the catalogue
//! masks it (`Capabilities::sensitive_fields`). A clear-text password cannot be
//! declared at all: anything that is not a crypt(3) hash (`$id$...`) or a
//! locked marker (`!`, `*`, `!$id$...`) is refused at compile time, and so
//! is a malformed or overlong hash chpasswd would refuse only during an
//! apply (after useradd made the account), the error naming the field,
//! never the value.
//!
//! # A password the account's user may change
//!
//! `update_password: on_create` (Ansible's `update_password`) declares an
//! initial password: the hash is set when Datum creates the account (or
//! completes one useradd left without its shadow entry), and the live hash
//! is never compared after that, so a user who ran `passwd` is no drift:
//! `plan` and `check` show nothing for it and neither `apply` nor a
//! `revert` class sets it back. `always` (the default) keeps the live hash
//! the declared one.

use std::collections::{BTreeSet, HashMap};

use datum_core::{
    Action, DeclaredFields, Diff, FieldChange, Observed, Presence, Resource, ResourceId,
};
use datum_host::Host;
use serde_json::{Value, json};

use crate::Activated;
use crate::common::account_files::{self, AccountFiles};
use crate::common::fields::{bool_field, type_name, unknown_fields};
use crate::common::{Ensure, all_or_nothing, ensure_change};
use crate::group::{AccountName, account_id};
use crate::kind::planned;
use crate::{
    Capabilities, Exclusive, FieldError, FieldLookup, Kind, OrderingEdge, OrdersOthers, Planned,
    ProviderError, Reach, Refusal,
};

/// The manifest `type:` of this kind.
pub const KIND: &str = "User";

const FIELDS: &[&str] = &[
    "name",
    "comment",
    "uid",
    "gid",
    "groups",
    "home",
    "shell",
    "system",
    "ensure",
    "password_hash",
    "update_password",
    "expiry",
];

/// When the account expires (`expiry`: Puppet's word; Ansible's `expires`):
/// shadow's eighth field, set with `useradd -e` / `usermod -e` (`chage -E`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// No expiry (an empty field; `-e ''`).
    Never,
    /// From this day on (days since 1970-01-01, as shadow counts them; at
    /// least 1: shadow(5) says 0 may be read as never or as expired).
    Day(u32),
}

/// The last day [`expiry_date`] can write (9999-12-31).
const LAST_DAY: u32 = 2_932_896;

/// `days` since 1970-01-01 as `YYYY-MM-DD`; `None` past [`LAST_DAY`].
fn expiry_date(days: u32) -> Option<String> {
    if days > LAST_DAY {
        return None;
    }
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::from(days) * 86_400);
    let mut text = humantime::format_rfc3339_seconds(at).to_string();
    text.truncate(10);
    Some(text)
}

impl Expiry {
    /// How the field is declared and observed: `YYYY-MM-DD` or `never`.
    fn text(self) -> String {
        match self {
            Expiry::Never => "never".to_owned(),
            Expiry::Day(days) => expiry_date(days).unwrap_or_else(|| days.to_string()),
        }
    }

    /// What `useradd -e` and `usermod -e` take for it.
    fn argument(self) -> String {
        match self {
            Expiry::Never => String::new(),
            Expiry::Day(_) => self.text(),
        }
    }

    /// A declared `expiry`: `never`, or a day `YYYY-MM-DD` after
    /// 1970-01-01 and at most 9999-12-31.
    fn parse(text: &str) -> Result<Expiry, String> {
        if text == "never" {
            return Ok(Expiry::Never);
        }
        let shaped = text.len() == 10
            && text.bytes().enumerate().all(|(i, b)| {
                if i == 4 || i == 7 {
                    b == b'-'
                } else {
                    b.is_ascii_digit()
                }
            });
        let days = humantime::parse_rfc3339(&format!("{text}T00:00:00Z"))
            .ok()
            .filter(|_| shaped)
            .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| u32::try_from(d.as_secs() / 86_400).ok());
        match days {
            Some(days) if days >= 1 => Ok(Expiry::Day(days)),
            Some(_) => Err("`expiry` must be a day after 1970-01-01 (shadow reads day 0 as either never or expired), or `never`".to_owned()),
            None => Err(format!(
                "`expiry` must be a date `YYYY-MM-DD` (such as `2027-03-31`) or `never`, found `{}`",
                text.escape_debug()
            )),
        }
    }

    /// Shadow's eighth field as observed: empty is `never`, a number of
    /// days its date; anything else as written (a change then).
    fn observed(field: &str) -> String {
        if field.is_empty() {
            return "never".to_owned();
        }
        match field.parse::<u32>() {
            Ok(days) if days >= 1 => Expiry::Day(days).text(),
            _ => field.to_owned(),
        }
    }
}

/// When the declared hash is set (`update_password`, Ansible's word).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum UpdatePassword {
    /// Whenever the live hash is another: it is compared on every pass.
    #[default]
    Always,
    /// Only when Datum creates the account (or gives it its missing shadow
    /// entry); never compared after that.
    OnCreate,
}

/// What a change to the hash shows instead of it.
const HIDDEN: &str = "(sensitive)";

/// The observed `shadow` of an account the root's shadow file has no line
/// for (the field is absent otherwise).
const SHADOW_MISSING: &str = "missing";

/// A User declaration, parsed.
#[derive(Clone, PartialEq, Eq)]
pub struct UserDesired {
    pub name: String,
    /// passwd's fifth field (GECOS), when managed.
    pub comment: Option<String>,
    pub uid: Option<u32>,
    /// The primary group as declared: a name or a decimal number.
    pub gid: Option<String>,
    /// Supplementary groups, when managed.
    pub groups: Option<BTreeSet<String>>,
    pub home: Option<String>,
    pub shell: Option<String>,
    pub system: bool,
    pub ensure: Ensure,
    password_hash: Option<String>,
    /// When the hash is set and compared.
    pub update_password: UpdatePassword,
    /// When the account expires, when managed.
    pub expiry: Option<Expiry>,
    /// The resource says `sensitive: true` itself: what the plan says it
    /// would refuse names none of its values (set by the kind's `declare`).
    hides_values: bool,
}

impl std::fmt::Debug for UserDesired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserDesired")
            .field("name", &self.name)
            .field("comment", &self.comment)
            .field("uid", &self.uid)
            .field("gid", &self.gid)
            .field("groups", &self.groups)
            .field("home", &self.home)
            .field("shell", &self.shell)
            .field("system", &self.system)
            .field("ensure", &self.ensure)
            .field(
                "password_hash",
                &self.password_hash.as_ref().map(|_| HIDDEN),
            )
            .field("update_password", &self.update_password)
            .field("expiry", &self.expiry)
            .finish()
    }
}

/// A User's `desired` as written in a manifest (the type its JSON Schema is
/// derived from; held to [`UserDesired::parse`] by the tests).
#[derive(schemars::JsonSchema)]
#[schemars(
    deny_unknown_fields,
    transform = datum_core::schema::optional_never_null,
    title = "User",
    extend("dependentRequired" = {"update_password": ["password_hash"]}),
    description = "An account in the host's /etc/passwd (changed with useradd, usermod and userdel; never its home directory)."
)]
pub struct UserDeclaration {
    /// The account's name (default: the resource's name).
    #[schemars(with = "Option<AccountName>")]
    pub name: Option<String>,
    /// passwd's fifth field (GECOS: a full name, a room, a phone), without
    /// `:` or control characters.
    #[schemars(with = "Option<Comment>")]
    pub comment: Option<String>,
    /// The account's number.
    #[schemars(range(max = 4294967294u32))]
    pub uid: Option<u32>,
    /// The primary group: a name or a number.
    #[schemars(with = "Option<GroupRef>")]
    pub gid: Option<String>,
    /// Supplementary groups, exactly these.
    #[schemars(with = "Option<UniqueNames>")]
    pub groups: Option<Vec<String>>,
    /// The home directory, without `:` or control characters (never created
    /// or removed: declare a Directory).
    #[schemars(with = "Option<crate::common::schema::HostPath>")]
    pub home: Option<String>,
    /// The login shell, without `:` or control characters.
    #[schemars(with = "Option<crate::common::schema::HostPath>")]
    pub shell: Option<String>,
    /// When created: a system account (its number from the system range).
    pub system: Option<bool>,
    #[schemars(with = "Option<crate::common::schema::Ensure>")]
    pub ensure: Option<String>,
    /// A crypt(3) hash (`$6$...`, `$y$...`) or a locked marker (`!`, `*`);
    /// sensitive: never shown. Never a password.
    #[schemars(with = "Option<PasswordHash>")]
    pub password_hash: Option<String>,
    /// `always` (default): the live hash is kept the declared one;
    /// `on_create`: set when the account is created, never compared after
    /// (the account's user may change it). Only with `password_hash`.
    #[schemars(with = "Option<UpdatePasswordWhen>")]
    pub update_password: Option<String>,
    /// The day the account expires, `YYYY-MM-DD` (shadow's eighth field,
    /// `chage -E`), or `never`.
    #[schemars(with = "Option<ExpiryDate>")]
    pub expiry: Option<String>,
}

/// A value of the manifest schema (see the declaration type above).
pub struct ExpiryDate;

impl schemars::JsonSchema for ExpiryDate {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AccountExpiry".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^(never|[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))$",
            "description": "The day an account expires, `YYYY-MM-DD` (quoted or not), after 1970-01-01, or `never`.",
        })
    }
}

/// A value of the manifest schema (see the declaration type above).
pub struct UpdatePasswordWhen;

impl schemars::JsonSchema for UpdatePasswordWhen {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "UpdatePassword".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "enum": ["always", "on_create"],
            "description": "When `password_hash` is set: `always` (default, compared on every pass) or `on_create` (when Datum creates the account only; a password the user changes is no drift).",
        })
    }
}

/// A value of the manifest schema (see the declaration type above).
pub struct UniqueNames;

impl schemars::JsonSchema for UniqueNames {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "UniqueAccountNames".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let item = generator.subschema_for::<AccountName>();
        schemars::json_schema!({ "type": "array", "items": item, "uniqueItems": true })
    }
}

/// A value of the manifest schema (see the declaration type above).
pub struct Comment;

impl schemars::JsonSchema for Comment {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AccountComment".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[^:\\x00-\\x1f\\x7f-\\x9f]*$",
            "description": "passwd's fifth field (GECOS), such as `Alice Liddell,Room 4`: any text without `:` or control characters (a line break would end the passwd line).",
        })
    }
}

/// A value of the manifest schema (see the declaration type above).
pub struct GroupRef;

impl schemars::JsonSchema for GroupRef {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GroupRef".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let name = generator.subschema_for::<AccountName>();
        schemars::json_schema!({
            "description": "A group by name or number.",
            "oneOf": [name, { "type": "integer", "minimum": 0, "maximum": 4294967294u64 }]
        })
    }
}

/// A value of the manifest schema (see the declaration type above).
pub struct PasswordHash;

impl schemars::JsonSchema for PasswordHash {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PasswordHash".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^(!?\\$[a-z0-9]+(\\$[!-#%-9;-~]*)+\\$[!-#%-9;-~]+|!|\\*|!\\*)$",
            "maxLength": MAX_HASH_LEN,
            "description": "A crypt(3) hash such as `$y$...` or `$6$...` (mkpasswd), at most 384 characters, or `!` / `*` for a locked account. Sensitive: never shown.",
            "writeOnly": true,
        })
    }
}

/// The longest `password_hash` taken: a crypt(3) hash is at most 383
/// characters (libxcrypt's `CRYPT_OUTPUT_SIZE`, 384 with its NUL), and a
/// `!` may lock it. chpasswd refuses a line longer than its buffer (8 KiB)
/// only during an apply, after useradd made the account.
pub const MAX_HASH_LEN: usize = 384;

/// Whether `text` is a crypt(3) hash or a locked marker, never a password:
/// `!`, `*` or `!*`; or `$id$` (lower-case letters and digits: `$6$`,
/// `$y$`, `$2b$`), then at least two `$`-separated parts, the last not
/// empty (`$6$salt$hash`, `$y$j9T$salt$hash`, `$2b$12$salthash`), each of
/// printable ASCII but `:` (a shadow field's end), the whole at most
/// [`MAX_HASH_LEN`] characters, optionally locked by a leading `!`.
fn check_hash(text: &str) -> Result<(), String> {
    if matches!(text, "!" | "*" | "!*") {
        return Ok(());
    }
    if text.len() > MAX_HASH_LEN {
        // Neither the value nor its length is quoted.
        return Err(format!(
            "`password_hash` is longer than any crypt(3) hash (at most {MAX_HASH_LEN} characters); declare a hash made by `mkpasswd`, never a password"
        ));
    }
    let body = text.strip_prefix('!').unwrap_or(text);
    let hash = body.strip_prefix('$').is_some_and(|rest| {
        let mut parts = rest.split('$');
        let id = parts.next().unwrap_or("");
        let parts: Vec<&str> = parts.collect();
        !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && parts.len() >= 2
            && parts.last().is_some_and(|last| !last.is_empty())
            && parts
                .iter()
                .all(|p| p.bytes().all(|b| b.is_ascii_graphic() && b != b':'))
    });
    if hash {
        Ok(())
    } else {
        // The value itself is not quoted: it may be a password.
        Err("`password_hash` must be a crypt(3) hash such as `$y$...` or `$6$...` (`$id$`, then its `$`-separated parts of printable ASCII, without `:`; make one with `mkpasswd`), or `!` / `*` for a locked account; a password is never declared".to_owned())
    }
}

fn text_field(
    map: &dyn DeclaredFields,
    field: &str,
    errors: &mut Vec<FieldError>,
) -> Option<String> {
    match map.get(field)? {
        Value::String(s) => Some(s.clone()),
        other => {
            errors.push(FieldError::new(
                &[field],
                format!("`{field}` must be a string, found {}", type_name(other)),
            ));
            None
        }
    }
}

fn absolute_path(value: &str, field: &str) -> Result<(), FieldError> {
    // A control character (a carriage return, an escape) is no passwd
    // field: useradd fails half-way ("failure while writing changes to
    // /etc/passwd") or the line reads back differently on every pass.
    let ok = value.starts_with('/')
        && !value.chars().any(|c| c == ':' || c.is_control())
        && value
            .split('/')
            .skip(1)
            .all(|c| !c.is_empty() && c != "." && c != "..")
        || value == "/";
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            &[field],
            format!(
                "`{field}` must be an absolute, normalised path without `:` or control characters"
            ),
        ))
    }
}

impl UserDesired {
    /// Parses `desired`; `default_name` is the resource's own name. Returns
    /// every problem found (never quoting a password hash).
    pub fn parse(
        desired: &dyn DeclaredFields,
        default_name: &str,
    ) -> Result<Self, Vec<FieldError>> {
        if let Err(found) = desired.mapping() {
            return Err(vec![FieldError::new(
                &[],
                format!("`desired` of a User must be a mapping, found {found}"),
            )]);
        }
        let mut errors = unknown_fields(KIND, desired, FIELDS);
        let name =
            text_field(desired, "name", &mut errors).unwrap_or_else(|| default_name.to_owned());
        if let Err(m) = account_files::check_name(&name) {
            errors.push(FieldError::new(&["name"], m));
        }
        let comment = text_field(desired, "comment", &mut errors);
        if let Some(c) = &comment
            && c.chars().any(|c| c == ':' || c.is_control())
        {
            // useradd refuses `:` and a line break ("invalid comment"); any
            // other control character (a carriage return, an escape) would
            // be written and read back differently, or print as a terminal
            // sequence wherever the field is shown.
            errors.push(FieldError::new(
                &["comment"],
                "`comment` must be text without `:` or control characters (a line break would end the passwd line)",
            ));
        }
        let uid = desired
            .get("uid")
            .map(|v| account_id(v, "uid"))
            .transpose()
            .map_err(|e| errors.push(e))
            .ok()
            .flatten();
        let gid = match desired.get("gid") {
            None => None,
            Some(Value::String(s)) if account_files::check_name(s).is_ok() => Some(s.clone()),
            Some(v @ Value::Number(_)) => account_id(v, "gid")
                .map(|n| n.to_string())
                .map_err(|e| errors.push(e))
                .ok(),
            Some(other) => {
                errors.push(FieldError::new(
                    &["gid"],
                    format!(
                        "`gid` must be a group name or number, found {}",
                        match other {
                            Value::String(s) => format!("`{s}`"),
                            v => type_name(v).to_owned(),
                        }
                    ),
                ));
                None
            }
        };
        let groups = match desired.get("groups") {
            None => None,
            Some(Value::Array(items)) => {
                let mut set = BTreeSet::new();
                for (i, item) in items.iter().enumerate() {
                    let index = i.to_string();
                    match item.as_str().map(|s| (s, account_files::check_name(s))) {
                        Some((s, Ok(()))) => {
                            if !set.insert(s.to_owned()) {
                                errors.push(FieldError::new(
                                    &["groups", &index],
                                    format!("`{s}` is listed twice in `groups`"),
                                ));
                            }
                        }
                        Some((_, Err(m))) => errors.push(FieldError::new(&["groups", &index], m)),
                        None => errors.push(FieldError::new(
                            &["groups", &index],
                            format!(
                                "a group in `groups` must be a name, found {}",
                                type_name(item)
                            ),
                        )),
                    }
                }
                Some(set)
            }
            Some(other) => {
                errors.push(FieldError::new(
                    &["groups"],
                    format!(
                        "`groups` must be a list of group names, found {}",
                        type_name(other)
                    ),
                ));
                None
            }
        };
        let home = text_field(desired, "home", &mut errors);
        if let Some(h) = &home
            && let Err(e) = absolute_path(h, "home")
        {
            errors.push(e);
        }
        let shell = text_field(desired, "shell", &mut errors);
        if let Some(s) = &shell
            && let Err(e) = absolute_path(s, "shell")
        {
            errors.push(e);
        }
        let system = bool_field(desired, "system", &mut errors).unwrap_or(false);
        let ensure = Ensure::parse(desired.get("ensure"))
            .map_err(|m| errors.push(FieldError::new(&["ensure"], m)))
            .unwrap_or(Ensure::Present);
        let password_hash = match desired.get("password_hash") {
            None => None,
            Some(Value::String(s)) => match check_hash(s) {
                Ok(()) => Some(s.clone()),
                Err(m) => {
                    errors.push(FieldError::new(&["password_hash"], m));
                    None
                }
            },
            Some(other) => {
                errors.push(FieldError::new(
                    &["password_hash"],
                    format!(
                        "`password_hash` must be a string, found {}",
                        type_name(other)
                    ),
                ));
                None
            }
        };
        let update_password = match desired.get("update_password") {
            None => UpdatePassword::Always,
            Some(Value::String(s)) if s == "always" => UpdatePassword::Always,
            Some(Value::String(s)) if s == "on_create" => UpdatePassword::OnCreate,
            Some(other) => {
                errors.push(FieldError::new(
                    &["update_password"],
                    format!(
                        "`update_password` must be `always` or `on_create`, found {}",
                        match other {
                            Value::String(s) => format!("`{}`", s.escape_debug()),
                            v => type_name(v).to_owned(),
                        }
                    ),
                ));
                UpdatePassword::Always
            }
        };
        if desired.get("update_password").is_some() && desired.get("password_hash").is_none() {
            errors.push(FieldError::new(
                &["update_password"],
                "`update_password` says when `password_hash` is set, and no `password_hash` is declared",
            ));
        }
        let expiry = match desired.get("expiry") {
            None => None,
            Some(Value::String(s)) => Expiry::parse(s)
                .map_err(|m| errors.push(FieldError::new(&["expiry"], m)))
                .ok(),
            Some(other) => {
                errors.push(FieldError::new(
                    &["expiry"],
                    format!(
                        "`expiry` must be a date `YYYY-MM-DD` or `never`, found {}",
                        type_name(other)
                    ),
                ));
                None
            }
        };
        all_or_nothing(errors)?;
        Ok(UserDesired {
            name,
            comment,
            uid,
            gid,
            groups,
            home,
            shell,
            system,
            ensure,
            password_hash,
            update_password,
            expiry,
            hides_values: false,
        })
    }

    /// Whether a password hash is declared (its value stays here).
    pub fn declares_hash(&self) -> bool {
        self.password_hash.is_some()
    }

    /// Whether observing it needs the shadow file (a hash or an expiry).
    fn needs_shadow(&self) -> bool {
        self.declares_hash() || self.expiry.is_some()
    }
}

fn desired(resource: &Resource) -> Result<UserDesired, ProviderError> {
    let mut d = UserDesired::parse(&resource.desired, &resource.id.name)
        .map_err(crate::common::fields::invalid)?;
    d.hides_values = resource.sensitive && !resource.sensitive_by_field_only;
    Ok(d)
}

/// Where an observation lists the groups a User declared present names
/// (`gid`, `groups`) that no account file has, each as `{field, name}`:
/// useradd and usermod refuse them ("group 'ops' does not exist"), so the
/// plan calls the change one that would fail unless something earlier in
/// the pass may make the group ([`UserProvider`]'s
/// `refuses_unless_changed_first`). Left out when there are none.
const UNKNOWN_GROUPS: &str = "unknown_groups";

/// Where an observation names another account that holds the declared
/// `uid` (useradd and usermod refuse a second account of one number, "UID
/// 0 is not unique"). Left out when no other account holds it.
const UID_TAKEN_BY: &str = "uid_taken_by";

/// What a User declared present needs of the account files that they do
/// not give it ([`UNKNOWN_GROUPS`], [`UID_TAKEN_BY`]).
fn note_refused(d: &UserDesired, files: &AccountFiles, observed: &mut Observed) {
    if d.ensure != Ensure::Present {
        return;
    }
    let known = |group: &str| match group.parse::<u32>() {
        Ok(n) => files.groups_by_id(n).is_some(),
        Err(_) => files.group(group).is_some(),
    };
    // On the machine's own root useradd and usermod take a `-g` group the
    // name service knows (LDAP, sssd) that the files do not: left to them.
    let named = d
        .gid
        .iter()
        .filter(|_| !files.asks_name_service())
        .map(|g| ("gid", g))
        .chain(d.groups.iter().flatten().map(|g| ("groups", g)));
    let unknown: Vec<Value> = named
        .filter(|(_, group)| !known(group))
        .map(|(field, group)| json!({"field": field, "name": group}))
        .collect();
    if !unknown.is_empty() {
        observed
            .fields
            .insert(UNKNOWN_GROUPS.to_owned(), Value::Array(unknown));
    }
    if let Some(other) = d.uid.and_then(|n| files.other_user_with_uid(n, &d.name)) {
        observed
            .fields
            .insert(UID_TAKEN_BY.to_owned(), json!(other));
    }
}

/// Why useradd or usermod will refuse the change `diff` makes, from what
/// [`note_refused`] found for a field it changes (the first reason);
/// `None` when nothing did.
fn refusal(d: &UserDesired, observed: &Observed, diff: &Diff) -> Option<String> {
    let changes = |field: &str| diff.changes.iter().any(|c| c.field == field);
    let program = if observed.presence == Presence::Present {
        "usermod"
    } else {
        "useradd"
    };
    if let (Some(uid), Some(other)) = (
        d.uid,
        observed.fields.get(UID_TAKEN_BY).and_then(Value::as_str),
    ) && changes("uid")
    {
        if d.hides_values {
            return Some(format!(
                "the declared uid belongs to another account: {program} refuses a second account of one number"
            ));
        }
        return Some(format!(
            "uid {uid} belongs to account `{other}`: {program} refuses a second account of one number (declare another uid, or change `{other}` first)"
        ));
    }
    let unknown = observed.fields.get(UNKNOWN_GROUPS)?.as_array()?;
    let (field, name) = unknown
        .iter()
        .filter_map(|u| Some((u["field"].as_str()?, u["name"].as_str()?)))
        .find(|(field, _)| changes(field))?;
    // useradd's -G reads the files only and refuses such a group, as both
    // do a -g on a root other than / (a gid on / is not noted). usermod -G
    // on the machine's own root takes a group only the name service knows
    // and exits 0 without the membership: it does not always refuse.
    let outcome = if program == "usermod" && field == "groups" {
        "usermod would not make the membership (it refuses a group it cannot find; on the machine's own root it takes one only the name service knows and exits 0 without adding the account to it)".to_owned()
    } else {
        format!("{program} refuses it")
    };
    if d.hides_values {
        return Some(format!(
            "a group named in `{field}` is in no account file (/etc/group) and nothing before it in the pass makes it: {outcome}"
        ));
    }
    Some(format!(
        "group `{name}` (named in `{field}`) is in no account file (/etc/group) and nothing before it in the pass makes it: {outcome} (declare a Group for it, or name a group the host has)"
    ))
}

/// Where an observation of a missing account without a declared `uid`
/// records the number it is made with: the owner of its home directory,
/// which no account holds (see [`note_home_owner`]).
const HOME_UID: &str = "home_uid";

/// The home directory a new account has: the declared one, or useradd's
/// default `/home/NAME` (a root whose `/etc/default/useradd` says another
/// `HOME` is not read: there nothing is found, as before).
fn home_of(d: &UserDesired) -> String {
    d.home
        .clone()
        .unwrap_or_else(|| format!("/home/{}", d.name))
}

/// A User without a declared `uid` whose account is missing while its home
/// directory is there, owned by `owner`: an account removed by hand
/// (`userdel` without `-r`) leaves its files owned by a number no account
/// holds, and useradd's next free number would leave them orphaned (or
/// give them to the next account made). That number, when no account
/// holds it, is the one the account is made with again ([`HOME_UID`]; the
/// plan shows it as `uid`). When another account holds it now, the account
/// is made as before and the note says whose the files are. Root's number
/// is never taken from a home (a home root owns is made so on purpose).
/// Returns the note for the pass's warnings (`None`: nothing to say).
/// `holder` says which account holds a number (`Some(None)`: none;
/// `None`: it cannot tell, and nothing is done).
fn note_home_owner(
    d: &UserDesired,
    home: &str,
    owner: Option<u32>,
    holder: impl FnOnce(u32) -> Option<Option<String>>,
    observed: &mut Observed,
) -> Option<String> {
    let uid = owner.filter(|n| *n != 0)?;
    let holder = holder(uid)?;
    if holder.is_none() {
        observed.fields.insert(HOME_UID.to_owned(), json!(uid));
    }
    let name = &d.name;
    Some(match (holder, d.hides_values) {
        (None, false) => format!(
            "account `{name}` is made with uid {uid}, the owner of its home directory {home}, which no account holds (its files stay its own; declare `uid` to choose another number)"
        ),
        (Some(other), false) => format!(
            "its home directory {home} is owned by uid {uid}, account `{other}`'s: useradd gives `{name}` another number, so if uid {uid} was `{name}`'s before, what it owns is `{other}`'s now (chown the files, or declare `uid`)"
        ),
        (None, true) => "made with the number that owns its home directory, which no account holds (the values are not shown: the resource is sensitive)".to_owned(),
        (Some(_), true) => "its home directory is owned by another account: useradd gives it another number, so if that number was this account's before, what it owns is the other account's now (the values are not shown: the resource is sensitive)".to_owned(),
    })
}

/// The note for a missing account whose home directory is owned by `uid`,
/// one of the subordinate ids `/etc/subuid` gives account `other` (`None`:
/// the file cannot be read): not taken, as an account of that number would
/// be one that account's user namespaces act as (their root writes, signals
/// and owns as it); useradd chooses, as before.
fn subordinate_note(d: &UserDesired, home: &str, uid: u32, other: Option<&str>) -> String {
    let name = &d.name;
    match (other, d.hides_values) {
        (Some(other), false) => format!(
            "its home directory {home} is owned by uid {uid}, one of the subordinate ids /etc/subuid gives `{other}` (its user namespaces' ids): not taken, useradd gives `{name}` another number (chown the files, or declare `uid`)"
        ),
        (None, false) => format!(
            "its home directory {home} is owned by uid {uid}, and /etc/subuid cannot be read to tell whether it is another account's subordinate id: not taken, useradd gives `{name}` another number (declare `uid` to choose it)"
        ),
        (_, true) => "its home directory is owned by a number that may be another account's subordinate id (/etc/subuid): not taken, useradd gives it another number (the values are not shown: the resource is sensitive)".to_owned(),
    }
}

/// What observe records about a user (never the hash itself).
pub fn observation(d: &UserDesired, files: &AccountFiles) -> Observed {
    let Some(user) = files.user(&d.name) else {
        let mut observed = Observed::absent();
        note_refused(d, files, &mut observed);
        return observed;
    };
    let mut observed = Observed::absent();
    observed.presence = Presence::Present;
    note_refused(d, files, &mut observed);
    let fields = &mut observed.fields;
    fields.insert("uid".to_owned(), json!(user.uid));
    fields.insert("gid".to_owned(), json!(user.gid));
    // The primary group by name too, when it has one: a declared name is
    // compared by name (renumbering the group is the Group's business).
    if let Some(group) = files.groups_by_id(user.gid) {
        fields.insert("gid_name".to_owned(), json!(group));
    }
    fields.insert(
        "groups".to_owned(),
        json!(files.memberships(&d.name).into_iter().collect::<Vec<_>>()),
    );
    fields.insert("comment".to_owned(), json!(user.comment));
    fields.insert("home".to_owned(), json!(user.home));
    fields.insert("shell".to_owned(), json!(user.shell));
    // No line in a shadow file that was read: half-made (see `diff`).
    if files.lacks_shadow_entry(&d.name) {
        fields.insert("shadow".to_owned(), json!(SHADOW_MISSING));
    }
    if d.expiry.is_some()
        && let Some(field) = files.expiry(&d.name)
    {
        fields.insert("expiry".to_owned(), json!(Expiry::observed(field)));
    }
    // An initial password only (`on_create`): whatever the account has now
    // is its user's business, never looked at.
    if let Some(declared) = d
        .password_hash
        .as_ref()
        .filter(|_| d.update_password == UpdatePassword::Always)
    {
        let same = files.hash(&d.name).is_some_and(|h| h.is(declared));
        fields.insert(
            "password_hash".to_owned(),
            json!(if same { "declared" } else { "other" }),
        );
    }
    observed
}

/// The Users declared absent, each with the account name it removes (for
/// the edges between them and the Groups: `group::around_users_removed`).
pub(crate) fn removed(resources: &[Resource]) -> Vec<(&Resource, String)> {
    resources
        .iter()
        .filter(|r| r.id.kind == KIND)
        .filter_map(|r| {
            let d = UserDesired::parse(&r.desired, &r.id.name).ok()?;
            (d.ensure == Ensure::Absent).then_some((r, d.name))
        })
        .collect()
}

/// The `User` resource type.
#[derive(Debug, Default, Clone, Copy)]
pub struct UserProvider;

/// Whatever is owned by a declared User (a file's, a directory's `owner`)
/// comes after it: the account exists before anything is chowned to it.
impl OrdersOthers for UserProvider {
    fn edges(&self, resources: &[Resource]) -> Vec<OrderingEdge> {
        // By name, the first declaration of a name first (a second is a
        // conflict reported elsewhere): every other resource looks its
        // owner up here.
        // A User without `gid` may also make its own group (useradd's
        // USERGROUPS_ENAB): what names that group (a file's `group:`)
        // comes after it too.
        let mut users: HashMap<String, (&Resource, bool)> = HashMap::new();
        for r in resources.iter().filter(|r| r.id.kind == KIND) {
            if let Ok(d) = UserDesired::parse(&r.desired, &r.id.name)
                && d.ensure == Ensure::Present
            {
                let own_group = d.gid.is_none();
                users.entry(d.name).or_insert((r, own_group));
            }
        }
        if users.is_empty() {
            return Vec::new();
        }
        let mut edges = Vec::new();
        for r in resources.iter().filter(|r| r.id.kind != KIND) {
            let named = |field: &str| {
                let name = r.desired.get(field).and_then(Value::as_str)?;
                users.get(name)
            };
            let owner = named("owner").map(|(user, _)| user);
            let group = named("group")
                .filter(|(_, own_group)| *own_group)
                .map(|(user, _)| user);
            // One edge per user: a file owned by deploy:deploy names the
            // same User twice (compared here, never against every edge so
            // far, which grew with the resources owned by a User).
            let group = group.filter(|g| owner.is_none_or(|o| o.id != g.id));
            for user in [owner, group].into_iter().flatten() {
                edges.push(OrderingEdge {
                    from: r.id.clone(),
                    after: user.id.clone(),
                });
            }
        }
        edges
    }

    /// What is owned by an account a User declares absent (a File's,
    /// a Directory's `owner`): see `crate::group::naming_removed`.
    fn warnings(&self, resources: &[Resource]) -> Vec<(ResourceId, String)> {
        let removed: HashMap<String, &Resource> = removed(resources)
            .into_iter()
            .map(|(r, name)| (name, r))
            .collect();
        crate::group::naming_removed(resources, &removed, "account", |r| {
            match r.desired.get("owner").and_then(Value::as_str) {
                Some(owner) if r.id.kind != KIND && owner.parse::<u32>().is_err() => {
                    vec![("owner", owner)]
                }
                _ => Vec::new(),
            }
        })
    }
}

impl Kind for UserProvider {
    const KIND: &'static str = KIND;
    type Declaration = UserDesired;
    type Written = UserDeclaration;
    type Staging = Planned;

    fn declare(&self, resource: &Resource) -> Result<UserDesired, ProviderError> {
        desired(resource)
    }

    fn check_fields(&self, desired: &Value) -> Result<(), Vec<FieldError>> {
        UserDesired::parse(desired, "user").map(drop)
    }

    fn observe(
        &self,
        host: &Host,
        resource: &Resource,
        d: &UserDesired,
    ) -> Result<Observed, ProviderError> {
        let files = account_files::current(host, d.needs_shadow())
            .map_err(account_files::account_failure)?;
        let mut observed = observation(d, &files);
        if observed.presence == Presence::Absent && d.ensure == Ensure::Present && d.uid.is_none() {
            let home = home_of(d);
            // What cannot be looked at (a boundary, a link on the way) is
            // left to useradd's own choice, as before.
            let owner = host
                .lstat(std::path::Path::new(&home))
                .ok()
                .flatten()
                .filter(|st| st.kind == datum_host::FileKind::Directory)
                .map(|st| st.meta.uid);
            // Who holds the number: the files, and on the machine's own
            // root the name service too (useradd asks it there). When it
            // cannot answer, useradd chooses, as before.
            let holder = |uid: u32| match files.other_user_with_uid(uid, &d.name) {
                Some(name) => Some(Some(name.to_owned())),
                None if files.asks_name_service() => {
                    // An account of its own name there is not another's.
                    account_files::name_service_user(host, uid)
                        .ok()
                        .filter(|h| h.as_deref() != Some(d.name.as_str()))
                }
                None => Some(None),
            };
            // A number /etc/subuid gives another account's user namespaces
            // is theirs to act as: never taken (nor when it cannot be read).
            let note = match owner.map(|n| (n, account_files::subordinate_owner(host, n))) {
                Some((n, Ok(Some(other)))) if n != 0 => {
                    Some(subordinate_note(d, &home, n, Some(&other)))
                }
                Some((n, Err(_))) if n != 0 => Some(subordinate_note(d, &home, n, None)),
                _ => note_home_owner(d, &home, owner, holder, &mut observed),
            };
            if let Some(note) = note {
                host.notice(format!("{}: {note}", resource.id));
            }
        }
        Ok(observed)
    }

    fn plan(&self, _resource: &Resource, d: &UserDesired, observed: &Observed) -> Diff {
        diff(d, observed)
    }

    /// A group no account file has (in `gid` or `groups`), or a `uid`
    /// another account holds: useradd and usermod refuse them, unless an
    /// earlier change of the account files (a Group made, a User removed)
    /// comes first.
    fn refuses_unless_changed_first(
        &self,
        d: &UserDesired,
        observed: &Observed,
    ) -> Option<Refusal> {
        refusal(d, observed, &diff(d, observed)).map(|why| Refusal {
            why,
            reach: Reach::AlsoAround(crate::common::meta::ACCOUNT_FILES),
        })
    }

    fn stage(
        &self,
        _host: &Host,
        _resource: &Resource,
        _d: &UserDesired,
        observed: &Observed,
        diff: &Diff,
    ) -> Result<Planned, ProviderError> {
        Ok(planned(observed, diff))
    }

    fn activate(
        &self,
        host: &Host,
        resource: &Resource,
        d: &UserDesired,
        staging: Planned,
    ) -> Result<Activated<Planned>, ProviderError> {
        let diff = &staging.diff;
        let failure = account_files::activation_failure(resource);
        let run = |program, args: Vec<String>| {
            account_files::run_tool(host, resource, program, args, &d.name).map_err(&failure)
        };
        let changed = |field: &str| diff.changes.iter().any(|c| c.field == field);
        // What went through before the hash (for a report that the hash
        // failed after it: the host has moved all the same).
        let done = match diff.action {
            Some(Action::Remove) => {
                // userdel would take the user's own group with it
                // (USERGROUPS_ENAB): one a Group declares keeps its name,
                // number and gshadow entry by being renamed for the while.
                let kept = keep_declared_group(host, resource, d).map_err(&failure)?;
                let removed = run("userdel", vec!["--".into(), d.name.clone()]);
                if let Some(kept) = kept {
                    // Given back whatever userdel did; if this fails, the
                    // Group finds it under `kept` and renames it next pass.
                    let back = run(
                        "groupmod",
                        vec!["-n".into(), d.name.clone(), "--".into(), kept],
                    );
                    removed.and(back)?;
                } else {
                    removed?;
                }
                return Ok(Activated::Done);
            }
            Some(Action::Create) => {
                let mut args = vec!["-M".to_owned()];
                args.extend(account_args(d, true, |_| true));
                // The number a missing account's home directory still has
                // (`HOME_UID`), planned as a change of `uid`.
                if d.uid.is_none()
                    && let Some(uid) = diff
                        .changes
                        .iter()
                        .find(|c| c.field == "uid")
                        .and_then(|c| c.after.as_ref()?.as_u64())
                {
                    args.extend(["-u".to_owned(), uid.to_string()]);
                }
                if d.gid.is_none()
                    && name_group_exists(host, d).map_err(account_files::account_failure)?
                {
                    // useradd would make a group named after the user and
                    // refuses when one exists (a declared Group of that
                    // name, made earlier): the user joins that group, as
                    // it would have joined the one useradd makes.
                    args.extend(["-g".to_owned(), d.name.clone()]);
                }
                if d.system {
                    args.push("-r".to_owned());
                }
                args.extend(["--".to_owned(), d.name.clone()]);
                run("useradd", args)?;
                Some(format!(
                    "account `{}` created (useradd; its password stays locked)",
                    d.name
                ))
            }
            Some(_) => {
                let mut args = account_args(d, false, changed);
                if changed("shadow") && d.password_hash.is_none() {
                    // usermod makes the missing entry, locked as useradd
                    // leaves a new account (chpasswd below makes it when a
                    // hash is declared).
                    args.extend(["-p".to_owned(), "!".to_owned()]);
                }
                if args.is_empty() {
                    None
                } else {
                    let mut all = args;
                    all.extend(["--".to_owned(), d.name.clone()]);
                    run("usermod", all)?;
                    let fields: Vec<&str> = diff
                        .changes
                        .iter()
                        .map(|c| c.field.as_str())
                        .filter(|f| *f != "password_hash")
                        // With a hash declared, chpasswd makes the entry.
                        .filter(|f| *f != "shadow" || d.password_hash.is_none())
                        .collect();
                    Some(format!(
                        "{} of account `{}` changed (usermod)",
                        fields.join(", "),
                        d.name
                    ))
                }
            }
            None => return Ok(Activated::Done),
        };
        if let Some(hash) = &d.password_hash
            && (diff.action == Some(Action::Create) || changed("password_hash"))
        {
            account_files::set_hash(host, &d.name, hash)
                .map_err(|failed| match done {
                    Some(done) => account_files::AccountError::HashNotSet {
                        // An initial password is not compared again: no
                        // later pass would set it.
                        done: match d.update_password {
                            UpdatePassword::OnCreate => format!(
                                "{done} (update_password: on_create: no later pass sets it; set it by hand with `chpasswd -e` or declare `always` for one pass)"
                            ),
                            UpdatePassword::Always => done,
                        },
                        failed: Box::new(failed),
                    },
                    None => failed,
                })
                .map_err(&failure)?;
        }
        Ok(Activated::Done)
    }
}

impl Capabilities for UserProvider {
    fn watches_writes(&self) -> Option<&dyn crate::WatchesWrites> {
        Some(&account_files::WATCH)
    }

    fn ordering(&self) -> Option<&dyn OrdersOthers> {
        Some(self)
    }

    fn takes_validator(&self) -> bool {
        false
    }

    fn sensitive_fields(&self) -> &'static [&'static str] {
        &["password_hash"]
    }

    /// The account's name (whatever `ensure` says: one User adding what
    /// another removes), and its uid while present.
    fn exclusive_claims(&self, field: FieldLookup<'_, '_>, name: &str) -> Vec<Exclusive> {
        crate::group::account_claims(field, name, "account", "uid")
    }

    /// The resource's name when `name:` is not written: the account's name.
    fn check_resource_name(&self, field: FieldLookup<'_, '_>, name: &str) -> Option<String> {
        crate::common::fields::name_as_field(field, name, "account", account_files::check_name)
    }
}

/// Before `userdel` of `d`: renames the group named like the user to
/// [`account_files::kept_name`] when a Group declares it present in this
/// pass and userdel would take it (`USERGROUPS_ENAB` on in the root, and it
/// is the user's primary group), so userdel finds no group of the user's
/// name; the caller gives the name back. `None` when nothing was renamed.
/// (Renamed, the group never leaves the files: a pass killed before the
/// name is given back leaves it with its number, for the Group to rename
/// back at the next pass, where a group removed and made again would have
/// had to be numbered from a record outside the files.) A group already
/// under that name fails the removal before anything runs
/// ([`account_files::AccountError::KeptNameTaken`]).
fn keep_declared_group(
    host: &Host,
    resource: &Resource,
    d: &UserDesired,
) -> Result<Option<String>, account_files::AccountError> {
    if !account_files::is_declared_group(host, &d.name) {
        return Ok(None);
    }
    let files = account_files::current(host, false)?;
    let (Some(user), Some(group)) = (files.user(&d.name), files.group(&d.name)) else {
        return Ok(None);
    };
    if user.gid != group.gid || !account_files::root_makes_user_groups(host)? {
        return Ok(None);
    }
    let kept = account_files::kept_name(&d.name);
    if let Some(taken) = files.group(&kept) {
        return Err(account_files::AccountError::KeptNameTaken {
            user: d.name.clone(),
            kept,
            gid: taken.gid,
        });
    }
    account_files::run_tool(
        host,
        resource,
        "groupmod",
        vec!["-n".into(), kept.clone(), "--".into(), d.name.clone()],
        &d.name,
    )?;
    Ok(Some(kept))
}

/// Whether a new account without a declared `gid` must be given its
/// same-named group: useradd makes one on this root (`USERGROUPS_ENAB`) and
/// the group exists already, which useradd refuses ("group deploy exists -
/// if you want to add this user to that group, use -g"), on every pass.
fn name_group_exists(host: &Host, d: &UserDesired) -> Result<bool, account_files::AccountError> {
    Ok(account_files::current(host, false)?
        .group(&d.name)
        .is_some()
        && account_files::root_makes_user_groups(host)?)
}

/// useradd/usermod options for the declared fields `wanted` selects.
fn account_args(d: &UserDesired, creating: bool, wanted: impl Fn(&str) -> bool) -> Vec<String> {
    let mut args = Vec::new();
    let mut option = |field: &str, flag: &str, value: Option<String>| {
        if let Some(value) = value
            && wanted(field)
        {
            args.extend([flag.to_owned(), value]);
        }
    };
    option("uid", "-u", d.uid.map(|n| n.to_string()));
    option("gid", "-g", d.gid.clone());
    option(
        "groups",
        "-G",
        d.groups
            .as_ref()
            // A new account has no supplementary groups to clear.
            .filter(|g| !g.is_empty() || !creating)
            .map(|g| g.iter().cloned().collect::<Vec<_>>().join(",")),
    );
    option("comment", "-c", d.comment.clone());
    option("home", "-d", d.home.clone());
    option("shell", "-s", d.shell.clone());
    option("expiry", "-e", d.expiry.map(Expiry::argument));
    args
}

fn change(field: &str, before: Option<&Value>, after: Value) -> FieldChange {
    FieldChange {
        field: field.to_owned(),
        before: before.cloned(),
        after: Some(after),
    }
}

/// The pure comparison behind the `User` kind's plan.
pub fn diff(d: &UserDesired, observed: &Observed) -> Diff {
    let mut out = Diff::default();
    let present = observed.presence == Presence::Present;
    match (d.ensure, present) {
        (Ensure::Absent, true) => {
            out.action = Some(Action::Remove);
            out.changes.push(ensure_change("present", "absent"));
            return out;
        }
        (Ensure::Absent, false) => return out,
        (Ensure::Present, false) => {
            out.action = Some(Action::Create);
            out.changes.push(ensure_change("absent", "present"));
        }
        (Ensure::Present, true) => {}
    }
    let seen = |field: &str| {
        if present {
            observed.fields.get(field)
        } else {
            None
        }
    };
    if let Some(uid) = d.uid
        && seen("uid") != Some(&json!(uid))
    {
        out.changes.push(change("uid", seen("uid"), json!(uid)));
    }
    // Made again with the number its home directory still has.
    if d.uid.is_none()
        && !present
        && let Some(uid) = observed.fields.get(HOME_UID)
    {
        out.changes.push(change("uid", None, uid.clone()));
    }
    if let Some(gid) = &d.gid {
        let same = match gid.parse::<u32>() {
            Ok(n) => seen("gid") == Some(&json!(n)),
            Err(_) => seen("gid_name") == Some(&json!(gid)),
        };
        if !same {
            let before = seen("gid_name").or(seen("gid"));
            out.changes.push(change("gid", before, json!(gid)));
        }
    }
    if let Some(groups) = &d.groups {
        let want: Vec<&String> = groups.iter().collect();
        let have = seen("groups");
        // A new account starts without supplementary groups.
        if (present || !want.is_empty()) && have != Some(&json!(want)) {
            out.changes.push(change("groups", have, json!(want)));
        }
    }
    for field in ["comment", "home", "shell"] {
        let declared = match field {
            "comment" => &d.comment,
            "home" => &d.home,
            _ => &d.shell,
        };
        if let Some(value) = declared
            && seen(field) != Some(&json!(value))
        {
            out.changes.push(change(field, seen(field), json!(value)));
        }
    }
    if let Some(expiry) = d.expiry
        && seen("expiry") != Some(&json!(expiry.text()))
    {
        out.changes
            .push(change("expiry", seen("expiry"), json!(expiry.text())));
    }
    // useradd renames passwd into place before shadow: killed in between,
    // it left an account no tool reading shadow accepts (nor can anyone
    // log in as). Its entry is added (locked, or with the declared hash).
    if seen("shadow") == Some(&json!(SHADOW_MISSING)) {
        out.changes
            .push(change("shadow", seen("shadow"), json!("present")));
    }
    let set_hash = match d.update_password {
        UpdatePassword::Always => seen("password_hash") != Some(&json!("declared")),
        // An initial password: set with the account (or with the shadow
        // entry useradd left unmade), never compared with the live one.
        UpdatePassword::OnCreate => !present || seen("shadow") == Some(&json!(SHADOW_MISSING)),
    };
    if d.password_hash.is_some() && set_hash {
        out.changes.push(FieldChange {
            field: "password_hash".to_owned(),
            before: present.then(|| json!(HIDDEN)),
            after: Some(json!(HIDDEN)),
        });
    }
    if out.action.is_none() && !out.changes.is_empty() {
        out.action = Some(Action::Update);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::schema;

    const CANARY: &str = "$6$salt$CANARY-HASH-7f3a";

    fn files() -> AccountFiles {
        AccountFiles::parse(
            "deploy:x:2000:3000::/srv/deploy:/bin/bash\n",
            "ops:x:3000:\nwww-data:x:33:deploy\nadm:x:4:deploy\n",
        )
        .with_shadow(&format!("deploy:{CANARY}:20000::::::\n"))
    }

    fn parse(v: Value) -> UserDesired {
        UserDesired::parse(&v, "deploy").unwrap()
    }

    #[test]
    fn a_matching_account_has_no_diff() {
        let d = parse(json!({
            "uid": 2000, "gid": "ops", "groups": ["adm", "www-data"],
            "home": "/srv/deploy", "shell": "/bin/bash", "password_hash": CANARY
        }));
        let observed = observation(&d, &files());
        assert_eq!(observed.fields["password_hash"], json!("declared"));
        let diff = diff(&d, &observed);
        assert!(diff.changes.is_empty(), "{:?}", diff.changes);
        // The primary group by number works too.
        let d = parse(json!({"gid": 3000}));
        assert!(
            super::diff(&d, &observation(&d, &files()))
                .changes
                .is_empty()
        );
    }

    #[test]
    fn differences_are_fields_and_the_hash_is_never_shown() {
        let d = parse(json!({
            "uid": 2001, "gid": "adm", "groups": ["ops"], "shell": "/bin/sh",
            "password_hash": "$y$j9T$other$CANARY-OTHER"
        }));
        let observed = observation(&d, &files());
        assert_eq!(observed.fields["password_hash"], json!("other"));
        let diff = diff(&d, &observed);
        let fields: Vec<&str> = diff.changes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["uid", "gid", "groups", "shell", "password_hash"]);
        assert_eq!(diff.action, Some(Action::Update));
        assert_eq!(diff.changes[1].before, Some(json!("ops")));
        assert_eq!(diff.changes[2].before, Some(json!(["adm", "www-data"])));
        let shown = format!("{diff:?} {observed:?} {d:?}");
        assert!(!shown.contains("CANARY"), "{shown}");
        assert_eq!(
            account_args(&d, false, |f| diff.changes.iter().any(|c| c.field == f)),
            ["-u", "2001", "-g", "adm", "-G", "ops", "-s", "/bin/sh"]
        );
    }

    /// An account in passwd (`x`) without a line in a shadow file that was
    /// read is half-made: a change of `shadow`, made with `usermod -p !`
    /// unless a hash is declared (chpasswd makes the entry then). Not
    /// when the shadow file was not read, nor for a password kept in
    /// passwd itself.
    #[test]
    fn an_account_without_its_shadow_entry_is_a_change() {
        let half = AccountFiles::parse(
            "deploy:x:2000:3000::/srv/deploy:/bin/bash\nold:$6$s$h:2001:3000::/:/bin/sh\n",
            "ops:x:3000:\n",
        )
        .with_shadow("root:*:20000::::::\n");
        let d = parse(json!({"uid": 2000}));
        let observed = observation(&d, &half);
        assert_eq!(observed.fields["shadow"], json!("missing"));
        let changes = diff(&d, &observed).changes;
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(
            (changes[0].field.as_str(), changes[0].after.clone()),
            ("shadow", Some(json!("present")))
        );
        let with_hash = parse(json!({"uid": 2000, "password_hash": CANARY}));
        let fields: Vec<String> = diff(&with_hash, &observation(&with_hash, &half))
            .changes
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, ["shadow", "password_hash"]);
        let old = UserDesired::parse(&json!({"uid": 2001}), "old").unwrap();
        assert!(!observation(&old, &half).fields.contains_key("shadow"));
        let unread = AccountFiles::parse("deploy:x:2000:3000::/srv/deploy:/bin/bash\n", "");
        assert!(!observation(&d, &unread).fields.contains_key("shadow"));
        assert!(!observation(&d, &files()).fields.contains_key("shadow"));
    }

    /// A group no account file has, or a uid another account holds, is
    /// refused for the change that would hand it to useradd or usermod,
    /// and only then: an account already holding a shared uid may still
    /// change its shell; a removal names nothing.
    #[test]
    fn a_missing_group_or_a_taken_uid_is_refused_only_for_a_change_that_uses_it() {
        let files = AccountFiles::parse(
            "deploy:x:2000:3000::/srv/deploy:/bin/bash\ntwin:x:2000:3000::/:/bin/sh\nold:x:2001:3000::/:/bin/sh\n",
            "ops:x:3000:\n",
        );
        let refused = |v: Value| {
            let d = parse(v);
            let o = observation(&d, &files);
            refusal(&d, &o, &diff(&d, &o))
        };
        let why = refused(json!({"groups": ["ops", "nosuch"]})).unwrap();
        assert!(
            why.starts_with("group `nosuch` (named in `groups`) is in no account file"),
            "{why}"
        );
        // usermod -G takes a group only the name service knows on the
        // machine's own root and exits 0 without the membership: it does
        // not always refuse it, but never makes the membership.
        assert!(
            why.contains(": usermod would not make the membership (it refuses"),
            "{why}"
        );
        assert!(!why.contains("usermod refuses"), "{why}");
        let why = refused(json!({"gid": 3001})).unwrap();
        assert!(why.contains("group `3001` (named in `gid`)"), "{why}");
        assert!(why.contains(": usermod refuses it"), "{why}");
        let why = refused(json!({"uid": 2001})).unwrap();
        assert!(
            why.starts_with("uid 2001 belongs to account `old`"),
            "{why}"
        );
        // Its own number already (shared with `twin`): nothing to refuse.
        assert_eq!(refused(json!({"uid": 2000, "shell": "/bin/sh"})), None);
        assert_eq!(refused(json!({"gid": 3000, "groups": ["ops"]})), None);
        assert_eq!(
            refused(json!({"ensure": "absent", "groups": ["nosuch"]})),
            None
        );
        let new = UserDesired::parse(&json!({"uid": 2001, "groups": ["x"]}), "fresh").unwrap();
        let o = observation(&new, &files);
        let why = refusal(&new, &o, &diff(&new, &o)).unwrap();
        assert!(why.contains("useradd refuses"), "{why}");
    }

    /// On the machine's own root useradd and usermod run without `--root`
    /// and `-g` takes a group the name service knows (LDAP, sssd, systemd's
    /// userdb) that /etc/group does not name: f1a7369 planned such a `gid`
    /// as a change that would fail (exit 4), and the apply refused it,
    /// although useradd makes the account (seen in a mount namespace with a
    /// userdb group 4242: `useradd -M -g 4242 t4` exits 0 on /, `useradd
    /// --root R -g 4242` refuses it). useradd's `-G` looks in the files
    /// only (`group 'ldapgrp' does not exist` on / too), so `groups` is
    /// still refused.
    #[test]
    fn a_gid_only_the_name_service_knows_is_left_to_useradd_on_the_machines_root() {
        let local = files();
        let machine = files().with_name_service();
        let d = UserDesired::parse(&json!({"gid": 4242, "groups": []}), "fresh").unwrap();
        let o = observation(&d, &local);
        assert!(refusal(&d, &o, &diff(&d, &o)).is_some());
        let o = observation(&d, &machine);
        assert_eq!(refusal(&d, &o, &diff(&d, &o)), None);
        let named = UserDesired::parse(&json!({"gid": "ldapgrp"}), "fresh").unwrap();
        let o = observation(&named, &machine);
        assert_eq!(refusal(&named, &o, &diff(&named, &o)), None);
        let joining = UserDesired::parse(&json!({"groups": ["ldapgrp"]}), "fresh").unwrap();
        let o = observation(&joining, &machine);
        let why = refusal(&joining, &o, &diff(&joining, &o)).unwrap();
        assert!(why.contains("(named in `groups`)"), "{why}");
    }

    #[test]
    fn a_missing_account_is_created_and_an_absent_one_removed() {
        let d = parse(json!({"uid": 2100, "groups": []}));
        let created = diff(&d, &observation(&d, &AccountFiles::default()));
        assert_eq!(created.action, Some(Action::Create));
        assert_eq!(created.changes.len(), 2, "{:?}", created.changes);
        let gone = parse(json!({"ensure": "absent"}));
        assert_eq!(
            diff(&gone, &observation(&gone, &files())).action,
            Some(Action::Remove)
        );
        assert_eq!(diff(&gone, &Observed::absent()).action, None);
    }

    #[test]
    fn a_password_is_refused_without_being_quoted() {
        let errors =
            UserDesired::parse(&json!({"password_hash": "hunter2-CANARY"}), "deploy").unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(
            !errors[0].message.contains("CANARY"),
            "{}",
            errors[0].message
        );
        for ok in ["!", "*", "!$6$s$h", "$y$j9T$salt$hash"] {
            assert!(check_hash(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "$",
            "$6$",
            "$6$a b",
            "$6$a:b",
            "plain",
            "$$x",
            "$6$a\u{b}b",
            "$6$a\0b",
            "$6$a\u{1b}b",
        ] {
            assert!(check_hash(bad).is_err(), "{bad}");
        }
    }

    /// The crypt(3) formats pass (SHA-crypt with rounds, yescrypt, bcrypt,
    /// NT's empty salt, locked); a hash chpasswd would refuse or no crypt
    /// makes is refused at compile time: longer than [`MAX_HASH_LEN`] (a
    /// line past chpasswd's buffer failed only in the apply, after useradd
    /// made the account), an empty last part, one part, non-ASCII. The
    /// error never quotes the value.
    #[test]
    fn a_malformed_or_overlong_hash_is_refused_without_being_quoted() {
        let longest = format!("$6$salt${}", "a".repeat(MAX_HASH_LEN - 8));
        for ok in [
            "$6$rounds=5000$saltsalt$abc./XYZ",
            "$2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW",
            "$3$$8846f7eaee8fb117ad06bdd830b7586c",
            "$gy$j9T$salt$hash",
            "!*",
            longest.as_str(),
        ] {
            assert!(check_hash(ok).is_ok(), "{ok}");
        }
        let overlong = format!("$6$salt$CANARY-{}", "a".repeat(MAX_HASH_LEN));
        for bad in [
            overlong.as_str(),
            &format!("{longest}a"),
            &format!("!{longest}"),
            "$6$CANARY$",
            "$6$CANARY",
            "$6$salt$CANARY\u{e9}",
            "!!$6$salt$CANARY",
            "$6$$$",
        ] {
            let errors = UserDesired::parse(&json!({"uid": 2000, "password_hash": bad}), "deploy")
                .unwrap_err();
            let fields: Vec<String> = errors.iter().map(|e| e.path.join(".")).collect();
            assert_eq!(fields, ["password_hash"], "{bad}");
            assert!(
                !errors[0].message.contains("CANARY"),
                "{}",
                errors[0].message
            );
            assert!(!errors[0].message.contains("aaaa"), "{}", errors[0].message);
        }
    }

    #[test]
    fn every_problem_is_named() {
        let errors = UserDesired::parse(
            &json!({"uid": "2000", "gid": "Bad Group", "groups": ["ops", "ops", 3],
                    "home": "relative", "shell": "/bin/../sh", "system": "no",
                    "ensure": "maybe", "gecos": "x", "comment": "a:b"}),
            "deploy",
        )
        .unwrap_err();
        let fields: Vec<String> = errors.iter().map(|e| e.path.join(".")).collect();
        assert_eq!(
            fields,
            [
                "gecos", "comment", "uid", "gid", "groups.1", "groups.2", "home", "shell",
                "system", "ensure"
            ],
            "{errors:?}"
        );
    }

    /// `update_password: on_create` sets the hash with the account (and
    /// with a shadow entry useradd left unmade) and never compares it
    /// afterwards: another live hash is no change, and the observation
    /// does not look at it. `always` (the default) compares it.
    #[test]
    fn an_initial_password_is_set_on_creation_only() {
        let initial = parse(json!({"password_hash": "$y$j9T$salt$CANARY-INITIAL",
                                   "update_password": "on_create"}));
        assert_eq!(initial.update_password, UpdatePassword::OnCreate);
        let observed = observation(&initial, &files());
        assert!(
            !observed.fields.contains_key("password_hash"),
            "{observed:?}"
        );
        let diff_now = diff(&initial, &observed);
        assert!(diff_now.changes.is_empty(), "{:?}", diff_now.changes);
        assert_eq!(diff_now.action, None);
        // The same hash declared `always` (or with no word) is a change.
        for always in [json!("always"), Value::Null] {
            let mut v = json!({"password_hash": "$y$j9T$salt$CANARY-INITIAL"});
            if !always.is_null() {
                v["update_password"] = always;
            }
            let d = parse(v);
            assert_eq!(d.update_password, UpdatePassword::Always);
            let fields: Vec<String> = diff(&d, &observation(&d, &files()))
                .changes
                .into_iter()
                .map(|c| c.field)
                .collect();
            assert_eq!(fields, ["password_hash"]);
        }
        // Created: the hash is one of the changes (set by chpasswd).
        let created = diff(&initial, &observation(&initial, &AccountFiles::default()));
        assert_eq!(created.action, Some(Action::Create));
        assert!(created.changes.iter().any(|c| c.field == "password_hash"));
        // Half-made by useradd: the missing entry gets the hash.
        let half = AccountFiles::parse("deploy:x:2000:3000::/srv/deploy:/bin/bash\n", "")
            .with_shadow("root:*:20000::::::\n");
        let fields: Vec<String> = diff(&initial, &observation(&initial, &half))
            .changes
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, ["shadow", "password_hash"]);
        let shown = format!("{initial:?} {observed:?} {created:?}");
        assert!(!shown.contains("CANARY"), "{shown}");
        // Refused: another word, or no hash to set.
        let errors = UserDesired::parse(
            &json!({"password_hash": "!", "update_password": "on_change"}),
            "deploy",
        )
        .unwrap_err();
        assert_eq!(errors[0].path, ["update_password"]);
        assert!(
            errors[0]
                .message
                .contains("`always` or `on_create`, found `on_change`"),
            "{errors:?}"
        );
        let errors =
            UserDesired::parse(&json!({"update_password": "on_create"}), "deploy").unwrap_err();
        assert_eq!(errors[0].path, ["update_password"]);
        assert!(
            errors[0].message.contains("no `password_hash`"),
            "{errors:?}"
        );
    }

    /// A missing account without a declared `uid` whose home directory is
    /// still there: made again with the home's owner when no account holds
    /// that number (a change of `uid` in the plan, `-u` to useradd);
    /// otherwise made as before, the note naming the account that holds
    /// it. Nothing for root's number, a declared `uid`, an account that is
    /// there, or no home.
    #[test]
    fn a_missing_account_is_made_again_with_its_homes_number() {
        let files = AccountFiles::parse(
            "deploy:x:2000:3000::/srv/deploy:/bin/bash\nbob:x:1000:3000::/home/bob:/bin/sh\n",
            "ops:x:3000:\n",
        );
        let alice = UserDesired::parse(&json!({}), "alice").unwrap();
        assert_eq!(home_of(&alice), "/home/alice");
        let in_files = |n: u32| Some(files.other_user_with_uid(n, "alice").map(str::to_owned));
        // The name service holds it (the machine's own root): noted, not
        // taken; it cannot tell: nothing at all.
        let mut observed = observation(&alice, &files);
        let note = note_home_owner(
            &alice,
            "/home/alice",
            Some(1001),
            |_| Some(Some("ldapuser".to_owned())),
            &mut observed,
        )
        .unwrap();
        assert!(note.contains("account `ldapuser`'s"), "{note}");
        assert!(!observed.fields.contains_key(HOME_UID));
        let mut observed = observation(&alice, &files);
        assert_eq!(
            note_home_owner(&alice, "/home/alice", Some(1001), |_| None, &mut observed),
            None
        );
        assert!(!observed.fields.contains_key(HOME_UID));
        let mut observed = observation(&alice, &files);
        let note =
            note_home_owner(&alice, "/home/alice", Some(1001), in_files, &mut observed).unwrap();
        assert!(
            note.contains("made with uid 1001, the owner of its home directory /home/alice"),
            "{note}"
        );
        let planned = diff(&alice, &observed);
        assert_eq!(planned.action, Some(Action::Create));
        let uid = planned.changes.iter().find(|c| c.field == "uid").unwrap();
        assert_eq!(
            (uid.before.clone(), uid.after.clone()),
            (None, Some(json!(1001)))
        );
        // Held by another account: noted, not taken.
        let mut observed = observation(&alice, &files);
        let note =
            note_home_owner(&alice, "/home/alice", Some(1000), in_files, &mut observed).unwrap();
        assert!(
            note.contains("owned by uid 1000, account `bob`'s: useradd gives `alice` another number, so if uid 1000 was `alice`'s before, what it owns is `bob`'s now"),
            "{note}"
        );
        assert!(
            !diff(&alice, &observed)
                .changes
                .iter()
                .any(|c| c.field == "uid")
        );
        // Root's, or no home: nothing.
        for owner in [Some(0), None] {
            let mut observed = observation(&alice, &files);
            assert_eq!(
                note_home_owner(&alice, "/home/alice", owner, in_files, &mut observed),
                None
            );
            assert!(!observed.fields.contains_key(HOME_UID));
        }
        // A sensitive User's note names no number, account or path.
        let mut hidden = alice.clone();
        hidden.hides_values = true;
        for owner in [1000, 1001] {
            let mut observed = observation(&hidden, &files);
            let note =
                note_home_owner(&hidden, "/home/alice", Some(owner), in_files, &mut observed)
                    .unwrap();
            for word in ["100", "bob", "/home"] {
                assert!(!note.contains(word), "{note}");
            }
        }
        // A declared uid wins over the home's.
        let declared =
            UserDesired::parse(&json!({"uid": 2100, "home": "/srv/a"}), "alice").unwrap();
        assert_eq!(home_of(&declared), "/srv/a");
        let mut observed = observation(&declared, &files);
        observed.fields.insert(HOME_UID.to_owned(), json!(1001));
        let uids: Vec<_> = diff(&declared, &observed)
            .changes
            .into_iter()
            .filter(|c| c.field == "uid")
            .map(|c| c.after)
            .collect();
        assert_eq!(uids, [Some(json!(2100))]);
    }

    /// `expiry` is shadow's eighth field (days since 1970-01-01, empty for
    /// never), shown and declared as a date; given to useradd and usermod
    /// as `-e YYYY-MM-DD` (`-e ''` for never).
    #[test]
    fn the_expiry_is_shadows_eighth_field_as_a_date() {
        let files = AccountFiles::parse(
            "deploy:x:2000:3000::/srv/deploy:/bin/bash\nold:x:2001:3000::/:/bin/sh\nodd:x:2002:3000::/:/bin/sh\n",
            "ops:x:3000:\n",
        )
        .with_shadow("deploy:!:20000:0:99999:7::20908:\nold:!:20000::::::\nodd:!:20000:::::x\n");
        let d = parse(json!({"expiry": "2027-03-31"}));
        assert_eq!(d.expiry, Some(Expiry::Day(20908)));
        let observed = observation(&d, &files);
        assert_eq!(observed.fields["expiry"], json!("2027-03-31"));
        assert!(diff(&d, &observed).changes.is_empty());
        let never = parse(json!({"expiry": "never"}));
        let changes = diff(&never, &observation(&never, &files)).changes;
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(
            (changes[0].before.clone(), changes[0].after.clone()),
            (Some(json!("2027-03-31")), Some(json!("never")))
        );
        assert_eq!(account_args(&never, false, |f| f == "expiry"), ["-e", ""]);
        let old = UserDesired::parse(&json!({"expiry": "never"}), "old").unwrap();
        assert!(diff(&old, &observation(&old, &files)).changes.is_empty());
        let later = UserDesired::parse(&json!({"expiry": "2030-01-01"}), "old").unwrap();
        let changes = diff(&later, &observation(&later, &files)).changes;
        assert_eq!(changes[0].before, Some(json!("never")));
        assert_eq!(account_args(&later, true, |_| true), ["-e", "2030-01-01"]);
        let odd = UserDesired::parse(&json!({"expiry": "never"}), "odd").unwrap();
        assert_eq!(observation(&odd, &files).fields["expiry"], json!("x"));
        // Not declared: not looked at.
        assert!(
            !observation(&parse(json!({})), &files)
                .fields
                .contains_key("expiry")
        );
        assert_eq!(Expiry::parse("9999-12-31"), Ok(Expiry::Day(LAST_DAY)));
        assert_eq!(Expiry::parse("1970-01-02"), Ok(Expiry::Day(1)));
        assert_eq!(Expiry::observed("99999999"), "99999999");
        for bad in [
            "1970-01-01",
            "2027-02-30",
            "2027-3-31",
            "27-03-31",
            "2027-03-31T00:00:00Z",
            "tomorrow",
            "",
            "Never",
            "+2027-03-31",
        ] {
            let errors = UserDesired::parse(&json!({"expiry": bad}), "deploy").unwrap_err();
            assert_eq!(errors[0].path, ["expiry"], "{bad}");
        }
        let errors = UserDesired::parse(&json!({"expiry": 20908}), "deploy").unwrap_err();
        assert!(errors[0].message.contains("found a number"), "{errors:?}");
    }

    /// passwd's fifth field is observed, compared when declared (an empty
    /// one too), given to useradd and usermod as `-c`, and left alone when
    /// not declared; `:` and control characters are refused.
    #[test]
    fn the_comment_is_passwds_fifth_field() {
        let files = AccountFiles::parse(
            "deploy:x:2000:3000:Deploy Bot,,,:/srv/deploy:/bin/bash\n",
            "ops:x:3000:\n",
        );
        let same = parse(json!({"comment": "Deploy Bot,,,"}));
        let observed = observation(&same, &files);
        assert_eq!(observed.fields["comment"], json!("Deploy Bot,,,"));
        assert!(diff(&same, &observed).changes.is_empty());
        assert!(diff(&parse(json!({})), &observed).changes.is_empty());
        for want in ["", "Zoë Ørsted"] {
            let d = parse(json!({"comment": want}));
            let changes = diff(&d, &observation(&d, &files)).changes;
            assert_eq!(changes.len(), 1, "{changes:?}");
            assert_eq!(changes[0].field, "comment");
            assert_eq!(changes[0].before, Some(json!("Deploy Bot,,,")));
            assert_eq!(changes[0].after, Some(json!(want)));
            assert_eq!(
                account_args(&d, false, |f| f == "comment"),
                ["-c", want],
                "{want:?}"
            );
        }
        let new = parse(json!({"comment": "New"}));
        let created = diff(&new, &Observed::absent());
        assert!(created.changes.iter().any(|c| c.field == "comment"));
        assert_eq!(account_args(&new, true, |_| true), ["-c", "New"]);
        for bad in ["a:b", "a\nb", "a\rb", "\u{1b}[2J", "a\u{85}b"] {
            let errors = UserDesired::parse(&json!({"comment": bad}), "deploy").unwrap_err();
            let fields: Vec<String> = errors.iter().map(|e| e.path.join(".")).collect();
            assert_eq!(fields, ["comment"], "{bad:?}");
            assert!(errors[0].message.contains("without `:`"), "{errors:?}");
        }
    }

    #[test]
    fn a_home_or_shell_with_a_control_character_is_refused() {
        for bad in ["/bin/sh\r", "/srv/a\u{1b}[2Jb", "/bin/sh\t", "/a\u{85}b"] {
            let errors =
                UserDesired::parse(&json!({"shell": bad, "home": bad}), "deploy").unwrap_err();
            let fields: Vec<String> = errors.iter().map(|e| e.path.join(".")).collect();
            assert_eq!(fields, ["home", "shell"], "{bad:?}");
        }
        assert!(UserDesired::parse(&json!({"shell": "/bin/sh", "home": "/"}), "deploy").is_ok());
    }

    #[test]
    fn what_a_declared_user_owns_is_ordered_after_it() {
        use datum_core::ResourceId;
        let r = |kind: &str, name: &str, desired: Value| {
            Resource::new(ResourceId::new(kind, name), desired)
        };
        let resources = [
            r("File", "key", json!({"path": "/k", "owner": "deploy"})),
            r(
                "Directory",
                "home",
                json!({"path": "/srv/app", "owner": "app"}),
            ),
            r("File", "root", json!({"path": "/r", "owner": "root"})),
            r("User", "deploy", json!({})),
            r("User", "app-user", json!({"name": "app"})),
            r("User", "gone", json!({"ensure": "absent"})),
            r("File", "gone-file", json!({"path": "/g", "owner": "gone"})),
            r(
                "File",
                "own-group",
                json!({"path": "/o", "group": "deploy"}),
            ),
            r(
                "File",
                "both",
                json!({"path": "/b", "owner": "deploy", "group": "deploy"}),
            ),
            r("User", "grouped", json!({"gid": "ops"})),
            r("File", "not-own", json!({"path": "/n", "group": "grouped"})),
        ];
        let edges: Vec<(String, String)> = UserProvider
            .edges(&resources)
            .into_iter()
            .map(|e| (e.from.to_string(), e.after.to_string()))
            .collect();
        assert_eq!(
            edges,
            [
                ("File[key]".to_owned(), "User[deploy]".to_owned()),
                ("Directory[home]".to_owned(), "User[app-user]".to_owned()),
                ("File[own-group]".to_owned(), "User[deploy]".to_owned()),
                ("File[both]".to_owned(), "User[deploy]".to_owned()),
            ]
        );
    }

    #[test]
    fn the_schema_agrees_with_check() {
        let cases = [
            json!({}),
            json!({"uid": 2000, "gid": "ops", "groups": ["a", "b"], "home": "/srv/d",
                   "shell": "/bin/sh", "system": true, "ensure": "present",
                   "password_hash": "$6$s$h"}),
            json!({"gid": 33}),
            json!({"uid": -1}),
            json!({"groups": ["a", "a"]}),
            json!({"groups": "a"}),
            json!({"home": "relative"}),
            json!({"password_hash": "secret"}),
            json!({"password_hash": "!"}),
            json!({"password_hash": "$6$s$a\u{1b}b"}),
            json!({"password_hash": "$6$s$"}),
            json!({"password_hash": "$6$s"}),
            json!({"password_hash": "$3$$h"}),
            json!({"password_hash": format!("$6$s${}", "h".repeat(MAX_HASH_LEN))}),
            json!({"name": "Deploy"}),
            json!({"gecos": "x"}),
            json!({"expiry": "2027-03-31"}),
            json!({"expiry": "never"}),
            json!({"expiry": "2027-13-01"}),
            json!({"expiry": "2027-3-1"}),
            json!({"expiry": 20908}),
            json!({"password_hash": "!", "update_password": "on_create"}),
            json!({"update_password": "on_create"}),
            json!({"update_password": "always", "uid": 2000}),
            json!({"password_hash": "!", "update_password": "always"}),
            json!({"password_hash": "!", "update_password": "never"}),
            json!({"password_hash": "!", "update_password": true}),
            json!({"comment": "Alice Liddell,Room 4,,"}),
            json!({"comment": ""}),
            json!({"comment": "Zoë Ørsted"}),
            json!({"comment": "a:b"}),
            json!({"comment": "a\nb"}),
            json!({"comment": "a\rb"}),
            json!({"comment": "a\u{85}b"}),
            json!({"comment": 3}),
        ];
        schema::agrees_with_check(&UserProvider, &cases).unwrap();
    }
}
