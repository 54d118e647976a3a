//! Rendering: each resource's content for one host (inline text, a hashed
//! source file, a template, a packed source folder), on every core.

use super::Analysis;
use crate::content::{self, ContentKind};
use crate::host::HostIdentity;
use crate::merge::Merged;
use datum_core::Content;
use datum_core::parallel::in_stretches;
use datum_manifest::Diagnostic;

impl<'r> Analysis<'r> {
    /// Every resource's content for this host, read and hashed on all cores
    /// (file reads and SHA-256 dominate a large catalogue's compile time).
    /// Problems are reported in resource order, whatever thread found them.
    pub(super) fn render_all(
        &mut self,
        merged: &[Merged],
        host: &HostIdentity,
    ) -> Vec<Option<Content>> {
        let this = &*self;
        // Each thread renders straight into its own stretch of the result:
        // no per-thread list joined into a second one (20,000 contents held
        // three times at the compile's peak).
        let mut contents: Vec<Option<Content>> = Vec::new();
        contents.resize_with(merged.len(), || None);
        let problems = in_stretches(&mut contents, |first, slots| {
            let mut problems = Vec::new();
            for (slot, m) in slots.iter_mut().zip(&merged[first..]) {
                match this.render(m, host) {
                    Ok(content) => *slot = content,
                    Err(d) => problems.push(*d),
                }
            }
            problems
        });
        for d in problems.into_iter().flatten() {
            self.diags.push(d);
        }
        contents
    }

    /// The winning content field as bytes for this host.
    fn render(&self, m: &Merged, host: &HostIdentity) -> Result<Option<Content>, Box<Diagnostic>> {
        if let Some(folder) = self.providers[m.last_doc()].and_then(|p| p.source_folder()) {
            return self.render_tree(m, folder);
        }
        let Some((doc, decl)) = m
            .content
            .and_then(|d| Some((self.doc(d), self.contents[d].as_ref()?)))
        else {
            return Ok(None);
        };
        match decl.kind {
            ContentKind::Inline => Ok(Some(Content::new(decl.text.clone().into_bytes()))),
            ContentKind::Source => {
                // A refused path is already reported.
                let Some(file) = decl.file.as_ref() else {
                    return Ok(None);
                };
                // Hashed, not kept: the bytes are read again when a File
                // is written (and refused if they changed meanwhile). A
                // sensitive one's digests are never cached (in the clear).
                let cache = match self.hashes {
                    Some(hashes) if self.is_sensitive(m) => {
                        hashes.forget(&file.abs);
                        None
                    }
                    other => other,
                };
                match content::hash_source(&file.abs, &file.key, cache) {
                    Ok((digests, size)) => Ok(Some(Content::from_source(
                        file.abs.clone(),
                        digests.sha256_hex(),
                        Some(digests.blake3_hex()),
                        size,
                    ))),
                    Err(e) => Err(Box::new(
                        Diagnostic::error(format!(
                            "cannot read source {}: {e}",
                            file.rel.display()
                        ))
                        .resource(&m.id)
                        .at(doc.origin_at(decl.key))
                        .until(decl.end),
                    )),
                }
            }
            ContentKind::Template => {
                let Some(rel) = decl.file.as_ref().map(|f| &f.rel) else {
                    return Ok(None);
                };
                // A template that did not parse is already reported.
                if !self.templates.is_loaded(rel) {
                    return Ok(None);
                }
                let layer = self.layer_name(doc);
                let origin = doc.origin_at(decl.key);
                self.templates
                    .render(rel, host, &m.id, &origin, &layer, self.is_sensitive(m))
                    .map(|text| Some(Content::new(text.into_bytes())))
            }
        }
    }

    /// A source-folder resource's declared content (a Tree's): its folder
    /// packed as content by its kind.
    fn render_tree(
        &self,
        m: &Merged,
        folder: &dyn datum_providers::TakesSourceFolder,
    ) -> Result<Option<Content>, Box<Diagnostic>> {
        let Some((_, d)) = m.fields.get(folder.field()) else {
            return Ok(None);
        };
        // A refused folder is already reported.
        let Some(dir) = self.tree_dirs.get(*d).and_then(Option::as_ref) else {
            return Ok(None);
        };
        match folder.pack(&dir.path) {
            Ok(content) => {
                let path = m.fields.get("path").and_then(|(v, _)| v.as_str());
                match path.map(|path| folder.check_packed(&content, path)) {
                    Some(Err(problem)) => Err(Box::new(
                        Diagnostic::error(format!("the tree source: {problem}"))
                            .resource(&m.id)
                            .at(self.doc(*d).origin_at(dir.at))
                            .until(dir.end),
                    )),
                    _ => Ok(Some(content)),
                }
            }
            Err(e) => {
                // The document's `desired` mapping may be gone by now: the
                // place was kept with the folder.
                Err(Box::new(
                    Diagnostic::error(format!("cannot read the tree source: {e}"))
                        .resource(&m.id)
                        .at(self.doc(*d).origin_at(dir.at))
                        .until(dir.end),
                ))
            }
        }
    }
}
