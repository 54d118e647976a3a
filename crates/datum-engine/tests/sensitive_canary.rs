//! Canary strings a validator's output must never carry out of a pass: a
//! word of a sensitive file's content, quoted by a shipped validator (in
//! one of its own lines' holes or in a line of no known shape) at the
//! output's start or end, beside quotes, `=`, `;`, punctuation outside
//! ASCII, a backslash escape, with CR LF; a word outside ASCII; a word
//! holding punctuation itself; a later place standing alone after an
//! earlier one inside a longer word. Each of these outputs must be
//! withheld (a miss is a leak), whatever rule decides where a word of the
//! output begins and ends.

use datum_catalog::{Catalogue, HostIdentity};
use datum_core::{Content, Resource, ResourceId};
use datum_engine::SensitivePaths;
use datum_providers::validators;

const SECRET: &str = "token: CNRY8812xq\r\npass = Grüße42x\r\nkey \"p@ss/CNRY-77.q\"\r\n\
    SSLPassPhrase CNRYab\\\ncdQQ\nTOKEN=\"CNRYzz\"'wwQQ'\n";

fn catalogue() -> Catalogue {
    Catalogue {
        host: HostIdentity::default(),
        resources: vec![Resource {
            sensitive: true,
            content: Some(Content::new(SECRET.as_bytes().to_vec())),
            ..Resource::new(
                ResourceId::new("File", "secret"),
                serde_json::json!({ "path": "/etc/app/secret.conf" }),
            )
        }],
        autorequires: Vec::new(),
        boundary: Default::default(),
    }
}

#[test]
fn a_canary_quoted_by_a_validator_is_withheld_wherever_it_stands() {
    let catalogue = catalogue();
    let paths = SensitivePaths::of(&catalogue, datum_providers::registry());
    let outputs = [
        // nginx's own lines, the canary in a hole.
        "nginx: [emerg] unknown directive \"CNRY8812xq\" in /etc/nginx/conf.d/a.conf:3",
        "2026/12/07 11:17:58 [emerg] 1#1: unknown directive \"CNRY8812xq\" in /f:3\r\n",
        "nginx: configuration file CNRY8812xq test failed",
        "nginx: [emerg] unknown directive \"Grüße42x\" in /f:1",
        // The whole output, its start, its end.
        "CNRY8812xq",
        "CNRY8812xq is not a directive",
        "bad value: CNRY8812xq",
        "bad value: CNRY8812xq\r\n",
        // Quotes, `=`, `;`, punctuation outside ASCII, an escape.
        "token=CNRY8812xq;",
        "'CNRY8812xq'",
        "`CNRY8812xq`",
        "«CNRY8812xq»",
        "→CNRY8812xq←",
        "value \"\\tCNRY8812xq\\n\"",
        "at /srv/CNRY8812xq/x",
        "Grüße42x.",
        "„Grüße42x“",
        // A word holding punctuation, quoted or not.
        "key \"p@ss/CNRY-77.q\" unknown",
        "p@ss/CNRY-77.q",
        // The first place inside a longer word, a later one alone.
        "CNRY8812xqz or CNRY8812xq",
        // Words the content splits (at a line continuation, between two
        // quoted strings) that a validator prints joined: apache2 joins a
        // line ending in a backslash to the next, a shell or an env-file
        // reader joins adjacent quoted strings. Each part is inside a
        // longer word of the output, which still prints it.
        "Invalid command 'CNRYabcdQQ', perhaps misspelled",
        "TOKEN=CNRYzzwwQQ",
        // Its path, under a root.
        "/r/etc/app/secret.conf:3: bad",
    ];
    for output in outputs {
        for validator in [
            None,
            validators::lookup("nginx"),
            validators::lookup("sshd"),
        ] {
            assert!(paths.named_in(output), "{output:?} named no sensitive word");
            assert!(
                paths.withheld(validator, output).is_some(),
                "{output:?} was not withheld (validator {:?})",
                validator.map(|v| v.name)
            );
        }
    }
    // The validators asked exist (else the loop above asked None thrice).
    assert!(validators::lookup("nginx").is_some());
    assert!(validators::lookup("sshd").is_some());
}
