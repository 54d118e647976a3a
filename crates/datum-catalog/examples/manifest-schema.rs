//! Prints the JSON Schema of resource manifests, as the repository ships it:
//! `cargo run -p datum-catalog --example manifest-schema > schema/datum-manifest.schema.json`
//! (the test `the_shipped_schema_is_current` says when that is due).

use std::io::Write as _;

fn main() -> std::io::Result<()> {
    std::io::stdout().write_all(datum_catalog::schema::manifest_schema_text().as_bytes())
}
