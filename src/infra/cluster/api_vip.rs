//! The Neutron port that reserves the API VIP when no load balancer holds
//! it: with `spec.apiServerFixedIP` and no `apiServerLoadBalancer` (the
//! keepalived endpoint), the address lives on the control-plane ports only
//! as an allowed address pair, so without a port of its own Neutron would
//! hand it to the next port that asks (a machine, DHCP, a user's).
//!
//! The port is recorded in `status.apiServerVIPPort` right after its
//! create; a pass that dies before that finds it again as the holder of the
//! address with our name, so there is never a second one. An address held by
//! any other port is the user's to sort out.

use std::collections::BTreeSet;
use std::net::IpAddr;

use serde_json::json;
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::CloudClients;

use super::{os, user, Pass};
use crate::infra::api::cluster::VipPort;
use crate::infra::seam::{InfraError, StatusSink};

/// Reason for errors of this step.
const FAILED: &str = "APIServerVIPPortFailed";
/// Reason when another port holds the address.
pub(super) const IN_USE: &str = "APIServerVIPInUse";

/// Whether `ip` lies in `cidr` (same family, same leading bits).
pub(super) fn cidr_contains(cidr: &str, ip: &str) -> bool {
    let Some((net, bits)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(net), Ok(ip), Ok(bits)) = (net.parse::<IpAddr>(), ip.parse::<IpAddr>(), bits.parse())
    else {
        return false;
    };
    let (net, ip, width) = match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => (u128::from(u32::from(n)), u128::from(u32::from(i)), 32),
        (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128),
        _ => return false,
    };
    let bits: u32 = bits;
    if bits > width {
        return false;
    }
    let shift = width - bits;
    shift >= 128 || (net >> shift) == (ip >> shift)
}

fn holds(port: &net::Port, ip: &str) -> bool {
    port.fixed_ips.iter().any(|f| f.ip_address == ip)
}

/// A port that only reserves its address: bound to nothing and owned by no service.
fn reserves(port: &net::Port) -> bool {
    port.device_owner.is_empty() && port.device_id.is_empty()
}

impl<C: CloudClients, S: StatusSink> Pass<'_, C, S> {
    /// The address to reserve: the fixed API IP when no load balancer takes it.
    fn api_vip_wanted(&self) -> Option<String> {
        if self.spec.api_load_balancer_enabled() {
            return None;
        }
        self.spec
            .api_server_fixed_ip
            .clone()
            .filter(|ip| !ip.trim().is_empty())
    }

    fn api_vip_description(&self) -> String {
        format!("{} kubeapi VIP reservation", self.names.description())
    }

    /// Creates, adopts or releases the API VIP port. Steady state: one GET.
    pub(super) async fn reconcile_api_vip_port(&mut self) -> Result<(), InfraError> {
        let Some(ip) = self.api_vip_wanted() else {
            if self.status.api_server_vip_port.is_some() {
                // A load balancer now, or no fixed IP: free the address.
                self.delete_api_vip_port().await?;
                self.save().await?;
            }
            return Ok(());
        };
        let Some(network) = self.status.network.clone() else {
            return Ok(());
        };
        let Some(subnet) = network
            .subnets
            .iter()
            .find(|s| cidr_contains(&s.cidr, &ip))
            .cloned()
        else {
            if self.fip_allowed() {
                // The floating IP is the endpoint; the fixed IP is unused (as in CAPO).
                tracing::debug!(%ip, "apiServerFixedIP is in no cluster subnet; nothing reserved");
                return Ok(());
            }
            return Err(user(
                FAILED,
                format!(
                    "spec.apiServerFixedIP {ip} is in no subnet of the cluster network {}; \
                     without a load balancer it must be a free address of the node subnet",
                    network.network.id
                ),
            ));
        };
        let neutron = self.clients.network();
        let name = self.names.api_vip_port_name();

        if let Some(recorded) = self.status.api_server_vip_port.clone() {
            match neutron.get::<net::Port>(&recorded.id).await {
                Ok(p) if holds(&p, &ip) && (p.name == name || reserves(&p)) => {
                    if p.name == name {
                        self.ensure_tags(&p).await?;
                    }
                    self.record_api_vip(&p, &ip);
                    return Ok(());
                }
                // The address changed: the old reservation goes first.
                Ok(_) => {
                    self.delete_api_vip_port().await?;
                    self.save().await?;
                }
                Err(e) if e.is_not_found() => self.status.api_server_vip_port = None,
                Err(e) => return Err(os(FAILED, e)),
            }
        }

        let holders: Vec<net::Port> = neutron
            .list(&[
                ("network_id", network.network.id.clone()),
                ("fixed_ips", format!("ip_address={ip}")),
            ])
            .await
            .map_err(|e| os(FAILED, e))?;
        let holders: Vec<net::Port> = holders.into_iter().filter(|p| holds(p, &ip)).collect();
        if let Some(reserved) = holders.iter().find(|p| p.name != name && reserves(p)) {
            // A port made by hand to hold the address, as CAPO's documentation asks of
            // keepalived users: used as it is, never tagged, changed or deleted.
            tracing::info!(port = %reserved.id, %ip, "the API VIP is held by a reservation port of the user's");
            self.record_api_vip(reserved, &ip);
            return Ok(());
        }
        if let Some(other) = holders.iter().find(|p| p.name != name) {
            let what = if other.name.is_empty() {
                String::new()
            } else {
                format!(" ({:?})", other.name)
            };
            let owner = if other.device_owner.is_empty() {
                String::new()
            } else {
                format!(", device owner {}", other.device_owner)
            };
            return Err(user(
                IN_USE,
                format!(
                    "the API address {ip} (spec.apiServerFixedIP) is held by port {}{what}{owner} \
                     on network {}; free it or choose another address",
                    other.id, network.network.id
                ),
            ));
        }
        let port = match holders.into_iter().next() {
            // Ours, from a pass that could not record it.
            Some(p) => p,
            None => {
                let body = json!({
                    "name": name,
                    "network_id": network.network.id,
                    "description": self.api_vip_description(),
                    "device_owner": "",
                    "admin_state_up": true,
                    "fixed_ips": [{"subnet_id": subnet.id, "ip_address": ip}],
                });
                let p: net::Port = neutron.create(body).await.map_err(|e| {
                    if e.status() == Some(403) {
                        user(
                            FAILED,
                            format!(
                                "not allowed to reserve {ip} on network {}: Neutron lets only \
                                 the network's owner or an admin choose a port's address ({e})",
                                network.network.id
                            ),
                        )
                    } else {
                        os(FAILED, e)
                    }
                })?;
                tracing::info!(port = %p.id, %ip, "reserved the API VIP");
                self.record_api_vip(&p, &ip);
                self.save().await?;
                p
            }
        };
        self.ensure_tags(&port).await?;
        self.record_api_vip(&port, &ip);
        Ok(())
    }

    fn record_api_vip(&mut self, port: &net::Port, ip: &str) {
        self.status.api_server_vip_port = Some(Box::new(VipPort {
            id: port.id.clone(),
            name: port.name.clone(),
            ip_address: ip.to_owned(),
        }));
    }

    /// Deletes the recorded API VIP port and any named like it; a reservation port of
    /// the user's (another name) is only forgotten.
    pub(super) async fn delete_api_vip_port(&mut self) -> Result<(), InfraError> {
        let neutron = self.clients.network();
        let name = self.names.api_vip_port_name();
        let mut ids: BTreeSet<String> = self
            .status
            .api_server_vip_port
            .iter()
            .filter(|p| p.name == name)
            .map(|p| p.id.clone())
            .filter(|id| !id.is_empty())
            .collect();
        let named: Vec<net::Port> = neutron
            .list(&[("name", name.clone())])
            .await
            .map_err(|e| os("DeleteFailed", e))?;
        ids.extend(named.into_iter().filter(|p| p.name == name).map(|p| p.id));
        for id in &ids {
            match neutron.delete::<net::Port>(id).await {
                Ok(()) => tracing::info!(port = %id, "released the API VIP"),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(os("DeleteFailed", e)),
            }
        }
        self.status.api_server_vip_port = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::cidr_contains;

    #[test]
    fn addresses_in_and_out_of_a_subnet() {
        assert!(cidr_contains("10.6.0.0/24", "10.6.0.250"));
        assert!(!cidr_contains("10.6.0.0/24", "10.6.1.1"));
        assert!(cidr_contains("0.0.0.0/0", "192.0.2.1"));
        assert!(cidr_contains("10.6.0.7/32", "10.6.0.7"));
        assert!(!cidr_contains("10.6.0.0/24", "fd00::1"));
        assert!(cidr_contains("fd00::/64", "fd00::1"));
        assert!(!cidr_contains("fd00::/64", "fd01::1"));
        assert!(!cidr_contains("10.6.0.0/33", "10.6.0.1"));
        assert!(!cidr_contains("garbage", "10.6.0.1"));
    }
}
