//! What CAPI does with a difference, per release: the one place the plan's rules live.
//!
//! Every rule below was read in CAPI's source at the tag named next to it
//! (github.com/kubernetes-sigs/cluster-api); 1.14 moved `internal/controllers/` to
//! `core/reconcilers/`, the functions kept their names.
//!
//! - Template rotation (all of 1.10..1.14): `reconcileReferencedTemplate` in
//!   `internal/controllers/topology/cluster/reconcile_state.go` (v1.10.10, v1.11.11,
//!   v1.12.11, v1.13.5; `core/reconcilers/topology/cluster/reconcile_state.go` in
//!   v1.14.0) compares the current template with the desired one through the patch
//!   helper: no change → nothing; `!HasSpecChanges()` (metadata only) → the template is
//!   patched in place, "This avoids recreating machines"; a spec change → a new
//!   template under a new generated name and the reference moved to it (a rotation).
//!   The InfrastructureCluster and the ControlPlane are never rotated: they are
//!   patched in place by `reconcileReferencedObject`.
//! - MachineDeployment rollout: `MachineTemplateDeepCopyRolloutFields` and
//!   `MachineTemplateUpToDate` in `internal/controllers/machinedeployment/mdutil/util.go`
//!   (v1.10.10 .. v1.13.5; `core/reconcilers/machinedeployment/mdutil/util.go` in
//!   v1.14.0): a new MachineSet (every machine replaced) when the version, the
//!   bootstrap reference, the infrastructure reference or the failure domain differ;
//!   labels, annotations, readinessGates and the node drain/volume-detach/deletion
//!   timeouts are propagated in place, and from v1.11 (v1beta2) `minReadySeconds`,
//!   from v1.12 `taints` too. Replicas are a scale, never a rollout.
//! - Control plane rollout (KubeadmControlPlane): `UpToDate`/`matchesMachineSpec` in
//!   `controlplane/kubeadm/internal/filters.go` (v1.10.10 .. v1.14.0): a machine is
//!   replaced when the version differs, the KubeadmConfig (ClusterConfiguration,
//!   Init/JoinConfiguration) differs, the infrastructure template was rotated
//!   (`matchesTemplateClonedFrom`), or rolloutAfter/rolloutBefore say so; the machine
//!   template's labels, annotations and node timeouts are synced in place
//!   (`syncMachines`).
//! - In-place machine updates: the `InPlaceUpdates` feature gate exists from v1.12.11
//!   (`feature/feature.go`, alpha, off by default). With it on and an update extension
//!   registered, a rollout above may become an in-place update; the plan assumes off.
//! - Patches that set labels and annotations reach the objects from v1.14 only (the
//!   rendering, `crate::render`, already follows that).

use crate::sdk::CapiVersion;

/// What happens to a changed field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Effect {
    /// Machines are replaced.
    Rollout,
    /// A Kubernetes version change: machines are replaced as an upgrade.
    Upgrade,
    /// The replica count changes: machines are added or removed, none replaced.
    Scale,
    /// Written to the object (and propagated to machines) without replacing machines.
    InPlace,
}

/// The rules of one CAPI release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub capi: CapiVersion,
    /// The Cluster's topology uses the v1beta2 spelling (1.11 on).
    pub v1beta2: bool,
    /// Fields of a MachineDeployment topology entry CAPI propagates to its MachineSets
    /// and Machines in place (paths relative to the entry).
    pub md_in_place: &'static [&'static str],
    /// Fields of a MachineDeployment topology entry whose change replaces the machines.
    pub md_rollout: &'static [&'static str],
    /// KubeadmControlPlane fields (paths under the object) synced to machines in place.
    pub kcp_in_place: &'static [&'static str],
    /// KubeadmControlPlane fields whose change replaces control-plane machines.
    pub kcp_rollout: &'static [&'static str],
    /// The `InPlaceUpdates` feature gate exists (alpha, off by default).
    pub in_place_updates_gate: bool,
}

/// v1beta1 spellings (CAPI 1.10, `api/v1beta1/cluster_types.go` of v1.10.10).
const MD_IN_PLACE_V1BETA1: &[&str] = &[
    "metadata",
    "nodeDrainTimeout",
    "nodeVolumeDetachTimeout",
    "nodeDeletionTimeout",
    "minReadySeconds",
    "strategy",
    "machineHealthCheck",
    "readinessGates",
];
/// v1beta2 spellings (CAPI 1.11 `api/core/v1beta2/cluster_types.go` of v1.11.11).
const MD_IN_PLACE_V1BETA2: &[&str] = &[
    "metadata",
    "deletion",
    "minReadySeconds",
    "rollout.strategy",
    "healthCheck",
    "readinessGates",
];
/// 1.12 adds taints, propagated in place (`spec.Taints = nil` in
/// `MachineTemplateDeepCopyRolloutFields`, v1.12.11).
const MD_IN_PLACE_V1BETA2_TAINTS: &[&str] = &[
    "metadata",
    "deletion",
    "minReadySeconds",
    "rollout.strategy",
    "healthCheck",
    "readinessGates",
    "taints",
];
const MD_ROLLOUT_V1BETA1: &[&str] = &["failureDomain", "rolloutAfter"];
const MD_ROLLOUT_V1BETA2: &[&str] = &["failureDomain", "rollout.after"];

const KCP_IN_PLACE_V1BETA1: &[&str] = &[
    "spec.machineTemplate.metadata",
    "spec.machineTemplate.nodeDrainTimeout",
    "spec.machineTemplate.nodeVolumeDetachTimeout",
    "spec.machineTemplate.nodeDeletionTimeout",
    "spec.rolloutStrategy",
    "spec.remediationStrategy",
    "spec.machineNamingStrategy",
];
const KCP_IN_PLACE_V1BETA2: &[&str] = &[
    "spec.machineTemplate.metadata",
    "spec.machineTemplate.spec.deletion",
    "spec.machineTemplate.spec.readinessGates",
    "spec.rollout.strategy",
    "spec.remediation",
    "spec.machineNaming",
];
const KCP_ROLLOUT_V1BETA1: &[&str] = &[
    "spec.kubeadmConfigSpec",
    "spec.rolloutAfter",
    "spec.rolloutBefore",
];
const KCP_ROLLOUT_V1BETA2: &[&str] = &[
    "spec.kubeadmConfigSpec",
    "spec.rollout.after",
    "spec.rollout.before",
];

impl Rules {
    /// The rules of `capi`.
    pub fn of(capi: CapiVersion) -> Rules {
        let v1beta2 = capi.minor >= 11;
        Rules {
            capi,
            v1beta2,
            md_in_place: match capi.minor {
                ..=10 => MD_IN_PLACE_V1BETA1,
                11 => MD_IN_PLACE_V1BETA2,
                _ => MD_IN_PLACE_V1BETA2_TAINTS,
            },
            md_rollout: if v1beta2 {
                MD_ROLLOUT_V1BETA2
            } else {
                MD_ROLLOUT_V1BETA1
            },
            kcp_in_place: if v1beta2 {
                KCP_IN_PLACE_V1BETA2
            } else {
                KCP_IN_PLACE_V1BETA1
            },
            kcp_rollout: if v1beta2 {
                KCP_ROLLOUT_V1BETA2
            } else {
                KCP_ROLLOUT_V1BETA1
            },
            in_place_updates_gate: capi.minor >= 12,
        }
    }

    /// What a change at `path` of a MachineDeployment topology entry does (`replicas`,
    /// `metadata.labels.x`, `failureDomain`, ...). Fields the rules do not name are
    /// written to the MachineDeployment without a rollout.
    pub fn machine_deployment_field(&self, path: &str) -> Effect {
        if path == "replicas" {
            return Effect::Scale;
        }
        if self.md_rollout.iter().any(|p| under(path, p)) {
            return Effect::Rollout;
        }
        Effect::InPlace
    }

    /// What a change at `path` of a rendered KubeadmControlPlane does.
    pub fn kubeadm_control_plane_field(&self, path: &str) -> Effect {
        if path == "spec.replicas" {
            return Effect::Scale;
        }
        if path == "spec.version" {
            return Effect::Upgrade;
        }
        if self.kcp_rollout.iter().any(|p| under(path, p)) {
            return Effect::Rollout;
        }
        if self.kcp_in_place.iter().any(|p| under(path, p)) {
            return Effect::InPlace;
        }
        // Anything else of the spec is written to the KCP; metadata never rolls.
        Effect::InPlace
    }
}

/// Whether `path` is `prefix` or below it (`a.b` is under `a`, `a.bc` is not).
pub fn under(path: &str, prefix: &str) -> bool {
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(minor: u16) -> Rules {
        Rules::of(CapiVersion::new(minor))
    }

    #[test]
    fn replicas_scale_and_labels_propagate_in_every_release() {
        for minor in 10..=14 {
            let r = rules(minor);
            assert_eq!(r.machine_deployment_field("replicas"), Effect::Scale);
            assert_eq!(
                r.machine_deployment_field("metadata.labels.team"),
                Effect::InPlace
            );
            assert_eq!(r.machine_deployment_field("failureDomain"), Effect::Rollout);
            assert_eq!(
                r.kubeadm_control_plane_field("spec.replicas"),
                Effect::Scale
            );
            assert_eq!(
                r.kubeadm_control_plane_field("spec.version"),
                Effect::Upgrade
            );
            assert_eq!(
                r.kubeadm_control_plane_field("spec.kubeadmConfigSpec.files[0].content"),
                Effect::Rollout
            );
            assert_eq!(
                r.kubeadm_control_plane_field("spec.machineTemplate.metadata.labels.a"),
                Effect::InPlace
            );
        }
    }

    #[test]
    fn spellings_follow_the_api_version() {
        assert_eq!(
            rules(10).machine_deployment_field("rolloutAfter"),
            Effect::Rollout
        );
        assert_eq!(
            rules(11).machine_deployment_field("rollout.after"),
            Effect::Rollout
        );
        assert_eq!(
            rules(11).machine_deployment_field("rollout.strategy.type"),
            Effect::InPlace
        );
        assert_eq!(
            rules(10).kubeadm_control_plane_field("spec.rolloutAfter"),
            Effect::Rollout
        );
        assert_eq!(
            rules(13).kubeadm_control_plane_field("spec.rollout.before.certificatesExpiryDays"),
            Effect::Rollout
        );
        assert!(!rules(11).md_in_place.contains(&"taints"));
        assert!(rules(12).md_in_place.contains(&"taints"));
        assert!(!rules(11).in_place_updates_gate);
        assert!(rules(12).in_place_updates_gate);
    }

    #[test]
    fn under_matches_whole_segments() {
        assert!(under("spec.a", "spec.a"));
        assert!(under("spec.a.b", "spec.a"));
        assert!(under("spec.a[0]", "spec.a"));
        assert!(!under("spec.ab", "spec.a"));
    }
}
