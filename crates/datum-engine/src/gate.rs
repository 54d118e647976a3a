//! The checkpoint between staging and activation: the resource's named
//! validator, looked up by the engine, run on the staged copy.

use std::path::Path;

use datum_core::Resource;
use datum_host::Host;
use datum_providers::{GateRejection, StagingGate};

/// Runs the resource's validator (if it names one) on staged content.
pub struct ValidationGate<'a> {
    pub resource: &'a Resource,
    pub host: &'a Host,
}

impl StagingGate for ValidationGate<'_> {
    fn check_staged(&mut self, _staged: &Path) -> Result<(), GateRejection> {
        let _ = self.host;
        match &self.resource.validate {
            None => Ok(()),
            // TODO(issue 3): run the validator registry's definition here.
            Some(name) => Err(GateRejection {
                summary: format!("validator `{name}` cannot run yet in this build"),
                detail: None,
            }),
        }
    }
}
