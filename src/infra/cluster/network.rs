//! External network, cluster network, subnet, router and router interface.

use serde_json::{json, Value};
use stackhook_openstack::networking::{self as net, Networking, NeutronResource};
use stackhook_openstack::CloudClients;

use super::{os, user, Pass};
use crate::infra::api::cluster::{NetworkStatus, NetworkStatusWithSubnets, Router, Subnet};
use crate::infra::api::names::conditions as cond;
use crate::infra::api::types::{FilterByNeutronTags, NetworkParam, SubnetParam};
use crate::infra::seam::{InfraError, StatusSink};

/// Router ports that connect a subnet (CAPO's list of device owners).
const ROUTER_INTERFACE_OWNERS: &[&str] = &[
    "network:router_interface",
    "network:router_interface_distributed",
    "network:ha_router_replicated_interface",
    "network:router_ha_interface",
];

/// Neutron list filters for a tag filter.
/// The subnet with ID `id`; a 404 is the user's to fix.
pub(crate) async fn subnet_by_id<C: CloudClients>(
    clients: &C,
    id: &str,
) -> Result<net::Subnet, InfraError> {
    clients.network().get::<net::Subnet>(id).await.map_err(|e| {
        if e.is_not_found() {
            user("SubnetNotFound", format!("subnet {id} does not exist"))
        } else {
            os("SubnetNotFound", e)
        }
    })
}

/// Neutron's subnet list filters for every field of CAPO's `SubnetFilter`.
pub(crate) fn subnet_query(
    f: &crate::infra::api::types::SubnetFilter,
) -> Vec<(&'static str, String)> {
    let mut q = Vec::new();
    for (k, v) in [
        ("name", &f.name),
        ("description", &f.description),
        ("project_id", &f.project_id),
        ("gateway_ip", &f.gateway_ip),
        ("cidr", &f.cidr),
        ("ipv6_address_mode", &f.ipv6_address_mode),
        ("ipv6_ra_mode", &f.ipv6_ra_mode),
    ] {
        if let Some(v) = v {
            q.push((k, v.clone()));
        }
    }
    if let Some(v) = f.ip_version {
        q.push(("ip_version", v.to_string()));
    }
    tag_query(&mut q, &f.tags);
    q
}

/// Neutron list filters for CAPO's network, router and security-group filters,
/// which share their fields: name, description, projectID and the tag filters.
pub(crate) fn named_query(
    name: &Option<String>,
    description: &Option<String>,
    project_id: &Option<String>,
    tags: &FilterByNeutronTags,
) -> Vec<(&'static str, String)> {
    let mut q = Vec::new();
    for (k, v) in [
        ("name", name),
        ("description", description),
        ("project_id", project_id),
    ] {
        if let Some(v) = v {
            q.push((k, v.clone()));
        }
    }
    tag_query(&mut q, tags);
    q
}

/// The one security group `f` matches, with every field of CAPO's filter (a name
/// shared across projects is told apart by projectID, description or tags);
/// `field`, when not empty, starts the message of a refusal.
pub(crate) async fn security_group_by_filter<C: CloudClients>(
    clients: &C,
    f: &crate::infra::api::types::SecurityGroupFilter,
    field: &str,
) -> Result<String, InfraError> {
    let q = named_query(&f.name, &f.description, &f.project_id, &f.tags);
    let found: Vec<net::SecurityGroup> = clients
        .network()
        .list(&q)
        .await
        .map_err(|e| os("SecurityGroupNotFound", e))?;
    match found.as_slice() {
        [one] => Ok(one.id.clone()),
        other => Err(user(
            "SecurityGroupNotFound",
            format!(
                "{field}{} security groups match {f:?}; it must match one",
                other.len()
            ),
        )),
    }
}

pub(crate) fn tag_query(q: &mut Vec<(&'static str, String)>, t: &FilterByNeutronTags) {
    if !t.tags.is_empty() {
        q.push(("tags", t.tags.join(",")));
    }
    if !t.tags_any.is_empty() {
        q.push(("tags-any", t.tags_any.join(",")));
    }
    if !t.not_tags.is_empty() {
        q.push(("not-tags", t.not_tags.join(",")));
    }
    if !t.not_tags_any.is_empty() {
        q.push(("not-tags-any", t.not_tags_any.join(",")));
    }
}

/// A resource's tags, as Neutron returns them.
pub(super) trait Tagged {
    fn id(&self) -> &str;
    fn tags(&self) -> &[String];
}
macro_rules! tagged {
    ($t:ty) => {
        impl Tagged for $t {
            fn id(&self) -> &str {
                &self.id
            }
            fn tags(&self) -> &[String] {
                &self.tags
            }
        }
    };
}
tagged!(net::Network);
tagged!(net::Subnet);
tagged!(net::Router);
tagged!(net::Port);
tagged!(net::SecurityGroup);
tagged!(net::FloatingIp);

impl<C: CloudClients, S: StatusSink> Pass<'_, C, S> {
    /// Of several resources found by name, the one carrying our tag; a name
    /// that matches more than one without telling them apart is an error.
    pub(super) fn pick<T: Tagged>(
        &self,
        kind: &str,
        name: &str,
        found: Vec<T>,
    ) -> Result<Option<T>, InfraError> {
        if found.len() <= 1 {
            return Ok(found.into_iter().next());
        }
        let total = found.len();
        let own = super::owner_tag(&self.names);
        let mut ours: Vec<T> = found
            .into_iter()
            .filter(|r| r.tags().contains(&own))
            .collect();
        if ours.len() == 1 {
            return Ok(ours.pop());
        }
        Err(user(
            "DuplicateResources",
            format!(
                "{} {kind}s are named {name:?}; remove the extra ones",
                if ours.is_empty() { total } else { ours.len() }
            ),
        ))
    }

    /// Adds the cluster's tags that `r` lacks (one PUT per missing tag).
    pub(super) async fn ensure_tags<T: NeutronResource + Tagged>(
        &self,
        r: &T,
    ) -> Result<Vec<String>, InfraError> {
        self.ensure_tags_of(r, false).await
    }

    /// Like [`Self::ensure_tags`], but a resource the status recorded before this pass
    /// gets only the user's `spec.tags`. A pass tags what it creates before recording
    /// it, so a recorded resource without the owner tag was made by another
    /// controller (CAPO, before a takeover): it is adopted as it is, with no write.
    /// The owner tag still goes on what a pass made and lost track of (found by name).
    pub(super) async fn ensure_tags_of<T: NeutronResource + Tagged>(
        &self,
        r: &T,
        recorded: bool,
    ) -> Result<Vec<String>, InfraError> {
        let own = super::owner_tag(&self.names);
        let mut tags = r.tags().to_vec();
        for t in &self.tags {
            if recorded && *t == own && !self.spec.tags.contains(t) {
                continue;
            }
            if !tags.contains(t) {
                self.clients
                    .network()
                    .add_tag::<T>(r.id(), t)
                    .await
                    .map_err(|e| os("TagFailed", e))?;
                tags.push(t.clone());
            }
        }
        Ok(tags)
    }

    pub(super) async fn reconcile_external_network(&mut self) -> Result<(), InfraError> {
        if self.spec.disable_external_network == Some(true) {
            self.status.external_network = None;
            return Ok(());
        }
        // Immutable in the spec, so a found network stays the right one.
        if self
            .status
            .external_network
            .as_ref()
            .is_some_and(|n| !n.id.is_empty())
        {
            return Ok(());
        }
        let found: Vec<net::Network> = match &self.spec.external_network {
            Some(param) => self.find_networks(param, true).await?,
            None => self
                .clients
                .network()
                .list(&[("router:external", "true".to_owned())])
                .await
                .map_err(|e| os("ExternalNetworkNotFound", e))?,
        };
        match (found.len(), &self.spec.external_network) {
            (1, _) => {
                let n = &found[0];
                self.status.external_network = Some(Box::new(NetworkStatus {
                    name: n.name.clone(),
                    id: n.id.clone(),
                    tags: n.tags.clone(),
                }));
            }
            (0, None) => self.status.external_network = None,
            (0, Some(p)) => {
                return Err(user(
                    "ExternalNetworkNotFound",
                    format!("no external network matches {}", describe(p)),
                ))
            }
            (n, _) => {
                return Err(user(
                    "ExternalNetworkNotFound",
                    format!("{n} external networks match; set spec.externalNetwork to choose one"),
                ))
            }
        }
        Ok(())
    }

    pub(super) async fn find_networks(
        &self,
        p: &NetworkParam,
        external: bool,
    ) -> Result<Vec<net::Network>, InfraError> {
        let reason = if external {
            "ExternalNetworkNotFound"
        } else {
            "NetworkNotFound"
        };
        if let Some(id) = &p.id {
            return match self.clients.network().get::<net::Network>(id).await {
                Ok(n) => Ok(vec![n]),
                Err(e) if e.is_not_found() => Ok(vec![]),
                Err(e) => Err(os(reason, e)),
            };
        }
        let mut q = p
            .filter
            .as_ref()
            .map(|f| named_query(&f.name, &f.description, &f.project_id, &f.tags))
            .unwrap_or_default();
        if external {
            q.push(("router:external", "true".to_owned()));
        }
        self.clients
            .network()
            .list(&q)
            .await
            .map_err(|e| os(reason, e))
    }

    pub(super) async fn reconcile_network(&mut self) -> Result<(), InfraError> {
        if let Some(managed) = self.spec.managed_subnets.first() {
            self.reconcile_managed_network(managed).await
        } else {
            self.reconcile_existing_network().await
        }
    }

    async fn reconcile_managed_network(
        &mut self,
        managed: &crate::infra::api::cluster::SubnetSpec,
    ) -> Result<(), InfraError> {
        let name = self.names.network_name();
        let neutron = self.clients.network();
        // Network.
        let found = neutron
            .list::<net::Network>(&[("name", name.clone())])
            .await
            .map_err(|e| os("NetworkCreateFailed", e))?;
        let recorded = self.status.network.as_ref().map(|n| n.network.id.clone());
        let (network, net_tags) = match self.pick("network", &name, found)? {
            Some(n) => {
                let tags = self
                    .ensure_tags_of(&n, recorded.as_deref() == Some(n.id.as_str()))
                    .await?;
                (n, tags)
            }
            None => {
                let mut body = json!({"name": name, "admin_state_up": true});
                if let Some(mtu) = self.spec.network_mtu {
                    body["mtu"] = json!(mtu);
                }
                if self.spec.disable_port_security == Some(true) {
                    body["port_security_enabled"] = json!(false);
                }
                let n: net::Network = neutron
                    .create(body)
                    .await
                    .map_err(|e| os("NetworkCreateFailed", e))?;
                tracing::info!(network = %n.id, %name, "created network");
                // Tagged before it is recorded: see `ensure_tags_of`.
                let tags = self.ensure_tags(&n).await?;
                self.status.network = Some(Box::new(NetworkStatusWithSubnets {
                    network: NetworkStatus {
                        name: n.name.clone(),
                        id: n.id.clone(),
                        tags: tags.clone(),
                    },
                    subnets: vec![],
                }));
                self.save().await?;
                (n, tags)
            }
        };

        // Subnet.
        let found = neutron
            .list::<net::Subnet>(&[
                ("network_id", network.id.clone()),
                ("cidr", managed.cidr.clone()),
            ])
            .await
            .map_err(|e| os("SubnetCreateFailed", e))?;
        let recorded_subnets: Vec<String> = self
            .status
            .network
            .as_ref()
            .map(|n| n.subnets.iter().map(|s| s.id.clone()).collect())
            .unwrap_or_default();
        let (subnet, subnet_tags) = match self.pick("subnet", &name, found)? {
            Some(s) => {
                let s = if s.dns_nameservers != managed.dns_nameservers {
                    neutron
                        .update::<net::Subnet>(
                            &s.id,
                            json!({"dns_nameservers": managed.dns_nameservers}),
                        )
                        .await
                        .map_err(|e| os("SubnetCreateFailed", e))?
                } else {
                    s
                };
                let tags = self
                    .ensure_tags_of(&s, recorded_subnets.contains(&s.id))
                    .await?;
                (s, tags)
            }
            None => {
                let mut body = json!({
                    "network_id": network.id,
                    "name": name,
                    "ip_version": 4,
                    "cidr": managed.cidr,
                    "dns_nameservers": managed.dns_nameservers,
                    "description": self.names.description(),
                });
                if !managed.allocation_pools.is_empty() {
                    body["allocation_pools"] = json!(managed
                        .allocation_pools
                        .iter()
                        .map(|p| json!({"start": p.start, "end": p.end}))
                        .collect::<Vec<_>>());
                }
                let s: net::Subnet = neutron
                    .create(body)
                    .await
                    .map_err(|e| os("SubnetCreateFailed", e))?;
                tracing::info!(subnet = %s.id, cidr = %s.cidr, "created subnet");
                let tags = self.ensure_tags(&s).await?;
                self.status.network = Some(Box::new(NetworkStatusWithSubnets {
                    network: NetworkStatus {
                        name: network.name.clone(),
                        id: network.id.clone(),
                        tags: net_tags.clone(),
                    },
                    subnets: vec![Subnet {
                        name: s.name.clone(),
                        id: s.id.clone(),
                        cidr: s.cidr.clone(),
                        tags: tags.clone(),
                    }],
                }));
                self.save().await?;
                (s, tags)
            }
        };
        self.status.network = Some(Box::new(NetworkStatusWithSubnets {
            network: NetworkStatus {
                name: network.name.clone(),
                id: network.id.clone(),
                tags: net_tags,
            },
            subnets: vec![Subnet {
                name: subnet.name.clone(),
                id: subnet.id.clone(),
                cidr: subnet.cidr.clone(),
                tags: subnet_tags,
            }],
        }));

        // Router, only with somewhere to route to.
        let Some(ext) = self.status.external_network.clone() else {
            self.status.router = None;
            return Ok(());
        };
        let recorded_router = self.status.router.as_ref().map(|r| r.id.clone());
        let (router, router_tags) = match &self.spec.router {
            Some(p) => {
                let r = self.find_router(p).await?;
                let tags = r.tags.clone();
                (r, tags)
            }
            None => {
                let found = neutron
                    .list::<net::Router>(&[("name", name.clone())])
                    .await
                    .map_err(|e| os("RouterCreateFailed", e))?;
                match self.pick("router", &name, found)? {
                    Some(r) => {
                        let tags = self
                            .ensure_tags_of(&r, recorded_router.as_deref() == Some(r.id.as_str()))
                            .await?;
                        (r, tags)
                    }
                    None => {
                        let mut body = json!({
                            "name": name,
                            "description": self.names.description(),
                        });
                        // As CAPO: with `externalRouterIPs` the gateway is set by the
                        // update below (some clouds take the fixed IPs only there).
                        if self.spec.external_router_ips.is_empty() {
                            body["external_gateway_info"] = json!({"network_id": ext.id});
                        }
                        let r: net::Router = neutron
                            .create(body)
                            .await
                            .map_err(|e| os("RouterCreateFailed", e))?;
                        tracing::info!(router = %r.id, "created router");
                        let tags = self.ensure_tags(&r).await?;
                        self.status.router = Some(Box::new(Router {
                            name: r.name.clone(),
                            id: r.id.clone(),
                            tags: tags.clone(),
                            ips: vec![],
                        }));
                        self.save().await?;
                        (r, tags)
                    }
                }
            }
        };
        let router = if self.spec.external_router_ips.is_empty() {
            router
        } else {
            self.ensure_external_router_ips(router, &ext.id).await?
        };
        let ips = router
            .external_gateway_info
            .as_ref()
            .map(|g| {
                g.external_fixed_ips
                    .iter()
                    .map(|f| f.ip_address.clone())
                    .collect()
            })
            .unwrap_or_default();
        self.status.router = Some(Box::new(Router {
            name: router.name.clone(),
            id: router.id.clone(),
            tags: router_tags,
            ips,
        }));

        // Interface into the cluster subnet.
        let ports = neutron
            .list::<net::Port>(&[("device_id", router.id.clone())])
            .await
            .map_err(|e| os("RouterCreateFailed", e))?;
        let attached = ports.iter().any(|p| {
            ROUTER_INTERFACE_OWNERS.contains(&p.device_owner.as_str())
                && p.fixed_ips.iter().any(|f| f.subnet_id == subnet.id)
        });
        if !attached {
            neutron
                .add_router_interface(&router.id, &subnet.id)
                .await
                .map_err(|e| os("RouterCreateFailed", e))?;
            tracing::info!(router = %router.id, subnet = %subnet.id, "attached router interface");
        }
        Ok(())
    }

    /// CAPO's `setRouterExternalIPs`: the router's gateway on the external network
    /// with one fixed IP per `spec.externalRouterIPs` entry (on its subnet, at its
    /// `fixedIP` when set). Written only when the gateway differs, unlike CAPO, which
    /// writes it on every pass. Neutron's default policy lets only admins choose
    /// external fixed IPs: its refusal is the user's to see, naming the field.
    async fn ensure_external_router_ips(
        &mut self,
        router: net::Router,
        external_network: &str,
    ) -> Result<net::Router, InfraError> {
        let mut wanted = Vec::with_capacity(self.spec.external_router_ips.len());
        for (i, p) in self.spec.external_router_ips.iter().enumerate() {
            let subnet_id = match self
                .external_router_subnet(i, &p.subnet, external_network)
                .await
            {
                Ok(id) => id,
                Err(e) => {
                    self.set(
                        cond::ROUTER_READY,
                        false,
                        super::reason_of(&e),
                        &e.to_string(),
                    );
                    return Err(e);
                }
            };
            wanted.push(GatewayIp {
                subnet_id,
                ip_address: p.fixed_ip.clone().filter(|ip| !ip.is_empty()),
            });
        }
        if gateway_matches(
            router.external_gateway_info.as_ref(),
            external_network,
            &wanted,
        ) {
            return Ok(router);
        }
        let body = json!({"external_gateway_info": gateway_body(external_network, &wanted)});
        match self
            .clients
            .network()
            .update::<net::Router>(&router.id, body)
            .await
        {
            Ok(r) => {
                tracing::info!(router = %r.id, "set the router's external fixed IPs");
                Ok(r)
            }
            Err(e) => {
                let e = refused(
                    cond::ROUTER_CREATE_FAILED,
                    "spec.externalRouterIPs",
                    "the router's external gateway fixed IPs",
                    e,
                );
                self.set(
                    cond::ROUTER_READY,
                    false,
                    super::reason_of(&e),
                    &e.to_string(),
                );
                Err(e)
            }
        }
    }

    /// The subnet of `spec.externalRouterIPs[i]`: an ID as given (CAPO makes no
    /// call for it; Neutron refuses one off the external network), or the one subnet
    /// of the external network its filter matches.
    async fn external_router_subnet(
        &self,
        i: usize,
        p: &SubnetParam,
        external_network: &str,
    ) -> Result<String, InfraError> {
        if let Some(id) = p.id.as_ref().filter(|id| !id.is_empty()) {
            return Ok(id.clone());
        }
        let Some(f) = &p.filter else {
            return Err(user(
                "SubnetNotFound",
                format!("spec.externalRouterIPs[{i}].subnet needs an id or a filter"),
            ));
        };
        let mut q = subnet_query(f);
        q.push(("network_id", external_network.to_owned()));
        let found: Vec<net::Subnet> = self
            .clients
            .network()
            .list(&q)
            .await
            .map_err(|e| os("SubnetNotFound", e))?;
        match found.as_slice() {
            [one] => Ok(one.id.clone()),
            other => Err(user(
                "SubnetNotFound",
                format!(
                    "spec.externalRouterIPs[{i}].subnet: {} subnets of the external network {external_network} match {f:?}; need exactly one",
                    other.len()
                ),
            )),
        }
    }

    async fn find_router(
        &self,
        p: &crate::infra::api::types::RouterParam,
    ) -> Result<net::Router, InfraError> {
        if let Some(id) = &p.id {
            return self
                .clients
                .network()
                .get::<net::Router>(id)
                .await
                .map_err(|e| {
                    if e.is_not_found() {
                        user("RouterNotFound", format!("router {id} does not exist"))
                    } else {
                        os("RouterNotFound", e)
                    }
                });
        }
        let q = p
            .filter
            .as_ref()
            .map(|f| named_query(&f.name, &f.description, &f.project_id, &f.tags))
            .unwrap_or_default();
        let mut found: Vec<net::Router> = self
            .clients
            .network()
            .list(&q)
            .await
            .map_err(|e| os("RouterNotFound", e))?;
        if found.len() != 1 {
            return Err(user(
                "RouterNotFound",
                format!(
                    "{} routers match spec.router; need exactly one",
                    found.len()
                ),
            ));
        }
        Ok(found.remove(0))
    }

    /// No managed subnets: resolve the user's network and subnets.
    async fn reconcile_existing_network(&mut self) -> Result<(), InfraError> {
        let neutron = self.clients.network();
        let mut subnets: Vec<net::Subnet> = Vec::new();
        for p in &self.spec.subnets {
            subnets.push(self.find_subnet(p).await?);
        }
        let network = match &self.spec.network {
            Some(p) => {
                let mut found = self.find_networks(p, false).await?;
                if found.len() != 1 {
                    return Err(user(
                        "NetworkNotFound",
                        format!(
                            "{} networks match {}; need exactly one",
                            found.len(),
                            describe(p)
                        ),
                    ));
                }
                found.remove(0)
            }
            None => match subnets.first() {
                Some(s) => neutron
                    .get::<net::Network>(&s.network_id)
                    .await
                    .map_err(|e| os("NetworkNotFound", e))?,
                None => {
                    return Err(user(
                        "NetworkNotFound",
                        "set spec.managedSubnets, spec.network or spec.subnets",
                    ))
                }
            },
        };
        if let Some(bad) = subnets.iter().find(|s| s.network_id != network.id) {
            return Err(user(
                "SubnetNotFound",
                format!("subnet {} is not on network {}", bad.id, network.id),
            ));
        }
        if subnets.is_empty() {
            subnets = neutron
                .list(&[("network_id", network.id.clone())])
                .await
                .map_err(|e| os("SubnetNotFound", e))?;
            if subnets.len() > 2 {
                return Err(user(
                    "SubnetNotFound",
                    format!(
                        "network {} has {} subnets; choose with spec.subnets",
                        network.id,
                        subnets.len()
                    ),
                ));
            }
        }
        self.status.network = Some(Box::new(NetworkStatusWithSubnets {
            network: NetworkStatus {
                name: network.name.clone(),
                id: network.id.clone(),
                tags: network.tags.clone(),
            },
            subnets: subnets
                .iter()
                .map(|s| Subnet {
                    name: s.name.clone(),
                    id: s.id.clone(),
                    cidr: s.cidr.clone(),
                    tags: s.tags.clone(),
                })
                .collect(),
        }));
        if let Some(p) = &self.spec.router {
            let r = self.find_router(p).await?;
            self.status.router = Some(Box::new(Router {
                name: r.name.clone(),
                id: r.id.clone(),
                tags: r.tags.clone(),
                ips: r
                    .external_gateway_info
                    .map(|g| {
                        g.external_fixed_ips
                            .into_iter()
                            .map(|f| f.ip_address)
                            .collect()
                    })
                    .unwrap_or_default(),
            }));
        }
        Ok(())
    }

    async fn find_subnet(&self, p: &SubnetParam) -> Result<net::Subnet, InfraError> {
        if let Some(id) = &p.id {
            return subnet_by_id(self.clients, id).await;
        }
        let q = p.filter.as_ref().map(subnet_query).unwrap_or_default();
        let mut found: Vec<net::Subnet> = self
            .clients
            .network()
            .list(&q)
            .await
            .map_err(|e| os("SubnetNotFound", e))?;
        if found.len() != 1 {
            return Err(user(
                "SubnetNotFound",
                format!(
                    "{} subnets match a spec.subnets filter; need exactly one",
                    found.len()
                ),
            ));
        }
        Ok(found.remove(0))
    }
}

/// One fixed IP wanted on the router's external gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct GatewayIp {
    pub subnet_id: String,
    /// Neutron picks an address on the subnet when unset.
    pub ip_address: Option<String>,
}

/// The `external_gateway_info` CAPO sends for `spec.externalRouterIPs`.
pub(super) fn gateway_body(network_id: &str, wanted: &[GatewayIp]) -> Value {
    json!({
        "network_id": network_id,
        "external_fixed_ips": wanted
            .iter()
            .map(|w| net::fixed_ip(Some(&w.subnet_id), w.ip_address.as_deref()))
            .collect::<Vec<_>>(),
    })
}

/// The gateway already is what `wanted` asks for: on `network_id`, with exactly one
/// address per wanted entry, on its subnet, and the given address where one is.
pub(super) fn gateway_matches(
    current: Option<&net::GatewayInfo>,
    network_id: &str,
    wanted: &[GatewayIp],
) -> bool {
    let Some(g) = current else {
        return false;
    };
    if g.network_id != network_id || g.external_fixed_ips.len() != wanted.len() {
        return false;
    }
    let mut free: Vec<&net::FixedIp> = g.external_fixed_ips.iter().collect();
    // Fixed addresses first, so a subnet-only entry cannot take the one they name.
    let (fixed, any): (Vec<&GatewayIp>, Vec<&GatewayIp>) =
        wanted.iter().partition(|w| w.ip_address.is_some());
    for w in fixed.into_iter().chain(any) {
        let at = free.iter().position(|f| {
            f.subnet_id == w.subnet_id && w.ip_address.as_ref().is_none_or(|ip| *ip == f.ip_address)
        });
        match at {
            Some(i) => {
                free.swap_remove(i);
            }
            None => return false,
        }
    }
    true
}

/// A write Neutron refused as the spec's fault (400, or 403 by policy): a user error
/// whose message names the spec `field` and says what Neutron answered; anything
/// else as [`os`] maps it.
pub(crate) fn refused(
    reason: &str,
    field: &str,
    what: &str,
    e: stackhook_openstack::OsError,
) -> InfraError {
    match e.status() {
        Some(status @ (400 | 403)) => user(
            reason,
            format!(
                "{field}: Neutron refused {what} (HTTP {status}{}): {}",
                if status == 403 { ", by policy" } else { "" },
                e.message()
            ),
        ),
        _ => os(reason, e),
    }
}

pub(super) fn describe(p: &NetworkParam) -> String {
    match (&p.id, &p.filter) {
        (Some(id), _) => format!("id {id}"),
        (None, Some(f)) => format!("filter {f:?}"),
        (None, None) => "an empty filter".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(subnet: &str, address: &str) -> net::FixedIp {
        net::FixedIp {
            subnet_id: subnet.into(),
            ip_address: address.into(),
        }
    }

    fn want(subnet: &str, address: Option<&str>) -> GatewayIp {
        GatewayIp {
            subnet_id: subnet.into(),
            ip_address: address.map(Into::into),
        }
    }

    #[test]
    fn a_named_filter_sends_every_field_neutron_lists_by() {
        let f: crate::infra::api::types::RouterFilter = serde_json::from_value(json!({
            "name": "r", "description": "kept", "projectID": "p1",
            "tags": ["a", "b"], "notTagsAny": ["x"]
        }))
        .unwrap();
        let q = named_query(&f.name, &f.description, &f.project_id, &f.tags);
        assert_eq!(
            q,
            vec![
                ("name", "r".to_owned()),
                ("description", "kept".to_owned()),
                ("project_id", "p1".to_owned()),
                ("tags", "a,b".to_owned()),
                ("not-tags-any", "x".to_owned()),
            ]
        );
        assert!(named_query(&None, &None, &None, &Default::default()).is_empty());
    }

    #[test]
    fn the_gateway_body_has_one_fixed_ip_per_entry() {
        let body = gateway_body(
            "ext",
            &[want("s1", Some("203.0.113.252")), want("s2", None)],
        );
        assert_eq!(
            body,
            json!({"network_id": "ext", "external_fixed_ips": [
                {"subnet_id": "s1", "ip_address": "203.0.113.252"},
                {"subnet_id": "s2"},
            ]})
        );
    }

    #[test]
    fn a_gateway_matches_only_what_the_entries_ask_for() {
        let gw = |network: &str, ips: Vec<net::FixedIp>| net::GatewayInfo {
            network_id: network.into(),
            external_fixed_ips: ips,
        };
        let wanted = [want("s1", Some("203.0.113.252")), want("s1", None)];
        // Either order of Neutron's answer; the subnet-only entry takes any address.
        let got = gw(
            "ext",
            vec![ip("s1", "203.0.113.20"), ip("s1", "203.0.113.252")],
        );
        assert!(gateway_matches(Some(&got), "ext", &wanted));
        let got = gw(
            "ext",
            vec![ip("s1", "203.0.113.252"), ip("s1", "203.0.113.20")],
        );
        assert!(gateway_matches(Some(&got), "ext", &wanted));
        // No gateway, another network, a missing or extra address, the wrong one.
        assert!(!gateway_matches(None, "ext", &wanted));
        let other = gw(
            "other",
            vec![ip("s1", "203.0.113.20"), ip("s1", "203.0.113.252")],
        );
        assert!(!gateway_matches(Some(&other), "ext", &wanted));
        let one = gw("ext", vec![ip("s1", "203.0.113.252")]);
        assert!(!gateway_matches(Some(&one), "ext", &wanted));
        let wrong = gw(
            "ext",
            vec![ip("s1", "203.0.113.20"), ip("s1", "203.0.113.21")],
        );
        assert!(!gateway_matches(Some(&wrong), "ext", &wanted));
        let elsewhere = gw(
            "ext",
            vec![ip("s2", "203.0.113.252"), ip("s1", "203.0.113.20")],
        );
        assert!(!gateway_matches(Some(&elsewhere), "ext", &wanted));
        // The gateway CAPO's create leaves (network only) is not yet the one wanted.
        assert!(!gateway_matches(
            Some(&gw("ext", vec![ip("s1", "203.0.113.9")])),
            "ext",
            &[want("s1", Some("203.0.113.252"))]
        ));
    }

    #[test]
    fn a_refusal_names_the_field_and_neutron_s_answer() {
        let http = |status| stackhook_openstack::OsError::Http {
            service: "network".into(),
            method: "PUT".into(),
            path: "/v2.0/routers/r".into(),
            status,
            message: "(rule:update_router) is disallowed by policy".into(),
            retry_after: None,
        };
        match refused(
            "RouterCreateFailed",
            "spec.externalRouterIPs",
            "the IPs",
            http(403),
        ) {
            InfraError::User { reason, message } => {
                assert_eq!(reason, "RouterCreateFailed");
                assert_eq!(
                    message,
                    "spec.externalRouterIPs: Neutron refused the IPs (HTTP 403, by policy): \
                     (rule:update_router) is disallowed by policy"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            refused("R", "f", "w", http(400)),
            InfraError::User { .. }
        ));
        assert!(matches!(
            refused("R", "f", "w", http(503)),
            InfraError::Transient { .. }
        ));
    }
}
