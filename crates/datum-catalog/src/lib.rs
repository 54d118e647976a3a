//! Compiles a repository for one host into a catalogue. (Skeleton: being written.)

use std::collections::BTreeMap;

use datum_core::Resource;
use serde::{Deserialize, Serialize};

/// Who the catalogue is compiled for: the host's name and labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct HostIdentity {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// The compiled, checked catalogue for one host: resources in dependency order
/// (every resource comes after everything it requires).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Catalogue {
    pub host: HostIdentity,
    pub resources: Vec<Resource>,
}
