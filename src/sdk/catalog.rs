//! The hook catalogue of `hooks.runtime.cluster.x-k8s.io/v1alpha1`, per CAPI minor version.
//!
//! Discovery must advertise only hooks the running CAPI knows: one unknown hook makes
//! CAPI reject the whole extension, so every list here is gated on [`CapiVersion`].

use std::fmt;
use std::str::FromStr;

/// The CAPI minor release the server talks to (1.10 ..= 1.14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CapiVersion {
    pub minor: u16,
}

impl CapiVersion {
    pub const OLDEST: CapiVersion = CapiVersion { minor: 10 };
    pub const NEWEST: CapiVersion = CapiVersion { minor: 14 };

    pub const fn new(minor: u16) -> Self {
        CapiVersion { minor }
    }

    /// All supported minors, oldest first.
    pub fn supported() -> impl Iterator<Item = CapiVersion> {
        (Self::OLDEST.minor..=Self::NEWEST.minor).map(CapiVersion::new)
    }

    /// From v1.13 hook requests carry a v1beta2 Cluster and DiscoverVariables answers
    /// with the v1beta2 `ClusterClassVariable` element.
    pub fn uses_v1beta2_variables(self) -> bool {
        self.minor >= 13
    }

    /// The apiVersion CAPI puts on Cluster/MachineDeployment holder references.
    pub fn holder_api_version(self) -> &'static str {
        if self.minor >= 11 {
            "cluster.x-k8s.io/v1beta2"
        } else {
            "cluster.x-k8s.io/v1beta1"
        }
    }
}

impl fmt::Display for CapiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unsupported CAPI version {given:?}: expected one of 1.10, 1.11, 1.12, 1.13, 1.14 (a patch suffix such as v1.10.4 is accepted)")]
pub struct CapiVersionError {
    pub given: String,
}

impl FromStr for CapiVersion {
    type Err = CapiVersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || CapiVersionError {
            given: s.to_string(),
        };
        let trimmed = s.trim().trim_start_matches('v');
        let mut parts = trimmed.split('.');
        let major = parts.next().ok_or_else(err)?;
        let minor = parts.next().ok_or_else(err)?;
        if let Some(patch) = parts.next() {
            patch.parse::<u32>().map_err(|_| err())?;
        }
        if parts.next().is_some() || major != "1" {
            return Err(err());
        }
        let minor: u16 = minor.parse().map_err(|_| err())?;
        let v = CapiVersion::new(minor);
        if v < Self::OLDEST || v > Self::NEWEST {
            return Err(err());
        }
        Ok(v)
    }
}

/// Every hook of v1alpha1 at CAPI v1.14.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Hook {
    Discovery,
    GeneratePatches,
    ValidateTopology,
    DiscoverVariables,
    BeforeClusterCreate,
    AfterControlPlaneInitialized,
    BeforeClusterUpgrade,
    BeforeControlPlaneUpgrade,
    AfterControlPlaneUpgrade,
    BeforeWorkersUpgrade,
    AfterWorkersUpgrade,
    AfterClusterUpgrade,
    BeforeClusterDelete,
    GenerateUpgradePlan,
    CanUpdateMachine,
    CanUpdateMachineSet,
    UpdateMachine,
}

impl Hook {
    pub const ALL: [Hook; 17] = [
        Hook::Discovery,
        Hook::GeneratePatches,
        Hook::ValidateTopology,
        Hook::DiscoverVariables,
        Hook::BeforeClusterCreate,
        Hook::AfterControlPlaneInitialized,
        Hook::BeforeClusterUpgrade,
        Hook::BeforeControlPlaneUpgrade,
        Hook::AfterControlPlaneUpgrade,
        Hook::BeforeWorkersUpgrade,
        Hook::AfterWorkersUpgrade,
        Hook::AfterClusterUpgrade,
        Hook::BeforeClusterDelete,
        Hook::GenerateUpgradePlan,
        Hook::CanUpdateMachine,
        Hook::CanUpdateMachineSet,
        Hook::UpdateMachine,
    ];

    /// CamelCase name as used in Discovery's `requestHook.hook`.
    pub fn name(self) -> &'static str {
        match self {
            Hook::Discovery => "Discovery",
            Hook::GeneratePatches => "GeneratePatches",
            Hook::ValidateTopology => "ValidateTopology",
            Hook::DiscoverVariables => "DiscoverVariables",
            Hook::BeforeClusterCreate => "BeforeClusterCreate",
            Hook::AfterControlPlaneInitialized => "AfterControlPlaneInitialized",
            Hook::BeforeClusterUpgrade => "BeforeClusterUpgrade",
            Hook::BeforeControlPlaneUpgrade => "BeforeControlPlaneUpgrade",
            Hook::AfterControlPlaneUpgrade => "AfterControlPlaneUpgrade",
            Hook::BeforeWorkersUpgrade => "BeforeWorkersUpgrade",
            Hook::AfterWorkersUpgrade => "AfterWorkersUpgrade",
            Hook::AfterClusterUpgrade => "AfterClusterUpgrade",
            Hook::BeforeClusterDelete => "BeforeClusterDelete",
            Hook::GenerateUpgradePlan => "GenerateUpgradePlan",
            Hook::CanUpdateMachine => "CanUpdateMachine",
            Hook::CanUpdateMachineSet => "CanUpdateMachineSet",
            Hook::UpdateMachine => "UpdateMachine",
        }
    }

    /// The URL path segment: CAPI lowercases the hook name (`GVHToPath`).
    pub fn path_segment(self) -> String {
        self.name().to_ascii_lowercase()
    }

    pub fn from_path_segment(segment: &str) -> Option<Hook> {
        Hook::ALL
            .into_iter()
            .find(|h| h.name().eq_ignore_ascii_case(segment))
    }

    pub fn request_kind(self) -> String {
        format!("{}Request", self.name())
    }

    /// The first CAPI minor whose catalogue has this hook.
    pub fn introduced_in(self) -> CapiVersion {
        match self {
            Hook::BeforeControlPlaneUpgrade
            | Hook::BeforeWorkersUpgrade
            | Hook::AfterWorkersUpgrade
            | Hook::GenerateUpgradePlan
            | Hook::CanUpdateMachine
            | Hook::CanUpdateMachineSet
            | Hook::UpdateMachine => CapiVersion::new(12),
            _ => CapiVersion::OLDEST,
        }
    }

    pub fn known_to(self, capi: CapiVersion) -> bool {
        capi >= self.introduced_in()
    }

    /// Whether the response carries `retryAfterSeconds` and CAPI honours it as a block.
    /// AfterClusterUpgrade became blocking in v1.12.
    pub fn is_blocking(self, capi: CapiVersion) -> bool {
        match self {
            Hook::BeforeClusterCreate
            | Hook::BeforeClusterUpgrade
            | Hook::BeforeControlPlaneUpgrade
            | Hook::AfterControlPlaneUpgrade
            | Hook::BeforeWorkersUpgrade
            | Hook::AfterWorkersUpgrade
            | Hook::BeforeClusterDelete
            | Hook::UpdateMachine => true,
            Hook::AfterClusterUpgrade => capi.minor >= 12,
            _ => false,
        }
    }

    /// Lifecycle hooks carry a Cluster and are fanned out to the handler registry.
    pub fn is_lifecycle(self) -> bool {
        matches!(
            self,
            Hook::BeforeClusterCreate
                | Hook::AfterControlPlaneInitialized
                | Hook::BeforeClusterUpgrade
                | Hook::BeforeControlPlaneUpgrade
                | Hook::AfterControlPlaneUpgrade
                | Hook::BeforeWorkersUpgrade
                | Hook::AfterWorkersUpgrade
                | Hook::AfterClusterUpgrade
                | Hook::BeforeClusterDelete
        )
    }

    /// The default handler name: the hook in kebab-case, a DNS-1123 label.
    pub fn default_handler_name(self) -> String {
        let mut out = String::new();
        for (i, c) in self.name().chars().enumerate() {
            if c.is_ascii_uppercase() {
                if i > 0 {
                    out.push('-');
                }
                out.push(c.to_ascii_lowercase());
            } else {
                out.push(c);
            }
        }
        // CAPI's own test extension spells this one `can-update-machineset`.
        out.replace("machine-set", "machineset")
    }
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The hooks a CAPI minor knows, in catalogue order.
pub fn hooks_for(capi: CapiVersion) -> Vec<Hook> {
    Hook::ALL.into_iter().filter(|h| h.known_to(capi)).collect()
}

/// A DNS-1123 label: what CAPI accepts as a handler or ExtensionConfig name.
pub fn is_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!("1.10".parse::<CapiVersion>().unwrap().minor, 10);
        assert_eq!("v1.10.4".parse::<CapiVersion>().unwrap().minor, 10);
        assert_eq!("1.14.0".parse::<CapiVersion>().unwrap().minor, 14);
        assert!("1.9".parse::<CapiVersion>().is_err());
        assert!("1.15".parse::<CapiVersion>().is_err());
        assert!("2.10".parse::<CapiVersion>().is_err());
        assert!("1.x".parse::<CapiVersion>().is_err());
    }

    #[test]
    fn catalogue_sizes_match_capi() {
        assert_eq!(hooks_for(CapiVersion::new(10)).len(), 10);
        assert_eq!(hooks_for(CapiVersion::new(11)).len(), 10);
        assert_eq!(hooks_for(CapiVersion::new(12)).len(), 17);
        assert_eq!(hooks_for(CapiVersion::new(14)).len(), 17);
    }

    #[test]
    fn handler_names_are_labels() {
        for h in Hook::ALL {
            let name = h.default_handler_name();
            assert!(is_dns1123_label(&name), "{name}");
        }
        assert_eq!(
            Hook::AfterControlPlaneInitialized.default_handler_name(),
            "after-control-plane-initialized"
        );
        assert_eq!(
            Hook::CanUpdateMachineSet.default_handler_name(),
            "can-update-machineset"
        );
        assert!(!is_dns1123_label("a.b"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("A"));
    }

    #[test]
    fn after_cluster_upgrade_blocks_from_1_12() {
        assert!(!Hook::AfterClusterUpgrade.is_blocking(CapiVersion::new(11)));
        assert!(Hook::AfterClusterUpgrade.is_blocking(CapiVersion::new(12)));
    }
}
