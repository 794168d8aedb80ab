//! The cloud half of the OpenStackMachine controller: CAPO's machine flow (resolve
//! image, flavor and ports; create the ports, the server with the bootstrap data;
//! register control-plane servers with the API load balancer) and its reverse.
//!
//! Same crash rules as the cluster flow: every create is written to status through
//! the sink before the next step, and every resource is looked up by its
//! deterministic name (and our ownership marker) before one is created, so a pass
//! that dies anywhere never leaves a second server or port behind. Nova, Cinder and
//! Octavia are never polled: BUILD, `creating` and PENDING_* come back as a requeue.

pub mod reserve;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use stackhook_openstack::blockstorage::{BlockStorage, Volume, VolumeCreate, VolumeFilter};
use stackhook_openstack::compute::{
    BlockDestination, BlockDevice, Compute, Server, ServerCreate, ServerGroupPolicy,
    ServerGroupRules,
};
use stackhook_openstack::image::Images;
use stackhook_openstack::loadbalancing::{self as lb, LoadBalancing};
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::{ClientCache, CloudClients};

use crate::infra::api::extensions::{NodeResources, ServerGroupPolicyName};
use crate::infra::api::machine::{BlockDeviceType, OpenStackMachineSpec, VolumeAzSource};
use crate::infra::api::names::{
    block_device_volume_name, port_name, provider_id, root_volume_name, ClusterNames,
};
use crate::infra::api::types::{
    BindingProfile, ImageParam, NodeAddress, PortStatus, ResolvedFixedIp, ResolvedPortSpec,
};
use crate::infra::api::{OpenStackMachine, OpenStackMachineStatus};
use crate::infra::cluster::{named_query, os, owner_tag, user, CloudSource, OWNER_METADATA_KEY};
use crate::infra::seam::{
    DeleteProgress, IdentitySecret, InfraError, MachineInfra, MachineOutcome, MachineScope,
    StatusSink,
};
use reserve::ReservePolicy;

/// Reason (and `failureReason`) of a machine with a `floatingIPPoolRef`.
pub const FLOATING_IP_POOL_NOT_SUPPORTED: &str = "FloatingIPPoolNotSupported";

/// While Nova builds or deletes a server (CAPO requeues after 15 s; a server usually
/// needs a few).
pub const SERVER_REQUEUE: Duration = Duration::from_secs(5);

/// `MachineInfra` on OpenStack: by default a real one, through cached clients.
pub struct OpenStackMachineInfra<C = ClientCache> {
    clouds: C,
    reserve: ReservePolicy,
    groups: GroupLocks,
}

/// One lock per managed server group (by cloud, project and name), shared by all
/// reconciles of the process. Nova lets a group be deleted with members in it, so a
/// machine deleting the group's last member and one booting into it must not
/// interleave: the one deleting checks for members and deletes under the lock, the
/// one booting checks that the group still exists and creates its server under it.
#[derive(Default)]
pub struct GroupLocks {
    locks: std::sync::Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl GroupLocks {
    fn get(&self, key: String) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(key).or_default().clone()
    }
}

/// The cloud and project a client set works in, for keying per-project locks.
fn project_key(config: &stackhook_openstack::CloudConfig) -> String {
    use stackhook_openstack::config::AuthMethod;
    let who = match &config.auth {
        AuthMethod::Password {
            project,
            project_domain,
            ..
        } => format!("{project:?}/{project_domain:?}"),
        AuthMethod::ApplicationCredential { credential, .. } => format!("{credential:?}"),
    };
    format!(
        "{} {} {who}",
        config.auth_url,
        config.region.as_deref().unwrap_or_default()
    )
}

impl OpenStackMachineInfra {
    pub fn new() -> Self {
        Self::with_clouds(ClientCache::new())
    }
}

impl Default for OpenStackMachineInfra {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: CloudSource> OpenStackMachineInfra<C> {
    pub fn with_clouds(clouds: C) -> Self {
        Self {
            clouds,
            reserve: ReservePolicy::default(),
            groups: GroupLocks::default(),
        }
    }

    /// Replaces the node reservation policy.
    pub fn with_reserve_policy(mut self, reserve: ReservePolicy) -> Self {
        self.reserve = reserve;
        self
    }

    /// The clients for an identity; exposed so callers can read request counts.
    pub fn clients_for(&self, identity: &IdentitySecret) -> Result<Arc<C::Clients>, InfraError> {
        self.clouds
            .clients_for(identity)
            .map_err(|e| user("InvalidCloudConfig", e.to_string()))
    }
}

impl<C: CloudSource> MachineInfra for OpenStackMachineInfra<C> {
    async fn reconcile(
        &self,
        scope: &MachineScope,
        machine: &OpenStackMachine,
        identity: &IdentitySecret,
        sink: &impl StatusSink<OpenStackMachineStatus>,
    ) -> Result<MachineOutcome, InfraError> {
        let clients = self.clients_for(identity)?;
        let mut pass = MachinePass::new(&*clients, scope, machine, sink, &self.groups);
        match pass.run(identity, &self.reserve).await {
            Err(InfraError::User { reason, message }) => {
                pass.status
                    .failure_reason
                    .get_or_insert_with(|| reason.clone());
                pass.status
                    .failure_message
                    .get_or_insert_with(|| message.clone());
                // Why, in the object: Neutron's refusal of a port names the field.
                crate::infra::conditions::mark_false(
                    &mut pass.status.conditions,
                    crate::infra::api::names::conditions::READY,
                    &reason,
                    crate::infra::conditions::Severity::Error,
                    &message,
                );
                if let Err(e) = pass.save().await {
                    tracing::warn!(error = %e, "could not record the failure in status");
                }
                Err(InfraError::User { reason, message })
            }
            Err(
                e @ InfraError::Transient {
                    unavailable: true, ..
                },
            ) => {
                crate::infra::conditions::mark_false(
                    &mut pass.status.conditions,
                    crate::infra::api::names::conditions::READY,
                    crate::infra::cluster::UNAVAILABLE,
                    crate::infra::conditions::Severity::Warning,
                    &e.to_string(),
                );
                if let Err(err) = pass.save().await {
                    tracing::warn!(error = %err, "could not record the outage in status");
                }
                Err(e)
            }
            other => other,
        }
    }

    async fn delete(
        &self,
        scope: &MachineScope,
        machine: &OpenStackMachine,
        identity: &IdentitySecret,
        sink: &impl StatusSink<OpenStackMachineStatus>,
    ) -> Result<DeleteProgress, InfraError> {
        let clients = self.clients_for(identity)?;
        let mut pass = MachinePass::new(&*clients, scope, machine, sink, &self.groups);
        pass.delete_all().await
    }
}

/// The Glance image of `image`: its ID, or the one image its filter matches.
/// `invalid` is the reason when neither is given; `whose` names the server in messages.
pub(crate) async fn resolve_image<C: CloudClients>(
    clients: &C,
    image: &ImageParam,
    invalid: &str,
    whose: &str,
) -> Result<String, InfraError> {
    if let Some(id) = image.id.as_ref().filter(|id| !id.is_empty()) {
        return Ok(id.clone());
    }
    let Some(filter) = &image.filter else {
        return Err(user(
            invalid,
            format!(
                "{whose} image needs an id, a filter, or (for an OpenStackMachine) an imageRef"
            ),
        ));
    };
    let mut query: Vec<(&str, String)> = Vec::new();
    if let Some(n) = &filter.name {
        query.push(("name", n.clone()));
    }
    for t in &filter.tags {
        query.push(("tag", t.clone()));
    }
    let images = clients
        .image()
        .list(&query)
        .await
        .map_err(|e| os("ImageNotFound", e))?;
    match images.as_slice() {
        [one] => Ok(one.id.clone()),
        [] => Err(user(
            "ImageNotFound",
            format!("no image matches {whose} filter {filter:?}"),
        )),
        many => Err(user(
            "ImageNotFound",
            format!(
                "{} images match {whose} filter {filter:?}; it must match one",
                many.len()
            ),
        )),
    }
}

/// `^name$` with the regex metacharacters Nova would interpret escaped.
pub(crate) fn name_regex(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('^');
    for c in name.chars() {
        if ".^$*+?()[]{}|\\".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('$');
    out
}

/// One pass over one machine.
struct MachinePass<'a, C: CloudClients, S: StatusSink<OpenStackMachineStatus>> {
    clients: &'a C,
    scope: &'a MachineScope,
    spec: &'a OpenStackMachineSpec,
    /// The server's name: the OpenStackMachine's, as CAPO names it.
    name: String,
    names: ClusterNames,
    /// The cluster's tags plus our ownership tag (on ports and the server).
    tags: Vec<String>,
    owner: String,
    region: Option<String>,
    status: OpenStackMachineStatus,
    /// The status as the pass found it.
    initial: OpenStackMachineStatus,
    sink: &'a S,
    requeue: Option<Duration>,
    groups: &'a GroupLocks,
}

impl<'a, C: CloudClients, S: StatusSink<OpenStackMachineStatus>> MachinePass<'a, C, S> {
    fn new(
        clients: &'a C,
        scope: &'a MachineScope,
        machine: &'a OpenStackMachine,
        sink: &'a S,
        groups: &'a GroupLocks,
    ) -> Self {
        let names = ClusterNames::new(scope.namespace.clone(), scope.cluster_name.clone());
        let owner = owner_tag(&names);
        let mut tags = scope.cluster.spec.tags.clone();
        for t in machine.spec.tags.iter().chain(std::iter::once(&owner)) {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
        // providerID as CAPO writes it: the machine's own identityRef region, never the
        // cluster's. The kubelet's `openstack:///<id>` must match, or the Machine never
        // gets its Node.
        let region = machine
            .spec
            .identity_ref
            .as_ref()
            .and_then(|i| i.region.clone());
        Self {
            clients,
            scope,
            spec: &machine.spec,
            name: machine.metadata.name.clone().unwrap_or_default(),
            names,
            tags,
            owner,
            region,
            status: machine.status.clone().unwrap_or_default(),
            initial: machine.status.clone().unwrap_or_default(),
            sink,
            requeue: None,
            groups,
        }
    }

    async fn save(&self) -> Result<(), InfraError> {
        self.sink.save(&self.status).await.map_err(InfraError::Sink)
    }

    fn wait(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    async fn run(
        &mut self,
        _identity: &IdentitySecret,
        reserve: &ReservePolicy,
    ) -> Result<MachineOutcome, InfraError> {
        if self.status.failure_reason.is_some() {
            // CAPO's terminal failure: the Machine is to be replaced, not repaired.
            return Ok(MachineOutcome {
                status: self.status.clone(),
                provider_id: None,
                requeue_after: None,
            });
        }
        if let Some(pool) = &self.spec.floating_ip_pool_ref {
            // CAPO serves these pools as a CAPI IPAM provider of its own
            // (OpenStackFloatingIPPool, IPAddressClaims), which this controller does
            // not run; refused before any cloud call (README, "floatingIPPoolRef").
            return Err(user(
                FLOATING_IP_POOL_NOT_SUPPORTED,
                format!(
                    "floatingIPPoolRef ({} {}) is not supported: no controller here serves \
                     OpenStackFloatingIPPools (CAPO's IPAM provider); remove it, or give the \
                     cluster an API load balancer or API floating IP instead",
                    pool.kind, pool.name
                ),
            ));
        }
        if let Some(outcome) = self.steady().await? {
            return Ok(outcome);
        }
        let flavor = self.resolve().await?;
        self.status
            .extensions
            .get_or_insert_with(Default::default)
            .node_resources = BTreeMap::from([(
            self.scope.machine_name.clone(),
            NodeResources {
                reserved: reserve.reserve(flavor.vcpus, flavor.ram),
            },
        )]);
        let ports = self.ensure_ports().await?;
        let Some(devices) = self.ensure_volumes().await? else {
            self.save_if_changed().await?;
            return Ok(self.outcome(None));
        };
        let Some(server) = self.ensure_server(&ports, devices).await? else {
            return Ok(self.outcome(None));
        };
        self.status.instance_id = Some(server.id.clone());
        self.status.instance_state = Some(server.status.clone());
        match server.status.as_str() {
            "ACTIVE" => {}
            "ERROR" => {
                let fault = server
                    .fault
                    .as_ref()
                    .map(|f| f.message.as_str())
                    .filter(|m| !m.is_empty())
                    .unwrap_or("no fault reported");
                // As CAPO: a server in ERROR is a terminal failure of the Machine.
                self.status.failure_reason = Some("UpdateError".into());
                self.status.failure_message =
                    Some(format!("instance state ERROR is unexpected: {fault}"));
                self.status.ready = Some(false);
                self.save().await?;
                return Err(user(
                    "InstanceStateError",
                    format!("server {} is in ERROR: {fault}", server.id),
                ));
            }
            other => {
                tracing::debug!(server = %server.id, status = other, "waiting for the server");
                self.wait(SERVER_REQUEUE);
                self.save_if_changed().await?;
                return Ok(self.outcome(None));
            }
        }
        self.status.addresses = addresses(&self.name, &ports);
        if self.scope.control_plane {
            if self.api_fip_wanted() {
                let port = self.management_port_id();
                let held = self.ensure_api_fip(port.as_deref()).await?;
                set_external_ip(&mut self.status.addresses, held);
            } else {
                self.ensure_lb_members(&ports).await?;
            }
        }
        self.status.ready = Some(self.requeue.is_none());
        if self.requeue.is_some() {
            self.save_if_changed().await?;
        }
        let provider = provider_id(self.region.as_deref(), &server.id);
        Ok(self.outcome(Some(provider)))
    }

    /// A machine that was ready costs one read per pass: its server, still ACTIVE.
    /// A server gone from under a ready machine is CAPO's terminal failure (the
    /// Machine is replaced), never a second server with the same name.
    async fn steady(&mut self) -> Result<Option<MachineOutcome>, InfraError> {
        let (Some(true), Some(id)) = (self.status.ready, self.status.instance_id.clone()) else {
            return Ok(None);
        };
        match self.clients.compute().server(&id).await {
            Ok(s) if s.status == "ACTIVE" => {
                if self.scope.control_plane && self.api_fip_wanted() {
                    // The API address moves to a survivor when its holder goes.
                    let port = self.management_port_id();
                    let held = self.ensure_api_fip(port.as_deref()).await?;
                    set_external_ip(&mut self.status.addresses, held);
                }
                let provider = provider_id(self.region.as_deref(), &s.id);
                Ok(Some(self.outcome(Some(provider))))
            }
            Ok(_) => Ok(None),
            Err(e) if e.is_not_found() => {
                self.status.failure_reason = Some("UpdateError".into());
                self.status.failure_message = Some(format!("server {id} is gone"));
                self.status.ready = Some(false);
                self.status.instance_state = Some("DELETED".into());
                self.save().await?;
                Err(user("InstanceNotFound", format!("server {id} is gone")))
            }
            Err(e) => Err(os("InstanceCreateFailed", e)),
        }
    }

    fn outcome(&self, provider_id: Option<String>) -> MachineOutcome {
        MachineOutcome {
            status: self.status.clone(),
            provider_id,
            requeue_after: self.requeue,
        }
    }

    /// Writes status when a waiting pass changed it, so the object shows progress
    /// (and stays quiet when nothing moved).
    async fn save_if_changed(&self) -> Result<(), InfraError> {
        if self.status == self.initial {
            return Ok(());
        }
        self.save().await
    }

    /// Image, flavor and ports resolved to IDs once and kept in
    /// `status.resolved`; the flavor's size is read each pass (for reservations).
    async fn resolve(&mut self) -> Result<stackhook_openstack::compute::Flavor, InfraError> {
        let mut resolved = self.status.resolved.clone().unwrap_or_default();
        if resolved.image_id.is_none() {
            resolved.image_id = Some(
                resolve_image(
                    self.clients,
                    &self.spec.image,
                    "ImageNotFound",
                    "the machine's",
                )
                .await?,
            );
        }
        if resolved.server_group_id.is_none() {
            // Two machines of a role finding no group must not both create one.
            let lock = self.managed_group_lock();
            let _creating = match &lock {
                Some(l) => Some(l.lock().await),
                None => None,
            };
            resolved.server_group_id = self.resolve_server_group().await?;
        }
        let flavors = self
            .clients
            .compute()
            .flavors()
            .await
            .map_err(|e| os("FlavorNotFound", e))?;
        let flavor = match (&self.spec.flavor_id, &self.spec.flavor) {
            (Some(id), _) if !id.is_empty() => flavors.into_iter().find(|f| &f.id == id),
            (_, Some(name)) => flavors.into_iter().find(|f| &f.name == name),
            _ => None,
        }
        .ok_or_else(|| {
            user(
                "FlavorNotFound",
                format!(
                    "no flavor matches {}",
                    self.spec
                        .flavor_id
                        .as_deref()
                        .or(self.spec.flavor.as_deref())
                        .unwrap_or("(none given)")
                ),
            )
        })?;
        resolved.flavor_id = Some(flavor.id.clone());
        if resolved.ports.is_empty() {
            let mut ports = self.resolve_ports().await?;
            if ports.iter().any(|p| p.trunk == Some(true)) {
                self.require_trunks(&ports).await?;
            }
            if ports
                .iter()
                .any(|p| p.fields.propagate_uplink_status.is_some())
            {
                let supported = self.has_extension(UPLINK_STATUS_EXTENSION).await?;
                uplink_status_where_supported(&mut ports, supported)?;
            }
            resolved.ports = ports;
        }
        self.status.resolved = Some(resolved);
        Ok(flavor)
    }

    /// The ports to create, with networks, subnets and security groups as IDs. No
    /// `ports` means one port on the cluster network, as CAPO does.
    async fn resolve_ports(&self) -> Result<Vec<ResolvedPortSpec>, InfraError> {
        let cluster_status = self.scope.cluster.status.clone().unwrap_or_default();
        let default_network = cluster_status
            .network
            .as_ref()
            .map(|n| n.network.id.clone());
        let default_subnets: Vec<String> = cluster_status
            .network
            .as_ref()
            .map(|n| n.subnets.iter().map(|s| s.id.clone()).collect())
            .unwrap_or_default();
        // The cluster's managed group for this role, then the machine's own.
        let role_group = if self.scope.control_plane {
            cluster_status.control_plane_security_group.as_ref()
        } else {
            cluster_status.worker_security_group.as_ref()
        };
        // As CAPO: a port's own groups replace the role's managed group; the
        // machine's `securityGroups` are appended to every port.
        let role_groups: Vec<String> = role_group.map(|g| g.id.clone()).into_iter().collect();
        let mut machine_groups: Vec<String> = Vec::new();
        for g in &self.spec.security_groups {
            let id = self.resolve_security_group(g).await?;
            if !machine_groups.contains(&id) {
                machine_groups.push(id);
            }
        }
        let requested = if self.spec.ports.is_empty() {
            vec![Default::default()]
        } else {
            self.spec.ports.clone()
        };
        let mut out = Vec::with_capacity(requested.len());
        for (i, p) in requested.iter().enumerate() {
            if p.fields.disable_port_security == Some(true)
                && !p.fields.allowed_address_pairs.is_empty()
            {
                return Err(user(
                    "InvalidMachineSpec",
                    format!(
                        "ports[{i}]: allowedAddressPairs need port security, and disablePortSecurity is true (Neutron refuses the port)"
                    ),
                ));
            }
            // Without a network, the first fixed IP's subnet names it, as CAPO infers it.
            let subnet_network = match (
                &p.network,
                p.fixed_ips.iter().find_map(|f| f.subnet.as_ref()),
            ) {
                (None, Some(subnet)) => Some(self.find_subnet(subnet, None).await?.network_id),
                _ => None,
            };
            let network_id = match (&p.network, subnet_network) {
                (Some(n), _) => match n.id.as_ref().filter(|id| !id.is_empty()) {
                    Some(id) => id.clone(),
                    None => self.resolve_network(n).await?,
                },
                (None, Some(from_subnet)) => from_subnet,
                (None, None) => default_network.clone().ok_or_else(|| {
                    user(
                        "NetworkNotFound",
                        "the cluster has no network yet and the port names none",
                    )
                })?,
            };
            let mut fixed_ips = Vec::new();
            for f in &p.fixed_ips {
                let subnet_id = match &f.subnet {
                    Some(s) => Some(match s.id.as_ref().filter(|id| !id.is_empty()) {
                        Some(id) => id.clone(),
                        None => self.resolve_subnet(s, &network_id).await?,
                    }),
                    None => None,
                };
                fixed_ips.push(ResolvedFixedIp {
                    subnet_id,
                    ip_address: f.ip_address.clone(),
                });
            }
            if fixed_ips.is_empty() && p.network.is_none() {
                // One address from each of the cluster's subnets, as CAPO's
                // `normalizePortTarget`: with one `spec.subnets` entry on a network
                // of several subnets, the port stays on that one.
                fixed_ips = default_subnets
                    .iter()
                    .map(|s| ResolvedFixedIp {
                        subnet_id: Some(s.clone()),
                        ip_address: None,
                    })
                    .collect();
            }
            let mut security_groups = Vec::new();
            for g in &p.security_groups {
                let id = self.resolve_security_group(g).await?;
                if !security_groups.contains(&id) {
                    security_groups.push(id);
                }
            }
            if security_groups.is_empty() {
                security_groups = role_groups.clone();
            }
            for id in &machine_groups {
                if !security_groups.contains(id) {
                    security_groups.push(id.clone());
                }
            }
            let mut tags = self.tags.clone();
            for t in &p.tags {
                if !tags.contains(t) {
                    tags.push(t.clone());
                }
            }
            // An empty suffix or description is an unset one.
            out.push(ResolvedPortSpec {
                name: port_name(
                    &self.name,
                    i,
                    p.name_suffix.as_deref().filter(|s| !s.is_empty()),
                ),
                description: p
                    .description
                    .clone()
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| self.names.port_description()),
                network_id,
                tags,
                trunk: p.trunk.or(self.spec.trunk),
                fixed_ips,
                security_groups: if p.fields.disable_port_security == Some(true) {
                    Vec::new()
                } else {
                    security_groups
                },
                fields: p.fields.clone(),
            });
        }
        Ok(out)
    }

    async fn resolve_network(
        &self,
        n: &crate::infra::api::types::NetworkParam,
    ) -> Result<String, InfraError> {
        let Some(f) = &n.filter else {
            return Err(user(
                "NetworkNotFound",
                "a port network needs an id or a filter",
            ));
        };
        let q = named_query(&f.name, &f.description, &f.project_id, &f.tags);
        let found: Vec<net::Network> = self
            .clients
            .network()
            .list(&q)
            .await
            .map_err(|e| os("NetworkNotFound", e))?;
        match found.as_slice() {
            [one] => Ok(one.id.clone()),
            other => Err(user(
                "NetworkNotFound",
                format!("{} networks match {f:?}; it must match one", other.len()),
            )),
        }
    }

    async fn resolve_subnet(
        &self,
        s: &crate::infra::api::types::SubnetParam,
        network_id: &str,
    ) -> Result<String, InfraError> {
        Ok(self.find_subnet(s, Some(network_id)).await?.id)
    }

    /// The one subnet `s` names (on `network_id` when given), with every field of
    /// CAPO's subnet filter.
    async fn find_subnet(
        &self,
        s: &crate::infra::api::types::SubnetParam,
        network_id: Option<&str>,
    ) -> Result<net::Subnet, InfraError> {
        if let Some(id) = s.id.as_ref().filter(|id| !id.is_empty()) {
            return crate::infra::cluster::subnet_by_id(self.clients, id).await;
        }
        let mut q = s
            .filter
            .as_ref()
            .map(crate::infra::cluster::subnet_query)
            .unwrap_or_default();
        if let Some(n) = network_id {
            q.push(("network_id", n.to_owned()));
        }
        let mut found: Vec<net::Subnet> = self
            .clients
            .network()
            .list(&q)
            .await
            .map_err(|e| os("SubnetNotFound", e))?;
        match found.len() {
            1 => Ok(found.remove(0)),
            n => Err(user(
                "SubnetNotFound",
                format!("{n} subnets match {s:?}; it must match one"),
            )),
        }
    }

    async fn resolve_security_group(
        &self,
        g: &crate::infra::api::types::SecurityGroupParam,
    ) -> Result<String, InfraError> {
        if let Some(id) = g.id.as_ref().filter(|id| !id.is_empty()) {
            return Ok(id.clone());
        }
        let Some(f) = &g.filter else {
            return Err(user(
                "SecurityGroupNotFound",
                "a security group needs an id or a filter",
            ));
        };
        crate::infra::cluster::security_group_by_filter(self.clients, f, "").await
    }

    fn recorded_ports(&self) -> Vec<String> {
        self.status
            .resources
            .as_ref()
            .map(|r| r.ports.iter().map(|p| p.id.clone()).collect())
            .unwrap_or_default()
    }

    fn record_port(&mut self, index: usize, id: &str) {
        let resources = self.status.resources.get_or_insert_with(Default::default);
        while resources.ports.len() <= index {
            resources.ports.push(PortStatus { id: String::new() });
        }
        resources.ports[index].id = id.to_owned();
    }

    /// Each resolved port: the recorded one, else the one with its name on its
    /// network, else a new one (recorded in status before the next).
    async fn ensure_ports(&mut self) -> Result<Vec<net::Port>, InfraError> {
        let specs = self
            .status
            .resolved
            .as_ref()
            .map(|r| r.ports.clone())
            .unwrap_or_default();
        let recorded = self.recorded_ports();
        let mut ports = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let neutron = self.clients.network();
            let mut found: Vec<net::Port> = Vec::new();
            if let Some(id) = recorded.get(i).filter(|id| !id.is_empty()) {
                match neutron.get::<net::Port>(id).await {
                    Ok(p) => found.push(p),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(os("PortCreateFailed", e)),
                }
            }
            if found.is_empty() {
                found = neutron
                    .list(&[
                        ("name", spec.name.clone()),
                        ("network_id", spec.network_id.clone()),
                    ])
                    .await
                    .map_err(|e| os("PortCreateFailed", e))?;
            }
            if found.len() > 1 {
                return Err(user(
                    "DuplicateResources",
                    format!(
                        "several ports are named {:?}; remove the extra ones",
                        spec.name
                    ),
                ));
            }
            let port = match found.pop() {
                Some(p) => p,
                None => {
                    let p: net::Port = neutron
                        .create(port_body(spec))
                        .await
                        .map_err(|e| port_refused(i, e))?;
                    tracing::info!(port = %p.id, name = %spec.name, "created a port");
                    self.record_port(i, &p.id);
                    self.save().await?;
                    p
                }
            };
            for t in &spec.tags {
                if !port.tags.contains(t) {
                    neutron
                        .add_tag::<net::Port>(&port.id, t)
                        .await
                        .map_err(|e| os("PortCreateFailed", e))?;
                }
            }
            if spec.trunk == Some(true) {
                self.ensure_trunk(&port, spec).await?;
            }
            self.record_port(i, &port.id);
            ports.push(port);
        }
        Ok(ports)
    }

    /// Whether Neutron lists the API extension `alias`.
    async fn has_extension(&self, alias: &str) -> Result<bool, InfraError> {
        let extensions: Vec<net::Extension> = self
            .clients
            .network()
            .list(&[])
            .await
            .map_err(|e| os("PortCreateFailed", e))?;
        Ok(extensions.iter().any(|e| e.alias == alias))
    }

    /// Trunks need Neutron's `trunk` extension; without it the spec cannot be met,
    /// which is the user's to change (or the cloud's to offer).
    async fn require_trunks(&self, ports: &[ResolvedPortSpec]) -> Result<(), InfraError> {
        let extensions: Vec<net::Extension> = self
            .clients
            .network()
            .list(&[])
            .await
            .map_err(|e| os("TrunkNotSupported", e))?;
        if extensions.iter().any(|e| e.alias == "trunk") {
            return Ok(());
        }
        let names: Vec<&str> = ports
            .iter()
            .filter(|p| p.trunk == Some(true))
            .map(|p| p.name.as_str())
            .collect();
        Err(user(
            "TrunkNotSupported",
            format!(
                "ports {names:?} ask for a trunk, but this cloud's Neutron has no trunk \
                 extension (its `trunk` service plugin is not enabled)"
            ),
        ))
    }

    /// The trunk whose parent is `port`, named after it as CAPO names it; created
    /// when missing and tagged like the port.
    async fn ensure_trunk(
        &self,
        port: &net::Port,
        spec: &ResolvedPortSpec,
    ) -> Result<(), InfraError> {
        let neutron = self.clients.network();
        let mut found: Vec<net::Trunk> = neutron
            .list(&[("port_id", port.id.clone())])
            .await
            .map_err(|e| os("TrunkCreateFailed", e))?;
        let trunk = match found.pop() {
            Some(t) => t,
            None => {
                let t: net::Trunk = neutron
                    .create(json!({
                        "name": spec.name,
                        "port_id": port.id,
                        "description": spec.description,
                    }))
                    .await
                    .map_err(|e| os("TrunkCreateFailed", e))?;
                tracing::info!(trunk = %t.id, port = %port.id, "created a trunk");
                t
            }
        };
        for t in &spec.tags {
            if !trunk.tags.contains(t) {
                neutron
                    .add_tag::<net::Trunk>(&trunk.id, t)
                    .await
                    .map_err(|e| os("TrunkCreateFailed", e))?;
            }
        }
        Ok(())
    }

    /// Deletes the trunks whose parent is `port`. A cloud without trunks answers
    /// the lookup with 404, which means there is nothing to delete.
    async fn delete_trunks(&self, port: &str) -> Result<(), InfraError> {
        let neutron = self.clients.network();
        let trunks: Vec<net::Trunk> = match neutron.list(&[("port_id", port.to_owned())]).await {
            Ok(t) => t,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(os("TrunkDeleteFailed", e)),
        };
        for t in trunks {
            match neutron.delete::<net::Trunk>(&t.id).await {
                Ok(()) => tracing::info!(trunk = %t.id, "deleted a trunk"),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(os("TrunkDeleteFailed", e)),
            }
        }
        Ok(())
    }

    /// The recorded server, else the one with the machine's name and our ownership
    /// marker, else a new one (its ID saved before anything else happens).
    async fn ensure_server(
        &mut self,
        ports: &[net::Port],
        block_devices: Vec<BlockDevice>,
    ) -> Result<Option<Server>, InfraError> {
        if let Some(s) = self.find_server().await? {
            return Ok(Some(s));
        }
        let Some(user_data) = self.scope.bootstrap_data.clone() else {
            return Err(user(
                "BootstrapDataMissing",
                "no bootstrap data to boot with",
            ));
        };
        // Held until Nova has the server as a member of the group.
        let group_lock = self.managed_group_lock();
        let _member = match &group_lock {
            Some(lock) => {
                let guard = lock.lock().await;
                self.confirm_managed_group().await?;
                Some(guard)
            }
            None => None,
        };
        let resolved = self.status.resolved.clone().unwrap_or_default();
        let mut metadata: BTreeMap<String, String> = self
            .spec
            .server_metadata
            .iter()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect();
        metadata.insert(OWNER_METADATA_KEY.to_owned(), self.owner.clone());
        let mut scheduler_hints = serde_json::Map::new();
        for h in &self.spec.scheduler_hint_additional_properties {
            let v = &h.value;
            let value = match (v.bool, v.number, &v.string) {
                (Some(b), _, _) => json!(b),
                (_, Some(n), _) => json!(n),
                (_, _, Some(s)) => json!(s),
                _ => continue,
            };
            scheduler_hints.insert(h.name.clone(), value);
        }
        let boots_from_volume = block_devices
            .iter()
            .any(|d| d.boot_index == 0 && d.destination_type == BlockDestination::Volume);
        let create = ServerCreate {
            name: self.name.clone(),
            flavor_id: resolved.flavor_id.clone().unwrap_or_default(),
            image_id: (!boots_from_volume)
                .then(|| resolved.image_id.clone())
                .flatten(),
            port_ids: ports.iter().map(|p| p.id.clone()).collect(),
            user_data: Some(user_data),
            availability_zone: self.scope.failure_domain.clone(),
            metadata,
            tags: self.tags.clone(),
            key_name: self.spec.ssh_key_name.clone(),
            config_drive: self.spec.config_drive,
            block_devices,
            server_group_id: resolved.server_group_id.clone(),
            scheduler_hints,
        };
        let body = create
            .body()
            .map_err(|e| user("InstanceCreateFailed", e.to_string()))?;
        let id = self
            .clients
            .compute()
            .create_server(body, &create.microversion().to_string())
            .await
            .map_err(|e| os("InstanceCreateFailed", e))?;
        tracing::info!(server = %id, name = %self.name, "created the server");
        self.status.instance_id = Some(id);
        self.status.instance_state = Some("BUILD".into());
        self.save().await?;
        self.wait(SERVER_REQUEUE);
        Ok(None)
    }

    /// `spec.serverGroup` as given (by ID, or the one group with that name), else the
    /// group this machine's role shares when `serverGroupPolicy` asks for one.
    async fn resolve_server_group(&self) -> Result<Option<String>, InfraError> {
        if let Some(g) = &self.spec.server_group {
            if let Some(id) = g.id.as_ref().filter(|id| !id.is_empty()) {
                return Ok(Some(id.clone()));
            }
            let name = g
                .filter
                .as_ref()
                .and_then(|f| f.name.clone())
                .filter(|n| !n.is_empty());
            let Some(name) = name else {
                return Ok(None);
            };
            let groups = self
                .clients
                .compute()
                .server_groups()
                .await
                .map_err(|e| os("ServerGroupNotFound", e))?;
            let found: Vec<_> = groups.into_iter().filter(|g| g.name == name).collect();
            return match found.as_slice() {
                [one] => Ok(Some(one.id.clone())),
                other => Err(user(
                    "ServerGroupNotFound",
                    format!(
                        "{} server groups are named {name:?}; it must be one",
                        other.len()
                    ),
                )),
            };
        }
        let Some(policy) = self
            .spec
            .extensions
            .as_ref()
            .and_then(|e| e.server_group_policy)
        else {
            return Ok(None);
        };
        let name = self.managed_group_name();
        let nova = self.clients.compute();
        let groups = nova
            .server_groups()
            .await
            .map_err(|e| os("ServerGroupCreateFailed", e))?;
        if let Some(g) = groups.into_iter().find(|g| g.name == name) {
            return Ok(Some(g.id));
        }
        let group = nova
            .create_server_group(&name, nova_policy(policy), &ServerGroupRules::default())
            .await
            .map_err(|e| os("ServerGroupCreateFailed", e))?;
        tracing::info!(group = %group.id, %name, "created the server group");
        Ok(Some(group.id))
    }

    /// The Magnum driver's names: `<cluster>-control-plane`, `<cluster>-<deployment>`.
    fn managed_group_name(&self) -> String {
        let role = if self.scope.control_plane {
            "control-plane".to_string()
        } else {
            self.scope
                .deployment
                .clone()
                .unwrap_or_else(|| "workers".to_string())
        };
        format!("{}-{role}", self.scope.cluster_name)
    }

    /// The root volume and `additionalBlockDevices` of type Volume, created before
    /// the server and found again by name plus our ownership metadata. `None` while
    /// Cinder is still creating one.
    async fn ensure_volumes(&mut self) -> Result<Option<Vec<BlockDevice>>, InfraError> {
        let mut devices = Vec::new();
        let image_id = self
            .status
            .resolved
            .as_ref()
            .and_then(|r| r.image_id.clone());
        let mut waiting = false;
        if let Some(root) = self.spec.root_volume.clone() {
            let az = self.volume_az(root.volume.availability_zone.as_ref());
            let v = self
                .ensure_volume(
                    &root_volume_name(&self.name),
                    root.size_gib,
                    root.volume.type_.clone(),
                    az,
                    image_id.clone(),
                )
                .await?;
            match v {
                Some(v) => devices.push(BlockDevice::boot_volume(&v.id, false)),
                None => waiting = true,
            }
        }
        for d in self.spec.additional_block_devices.clone() {
            match d.storage.type_ {
                BlockDeviceType::Local => devices.push(BlockDevice::local_disk(
                    u32::try_from(d.size_gib).unwrap_or(u32::MAX),
                    Some(&d.name),
                )),
                BlockDeviceType::Volume => {
                    let vol = d.storage.volume.clone().unwrap_or_default();
                    let az = self.volume_az(vol.availability_zone.as_ref());
                    let v = self
                        .ensure_volume(
                            &block_device_volume_name(&self.name, &d.name),
                            d.size_gib,
                            vol.type_.clone(),
                            az,
                            None,
                        )
                        .await?;
                    match v {
                        Some(v) => {
                            let mut dev = BlockDevice::data_volume(&v.id, Some(&d.name));
                            // We delete our volumes ourselves, server or not.
                            dev.delete_on_termination = false;
                            devices.push(dev);
                        }
                        None => waiting = true,
                    }
                }
            }
        }
        if waiting {
            self.wait(SERVER_REQUEUE);
            return Ok(None);
        }
        // Beside other devices the image needs a mapping of its own: Nova takes no
        // `imageRef` plus a mapping without a boot device ("Boot sequence for the
        // instance and image/block device mapping combination is not valid"). CAPO
        // sends the same entry.
        if !devices.is_empty() && !devices.iter().any(|d| d.boot_index == 0) {
            if let Some(image) = &image_id {
                devices.insert(0, BlockDevice::boot_image_local(image));
            }
        }
        Ok(Some(devices))
    }

    fn volume_az(
        &self,
        az: Option<&crate::infra::api::machine::VolumeAvailabilityZone>,
    ) -> Option<String> {
        match az {
            Some(z) if z.from == VolumeAzSource::Machine => self.scope.failure_domain.clone(),
            Some(z) => z.name.clone(),
            None => None,
        }
    }

    /// Our volume `name`, created when missing; `None` until it is available.
    async fn ensure_volume(
        &mut self,
        name: &str,
        size_gib: i64,
        volume_type: Option<String>,
        availability_zone: Option<String>,
        image_id: Option<String>,
    ) -> Result<Option<Volume>, InfraError> {
        let cinder = self.clients.block_storage();
        let mut found = self.own_volumes(name).await?;
        if found.len() > 1 {
            return Err(user(
                "DuplicateResources",
                format!("several volumes are named {name:?}; remove the extra ones"),
            ));
        }
        let volume = match found.pop() {
            Some(v) => v,
            None => {
                let create = VolumeCreate {
                    name: name.to_owned(),
                    size_gib: u32::try_from(size_gib).unwrap_or(u32::MAX),
                    description: Some(self.names.description()),
                    volume_type,
                    availability_zone,
                    image_id,
                    metadata: BTreeMap::from([(OWNER_METADATA_KEY.to_owned(), self.owner.clone())]),
                };
                let v = cinder
                    .create_volume(&create)
                    .await
                    .map_err(|e| os("VolumeCreateFailed", e))?;
                tracing::info!(volume = %v.id, %name, "created a volume");
                v
            }
        };
        if volume.is_failed() {
            return Err(user(
                "VolumeCreateFailed",
                format!("volume {} ({name}) is in {}", volume.id, volume.status),
            ));
        }
        Ok((volume.is_available() || volume.is_in_use()).then_some(volume))
    }

    /// Volumes named `name` that carry our ownership metadata.
    async fn own_volumes(&self, name: &str) -> Result<Vec<Volume>, InfraError> {
        let filter = VolumeFilter {
            name: Some(name.to_owned()),
            metadata: BTreeMap::from([(OWNER_METADATA_KEY.to_owned(), self.owner.clone())]),
        };
        self.clients
            .block_storage()
            .volumes(&filter)
            .await
            .map_err(|e| os("VolumeCreateFailed", e))
    }

    /// The pools of the cluster's API load balancer, by listener port.
    async fn api_pools(&self) -> Result<Vec<(i64, lb::Pool)>, InfraError> {
        let spec = &self.scope.cluster.spec;
        let has_lb = self
            .scope
            .cluster
            .status
            .as_ref()
            .is_some_and(|s| s.api_server_load_balancer.is_some());
        if !has_lb {
            return Ok(Vec::new());
        }
        let mut ports = vec![spec.api_server_port.unwrap_or(6443)];
        if let Some(l) = &spec.api_server_load_balancer {
            ports.extend(l.additional_ports.iter().copied());
        }
        let octavia = self.clients.load_balancer();
        let mut out = Vec::new();
        for port in ports {
            let name = self
                .names
                .load_balancer_port_name(u16::try_from(port).unwrap_or(6443));
            let pools: Vec<lb::Pool> = octavia
                .list(&[("name", name)])
                .await
                .map_err(|e| os("LoadBalancerMemberFailed", e))?;
            if let Some(p) = pools.into_iter().next() {
                out.push((port, p));
            }
        }
        Ok(out)
    }

    /// CAPO's API floating IP without a load balancer: a control-plane machine
    /// carries the cluster's API address when the cluster has a floating IP on an
    /// external network.
    fn api_fip_wanted(&self) -> bool {
        let spec = &self.scope.cluster.spec;
        let lb_enabled = spec.api_load_balancer_enabled();
        let has_external = self
            .scope
            .cluster
            .status
            .as_ref()
            .is_some_and(|s| s.external_network.is_some());
        !lb_enabled
            && spec.disable_api_server_floating_ip != Some(true)
            && spec.disable_external_network != Some(true)
            && has_external
    }

    /// The port on the cluster network (CAPO's management port), else the first.
    fn management_port_id(&self) -> Option<String> {
        let cluster_net = self
            .scope
            .cluster
            .status
            .as_ref()
            .and_then(|s| s.network.as_ref())
            .map(|n| n.network.id.clone());
        let resolved = self
            .status
            .resolved
            .as_ref()
            .map(|r| r.ports.as_slice())
            .unwrap_or_default();
        let index = resolved
            .iter()
            .position(|p| Some(&p.network_id) == cluster_net.as_ref())
            .unwrap_or(0);
        self.recorded_ports()
            .get(index)
            .filter(|id| !id.is_empty())
            .cloned()
    }

    /// The API floating IP: the address of `spec.controlPlaneEndpoint`, else
    /// `apiServerFloatingIP`, else the one the cluster allocated (by its
    /// description). Associated with `port` when it points nowhere; left alone when
    /// another control-plane machine holds it. One the cluster did not allocate is
    /// created with that address and this port in one request, under the cluster's
    /// API description, so the cluster's deletion releases it. The address, when this
    /// machine holds it.
    async fn ensure_api_fip(&mut self, port: Option<&str>) -> Result<Option<String>, InfraError> {
        let Some(port) = port else {
            return Ok(None);
        };
        let spec = &self.scope.cluster.spec;
        let address = spec
            .control_plane_endpoint
            .as_ref()
            .map(|e| e.host.clone())
            .filter(|h| !h.is_empty())
            .or_else(|| spec.api_server_floating_ip.clone());
        let description = format!("{} kubeapi", self.names.description());
        let query = match &address {
            Some(ip) => vec![("floating_ip_address", ip.clone())],
            None => vec![("description", description.clone())],
        };
        let neutron = self.clients.network();
        let found: Vec<net::FloatingIp> = neutron
            .list(&query)
            .await
            .map_err(|e| os("FloatingIPError", e))?;
        let fip = match found.as_slice() {
            [one] => one.clone(),
            [] => {
                let Some(ip) = address else {
                    return Err(user(
                        "FloatingIPError",
                        "the cluster has no API floating IP yet",
                    ));
                };
                let Some(ext) = self
                    .scope
                    .cluster
                    .status
                    .as_ref()
                    .and_then(|s| s.external_network.as_ref())
                else {
                    return Ok(None);
                };
                let f: net::FloatingIp = neutron
                    .create(json!({
                        "floating_network_id": ext.id,
                        "floating_ip_address": ip,
                        "description": description,
                        "port_id": port,
                    }))
                    .await
                    .map_err(|e| os("FloatingIPError", e))?;
                tracing::info!(fip = %f.floating_ip_address, %port, "allocated the API floating IP on this machine");
                return Ok(Some(f.floating_ip_address));
            }
            many => {
                return Err(user(
                    "FloatingIPError",
                    format!(
                        "{} floating IPs match the API address {query:?}; remove the extra ones",
                        many.len()
                    ),
                ))
            }
        };
        match fip.port_id.as_deref().filter(|p| !p.is_empty()) {
            Some(p) if p == port => Ok(Some(fip.floating_ip_address)),
            Some(_) => Ok(None),
            None => {
                neutron
                    .update::<net::FloatingIp>(&fip.id, json!({"port_id": port}))
                    .await
                    .map_err(|e| os("FloatingIPError", e))?;
                tracing::info!(fip = %fip.floating_ip_address, %port, "associated the API floating IP");
                Ok(Some(fip.floating_ip_address))
            }
        }
    }

    /// A member for this control-plane machine in each pool of the API load balancer.
    /// Octavia answers 409 while the load balancer is PENDING_*: a requeue.
    async fn ensure_lb_members(&mut self, ports: &[net::Port]) -> Result<(), InfraError> {
        let Some(address) = ports
            .first()
            .and_then(|p| p.fixed_ips.first())
            .map(|f| f.ip_address.clone())
        else {
            return Ok(());
        };
        let subnet = member_subnet(self.scope.cluster.status.as_ref());
        for (port, pool) in self.api_pools().await? {
            let name = self
                .names
                .load_balancer_member_name(u16::try_from(port).unwrap_or(6443), &self.name);
            let octavia = self.clients.load_balancer();
            let existing = octavia
                .members(&pool.id, &[("name", name.clone())])
                .await
                .map_err(|e| os("LoadBalancerMemberFailed", e))?;
            if existing.iter().any(|m| m.address == address) {
                continue;
            }
            let mut body = json!({"name": name, "address": address, "protocol_port": port});
            if let Some(subnet) = &subnet {
                body["subnet_id"] = json!(subnet);
            }
            match octavia.create_member(&pool.id, body).await {
                Ok(m) => {
                    tracing::info!(member = %m.id, pool = %pool.id, "added the load balancer member")
                }
                Err(e) if e.status() == Some(409) => self.wait(SERVER_REQUEUE),
                Err(e) => return Err(os("LoadBalancerMemberFailed", e)),
            }
        }
        Ok(())
    }

    /// Removes this machine's members; `false` while Octavia is busy.
    async fn delete_lb_members(&self) -> Result<bool, InfraError> {
        for (port, pool) in self.api_pools().await? {
            let name = self
                .names
                .load_balancer_member_name(u16::try_from(port).unwrap_or(6443), &self.name);
            let octavia = self.clients.load_balancer();
            let members = octavia
                .members(&pool.id, &[("name", name)])
                .await
                .map_err(|e| os("LoadBalancerMemberFailed", e))?;
            for m in members {
                match octavia.delete_member(&pool.id, &m.id).await {
                    Ok(()) => tracing::info!(member = %m.id, "removed the load balancer member"),
                    Err(e) if e.is_not_found() => {}
                    Err(e) if e.status() == Some(409) => return Ok(false),
                    Err(e) => return Err(os("LoadBalancerMemberFailed", e)),
                }
            }
        }
        Ok(true)
    }

    async fn find_server(&self) -> Result<Option<Server>, InfraError> {
        let nova = self.clients.compute();
        if let Some(id) = self.status.instance_id.as_ref().filter(|i| !i.is_empty()) {
            match nova.server(id).await {
                Ok(s) => return Ok(Some(s)),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(os("InstanceCreateFailed", e)),
            }
        }
        let mut found: Vec<Server> = nova
            .servers_named(&name_regex(&self.name))
            .await
            .map_err(|e| os("InstanceCreateFailed", e))?
            .into_iter()
            .filter(|s| s.name == self.name)
            .filter(|s| s.metadata.get(OWNER_METADATA_KEY) == Some(&self.owner))
            .collect();
        if found.len() > 1 {
            return Err(user(
                "DuplicateResources",
                format!(
                    "several servers are named {:?}; remove the extra ones",
                    self.name
                ),
            ));
        }
        Ok(found.pop())
    }

    /// Load balancer members, server, ports, volumes, then a managed server group
    /// left empty; requeues while Octavia or Nova is busy.
    async fn delete_all(&mut self) -> Result<DeleteProgress, InfraError> {
        if self.scope.control_plane && !self.delete_lb_members().await? {
            return Ok(DeleteProgress::Requeue {
                after: SERVER_REQUEUE,
                reason: "the API load balancer is busy".into(),
            });
        }
        if let Some(server) = self.find_server().await? {
            if server.task_state.as_deref() != Some("deleting") {
                self.clients
                    .compute()
                    .delete_server(&server.id)
                    .await
                    .or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })
                    .map_err(|e| os("InstanceDeleteFailed", e))?;
                tracing::info!(server = %server.id, "deleting the server");
            }
            self.status.instance_state = Some("DELETING".into());
            self.save().await?;
            return Ok(DeleteProgress::Requeue {
                after: SERVER_REQUEUE,
                reason: format!("server {} is being deleted", server.id),
            });
        }
        let neutron = self.clients.network();
        let mut port_ids = self.recorded_ports();
        let resolved = self.status.resolved.clone().unwrap_or_default();
        for spec in &resolved.ports {
            let named: Vec<net::Port> = neutron
                .list(&[
                    ("name", spec.name.clone()),
                    ("network_id", spec.network_id.clone()),
                ])
                .await
                .map_err(|e| os("PortDeleteFailed", e))?;
            for p in named {
                if !port_ids.contains(&p.id) {
                    port_ids.push(p.id);
                }
            }
        }
        let trunked = self.spec.trunk == Some(true)
            || self.spec.ports.iter().any(|p| p.trunk == Some(true))
            || resolved.ports.iter().any(|p| p.trunk == Some(true));
        for id in port_ids.iter().filter(|id| !id.is_empty()) {
            // Neutron keeps a trunk's parent port until the trunk is gone.
            if trunked {
                self.delete_trunks(id).await?;
            }
            match neutron.delete::<net::Port>(id).await {
                Ok(()) => tracing::info!(port = %id, "deleted a port"),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(os("PortDeleteFailed", e)),
            }
        }
        let mut volume_names = vec![root_volume_name(&self.name)];
        volume_names.extend(
            self.spec
                .additional_block_devices
                .iter()
                .map(|d| block_device_volume_name(&self.name, &d.name)),
        );
        for name in &volume_names {
            for v in self.own_volumes(name).await? {
                if v.status == "deleting" {
                    continue;
                }
                if v.is_in_use() {
                    // Nova detaches it as the server goes.
                    return Ok(DeleteProgress::Requeue {
                        after: SERVER_REQUEUE,
                        reason: format!("volume {} is still attached", v.id),
                    });
                }
                match self.clients.block_storage().delete_volume(&v.id).await {
                    Ok(()) => tracing::info!(volume = %v.id, "deleted a volume"),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(os("VolumeDeleteFailed", e)),
                }
            }
        }
        self.delete_managed_group_if_empty().await?;
        self.status.resources = None;
        self.status.instance_id = None;
        self.status.ready = Some(false);
        self.save().await?;
        Ok(DeleteProgress::Done)
    }
}

impl<C: CloudClients, S: StatusSink<OpenStackMachineStatus>> MachinePass<'_, C, S> {
    /// Whether this machine's group is the one its role shares, which we create and
    /// delete (not one `spec.serverGroup` names).
    fn group_is_managed(&self) -> bool {
        self.spec.server_group.is_none()
            && self
                .spec
                .extensions
                .as_ref()
                .is_some_and(|e| e.server_group_policy.is_some())
    }

    fn group_key(&self, name: &str) -> String {
        format!("{} {name}", project_key(self.clients.config()))
    }

    /// The lock of the managed group this machine boots into, if it has one.
    fn managed_group_lock(&self) -> Option<Arc<tokio::sync::Mutex<()>>> {
        self.group_is_managed()
            .then(|| self.groups.get(self.group_key(&self.managed_group_name())))
    }

    /// The managed group recorded in status, still there; else (deleted with its
    /// last member since this machine resolved it) found or created anew and
    /// recorded. Called under the group's lock, right before the server create.
    async fn confirm_managed_group(&mut self) -> Result<(), InfraError> {
        let recorded = self
            .status
            .resolved
            .as_ref()
            .and_then(|r| r.server_group_id.clone());
        if let Some(id) = &recorded {
            match self.clients.compute().server_group(id).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_not_found() => {
                    tracing::info!(group = %id, "the server group is gone; resolving it anew");
                }
                Err(e) => return Err(os("ServerGroupNotFound", e)),
            }
        }
        let id = self.resolve_server_group().await?;
        if id != recorded {
            self.status
                .resolved
                .get_or_insert_with(Default::default)
                .server_group_id = id;
            self.save().await?;
        }
        Ok(())
    }

    /// The group this machine's role shares goes with its last member, under the
    /// group's lock so that no machine boots into it meanwhile.
    async fn delete_managed_group_if_empty(&self) -> Result<(), InfraError> {
        if !self.group_is_managed() {
            return Ok(());
        }
        let name = self.managed_group_name();
        let lock = self.groups.get(self.group_key(&name));
        let _no_new_members = lock.lock().await;
        let nova = self.clients.compute();
        let groups = nova
            .server_groups()
            .await
            .map_err(|e| os("ServerGroupDeleteFailed", e))?;
        for g in groups.into_iter().filter(|g| g.name == name) {
            if g.members.is_empty() {
                match nova.delete_server_group(&g.id).await {
                    Ok(()) => tracing::info!(group = %g.id, %name, "deleted the server group"),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(os("ServerGroupDeleteFailed", e)),
                }
            }
        }
        Ok(())
    }
}

fn nova_policy(p: ServerGroupPolicyName) -> ServerGroupPolicy {
    match p {
        ServerGroupPolicyName::Affinity => ServerGroupPolicy::Affinity,
        ServerGroupPolicyName::AntiAffinity => ServerGroupPolicy::AntiAffinity,
        ServerGroupPolicyName::SoftAffinity => ServerGroupPolicy::SoftAffinity,
        ServerGroupPolicyName::SoftAntiAffinity => ServerGroupPolicy::SoftAntiAffinity,
    }
}

/// The Neutron body of a resolved port.
/// The `POST /v2.0/ports` body of a resolved port. As in CAPO's port body
/// (gophercloud's `omitempty`), an optional string that is empty (`''` as a
/// pack renders it unset) is left out like an absent one: description, MAC
/// address (also an address pair's), binding host and VNIC type, and the
/// fixed IP's subnet and address.
fn port_body(spec: &ResolvedPortSpec) -> Value {
    let given = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
    let mut body = json!({
        "name": spec.name,
        "network_id": spec.network_id,
        "admin_state_up": spec.fields.admin_state_up.unwrap_or(true),
    });
    if !spec.description.is_empty() {
        body["description"] = json!(spec.description);
    }
    if !spec.fixed_ips.is_empty() {
        body["fixed_ips"] = Value::Array(
            spec.fixed_ips
                .iter()
                .map(|f| net::fixed_ip(f.subnet_id.as_deref(), f.ip_address.as_deref()))
                .collect(),
        );
    }
    if spec.fields.disable_port_security == Some(true) {
        body["port_security_enabled"] = json!(false);
    } else if !spec.security_groups.is_empty() {
        body["security_groups"] = json!(spec.security_groups);
    }
    if !spec.fields.allowed_address_pairs.is_empty() {
        body["allowed_address_pairs"] = Value::Array(
            spec.fields
                .allowed_address_pairs
                .iter()
                .map(|p| match given(&p.mac_address) {
                    Some(mac) => json!({"ip_address": p.ip_address, "mac_address": mac}),
                    None => json!({"ip_address": p.ip_address}),
                })
                .collect(),
        );
    }
    if let Some(mac) = given(&spec.fields.mac_address) {
        body["mac_address"] = json!(mac);
    }
    if let Some(vnic) = given(&spec.fields.vnic_type) {
        body["binding:vnic_type"] = json!(vnic);
    }
    if let Some(host) = given(&spec.fields.host_id) {
        body["binding:host_id"] = json!(host);
    }
    if let Some(profile) = binding_profile(spec.fields.profile.as_ref()) {
        body["binding:profile"] = profile;
    }
    // Sent when set, `false` too, as CAPO's `*bool` is.
    if let Some(propagate) = spec.fields.propagate_uplink_status {
        body["propagate_uplink_status"] = json!(propagate);
    }
    for v in &spec.fields.value_specs {
        body[&v.key] = json!(v.value);
    }
    body
}

/// Neutron's extension that carries `propagate_uplink_status` on ports.
const UPLINK_STATUS_EXTENSION: &str = "uplink-status-propagation";

/// CAPO's `getPortProfile`: `ovsHWOffload` asks for the `switchdev` capability,
/// `trustedVF` for a trusted VF; nothing (no `binding:profile` at all) when neither
/// is true. Neutron's default policy lets only admins or services set it.
fn binding_profile(p: Option<&BindingProfile>) -> Option<Value> {
    let p = p?;
    let mut profile = serde_json::Map::new();
    if p.ovs_hw_offload == Some(true) {
        profile.insert("capabilities".into(), json!(["switchdev"]));
    }
    if p.trusted_vf == Some(true) {
        profile.insert("trusted".into(), json!(true));
    }
    (!profile.is_empty()).then_some(Value::Object(profile))
}

/// `propagateUplinkStatus` on a Neutron without the extension: `true` cannot be
/// met, which is the user's to change before anything is created; `false` is what
/// such a Neutron does anyway, so it is left out of the port (sending it would
/// only earn a 400 for an unknown attribute).
fn uplink_status_where_supported(
    ports: &mut [ResolvedPortSpec],
    supported: bool,
) -> Result<(), InfraError> {
    if supported {
        return Ok(());
    }
    let wanted: Vec<String> = ports
        .iter()
        .enumerate()
        .filter(|(_, p)| p.fields.propagate_uplink_status == Some(true))
        .map(|(i, _)| format!("ports[{i}].propagateUplinkStatus"))
        .collect();
    if !wanted.is_empty() {
        return Err(user(
            "UplinkStatusPropagationNotSupported",
            format!(
                "{}: this Neutron has no {UPLINK_STATUS_EXTENSION} extension; remove the field \
                 or use a cloud that offers it",
                wanted.join(", ")
            ),
        ));
    }
    for p in ports.iter_mut() {
        p.fields.propagate_uplink_status = None;
    }
    Ok(())
}

/// Neutron attributes of a port body and the port fields of the spec they come from.
const PORT_FIELDS: &[(&str, &str)] = &[
    ("binding:profile", "profile"),
    ("propagate_uplink_status", "propagateUplinkStatus"),
    ("binding:vnic_type", "vnicType"),
    ("binding:host_id", "hostID"),
    ("allowed_address_pairs", "allowedAddressPairs"),
    ("port_security_enabled", "disablePortSecurity"),
    ("mac_address", "macAddress"),
    ("fixed_ips", "fixedIPs"),
    ("security_groups", "securityGroups"),
];

/// A port create Neutron refused as the spec's fault (400, or 403 by policy): a
/// user error naming `ports[i]` and the field Neutron's answer names, with that
/// answer; anything else as [`os`] maps it.
fn port_refused(i: usize, e: stackhook_openstack::OsError) -> InfraError {
    let message = e.message();
    let field = PORT_FIELDS
        .iter()
        .find(|(attribute, _)| message.contains(attribute))
        .map_or_else(|| format!("ports[{i}]"), |(_, f)| format!("ports[{i}].{f}"));
    crate::infra::cluster::refused("PortCreateFailed", &field, "the port", e)
}

/// The `subnet_id` of an API load balancer member, as CAPO gives it: the cluster's
/// first subnet when the VIP is on another network (`apiServerLoadBalancer.network`),
/// so Octavia reaches the member there; none when they share the network.
fn member_subnet(cluster: Option<&crate::infra::api::OpenStackClusterStatus>) -> Option<String> {
    let cluster = cluster?;
    let network = cluster.network.as_ref()?;
    let lb_network = cluster
        .api_server_load_balancer
        .as_ref()?
        .load_balancer_network
        .as_ref()?;
    if lb_network.network.id.is_empty() || lb_network.network.id == network.network.id {
        return None;
    }
    network.subnets.first().map(|s| s.id.clone())
}

/// CAPO's `status.addresses`: the ports' fixed IPs as InternalIP, the server name
/// as InternalDNS.
fn addresses(server_name: &str, ports: &[net::Port]) -> Vec<NodeAddress> {
    let mut out: Vec<NodeAddress> = ports
        .iter()
        .flat_map(|p| p.fixed_ips.iter())
        .map(|f| NodeAddress {
            type_: "InternalIP".into(),
            address: f.ip_address.clone(),
        })
        .collect();
    out.push(NodeAddress {
        type_: "InternalDNS".into(),
        address: server_name.to_owned(),
    });
    out
}

/// The floating IP this machine holds, as CAPO reports one: an ExternalIP before
/// the InternalDNS entry; none when it holds none.
fn set_external_ip(addresses: &mut Vec<NodeAddress>, held: Option<String>) {
    addresses.retain(|a| a.type_ != "ExternalIP" || Some(&a.address) == held.as_ref());
    if let Some(ip) = held {
        if !addresses.iter().any(|a| a.type_ == "ExternalIP") {
            let at = addresses
                .iter()
                .position(|a| a.type_ == "InternalDNS")
                .unwrap_or(addresses.len());
            addresses.insert(
                at,
                NodeAddress {
                    type_: "ExternalIP".into(),
                    address: ip,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::types::{AddressPair, ResolvedPortSpecFields};

    #[test]
    fn port_bodies_carry_what_the_spec_resolved_to() {
        let spec = ResolvedPortSpec {
            name: "m-0".into(),
            description: "d".into(),
            network_id: "net".into(),
            tags: vec!["t".into()],
            trunk: None,
            fixed_ips: vec![ResolvedFixedIp {
                subnet_id: Some("sub".into()),
                ip_address: None,
            }],
            security_groups: vec!["sg".into()],
            fields: ResolvedPortSpecFields {
                allowed_address_pairs: vec![AddressPair {
                    ip_address: "10.0.0.5".into(),
                    mac_address: None,
                }],
                ..Default::default()
            },
        };
        let b = port_body(&spec);
        assert_eq!(b["fixed_ips"], json!([{"subnet_id": "sub"}]));
        assert_eq!(b["security_groups"], json!(["sg"]));
        assert_eq!(
            b["allowed_address_pairs"],
            json!([{"ip_address": "10.0.0.5"}])
        );
        assert_eq!(b["admin_state_up"], json!(true));
        let mut off = spec.clone();
        off.fields.disable_port_security = Some(true);
        let b = port_body(&off);
        assert_eq!(b["port_security_enabled"], json!(false));
        assert!(b.get("security_groups").is_none());
    }

    /// Each optional string of a machine's port as a pack renders it unset
    /// (`''`) stays out of the port body; set, it goes in.
    #[test]
    fn empty_optional_fields_stay_out_of_the_port_body() {
        type Case = (
            &'static str,
            &'static [&'static str],
            fn(&mut ResolvedPortSpec, &str),
        );
        let cases: [Case; 7] = [
            ("description", &["description"], |p, v| {
                p.description = v.into()
            }),
            ("macAddress", &["mac_address"], |p, v| {
                p.fields.mac_address = Some(v.into())
            }),
            ("vnicType", &["binding:vnic_type"], |p, v| {
                p.fields.vnic_type = Some(v.into())
            }),
            ("hostID", &["binding:host_id"], |p, v| {
                p.fields.host_id = Some(v.into())
            }),
            (
                "fixedIPs subnet",
                &["fixed_ips", "0", "subnet_id"],
                |p, v| {
                    p.fixed_ips = vec![ResolvedFixedIp {
                        subnet_id: Some(v.into()),
                        ip_address: Some("10.0.0.9".into()),
                    }]
                },
            ),
            (
                "fixedIPs ipAddress",
                &["fixed_ips", "0", "ip_address"],
                |p, v| {
                    p.fixed_ips = vec![ResolvedFixedIp {
                        subnet_id: Some("sub".into()),
                        ip_address: Some(v.into()),
                    }]
                },
            ),
            (
                "allowedAddressPairs macAddress",
                &["allowed_address_pairs", "0", "mac_address"],
                |p, v| {
                    p.fields.allowed_address_pairs = vec![AddressPair {
                        ip_address: "10.0.0.5".into(),
                        mac_address: Some(v.into()),
                    }]
                },
            ),
        ];
        let has = |body: &Value, path: &[&str]| {
            let mut at = body;
            for key in path {
                let next = match key.parse::<usize>() {
                    Ok(i) => at.get(i),
                    Err(_) => at.get(*key),
                };
                match next {
                    Some(v) => at = v,
                    None => return false,
                }
            }
            true
        };
        let base = ResolvedPortSpec {
            name: "m-0".into(),
            network_id: "net".into(),
            ..Default::default()
        };
        for (field, path, set) in cases {
            let mut empty = base.clone();
            set(&mut empty, "");
            let body = port_body(&empty);
            assert!(!has(&body, path), "{field} empty: {body}");
            let mut given = base.clone();
            set(&mut given, "x");
            let body = port_body(&given);
            assert!(has(&body, path), "{field} set: {body}");
        }
    }

    #[test]
    fn the_binding_profile_and_uplink_status_go_in_as_capo_sends_them() {
        let base = ResolvedPortSpec {
            name: "m-0".into(),
            network_id: "net".into(),
            ..Default::default()
        };
        let profile = |ovs, trusted| {
            let mut p = base.clone();
            p.fields.profile = Some(BindingProfile {
                ovs_hw_offload: ovs,
                trusted_vf: trusted,
            });
            port_body(&p)
        };
        assert_eq!(
            profile(Some(true), None)["binding:profile"],
            json!({"capabilities": ["switchdev"]})
        );
        assert_eq!(
            profile(None, Some(true))["binding:profile"],
            json!({"trusted": true})
        );
        assert_eq!(
            profile(Some(true), Some(true))["binding:profile"],
            json!({"capabilities": ["switchdev"], "trusted": true})
        );
        // Nothing true: no binding:profile at all, as CAPO leaves it out.
        for (ovs, trusted) in [(None, None), (Some(false), Some(false))] {
            assert!(profile(ovs, trusted).get("binding:profile").is_none());
        }
        assert!(port_body(&base).get("binding:profile").is_none());

        assert!(port_body(&base).get("propagate_uplink_status").is_none());
        for v in [true, false] {
            let mut p = base.clone();
            p.fields.propagate_uplink_status = Some(v);
            assert_eq!(port_body(&p)["propagate_uplink_status"], json!(v));
        }
    }

    #[test]
    fn uplink_status_without_the_extension_is_refused_or_left_out() {
        let port = |v| ResolvedPortSpec {
            fields: ResolvedPortSpecFields {
                propagate_uplink_status: v,
                ..Default::default()
            },
            ..Default::default()
        };
        // With the extension: untouched.
        let mut ports = vec![port(Some(true)), port(Some(false))];
        uplink_status_where_supported(&mut ports, true).unwrap();
        assert_eq!(ports[0].fields.propagate_uplink_status, Some(true));
        assert_eq!(ports[1].fields.propagate_uplink_status, Some(false));
        // Without: `true` is refused, naming each port that asks for it.
        let mut ports = vec![port(None), port(Some(true)), port(Some(false))];
        match uplink_status_where_supported(&mut ports, false) {
            Err(InfraError::User { reason, message }) => {
                assert_eq!(reason, "UplinkStatusPropagationNotSupported");
                assert!(
                    message.starts_with("ports[1].propagateUplinkStatus: this Neutron has no uplink-status-propagation extension"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        // `false` alone is what such a Neutron does: left out of the body.
        let mut ports = vec![port(Some(false))];
        uplink_status_where_supported(&mut ports, false).unwrap();
        assert_eq!(ports[0].fields.propagate_uplink_status, None);
        assert!(port_body(&ports[0])
            .get("propagate_uplink_status")
            .is_none());
    }

    #[test]
    fn a_refused_port_names_the_field_neutron_names() {
        let http = |status, message: &str| stackhook_openstack::OsError::Http {
            service: "network".into(),
            method: "POST".into(),
            path: "/v2.0/ports".into(),
            status,
            message: message.into(),
            retry_after: None,
        };
        let policy =
            "(rule:create_port and rule:create_port:binding:profile) is disallowed by policy";
        match port_refused(1, http(403, policy)) {
            InfraError::User { reason, message } => {
                assert_eq!(reason, "PortCreateFailed");
                assert_eq!(
                    message,
                    format!("ports[1].profile: Neutron refused the port (HTTP 403, by policy): {policy}")
                );
            }
            other => panic!("{other:?}"),
        }
        match port_refused(
            0,
            http(400, "Unrecognized attribute(s) 'propagate_uplink_status'"),
        ) {
            InfraError::User { message, .. } => {
                assert!(
                    message.starts_with("ports[0].propagateUplinkStatus: "),
                    "{message}"
                )
            }
            other => panic!("{other:?}"),
        }
        match port_refused(0, http(400, "Invalid input")) {
            InfraError::User { message, .. } => {
                assert!(message.starts_with("ports[0]: "), "{message}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            port_refused(0, http(503, "down")),
            InfraError::Transient { .. }
        ));
    }

    #[test]
    fn members_name_the_cluster_subnet_only_off_the_cluster_network() {
        use crate::infra::api::cluster::{
            LoadBalancer, NetworkStatus, NetworkStatusWithSubnets, Subnet,
        };
        let net = |id: &str, subnets: &[&str]| NetworkStatusWithSubnets {
            network: NetworkStatus {
                id: id.into(),
                ..Default::default()
            },
            subnets: subnets
                .iter()
                .map(|s| Subnet {
                    id: (*s).into(),
                    ..Default::default()
                })
                .collect(),
        };
        let status =
            |lb_net: Option<NetworkStatusWithSubnets>| crate::infra::api::OpenStackClusterStatus {
                network: Some(Box::new(net("cluster", &["cs1", "cs2"]))),
                api_server_load_balancer: Some(Box::new(LoadBalancer {
                    load_balancer_network: lb_net.map(Box::new),
                    ..Default::default()
                })),
                ..Default::default()
            };
        assert_eq!(
            member_subnet(Some(&status(Some(net("vip", &["vs1"]))))),
            Some("cs1".into())
        );
        assert_eq!(
            member_subnet(Some(&status(Some(net("cluster", &["cs1"]))))),
            None
        );
        assert_eq!(member_subnet(Some(&status(None))), None);
        assert_eq!(member_subnet(None), None);
    }

    #[test]
    fn the_held_floating_ip_is_the_one_external_address() {
        let mut a = addresses("m", &[]);
        set_external_ip(&mut a, Some("203.0.113.5".into()));
        set_external_ip(&mut a, Some("203.0.113.5".into()));
        let shown: Vec<_> = a
            .iter()
            .map(|x| (x.type_.as_str(), x.address.as_str()))
            .collect();
        assert_eq!(shown, [("ExternalIP", "203.0.113.5"), ("InternalDNS", "m")]);
        set_external_ip(&mut a, None);
        assert!(a.iter().all(|x| x.type_ != "ExternalIP"));
    }

    #[test]
    fn addresses_list_fixed_ips_then_the_name() {
        let p = net::Port {
            fixed_ips: vec![net::FixedIp {
                subnet_id: "s".into(),
                ip_address: "10.0.0.7".into(),
            }],
            ..Default::default()
        };
        let a = addresses("m", &[p]);
        assert_eq!(a[0].address, "10.0.0.7");
        assert_eq!(a[0].type_, "InternalIP");
        assert_eq!(a[1].type_, "InternalDNS");
    }
}
