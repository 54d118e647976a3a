//! Prints the manifest reference page, as the repository ships it:
//! `cargo run -p datum-catalog --example manifest-reference > docs/manifests.md`
//! (the test `the_shipped_reference_is_current` says when that is due).

use std::io::Write as _;

fn main() -> std::io::Result<()> {
    std::io::stdout().write_all(datum_catalog::reference::reference_markdown().as_bytes())
}
