//! The control-plane endpoint (Octavia load balancer with listener, pool and
//! monitor per port plus a floating IP; or a floating IP alone; or a fixed
//! IP) and the ingress VIP port.
//!
//! A new load balancer is created fully populated: its listeners, pools and
//! monitors nested in the one create, so Octavia provisions them in one
//! round. The steps one by one remain for completing or repairing an
//! existing one (and for a provider that refuses the populated create).
//! Octavia refuses changes while a load balancer is `PENDING_*`, so after
//! each Octavia write the pass stops and asks to be requeued instead of
//! polling.

use std::time::Duration;

use serde_json::{json, Value};
use stackhook_openstack::loadbalancing::{self as lb, LoadBalancing};
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::CloudClients;

use super::{os, owner_tag, subnet_by_id, subnet_query, user, Pass};
use crate::infra::api::cluster::{
    ApiServerLoadBalancer, LoadBalancer as LbStatus, NetworkStatus, NetworkStatusWithSubnets,
    Subnet,
};
use crate::infra::api::extensions::{LoadBalancersStatus, VirtualIp};
use crate::infra::api::types::SubnetParam;
use crate::infra::seam::{InfraError, StatusSink};

/// Octavia needs a moment after each change (about 1 s on the test cloud).
const OCTAVIA_REQUEUE: Duration = Duration::from_secs(2);
/// Octavia API version that has `allowed_cidrs`.
const ALLOWED_CIDRS_VERSION: (u32, u32) = (2, 12);

impl<C: CloudClients, S: StatusSink> Pass<'_, C, S> {
    fn api_port(&self) -> i64 {
        self.spec.api_server_port.unwrap_or(6443)
    }

    pub(super) fn fip_description(&self) -> String {
        format!("{} kubeapi", self.names.description())
    }

    /// `(host, port)`, or `None` while Octavia is busy.
    pub(super) async fn reconcile_endpoint(&mut self) -> Result<Option<(String, i32)>, InfraError> {
        let port = i32::try_from(self.api_port()).unwrap_or(6443);
        if self.spec.api_load_balancer_enabled() {
            return Ok(self
                .reconcile_load_balancer()
                .await?
                .map(|host| (host, port)));
        }
        self.status.api_server_load_balancer = None;
        if let Some(ep) = self
            .spec
            .control_plane_endpoint
            .as_ref()
            .filter(|ep| !ep.host.is_empty())
        {
            return Ok(Some((ep.host.clone(), ep.port)));
        }
        if self.fip_allowed() {
            let fip = self.ensure_api_fip(None).await?;
            return Ok(Some((fip.floating_ip_address, port)));
        }
        if let Some(ip) = &self.spec.api_server_fixed_ip {
            return Ok(Some((ip.clone(), port)));
        }
        Err(user(
            "APIEndpointConfigFailed",
            "unable to determine the control plane endpoint: enable the API load balancer, a floating IP (with an external network) or set apiServerFixedIP",
        ))
    }

    pub(super) fn fip_allowed(&self) -> bool {
        self.spec.disable_api_server_floating_ip != Some(true)
            && self.status.external_network.is_some()
    }

    async fn reconcile_load_balancer(&mut self) -> Result<Option<String>, InfraError> {
        let Some(spec) = self.spec.api_server_load_balancer.clone() else {
            return Ok(None);
        };
        let octavia = self.clients.load_balancer();
        let name = self.names.load_balancer_name();
        let known_id = self
            .status
            .api_server_load_balancer
            .as_ref()
            .map(|l| l.id.clone())
            .filter(|id| !id.is_empty());
        let mut found = match &known_id {
            Some(id) => match octavia.get::<lb::LoadBalancer>(id).await {
                Ok(l) => vec![l],
                Err(e) if e.is_not_found() => vec![],
                Err(e) => return Err(os("LoadBalancerFailed", e)),
            },
            None => vec![],
        };
        if found.is_empty() {
            found = octavia
                .list::<lb::LoadBalancer>(&[("name", name.clone())])
                .await
                .map_err(|e| os("LoadBalancerFailed", e))?;
        }
        if found.len() > 1 {
            let own = owner_tag(&self.names);
            found.retain(|l| l.tags.contains(&own));
            if found.len() != 1 {
                return Err(user(
                    "DuplicateResources",
                    format!("several load balancers are named {name:?}; remove the extra ones"),
                ));
            }
        }
        let Some(balancer) = found.pop() else {
            let network = self.load_balancer_network(&spec, None).await?;
            let (vip_network_id, vip_subnet_id) =
                vip_location(network.as_deref(), self.status.network.as_deref()).ok_or_else(
                    || {
                        user(
                            "APIEndpointConfigFailed",
                            "the cluster network has no subnet for the load balancer VIP",
                        )
                    },
                )?;
            let mut body = json!({
                "name": name,
                "description": self.names.description(),
                "tags": self.tags,
            });
            if let Some(id) = vip_network_id {
                body["vip_network_id"] = json!(id);
            }
            if let Some(id) = vip_subnet_id {
                body["vip_subnet_id"] = json!(id);
            }
            let vip = self
                .status
                .api_server_load_balancer
                .as_ref()
                .map(|l| l.internal_ip.clone())
                .filter(|ip| !ip.is_empty())
                .or_else(|| self.spec.api_server_fixed_ip.clone());
            if let Some(vip) = vip {
                body["vip_address"] = json!(vip);
            }
            if let Some(p) = &spec.provider {
                body["provider"] = json!(p);
            }
            if let Some(az) = &spec.availability_zone {
                body["availability_zone"] = json!(az);
            }
            if let Some(flavor) = &spec.flavor {
                body["flavor_id"] = json!(self.load_balancer_flavor(flavor).await?);
            }
            // Fully populated: listeners, pools and monitors come with the
            // load balancer in one request and one Octavia provisioning
            // round, exactly as the steps below would make them.
            let provider = spec.provider.as_deref().unwrap_or_default();
            let allowed = self.allowed_cidrs(&spec.allowed_cidrs, provider).await?;
            let mut populated = body.clone();
            populated["listeners"] = Value::Array(
                self.api_ports(&spec)
                    .into_iter()
                    .map(|port| {
                        let pname = self.port_name(port);
                        let mut listener = self.listener_body(&pname, port, allowed.as_deref());
                        let mut pool = self.pool_body(&pname, algorithm(provider));
                        pool["healthmonitor"] = self.monitor_body(&pname, &spec);
                        listener["default_pool"] = pool;
                        listener
                    })
                    .collect(),
            );
            let created: lb::LoadBalancer = match octavia.create(populated).await {
                Ok(l) => l,
                // A provider that cannot take all of it (no monitors, the
                // cloud's default being OVN): Octavia made nothing, and the
                // load balancer alone is then completed step by step.
                Err(e) if e.is_not_implemented() => {
                    tracing::info!(error = %e, "the provider refuses a fully populated load balancer");
                    octavia
                        .create(body)
                        .await
                        .map_err(|e| os("APIEndpointConfigFailed", e))?
                }
                Err(e) => return Err(os("APIEndpointConfigFailed", e)),
            };
            tracing::info!(lb = %created.id, %name, "created API load balancer");
            self.status.api_server_load_balancer = Some(Box::new(LbStatus {
                name: created.name.clone(),
                id: created.id.clone(),
                internal_ip: created.vip_address.clone(),
                tags: created.tags.clone(),
                load_balancer_network: network,
                ..Default::default()
            }));
            self.save().await?;
            self.wait(OCTAVIA_REQUEUE);
            return Ok(None);
        };
        let network = self.load_balancer_network(&spec, Some(&balancer)).await?;
        let previous = self
            .status
            .api_server_load_balancer
            .clone()
            .unwrap_or_default();
        self.status.api_server_load_balancer = Some(Box::new(LbStatus {
            name: balancer.name.clone(),
            id: balancer.id.clone(),
            ip: previous.ip.clone(),
            internal_ip: balancer.vip_address.clone(),
            allowed_cidrs: previous.allowed_cidrs.clone(),
            tags: balancer.tags.clone(),
            load_balancer_network: network,
        }));
        if balancer.provisioning_status == "ERROR" {
            return Err(user(
                "LoadBalancerError",
                format!("load balancer {} is in ERROR", balancer.id),
            ));
        }
        if !balancer.is_active() {
            tracing::debug!(lb = %balancer.id, status = %balancer.provisioning_status, "waiting for Octavia");
            self.wait(OCTAVIA_REQUEUE);
            return Ok(None);
        }

        let allowed = self
            .allowed_cidrs(&spec.allowed_cidrs, &balancer.provider)
            .await?;
        if let Some(lb) = self.status.api_server_load_balancer.as_mut() {
            lb.allowed_cidrs = allowed.clone().unwrap_or_default();
        }
        let algorithm = algorithm(&balancer.provider);
        let monitor = spec.monitor.clone().unwrap_or_default().settings();
        let ports = self.api_ports(&spec);
        let lb_filter = [("loadbalancer_id", balancer.id.clone())];
        let listeners: Vec<lb::Listener> = octavia
            .list(&lb_filter)
            .await
            .map_err(|e| os("APIEndpointConfigFailed", e))?;
        let pools: Vec<lb::Pool> = octavia
            .list(&lb_filter)
            .await
            .map_err(|e| os("APIEndpointConfigFailed", e))?;
        for port in ports {
            let pname = self.port_name(port);
            let listener = match listeners.iter().find(|l| l.name == pname) {
                Some(l) => l.clone(),
                None => {
                    let mut body = self.listener_body(&pname, port, allowed.as_deref());
                    body["loadbalancer_id"] = json!(balancer.id);
                    let l: lb::Listener = octavia
                        .create(body)
                        .await
                        .map_err(|e| os("APIEndpointConfigFailed", e))?;
                    tracing::info!(listener = %l.id, port, "created listener");
                    self.wait(OCTAVIA_REQUEUE);
                    return Ok(None);
                }
            };
            if let Some(a) = &allowed {
                let mut current = listener.allowed_cidrs.clone().unwrap_or_default();
                current.sort();
                if &current != a {
                    octavia
                        .update::<lb::Listener>(&listener.id, json!({"allowed_cidrs": a}))
                        .await
                        .map_err(|e| os("APIEndpointConfigFailed", e))?;
                    tracing::info!(listener = %listener.id, "updated allowed CIDRs");
                    self.wait(OCTAVIA_REQUEUE);
                    return Ok(None);
                }
            }
            let pool = match pools.iter().find(|p| p.name == pname) {
                Some(p) => p.clone(),
                None => {
                    let mut body = self.pool_body(&pname, algorithm);
                    body["listener_id"] = json!(listener.id);
                    let p: lb::Pool = octavia
                        .create(body)
                        .await
                        .map_err(|e| os("APIEndpointConfigFailed", e))?;
                    tracing::info!(pool = %p.id, port, "created pool");
                    self.wait(OCTAVIA_REQUEUE);
                    return Ok(None);
                }
            };
            let wanted = json!({
                "delay": monitor.delay,
                "timeout": monitor.timeout,
                "max_retries": monitor.max_retries,
                "max_retries_down": monitor.max_retries_down,
            });
            match pool.healthmonitor_id.as_deref().filter(|id| !id.is_empty()) {
                None => {
                    let mut body = self.monitor_body(&pname, &spec);
                    body["pool_id"] = json!(pool.id);
                    match octavia.create::<lb::HealthMonitor>(body).await {
                        Ok(m) => {
                            tracing::info!(monitor = %m.id, port, "created health monitor");
                            self.wait(OCTAVIA_REQUEUE);
                            return Ok(None);
                        }
                        // Some providers have no monitors; CAPO goes on without.
                        Err(e) if e.is_not_implemented() => {
                            tracing::warn!(error = %e, "the load balancer provider has no health monitors")
                        }
                        Err(e) => return Err(os("APIEndpointConfigFailed", e)),
                    }
                }
                Some(id) => {
                    let m: lb::HealthMonitor = octavia
                        .get(id)
                        .await
                        .map_err(|e| os("APIEndpointConfigFailed", e))?;
                    let current = (m.delay, m.timeout, m.max_retries, m.max_retries_down);
                    if current
                        != (
                            monitor.delay,
                            monitor.timeout,
                            monitor.max_retries,
                            monitor.max_retries_down,
                        )
                    {
                        octavia
                            .update::<lb::HealthMonitor>(id, wanted)
                            .await
                            .map_err(|e| os("APIEndpointConfigFailed", e))?;
                        self.wait(OCTAVIA_REQUEUE);
                        return Ok(None);
                    }
                }
            }
        }

        if !self.fip_allowed() {
            return Ok(Some(balancer.vip_address));
        }
        let fip = self.ensure_api_fip(Some(&balancer.vip_port_id)).await?;
        Ok(Some(fip.floating_ip_address))
    }

    /// CAPO's `resolveLoadBalancerNetwork`: where the VIP goes, as
    /// `status.apiServerLoadBalancer.loadBalancerNetwork` reports it. Without
    /// `spec.apiServerLoadBalancer.network` the cluster network and its subnets
    /// (`subnets` alone is not looked at, as in CAPO). With it, that network (exactly
    /// one match) and each of `subnets` resolved within it, in order: the first is the
    /// VIP's. For an existing load balancer the recorded network is kept while the
    /// load balancer is on it, so a settled cluster spends no reads here.
    async fn load_balancer_network(
        &self,
        spec: &ApiServerLoadBalancer,
        existing: Option<&lb::LoadBalancer>,
    ) -> Result<Option<Box<NetworkStatusWithSubnets>>, InfraError> {
        let Some(param) = &spec.network else {
            return Ok(self.status.network.clone());
        };
        let recorded = self
            .status
            .api_server_load_balancer
            .as_ref()
            .and_then(|l| l.load_balancer_network.clone())
            .filter(|n| !n.network.id.is_empty());
        if let (Some(balancer), Some(recorded)) = (existing, recorded) {
            if recorded.network.id == balancer.vip_network_id {
                return Ok(Some(recorded));
            }
        }
        let field = "spec.apiServerLoadBalancer.network";
        let mut found = self
            .find_networks(param, false)
            .await
            .map_err(|e| match e {
                InfraError::User { reason, message } => InfraError::User {
                    reason,
                    message: format!("{field}: {message}"),
                },
                other => other,
            })?;
        if found.len() != 1 {
            return Err(user(
                "LoadBalancerNetworkNotFound",
                format!(
                    "{field}: {} networks match {}; need exactly one",
                    found.len(),
                    super::network::describe(param)
                ),
            ));
        }
        let network = found.remove(0);
        let mut subnets = Vec::with_capacity(spec.subnets.len());
        for (i, p) in spec.subnets.iter().enumerate() {
            let s = self.load_balancer_subnet(i, p, &network.id).await?;
            subnets.push(Subnet {
                name: s.name,
                id: s.id,
                cidr: s.cidr,
                tags: s.tags,
            });
        }
        Ok(Some(Box::new(NetworkStatusWithSubnets {
            network: NetworkStatus {
                name: network.name,
                id: network.id,
                tags: network.tags,
            },
            subnets,
        })))
    }

    /// `spec.apiServerLoadBalancer.subnets[i]`, which must be on `network_id`.
    async fn load_balancer_subnet(
        &self,
        i: usize,
        p: &SubnetParam,
        network_id: &str,
    ) -> Result<net::Subnet, InfraError> {
        let field = format!("spec.apiServerLoadBalancer.subnets[{i}]");
        if let Some(id) = p.id.as_ref().filter(|id| !id.is_empty()) {
            let s = match subnet_by_id(self.clients, id).await {
                Ok(s) => s,
                Err(InfraError::User { message, .. }) => {
                    return Err(user(
                        "LoadBalancerNetworkNotFound",
                        format!("{field}: {message}"),
                    ))
                }
                Err(e) => return Err(e),
            };
            if s.network_id != network_id {
                return Err(user(
                    "LoadBalancerNetworkNotFound",
                    format!(
                        "{field}: subnet {id} is on network {}, not on the load balancer network {network_id}",
                        s.network_id
                    ),
                ));
            }
            return Ok(s);
        }
        let Some(f) = &p.filter else {
            return Err(user(
                "LoadBalancerNetworkNotFound",
                format!("{field} needs an id or a filter"),
            ));
        };
        let mut q = subnet_query(f);
        q.push(("network_id", network_id.to_owned()));
        let mut found: Vec<net::Subnet> = self
            .clients
            .network()
            .list(&q)
            .await
            .map_err(|e| os("LoadBalancerNetworkNotFound", e))?;
        if found.len() != 1 {
            return Err(user(
                "LoadBalancerNetworkNotFound",
                format!(
                    "{field}: {} subnets of the load balancer network {network_id} match {f:?}; need exactly one",
                    found.len()
                ),
            ));
        }
        Ok(found.remove(0))
    }

    /// The API port, then the additional ones: one listener, pool and
    /// monitor each.
    fn api_ports(&self, spec: &ApiServerLoadBalancer) -> Vec<i64> {
        let mut ports = vec![self.api_port()];
        ports.extend(spec.additional_ports.iter().copied());
        ports
    }

    /// The name of a port's listener, pool and monitor (CAPO's).
    fn port_name(&self, port: i64) -> String {
        self.names
            .load_balancer_port_name(u16::try_from(port).unwrap_or(0))
    }

    /// A listener as created on its own (plus `loadbalancer_id`) or inside
    /// the load balancer (plus `default_pool`).
    fn listener_body(&self, name: &str, port: i64, allowed: Option<&[String]>) -> Value {
        let mut body = json!({
            "name": name,
            "protocol": "TCP",
            "protocol_port": port,
            "tags": self.tags,
        });
        if let Some(a) = allowed {
            body["allowed_cidrs"] = json!(a);
        }
        body
    }

    /// A pool as created on its own (plus `listener_id`) or as a listener's
    /// `default_pool` (plus `healthmonitor`).
    fn pool_body(&self, name: &str, algorithm: &str) -> Value {
        json!({
            "name": name,
            "protocol": "TCP",
            "lb_algorithm": algorithm,
            "tags": self.tags,
        })
    }

    /// A health monitor as created on its own (plus `pool_id`) or inside
    /// its pool.
    fn monitor_body(&self, name: &str, spec: &ApiServerLoadBalancer) -> Value {
        let monitor = spec.monitor.clone().unwrap_or_default().settings();
        json!({
            "delay": monitor.delay,
            "timeout": monitor.timeout,
            "max_retries": monitor.max_retries,
            "max_retries_down": monitor.max_retries_down,
            "name": name,
            "type": "TCP",
            "tags": self.tags,
        })
    }

    /// The ID of the enabled Octavia flavor named `name`.
    async fn load_balancer_flavor(&self, name: &str) -> Result<String, InfraError> {
        let flavors: Vec<lb::Flavor> = self
            .clients
            .load_balancer()
            .list(&[("name", name.to_owned())])
            .await
            .map_err(|e| os("APIEndpointConfigFailed", e))?;
        pick_flavor(flavors, name)
    }

    /// The effective allowed CIDRs (sorted), or `None` when none are asked
    /// for or Octavia cannot apply them.
    async fn allowed_cidrs(
        &self,
        spec: &[String],
        provider: &str,
    ) -> Result<Option<Vec<String>>, InfraError> {
        if spec.is_empty() || provider == "ovn" {
            return Ok(None);
        }
        let version = self
            .clients
            .load_balancer()
            .api_version()
            .await
            .map_err(|e| os("APIEndpointConfigFailed", e))?;
        if version < ALLOWED_CIDRS_VERSION {
            return Ok(None);
        }
        let mut all: Vec<String> = spec.to_vec();
        // As CAPO: the bastion reaches the API through the load balancer too.
        if let Some(b) = &self.status.bastion {
            all.extend(b.floating_ip.iter().chain(b.ip.iter()).cloned());
        }
        if let Some(n) = &self.status.network {
            all.extend(n.subnets.iter().map(|s| s.cidr.clone()));
        }
        if let Some(r) = &self.status.router {
            all.extend(r.ips.iter().cloned());
        }
        let mut all: Vec<String> = all
            .into_iter()
            .filter(|c| !c.is_empty())
            .map(|c| {
                if c.contains('/') {
                    c
                } else if c.contains(':') {
                    format!("{c}/128")
                } else {
                    format!("{c}/32")
                }
            })
            .collect();
        all.sort();
        all.dedup();
        Ok(Some(all))
    }

    /// Finds or allocates the API floating IP and, with a load balancer,
    /// points it at the VIP port.
    async fn ensure_api_fip(
        &mut self,
        vip_port: Option<&str>,
    ) -> Result<net::FloatingIp, InfraError> {
        let neutron = self.clients.network();
        let recorded = self
            .status
            .api_server_load_balancer
            .as_ref()
            .map(|l| l.ip.clone())
            .filter(|ip| !ip.is_empty())
            .or_else(|| self.spec.api_server_floating_ip.clone());
        let query = match &recorded {
            Some(ip) => vec![("floating_ip_address", ip.clone())],
            None => vec![("description", self.fip_description())],
        };
        let found: Vec<net::FloatingIp> = neutron
            .list(&query)
            .await
            .map_err(|e| os("FloatingIPError", e))?;
        let found = self.pick("floating IP", &self.fip_description(), found)?;
        let port = vip_port.filter(|p| !p.is_empty());
        // What the VIP port already carries decides, before anything is created or
        // moved: Neutron gives a fixed IP one floating IP, and another controller
        // (CAPO before a takeover, a race of its own) may have left a second one
        // beside the one that works.
        let on_port = match (port, &found) {
            (Some(p), Some(f)) if f.port_id.as_deref() == Some(p) => None,
            (Some(p), _) => {
                let attached: Vec<net::FloatingIp> = neutron
                    .list(&[("port_id", p.to_string())])
                    .await
                    .map_err(|e| os("FloatingIPError", e))?;
                attached.into_iter().next().filter(|a| {
                    self.spec
                        .api_server_floating_ip
                        .as_deref()
                        .is_none_or(|wanted| wanted == a.floating_ip_address)
                })
            }
            (None, _) => None,
        };
        let fip = match (on_port, found) {
            (Some(attached), stray) => {
                if let Some(stray) = stray.filter(|s| s.id != attached.id) {
                    tracing::warn!(
                        adopted = %attached.floating_ip_address,
                        stray = %stray.floating_ip_address,
                        stray_id = %stray.id,
                        "the API load balancer's VIP port already has a floating IP: it is the API address; \
                         the other one is not attached to anything and is left as it is (release it if nothing uses it)"
                    );
                }
                attached
            }
            (None, Some(f)) => f,
            (None, None) => {
                let Some(ext) = self.status.external_network.clone() else {
                    return Err(user(
                        "FloatingIPError",
                        "no external network for the API floating IP",
                    ));
                };
                let mut body =
                    json!({"floating_network_id": ext.id, "description": self.fip_description()});
                if let Some(ip) = &self.spec.api_server_floating_ip {
                    body["floating_ip_address"] = json!(ip);
                }
                let f: net::FloatingIp = neutron
                    .create(body)
                    .await
                    .map_err(|e| os("FloatingIPError", e))?;
                tracing::info!(fip = %f.floating_ip_address, "allocated API floating IP");
                if let Some(l) = self.status.api_server_load_balancer.as_mut() {
                    l.ip = f.floating_ip_address.clone();
                }
                self.save().await?;
                f
            }
        };
        if fip.description == self.fip_description() {
            self.ensure_tags(&fip).await?;
        }
        if let Some(l) = self.status.api_server_load_balancer.as_mut() {
            l.ip = fip.floating_ip_address.clone();
        }
        if let Some(port) = port {
            if fip.port_id.as_deref() != Some(port) {
                // Providers whose VIP lives outside Neutron (noop drivers)
                // have no port to point at: leave the address unbound.
                match neutron.get::<net::Port>(port).await {
                    Ok(_) => {
                        neutron
                            .update::<net::FloatingIp>(&fip.id, json!({"port_id": port}))
                            .await
                            .map_err(|e| os("FloatingIPError", e))?;
                        tracing::info!(fip = %fip.floating_ip_address, %port, "associated API floating IP");
                    }
                    Err(e) if e.is_not_found() => {
                        tracing::warn!(%port, "load balancer VIP port is not in Neutron; floating IP left unassociated")
                    }
                    Err(e) => return Err(os("FloatingIPError", e)),
                }
            }
        }
        Ok(fip)
    }

    /// The reserved ingress VIP port, when `spec.extensions.loadBalancers.ingress.enabled`.
    pub(super) async fn reconcile_ingress_vip(&mut self) -> Result<Option<String>, InfraError> {
        let enabled = self
            .spec
            .extensions
            .as_ref()
            .and_then(|e| e.load_balancers.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .is_some_and(|i| i.enabled == Some(true));
        let had = self
            .status
            .extensions
            .as_ref()
            .and_then(|e| e.load_balancers.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .and_then(|i| i.vip.clone());
        let name = self.names.ingress_vip_port_name();
        let Some(network) = self.status.network.clone() else {
            return Ok(None);
        };
        if !enabled && had.is_none() {
            return Ok(None);
        }
        let neutron = self.clients.network();
        let found: Vec<net::Port> = neutron
            .list(&[
                ("name", name.clone()),
                ("network_id", network.network.id.clone()),
            ])
            .await
            .map_err(|e| os("IngressVIPFailed", e))?;
        if !enabled {
            for p in found {
                match neutron.delete::<net::Port>(&p.id).await {
                    Ok(()) => tracing::info!(port = %p.id, "released the ingress VIP"),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(os("IngressVIPFailed", e)),
                }
            }
            return Ok(None);
        }
        let port = match self.pick("port", &name, found)? {
            Some(p) => p,
            None => {
                let mut body = json!({
                    "name": name,
                    "network_id": network.network.id,
                    "description": self.names.description(),
                    "device_owner": "",
                    "admin_state_up": true,
                });
                if let Some(s) = network
                    .subnets
                    .iter()
                    .find(|s| !s.cidr.contains(':'))
                    .or(network.subnets.first())
                {
                    body["fixed_ips"] = Value::Array(vec![json!({"subnet_id": s.id})]);
                }
                let p: net::Port = neutron
                    .create(body)
                    .await
                    .map_err(|e| os("IngressVIPFailed", e))?;
                tracing::info!(port = %p.id, "reserved the ingress VIP");
                let vip = p.fixed_ips.first().map(|f| f.ip_address.clone());
                let ext = self.status.extensions.get_or_insert_with(Default::default);
                let lbs = ext
                    .load_balancers
                    .get_or_insert_with(LoadBalancersStatus::default);
                lbs.ingress = Some(VirtualIp { vip });
                self.save().await?;
                p
            }
        };
        self.ensure_tags(&port).await?;
        Ok(port.fixed_ips.first().map(|f| f.ip_address.clone()))
    }
}

/// `(vip_network_id, vip_subnet_id)` of a new load balancer, as CAPO's
/// `getOrCreateAPILoadBalancer` picks them: the load balancer network and its first
/// subnet, each when known; with neither, the cluster's first subnet. `None` when
/// there is nowhere to put the VIP.
fn vip_location(
    lb_network: Option<&NetworkStatusWithSubnets>,
    cluster: Option<&NetworkStatusWithSubnets>,
) -> Option<(Option<String>, Option<String>)> {
    let network = lb_network
        .map(|n| n.network.id.clone())
        .filter(|id| !id.is_empty());
    let subnet = lb_network
        .and_then(|n| n.subnets.first())
        .map(|s| s.id.clone())
        .filter(|id| !id.is_empty());
    if network.is_some() || subnet.is_some() {
        return Some((network, subnet));
    }
    let subnet = cluster
        .and_then(|n| n.subnets.first())
        .map(|s| s.id.clone())
        .filter(|id| !id.is_empty())?;
    Some((None, Some(subnet)))
}

/// The pool algorithm: OVN has no round robin.
fn algorithm(provider: &str) -> &'static str {
    if provider == "ovn" {
        "SOURCE_IP_PORT"
    } else {
        "ROUND_ROBIN"
    }
}

/// The enabled flavor named `name` (Octavia's name filter is exact, the
/// check here guards against providers that ignore it).
fn pick_flavor(flavors: Vec<lb::Flavor>, name: &str) -> Result<String, InfraError> {
    flavors
        .into_iter()
        .find(|f| f.name == name && f.enabled)
        .map(|f| f.id)
        .ok_or_else(|| {
            user(
                "LoadBalancerFlavorNotFound",
                format!("no enabled Octavia flavor is named {name:?}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(id: &str, subnets: &[&str]) -> NetworkStatusWithSubnets {
        NetworkStatusWithSubnets {
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
        }
    }

    #[test]
    fn the_vip_goes_on_the_load_balancer_network_and_its_first_subnet() {
        let cluster = net("cluster", &["cs1", "cs2"]);
        let s = |x: &str| Some(x.to_owned());
        // spec.apiServerLoadBalancer.network with subnets: the first one given.
        assert_eq!(
            vip_location(Some(&net("vip", &["vs2", "vs1"])), Some(&cluster)),
            Some((s("vip"), s("vs2")))
        );
        // The network alone: Octavia picks the subnet.
        assert_eq!(
            vip_location(Some(&net("vip", &[])), Some(&cluster)),
            Some((s("vip"), None))
        );
        // Unset: the cluster network as CAPO records it, its first subnet.
        assert_eq!(
            vip_location(Some(&cluster), Some(&cluster)),
            Some((s("cluster"), s("cs1")))
        );
        // Nothing recorded: the cluster's first subnet; none at all: nowhere.
        assert_eq!(
            vip_location(Some(&net("", &[])), Some(&cluster)),
            Some((None, s("cs1")))
        );
        assert_eq!(vip_location(None, Some(&cluster)), Some((None, s("cs1"))));
        assert_eq!(vip_location(None, Some(&net("cluster", &[]))), None);
        assert_eq!(vip_location(None, None), None);
    }

    #[test]
    fn picks_only_an_enabled_flavor_of_that_name() {
        let f = |id: &str, name: &str, enabled| lb::Flavor {
            id: id.into(),
            name: name.into(),
            enabled,
        };
        let all = vec![
            f("a", "small", false),
            f("b", "small", true),
            f("c", "big", true),
        ];
        assert_eq!(pick_flavor(all.clone(), "small").unwrap(), "b");
        match pick_flavor(all, "tiny") {
            Err(InfraError::User { reason, .. }) => {
                assert_eq!(reason, "LoadBalancerFlavorNotFound")
            }
            other => panic!("{other:?}"),
        }
        match pick_flavor(vec![f("a", "small", false)], "small") {
            Err(InfraError::User { reason, .. }) => {
                assert_eq!(reason, "LoadBalancerFlavorNotFound")
            }
            other => panic!("{other:?}"),
        }
    }
}
