//! The seam between the Kubernetes half of the OpenStack controllers (watching,
//! finalizers, status writes, leader election, Events) and the cloud half (what to
//! create in OpenStack and in which order).
//!
//! The Kubernetes half owns the object and writes its status; the cloud half never
//! talks to the apiserver except through [`StatusSink`], which it must call after
//! every create so that a crash between a create and the next step finds the new
//! resource's ID in status instead of creating a second one.

use std::future::Future;
use std::time::Duration;

use secrecy::SecretSlice;

use super::api::{
    OpenStackCluster, OpenStackClusterStatus, OpenStackMachine, OpenStackMachineStatus,
};

/// The identityRef Secret, already read from the object's namespace. `Debug` names
/// the Secret and the cloud but prints the clouds.yaml (passwords, application
/// credential secrets) redacted.
#[derive(Clone, Debug)]
pub struct IdentitySecret {
    pub namespace: String,
    pub name: String,
    /// Keyed into client caches: a changed Secret means a new client.
    pub resource_version: String,
    /// The `clouds.yaml` key, verbatim; read only to build the cloud's session.
    pub clouds_yaml: SecretSlice<u8>,
    /// The optional `cacert` key (PEM bundle replacing the system roots).
    pub cacert: Option<Vec<u8>>,
    /// `identityRef.cloudName`.
    pub cloud_name: String,
    /// `identityRef.region`, overriding the cloud entry's `region_name`.
    pub region: Option<String>,
}

/// Facts the cloud half needs that are not in the OpenStackCluster itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterScope {
    /// Namespace of the OpenStackCluster and its CAPI Cluster.
    pub namespace: String,
    /// The owning CAPI Cluster's name (resource names derive from it, as CAPO's do).
    pub cluster_name: String,
    /// Whether Machines of the cluster still exist (deletion waits for them).
    pub machines_remaining: usize,
}

/// Writes the status of the object being reconciled, immediately. `S` is the status
/// type of the kind (the cluster's unless said otherwise).
pub trait StatusSink<S = OpenStackClusterStatus>: Send + Sync {
    fn save(&self, status: &S) -> impl Future<Output = Result<(), SinkError>> + Send;
}

/// A status write failed; the reconcile stops and is retried.
#[derive(Debug, thiserror::Error)]
#[error("writing status: {0}")]
pub struct SinkError(pub String);

/// What the cloud half decided after one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterOutcome {
    /// The full new status, conditions and `extensions` included.
    pub status: OpenStackClusterStatus,
    /// `spec.controlPlaneEndpoint` to set when it is not set yet.
    pub control_plane_endpoint: Option<(String, i32)>,
    /// `None` when converged; otherwise check again after this long (never a sleep
    /// inside the reconcile: Octavia PENDING_* states come back here).
    pub requeue_after: Option<Duration>,
}

/// How far deletion got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeleteProgress {
    /// Everything is gone: the finalizer may be removed.
    Done,
    /// Still waiting (Machines, a load balancer being deleted…); check again.
    Requeue { after: Duration, reason: String },
}

/// Why a pass did not finish.
#[derive(Debug, thiserror::Error)]
pub enum InfraError {
    /// Transient (409, 429, 5xx, timeouts): retry with backoff, no user-facing Event.
    #[error("{reason}: {message}")]
    Transient {
        reason: String,
        message: String,
        retry_after: Option<Duration>,
        /// The service did not answer (no connection, no answer in time, 502/503/504):
        /// the controllers say so in the Ready condition.
        unavailable: bool,
    },
    /// The spec or the credentials are wrong: a Condition with this reason and an
    /// Event; retrying without a change will not help (but is still done slowly).
    #[error("{reason}: {message}")]
    User { reason: String, message: String },
    #[error(transparent)]
    Sink(#[from] SinkError),
}

/// The cloud half of the OpenStackCluster controller.
pub trait ClusterInfra: Send + Sync + 'static {
    fn reconcile(
        &self,
        scope: &ClusterScope,
        cluster: &OpenStackCluster,
        identity: &IdentitySecret,
        sink: &impl StatusSink,
    ) -> impl Future<Output = Result<ClusterOutcome, InfraError>> + Send;

    fn delete(
        &self,
        scope: &ClusterScope,
        cluster: &OpenStackCluster,
        identity: &IdentitySecret,
        sink: &impl StatusSink,
    ) -> impl Future<Output = Result<DeleteProgress, InfraError>> + Send;

    /// What the cluster's addons need from the cloud: the parsed identity and,
    /// for the CSI driver's StorageClasses, the project's volume types.
    fn addon_facts(
        &self,
        identity: &IdentitySecret,
        with_volume_types: bool,
    ) -> impl Future<Output = Result<crate::addons::install::CloudFacts, InfraError>> + Send {
        let _ = (identity, with_volume_types);
        async {
            Err(InfraError::User {
                reason: "AddonsUnsupported".into(),
                message: "this infrastructure renders no addons".into(),
            })
        }
    }
}

/// Facts the machine's cloud half needs from outside the OpenStackMachine: the CAPI
/// Machine, its Cluster and the cluster's infrastructure as the cluster controller
/// left it. `Debug` prints the bootstrap data (join tokens, certificates) redacted.
#[derive(Clone, Debug)]
pub struct MachineScope {
    pub namespace: String,
    /// The CAPI Cluster's name (server groups and tags derive from it).
    pub cluster_name: String,
    /// The CAPI Machine's name.
    pub machine_name: String,
    /// The Machine is part of the control plane (`cluster.x-k8s.io/control-plane`).
    pub control_plane: bool,
    /// The MachineDeployment it belongs to, if any (names its server group).
    pub deployment: Option<String>,
    /// `spec.failureDomain` of the Machine: the Nova availability zone.
    pub failure_domain: Option<String>,
    /// The bootstrap data (`value` of the Machine's bootstrap Secret), sent as
    /// user_data; `None` on deletion. Read only to build the server's create request.
    pub bootstrap_data: Option<SecretSlice<u8>>,
    /// The cluster's infrastructure: network, security groups, load balancer.
    pub cluster: OpenStackCluster,
}

/// What the machine's cloud half decided after one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineOutcome {
    pub status: OpenStackMachineStatus,
    /// `spec.providerID` to set when it is not set yet.
    pub provider_id: Option<String>,
    /// `None` when converged; otherwise check again after this long (BUILD, a volume
    /// being created, Octavia PENDING_*).
    pub requeue_after: Option<Duration>,
}

/// The cloud half of the OpenStackMachine controller.
pub trait MachineInfra: Send + Sync + 'static {
    fn reconcile(
        &self,
        scope: &MachineScope,
        machine: &OpenStackMachine,
        identity: &IdentitySecret,
        sink: &impl StatusSink<OpenStackMachineStatus>,
    ) -> impl Future<Output = Result<MachineOutcome, InfraError>> + Send;

    fn delete(
        &self,
        scope: &MachineScope,
        machine: &OpenStackMachine,
        identity: &IdentitySecret,
        sink: &impl StatusSink<OpenStackMachineStatus>,
    ) -> impl Future<Output = Result<DeleteProgress, InfraError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::OpenStackClusterSpec;

    #[test]
    fn machine_scope_debug_prints_no_bootstrap_data() {
        let scope = MachineScope {
            namespace: "ns".into(),
            cluster_name: "prod".into(),
            machine_name: "prod-md-0-abc".into(),
            control_plane: false,
            deployment: Some("md-0".into()),
            failure_domain: None,
            bootstrap_data: Some(
                b"#cloud-config\ntoken: abcdef.0123456789abcdef\n"
                    .to_vec()
                    .into(),
            ),
            cluster: OpenStackCluster::new("prod", OpenStackClusterSpec::default()),
        };
        for shown in [format!("{scope:?}"), format!("{scope:#?}")] {
            assert!(!shown.contains("0123456789abcdef"), "{shown}");
            assert!(!shown.contains("cloud-config"), "{shown}");
            // Not as bytes either: `#` `c` `l` are 35, 99, 108.
            assert!(!shown.contains("35, 99, 108"), "{shown}");
            assert!(shown.contains("REDACTED"), "{shown}");
            assert!(
                shown.contains("prod-md-0-abc") && shown.contains("md-0"),
                "{shown}"
            );
        }
    }
}
