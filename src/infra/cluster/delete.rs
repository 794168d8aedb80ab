//! Deletion in CAPO's reverse order: bastion, load balancer (and its floating IP),
//! the API VIP port, then the ingress VIP, router, ports and network, then the security
//! groups. Everything is found again by name and by our ownership tag, so
//! resources a crashed pass never recorded are removed too.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use stackhook_openstack::loadbalancing::{self as lb, LoadBalancing};
use stackhook_openstack::networking::{self as net, Networking, NeutronResource};
use stackhook_openstack::CloudClients;

use super::{os, owner_tag, Pass};
use crate::infra::api::names::SecurityGroupRole;
use crate::infra::seam::{DeleteProgress, InfraError, StatusSink};

/// CAPO waits 15 s between load balancer checks; Octavia here is faster.
const LB_DELETE_REQUEUE: Duration = Duration::from_secs(3);

impl<C: CloudClients, S: StatusSink> Pass<'_, C, S> {
    /// IDs of `T` named `name` or carrying our tag.
    async fn find_ids<T: NeutronResource + super::network::Tagged>(
        &self,
        names: &[String],
        extra: &[(&'static str, String)],
    ) -> Result<BTreeSet<String>, InfraError> {
        let neutron = self.clients.network();
        let mut ids = BTreeSet::new();
        let mut by_tag: Vec<(&str, String)> = vec![("tags", owner_tag(&self.names))];
        by_tag.extend(extra.iter().cloned());
        for r in neutron
            .list::<T>(&by_tag)
            .await
            .map_err(|e| os("DeleteFailed", e))?
        {
            ids.insert(r.id().to_owned());
        }
        if !names.is_empty() {
            let mut q: Vec<(&str, String)> = names.iter().map(|n| ("name", n.clone())).collect();
            q.extend(extra.iter().cloned());
            for r in neutron
                .list::<T>(&q)
                .await
                .map_err(|e| os("DeleteFailed", e))?
            {
                ids.insert(r.id().to_owned());
            }
        }
        Ok(ids)
    }

    async fn delete_ids<T: NeutronResource>(
        &self,
        ids: &BTreeSet<String>,
    ) -> Result<(), InfraError> {
        for id in ids {
            match self.clients.network().delete::<T>(id).await {
                Ok(()) => tracing::info!(kind = T::SINGULAR, %id, "deleted"),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(os("DeleteFailed", e)),
            }
        }
        Ok(())
    }

    pub(super) async fn delete_all(&mut self) -> Result<DeleteProgress, InfraError> {
        // 0. The bastion, which sits on the network and in a managed group.
        if (self.spec.bastion.is_some() || self.status.bastion.is_some())
            && !self.delete_bastion().await?
        {
            return Ok(DeleteProgress::Requeue {
                after: super::bastion::BASTION_REQUEUE,
                reason: "waiting for the bastion server to be deleted".into(),
            });
        }

        // 1. API load balancer; its cascade delete takes listeners, pools and monitors.
        let octavia = self.clients.load_balancer();
        let lb_name = self.names.load_balancer_name();
        let balancers: Vec<lb::LoadBalancer> = octavia
            .list(&[("name", lb_name.clone())])
            .await
            .map_err(|e| os("DeleteFailed", e))?;
        let mut waiting = false;
        for b in &balancers {
            if b.provisioning_status == "PENDING_DELETE" {
                waiting = true;
                continue;
            }
            if b.is_pending() {
                // Octavia refuses deletes while it works on the balancer.
                waiting = true;
                continue;
            }
            match octavia.delete_load_balancer_cascade(&b.id).await {
                Ok(()) => tracing::info!(lb = %b.id, "deleting API load balancer"),
                Err(e) if e.is_not_found() => {}
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(os("DeleteFailed", e)),
            }
            waiting = true;
        }

        // 2. Floating IPs we allocated (a user-given address is only released from its port).
        let user_fip = self.spec.api_server_floating_ip.clone();
        let fips: Vec<net::FloatingIp> = {
            let neutron = self.clients.network();
            let mut all: Vec<net::FloatingIp> = neutron
                .list(&[("description", self.fip_description())])
                .await
                .map_err(|e| os("DeleteFailed", e))?;
            all.extend(
                neutron
                    .list::<net::FloatingIp>(&[("tags", owner_tag(&self.names))])
                    .await
                    .map_err(|e| os("DeleteFailed", e))?,
            );
            if let Some(ip) = &user_fip {
                all.extend(
                    neutron
                        .list::<net::FloatingIp>(&[("floating_ip_address", ip.clone())])
                        .await
                        .map_err(|e| os("DeleteFailed", e))?,
                );
            }
            // The load balancer's address in status, allocated by CAPO for a cluster
            // taken over: CAPO describes it with the cluster's plain description and
            // tags it with `spec.tags` only, so neither list above finds it.
            let lb_ip = self
                .status
                .api_server_load_balancer
                .as_ref()
                .map(|l| l.ip.clone())
                .filter(|ip| !ip.is_empty() && user_fip.as_deref() != Some(ip.as_str()));
            if let Some(ip) = lb_ip {
                let capo = self.names.description();
                all.extend(
                    neutron
                        .list::<net::FloatingIp>(&[("floating_ip_address", ip)])
                        .await
                        .map_err(|e| os("DeleteFailed", e))?
                        .into_iter()
                        .filter(|f| f.description == capo),
                );
            }
            let mut seen = BTreeSet::new();
            all.retain(|f| seen.insert(f.id.clone()));
            all
        };
        for f in fips {
            let res = if user_fip.as_deref() == Some(f.floating_ip_address.as_str()) {
                if f.port_id.is_none() {
                    continue;
                }
                self.clients
                    .network()
                    .update::<net::FloatingIp>(&f.id, json!({"port_id": null}))
                    .await
                    .map(drop)
            } else {
                self.clients
                    .network()
                    .delete::<net::FloatingIp>(&f.id)
                    .await
            };
            match res {
                Ok(()) => tracing::info!(fip = %f.floating_ip_address, "released API floating IP"),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(os("DeleteFailed", e)),
            }
        }
        if waiting {
            return Ok(DeleteProgress::Requeue {
                after: LB_DELETE_REQUEUE,
                reason: "waiting for the API load balancer to be deleted".into(),
            });
        }
        if let Some(l) = self.status.api_server_load_balancer.take() {
            tracing::debug!(lb = %l.id, "API load balancer gone");
        }

        // 3. The API VIP port, on a managed network or the user's.
        self.delete_api_vip_port().await?;

        // 4. Network objects (only what we manage: with managed subnets).
        let net_name = self.names.network_name();
        if !self.spec.managed_subnets.is_empty() {
            let networks = self
                .find_ids::<net::Network>(std::slice::from_ref(&net_name), &[])
                .await?;
            let routers = if self.spec.router.is_none() {
                self.find_ids::<net::Router>(std::slice::from_ref(&net_name), &[])
                    .await?
            } else {
                BTreeSet::new()
            };
            let user_router = match &self.spec.router {
                Some(p) => {
                    p.id.clone()
                        .or_else(|| self.status.router.as_ref().map(|r| r.id.clone()))
                }
                None => None,
            };
            // Detach our subnets from every router involved.
            for router in routers.iter().chain(user_router.iter()) {
                for network in &networks {
                    let ports: Vec<net::Port> = self
                        .clients
                        .network()
                        .list(&[
                            ("device_id", router.clone()),
                            ("network_id", network.clone()),
                        ])
                        .await
                        .map_err(|e| os("DeleteFailed", e))?;
                    for p in ports {
                        for f in &p.fixed_ips {
                            match self
                                .clients
                                .network()
                                .remove_router_interface(router, &f.subnet_id)
                                .await
                            {
                                Ok(()) => {
                                    tracing::info!(%router, subnet = %f.subnet_id, "detached router interface")
                                }
                                Err(e) if e.is_not_found() => {}
                                Err(e) => return Err(os("DeleteFailed", e)),
                            }
                        }
                    }
                }
            }
            self.delete_ids::<net::Router>(&routers).await?;
            // Ports left on the network: ours by name prefix or tag (the ingress VIP among them).
            let prefixes = [
                self.names.cluster_resource_name(),
                self.names.name.clone(),
                net_name.clone(),
            ];
            for network in &networks {
                let ports: Vec<net::Port> = self
                    .clients
                    .network()
                    .list(&[("network_id", network.clone())])
                    .await
                    .map_err(|e| os("DeleteFailed", e))?;
                let own = owner_tag(&self.names);
                let ids: BTreeSet<String> = ports
                    .into_iter()
                    .filter(|p| p.device_owner.is_empty() || p.device_owner.starts_with("compute:"))
                    .filter(|p| {
                        p.tags.contains(&own)
                            || prefixes.iter().any(|x| p.name.starts_with(x.as_str()))
                    })
                    .map(|p| p.id)
                    .collect();
                self.delete_ids::<net::Port>(&ids).await?;
            }
            self.delete_ids::<net::Network>(&networks).await?;
        } else {
            // Only the ingress VIP port lives on a user's network.
            let ids = self
                .find_ids::<net::Port>(&[self.names.ingress_vip_port_name()], &[])
                .await?;
            self.delete_ids::<net::Port>(&ids).await?;
        }
        self.status.network = None;
        self.status.router = None;

        // 5. Security groups.
        let sg_names: Vec<String> = [
            SecurityGroupRole::ControlPlane,
            SecurityGroupRole::Worker,
            SecurityGroupRole::Bastion,
        ]
        .into_iter()
        .map(|r| self.names.security_group_name(r))
        .collect();
        let groups = self.find_ids::<net::SecurityGroup>(&sg_names, &[]).await?;
        self.delete_ids::<net::SecurityGroup>(&groups).await?;
        self.status.control_plane_security_group = None;
        self.status.worker_security_group = None;
        self.status.bastion_security_group = None;
        self.status.ready = false;
        Ok(DeleteProgress::Done)
    }
}
