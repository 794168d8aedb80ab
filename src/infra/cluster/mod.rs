//! The cloud half of the OpenStackCluster controller: CAPO's cluster flow
//! (external network; network, subnet, router; the API VIP port without a
//! load balancer; managed security groups; bastion; API endpoint; failure
//! domains) and its reverse on deletion, plus the
//! `status.extensions` facts for the bootstrap.
//!
//! Every create is followed by a status write through the sink, and every
//! resource is first looked up by name (and our ownership tag), so a pass
//! that dies anywhere is finished by the next one without duplicates.
//!
//! The pass is generic over the client set ([`CloudClients`]): production
//! runs it on the real clients, and the fault tests (`faults.rs`) on an
//! in-memory cloud (`fake.rs`) that fails or loses the answer of any call,
//! which the loopback test cloud cannot be made to do on cue.

mod api_vip;
mod bastion;
mod delete;
mod endpoint;
#[cfg(test)]
mod fake;
#[cfg(test)]
mod faults;
mod network;
pub(crate) use network::refused;
pub(crate) use network::{named_query, security_group_by_filter};
pub(crate) use network::{subnet_by_id, subnet_query};
pub mod rules;
mod security_groups;

use std::sync::Arc;
use std::time::Duration;

pub use bastion::OWNER_METADATA_KEY;

use secrecy::ExposeSecret;
use stackhook_openstack::compute::Compute;
use stackhook_openstack::identity::Identity;
use stackhook_openstack::{CacheKey, ClientCache, Clients, CloudClients, OsError};

use crate::infra::api::cluster::{ClusterInitialization, OpenStackClusterSpec};
use crate::infra::api::extensions::{
    CiliumStatus, ClusterStatusExtensions, LoadBalancersStatus, NetworkingStatus, NtpStatus,
    OpenStackStatus, PlatformStatus, VirtualIp,
};
use crate::infra::api::names::{conditions as cond, ClusterNames};
use crate::infra::api::types::FailureDomainSpec;
use crate::infra::api::{OpenStackCluster, OpenStackClusterStatus};
use crate::infra::conditions::{self, Severity};
use crate::infra::seam::{
    ClusterInfra, ClusterOutcome, ClusterScope, DeleteProgress, IdentitySecret, InfraError,
    StatusSink,
};

/// Platform facts that no OpenStack API provides; from operator configuration,
/// the defaults for clusters whose `spec.extensions.platform` does not set them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlatformConfig {
    pub ntp_server: Option<String>,
    pub management_vip: Option<String>,
}

/// While Octavia works on a load balancer.
const LB_PENDING_REQUEUE: Duration = Duration::from_secs(3);
/// While Machines remain on deletion (CAPO uses 5 s).
const MACHINES_REQUEUE: Duration = Duration::from_secs(5);

/// Where a pass gets the clients for an identity Secret: the client cache
/// in production; an in-memory cloud in the reconcile's fault tests.
pub trait CloudSource: Send + Sync + 'static {
    type Clients: CloudClients;

    /// The clients for `identity`; an error means its clouds.yaml or CA
    /// bundle is unusable.
    fn clients_for(&self, identity: &IdentitySecret) -> Result<Arc<Self::Clients>, OsError>;
}

impl CloudSource for ClientCache {
    type Clients = Clients;

    fn clients_for(&self, identity: &IdentitySecret) -> Result<Arc<Clients>, OsError> {
        let key = CacheKey {
            namespace: identity.namespace.clone(),
            name: identity.name.clone(),
            resource_version: identity.resource_version.clone(),
            cloud_name: identity.cloud_name.clone(),
            region: identity.region.clone(),
        };
        self.get_or_create(
            key,
            identity.clouds_yaml.expose_secret(),
            identity.cacert.as_deref(),
        )
    }
}

/// One cache shared by the cluster and machine controllers, so both use one session
/// (and token) per identity.
impl CloudSource for Arc<ClientCache> {
    type Clients = Clients;

    fn clients_for(&self, identity: &IdentitySecret) -> Result<Arc<Clients>, OsError> {
        self.as_ref().clients_for(identity)
    }
}

/// `ClusterInfra` on OpenStack: by default a real one, through cached clients.
pub struct OpenStackClusterInfra<C = ClientCache> {
    platform: PlatformConfig,
    clouds: C,
}

impl OpenStackClusterInfra {
    pub fn new(platform: PlatformConfig) -> Self {
        Self::with_clouds(platform, ClientCache::new())
    }
}

impl<C: CloudSource> OpenStackClusterInfra<C> {
    pub fn with_clouds(platform: PlatformConfig, clouds: C) -> Self {
        Self { platform, clouds }
    }

    /// The clients for an identity; exposed so callers can read the
    /// session's request counts.
    pub fn clients_for(&self, identity: &IdentitySecret) -> Result<Arc<C::Clients>, InfraError> {
        self.clouds
            .clients_for(identity)
            .map_err(|e| user("InvalidCloudConfig", e.to_string()))
    }
}

impl<C: CloudSource> ClusterInfra for OpenStackClusterInfra<C> {
    async fn reconcile(
        &self,
        scope: &ClusterScope,
        cluster: &OpenStackCluster,
        identity: &IdentitySecret,
        sink: &impl StatusSink,
    ) -> Result<ClusterOutcome, InfraError> {
        let clients = self.clients_for(identity)?;
        let mut pass = Pass::new(&*clients, scope, cluster, sink);
        match pass.run(&self.platform, identity).await {
            Ok(outcome) => Ok(outcome),
            Err(InfraError::User { reason, message }) => {
                // Tell the user why in the object, not only in an Event.
                pass.set(cond::READY, false, &reason, &message);
                pass.status.failure_reason = Some(reason.clone());
                pass.status.failure_message = Some(message.clone());
                if let Err(e) = pass.sink.save(&pass.status).await {
                    tracing::warn!(error = %e, "could not record the failure in status");
                }
                Err(InfraError::User { reason, message })
            }
            // A service that does not answer is said in the object too: which one,
            // and the request it did not answer. Not a failure: the pass is retried.
            Err(
                e @ InfraError::Transient {
                    unavailable: true, ..
                },
            ) => {
                pass.set(cond::READY, false, UNAVAILABLE, &e.to_string());
                if let Err(err) = pass.sink.save(&pass.status).await {
                    tracing::warn!(error = %err, "could not record the outage in status");
                }
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    async fn addon_facts(
        &self,
        identity: &IdentitySecret,
        with_volume_types: bool,
    ) -> Result<crate::addons::install::CloudFacts, InfraError> {
        let clients = self.clients_for(identity)?;
        crate::addons::install::CloudFacts::read(
            &*clients,
            identity.cacert.clone(),
            with_volume_types,
        )
        .await
        .map_err(|e| os("VolumeTypesUnreadable", e))
    }

    async fn delete(
        &self,
        scope: &ClusterScope,
        cluster: &OpenStackCluster,
        identity: &IdentitySecret,
        sink: &impl StatusSink,
    ) -> Result<DeleteProgress, InfraError> {
        if scope.machines_remaining > 0 {
            return Ok(DeleteProgress::Requeue {
                after: MACHINES_REQUEUE,
                reason: format!("{} Machines remain", scope.machines_remaining),
            });
        }
        let clients = self.clients_for(identity)?;
        let mut pass = Pass::new(&*clients, scope, cluster, sink);
        pass.delete_all().await
    }
}

/// One reconcile pass: the working status and what it needs.
pub(crate) struct Pass<'a, C: CloudClients, S: StatusSink> {
    pub clients: &'a C,
    pub names: ClusterNames,
    pub spec: &'a OpenStackClusterSpec,
    pub status: OpenStackClusterStatus,
    pub sink: &'a S,
    /// `spec.tags` plus our ownership tag.
    pub tags: Vec<String>,
    /// Set when a step waits for the cloud (Octavia PENDING_*).
    pub requeue: Option<Duration>,
    /// Set while Nova builds or deletes the bastion; unlike `requeue` it
    /// does not hold back readiness (CAPO handles the bastion after Ready).
    pub bastion_requeue: Option<Duration>,
    /// The status as the pass found it.
    initial: OpenStackClusterStatus,
}

impl<'a, C: CloudClients, S: StatusSink> Pass<'a, C, S> {
    fn new(
        clients: &'a C,
        scope: &ClusterScope,
        cluster: &'a OpenStackCluster,
        sink: &'a S,
    ) -> Self {
        let names = ClusterNames::new(scope.namespace.clone(), scope.cluster_name.clone());
        let mut tags = cluster.spec.tags.clone();
        let own = owner_tag(&names);
        if !tags.contains(&own) {
            tags.push(own);
        }
        Self {
            clients,
            names,
            spec: &cluster.spec,
            status: cluster.status.clone().unwrap_or_default(),
            sink,
            tags,
            requeue: None,
            bastion_requeue: None,
            initial: cluster.status.clone().unwrap_or_default(),
        }
    }

    /// Writes the working status now (after each create).
    pub async fn save(&self) -> Result<(), InfraError> {
        self.sink.save(&self.status).await.map_err(InfraError::Sink)
    }

    pub fn wait(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    /// Sets a CAPI condition, keeping its transition time when unchanged.
    pub fn set(&mut self, type_: &str, ok: bool, reason: &str, message: &str) {
        if ok {
            conditions::mark_true(&mut self.status.conditions, type_);
        } else {
            conditions::mark_false(
                &mut self.status.conditions,
                type_,
                reason,
                Severity::Warning,
                message,
            );
        }
    }

    async fn run(
        &mut self,
        platform: &PlatformConfig,
        identity: &IdentitySecret,
    ) -> Result<ClusterOutcome, InfraError> {
        self.status.failure_reason = None;
        self.status.failure_message = None;

        self.reconcile_external_network().await?;
        if let Err(e) = self.reconcile_network().await {
            self.set(cond::NETWORK_READY, false, reason_of(&e), &e.to_string());
            return Err(e);
        }
        self.set(cond::NETWORK_READY, true, "", "");
        if self.status.router.is_some() {
            self.set(cond::ROUTER_READY, true, "", "");
        }

        // Before anything else takes an address from the subnet.
        if let Err(e) = self.reconcile_api_vip_port().await {
            self.set(
                cond::API_ENDPOINT_READY,
                false,
                reason_of(&e),
                &e.to_string(),
            );
            return Err(e);
        }

        // A bastion no longer wanted goes before the security groups, so
        // the bastion group is free to be deleted in the same pass.
        if self.bastion_leftover() && !self.delete_bastion().await? {
            self.bastion_requeue = Some(bastion::BASTION_REQUEUE);
        }

        if self.spec.managed_security_groups.is_some() {
            if let Err(e) = self.reconcile_security_groups().await {
                self.set(
                    cond::SECURITY_GROUPS_READY,
                    false,
                    reason_of(&e),
                    &e.to_string(),
                );
                return Err(e);
            }
            self.set(cond::SECURITY_GROUPS_READY, true, "", "");
        }

        self.reconcile_bastion().await?;

        let endpoint = match self.reconcile_endpoint().await {
            Ok(ep) => ep,
            Err(e) => {
                self.set(
                    cond::API_ENDPOINT_READY,
                    false,
                    reason_of(&e),
                    &e.to_string(),
                );
                return Err(e);
            }
        };
        let ingress_vip = self.reconcile_ingress_vip().await?;
        self.reconcile_failure_domains().await?;

        let Some((host, port)) = endpoint else {
            // Octavia is still working; nothing below may claim readiness.
            self.set(
                cond::API_ENDPOINT_READY,
                false,
                "LoadBalancerPending",
                "waiting for the API load balancer to become ACTIVE",
            );
            self.set(cond::READY, false, "LoadBalancerPending", "");
            self.save_if_changed().await?;
            return Ok(ClusterOutcome {
                status: self.status.clone(),
                control_plane_endpoint: None,
                requeue_after: Some(
                    self.requeue
                        .unwrap_or(LB_PENDING_REQUEUE)
                        .min(self.bastion_requeue.unwrap_or(Duration::MAX)),
                ),
            });
        };
        self.set(cond::API_ENDPOINT_READY, true, "", "");

        self.status.extensions = Some(Box::new(
            self.extensions(platform, identity, &host, ingress_vip)
                .await?,
        ));
        let ready = self.requeue.is_none();
        self.status.ready = ready || self.status.ready;
        if ready {
            self.status.initialization = Some(ClusterInitialization {
                provisioned: Some(true),
            });
            self.set(cond::READY, true, "", "");
        }
        let set_endpoint = match &self.spec.control_plane_endpoint {
            Some(ep) if !ep.host.is_empty() => None,
            _ => Some((host, port)),
        };
        Ok(ClusterOutcome {
            status: self.status.clone(),
            control_plane_endpoint: set_endpoint,
            requeue_after: match (self.requeue, self.bastion_requeue) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        })
    }

    /// Writes status when a waiting pass changed it, so the object shows
    /// progress while Octavia works (and stays quiet when nothing moved).
    async fn save_if_changed(&self) -> Result<(), InfraError> {
        if self.status == self.initial {
            return Ok(());
        }
        self.save().await
    }

    async fn reconcile_failure_domains(&mut self) -> Result<(), InfraError> {
        let zones = self
            .clients
            .compute()
            .availability_zones()
            .await
            .map_err(|e| os("AvailabilityZoneListFailed", e))?;
        let spec = self.spec;
        self.status.failure_domains = zones
            .into_iter()
            .filter(|z| z.available)
            .map(|z| {
                let control_plane = if spec.control_plane_availability_zones.is_empty() {
                    !spec.control_plane_omit_availability_zone.unwrap_or(false)
                } else {
                    spec.control_plane_availability_zones.contains(&z.name)
                };
                (
                    z.name,
                    FailureDomainSpec {
                        control_plane: Some(control_plane),
                        attributes: Default::default(),
                    },
                )
            })
            .collect();
        Ok(())
    }

    async fn extensions(
        &self,
        platform: &PlatformConfig,
        identity: &IdentitySecret,
        host: &str,
        ingress_vip: Option<String>,
    ) -> Result<ClusterStatusExtensions, InfraError> {
        let id = self.clients.identity();
        let project = id
            .project()
            .await
            .map_err(|e| os("KeystoneTokenFailed", e))?;
        let endpoint = |types: &'static [&'static str]| async move {
            id.catalog_endpoint(types)
                .await
                .map_err(|e| os("KeystoneCatalogFailed", e))
        };
        let keystone = endpoint(&["identity"])
            .await?
            .or_else(|| Some(self.clients.config().auth_url.clone()));
        let nova = endpoint(&["compute"]).await?;
        let neutron = endpoint(&["network"]).await?;
        let cinder = endpoint(&["block-storage", "volumev3"]).await?;

        let default_subnet_id = self
            .status
            .network
            .as_ref()
            .and_then(|n| {
                n.subnets
                    .iter()
                    .find(|s| !s.cidr.contains(':'))
                    .or(n.subnets.first())
            })
            .map(|s| s.id.clone());
        let security_group_ids: Vec<String> = [
            &self.status.control_plane_security_group,
            &self.status.worker_security_group,
        ]
        .into_iter()
        .flatten()
        .map(|g| g.id.clone())
        .collect();
        let spec_ext = self.spec.extensions.as_ref();
        let platform_spec = spec_ext.and_then(|e| e.platform.as_ref());
        let ntp_server = platform_spec
            .and_then(|p| p.ntp.as_ref())
            .and_then(|n| n.server.clone())
            .or_else(|| platform.ntp_server.clone());
        let management_vip = platform_spec
            .and_then(|p| p.management.as_ref())
            .and_then(|m| m.vip.clone())
            .or_else(|| platform.management_vip.clone());
        // The controller fills these from the machines; a pass keeps what it found.
        let node_resources = self
            .status
            .extensions
            .as_ref()
            .map(|e| e.node_resources.clone())
            .unwrap_or_default();
        let cp_vip = self
            .status
            .api_server_load_balancer
            .as_ref()
            .map(|lb| lb.internal_ip.clone())
            .filter(|ip| !ip.is_empty())
            .or_else(|| self.spec.api_server_fixed_ip.clone())
            .or_else(|| Some(host.to_owned()));
        Ok(ClusterStatusExtensions {
            networking: Some(NetworkingStatus {
                cilium: Some(CiliumStatus {
                    project_id: project.as_ref().map(|p| p.id.clone()),
                    default_subnet_id,
                    security_group_ids,
                    webhook_enable: spec_ext
                        .and_then(|e| e.networking.as_ref())
                        .and_then(|n| n.cilium.as_ref())
                        .and_then(|c| c.webhook_enable),
                }),
            }),
            load_balancers: Some(LoadBalancersStatus {
                control_plane: Some(VirtualIp { vip: cp_vip }),
                ingress: ingress_vip.map(|vip| VirtualIp { vip: Some(vip) }),
            }),
            open_stack: Some(OpenStackStatus {
                keystone,
                nova,
                neutron,
                cinder,
                project: project.as_ref().map(|p| p.name.clone()),
                project_domain: project
                    .as_ref()
                    .map(|p| p.domain.name.clone())
                    .filter(|n| !n.is_empty()),
                region: identity
                    .region
                    .clone()
                    .or_else(|| self.clients.config().region.clone()),
                mgmt: Some(host.to_owned()),
            }),
            platform: Some(PlatformStatus {
                ntp: ntp_server.map(|server| NtpStatus {
                    server: Some(server),
                }),
                management: management_vip.map(|vip| VirtualIp { vip: Some(vip) }),
            }),
            node_resources,
        })
    }
}

/// The tag every resource we create carries, for adoption and for finding
/// leftovers on deletion: the cluster's CAPO resource name.
pub fn owner_tag(names: &ClusterNames) -> String {
    names.network_name()
}

/// The reason of a failed step, for its condition.
fn reason_of(e: &InfraError) -> &str {
    match e {
        InfraError::Transient { reason, .. } | InfraError::User { reason, .. } => reason,
        InfraError::Sink(_) => "StatusWriteFailed",
    }
}

pub(crate) fn user(reason: &str, message: impl Into<String>) -> InfraError {
    InfraError::User {
        reason: reason.to_owned(),
        message: message.into(),
    }
}

/// 409/429/5xx/no answer → transient; everything else is the user's to fix.
/// The Ready condition's reason while a service does not answer; its message names
/// the step, the service and the request.
pub const UNAVAILABLE: &str = "OpenStackUnavailable";

pub(crate) fn os(reason: &str, e: OsError) -> InfraError {
    if let Some(what) = e.unavailable() {
        return InfraError::Transient {
            reason: reason.to_owned(),
            retry_after: e.retry_after(),
            message: what,
            unavailable: true,
        };
    }
    if e.is_retryable() {
        InfraError::Transient {
            reason: reason.to_owned(),
            retry_after: e.retry_after(),
            message: e.to_string(),
            unavailable: false,
        }
    } else if e.is_auth() {
        user("AuthenticationFailed", e.to_string())
    } else {
        user(reason, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_transient_or_user() {
        let http = |status| OsError::Http {
            service: "network".into(),
            method: "POST".into(),
            path: "/v2.0/networks".into(),
            status,
            message: "m".into(),
            retry_after: None,
        };
        assert!(matches!(os("X", http(503)), InfraError::Transient { .. }));
        assert!(matches!(os("X", http(409)), InfraError::Transient { .. }));
        assert!(matches!(os("X", http(429)), InfraError::Transient { .. }));
        match os("X", http(400)) {
            InfraError::User { reason, .. } => assert_eq!(reason, "X"),
            other => panic!("{other:?}"),
        }
        match os("X", http(401)) {
            InfraError::User { reason, .. } => assert_eq!(reason, "AuthenticationFailed"),
            other => panic!("{other:?}"),
        }
        // No answer, or 502/503/504: the step keeps its reason and the outage is said.
        let hung = OsError::Transport {
            service: "network".into(),
            method: "GET".into(),
            path: "/v2.0/networks".into(),
            message: "no answer within 30 s".into(),
            timeout: true,
        };
        let e = os("NetworkError", hung);
        assert!(
            matches!(&e, InfraError::Transient { reason, unavailable: true, .. } if reason == "NetworkError"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "NetworkError: OpenStack network service (Neutron) is not answering (GET /v2.0/networks: no answer within 30 s)"
        );
        assert!(matches!(
            os("X", http(503)),
            InfraError::Transient {
                unavailable: true,
                ..
            }
        ));
        assert!(matches!(
            os("X", http(409)),
            InfraError::Transient {
                unavailable: false,
                ..
            }
        ));
    }
}
