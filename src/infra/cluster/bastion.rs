//! The bastion: a port on the cluster network with the bastion security
//! group, a Nova server on it, and a floating IP once the server is ACTIVE.
//!
//! CAPO delegates this to an `OpenStackServer` object; here the cluster
//! pass does the Nova and Neutron work itself, with the same crash rules as
//! the rest of the flow: every create is recorded through the sink at once,
//! and the server is found again by name plus an ownership metadata key, so
//! a pass that dies after the create never boots a second one. Nova is
//! never polled: while the server builds or goes away, the pass requeues.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use stackhook_openstack::compute::{Compute, Server, ServerCreate};
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::CloudClients;

use super::{os, owner_tag, user, Pass};
use crate::infra::api::cluster::{Bastion, BastionStatus};
use crate::infra::api::machine::OpenStackMachineSpec;
use crate::infra::api::types::{MachineResources, PortStatus};
use crate::infra::machine::{name_regex, resolve_image};
use crate::infra::seam::{InfraError, StatusSink};

/// While Nova builds or deletes the bastion (CAPO waits 15 s; the server
/// usually needs a few seconds).
pub(super) const BASTION_REQUEUE: Duration = Duration::from_secs(5);
/// Server metadata key naming the owning cluster (its owner tag), for
/// adoption: Nova tags are limited to 60 characters, metadata values to 255.
pub const OWNER_METADATA_KEY: &str = "stackhook-cluster";

/// The bastion spec when it is wanted: present and not disabled.
pub(super) fn wanted(bastion: Option<&Bastion>) -> Option<&Bastion> {
    bastion.filter(|b| b.enabled != Some(false))
}

/// The server's IPv4 address on the port, else its first one.
fn port_ip(port: &net::Port) -> Option<String> {
    port.fixed_ips
        .iter()
        .find(|f| !f.ip_address.contains(':'))
        .or(port.fixed_ips.first())
        .map(|f| f.ip_address.clone())
}

/// The Nova `metadata` map: the spec's entries plus our ownership key.
fn server_metadata(spec: &OpenStackMachineSpec, owner: &str) -> BTreeMap<String, String> {
    let mut m: BTreeMap<String, String> = spec
        .server_metadata
        .iter()
        .map(|e| (e.key.clone(), e.value.clone()))
        .collect();
    m.insert(OWNER_METADATA_KEY.to_owned(), owner.to_owned());
    m
}

/// What the server boots from and attaches to.
struct BootRefs<'a> {
    image_id: &'a str,
    flavor_id: &'a str,
    port_id: &'a str,
}

/// The bastion's `POST /servers`, built like a machine's so that its body
/// and microversion follow the same rules (tags need 2.53; an empty
/// `sshKeyName`, zone or tag is left out, as CAPO leaves it out).
fn server_create(
    name: &str,
    refs: &BootRefs<'_>,
    bastion: &Bastion,
    spec: &OpenStackMachineSpec,
    cluster_tags: &[String],
    owner: &str,
) -> ServerCreate {
    let mut tags: Vec<String> = spec.tags.clone();
    for t in cluster_tags {
        if !tags.contains(t) {
            tags.push(t.clone());
        }
    }
    ServerCreate {
        name: name.to_owned(),
        flavor_id: refs.flavor_id.to_owned(),
        image_id: Some(refs.image_id.to_owned()),
        port_ids: vec![refs.port_id.to_owned()],
        availability_zone: bastion.availability_zone.clone(),
        metadata: server_metadata(spec, owner),
        tags,
        key_name: spec.ssh_key_name.clone(),
        config_drive: spec.config_drive,
        ..Default::default()
    }
}

/// The fields of a bastion's machine spec the bastion does not act on, as their
/// paths. CAPO boots its bastion through an OpenStackServer with all of them; here
/// each is refused by name rather than accepted and left out of the server.
pub(crate) fn unsupported_bastion_fields(spec: &OpenStackMachineSpec) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut refuse = |set: bool, field: &'static str| {
        if set {
            out.push(field);
        }
    };
    refuse(!spec.ports.is_empty(), "spec.bastion.spec.ports");
    refuse(spec.root_volume.is_some(), "spec.bastion.spec.rootVolume");
    refuse(
        !spec.additional_block_devices.is_empty(),
        "spec.bastion.spec.additionalBlockDevices",
    );
    refuse(spec.server_group.is_some(), "spec.bastion.spec.serverGroup");
    refuse(spec.trunk == Some(true), "spec.bastion.spec.trunk");
    refuse(
        !spec.scheduler_hint_additional_properties.is_empty(),
        "spec.bastion.spec.schedulerHintAdditionalProperties",
    );
    refuse(spec.identity_ref.is_some(), "spec.bastion.spec.identityRef");
    refuse(
        spec.floating_ip_pool_ref.is_some(),
        "spec.bastion.spec.floatingIPPoolRef",
    );
    refuse(spec.extensions.is_some(), "spec.bastion.spec.extensions");
    refuse(
        spec.provider_id.as_deref().is_some_and(|p| !p.is_empty()),
        "spec.bastion.spec.providerID",
    );
    out
}

/// The bastion's port: on the cluster network, with the bastion security
/// group and the spec's groups, resolved to IDs (an empty ID is no group).
fn port_create(
    name: String,
    network_id: &str,
    description: String,
    bastion_group: Option<&str>,
    spec_groups: &[String],
) -> net::PortCreate {
    let security_groups = bastion_group
        .into_iter()
        .chain(spec_groups.iter().map(String::as_str))
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect();
    net::PortCreate {
        name,
        network_id: network_id.to_owned(),
        description: Some(description),
        security_groups,
        admin_state_up: Some(true),
        ..Default::default()
    }
}

impl<C: CloudClients, S: StatusSink> Pass<'_, C, S> {
    /// The bastion's ports the status records.
    fn recorded_bastion_ports(&self) -> Vec<String> {
        self.status
            .bastion
            .as_ref()
            .and_then(|b| b.resources.as_ref())
            .map(|r| r.ports.iter().map(|p| p.id.clone()).collect())
            .unwrap_or_default()
    }

    fn bastion_fip_description(&self) -> String {
        format!("{} bastion", self.names.description())
    }

    fn bastion_port_name(&self) -> String {
        format!("{}-0", self.names.bastion_name())
    }

    fn bastion_status(&mut self) -> &mut BastionStatus {
        self.status.bastion.get_or_insert_with(Default::default)
    }

    /// Whether a bastion may exist that is no longer wanted.
    pub(super) fn bastion_leftover(&self) -> bool {
        wanted(self.spec.bastion.as_deref()).is_none()
            && (self.spec.bastion.is_some() || self.status.bastion.is_some())
    }

    /// Creates or adopts the bastion and fills `status.bastion`.
    pub(super) async fn reconcile_bastion(&mut self) -> Result<(), InfraError> {
        let Some(bastion) = wanted(self.spec.bastion.as_deref()).cloned() else {
            return Ok(());
        };
        let Some(spec) = bastion.spec.clone() else {
            return Err(user(
                "InvalidBastionSpec",
                "spec.bastion.spec is required when the bastion is enabled",
            ));
        };
        let refused = unsupported_bastion_fields(&spec);
        if !refused.is_empty() {
            return Err(user(
                "InvalidBastionSpec",
                format!(
                    "{}: not supported on the bastion (its server has the image, flavor, \
                     sshKeyName, securityGroups, tags, serverMetadata and configDrive of \
                     its spec); remove them, or boot that server as an OpenStackMachine",
                    refused.join(", ")
                ),
            ));
        }
        let Some(network) = self.status.network.clone() else {
            return Ok(());
        };
        let name = self.names.bastion_name();
        {
            let st = self.bastion_status();
            st.name = Some(name.clone());
            st.ssh_key_name = spec.ssh_key_name.clone().filter(|k| !k.is_empty());
        }

        // Resolve once; the IDs stay in status.
        let mut resolved = self
            .status
            .bastion
            .as_ref()
            .and_then(|b| b.resolved.clone())
            .unwrap_or_default();
        if resolved.image_id.is_none() {
            resolved.image_id = Some(
                resolve_image(
                    self.clients,
                    &spec.image,
                    "InvalidBastionSpec",
                    "the bastion's",
                )
                .await?,
            );
        }
        if resolved.flavor_id.is_none() {
            resolved.flavor_id = Some(self.resolve_flavor(&spec).await?);
        }
        let image_id = resolved.image_id.clone().unwrap_or_default();
        let flavor_id = resolved.flavor_id.clone().unwrap_or_default();
        self.bastion_status().resolved = Some(resolved);

        let port = self.ensure_bastion_port(&network.network.id, &spec).await?;

        let server = match self.find_bastion_server().await? {
            Some(s) => s,
            None => {
                let owner = owner_tag(&self.names);
                let refs = BootRefs {
                    image_id: &image_id,
                    flavor_id: &flavor_id,
                    port_id: &port.id,
                };
                let create = server_create(&name, &refs, &bastion, &spec, &self.spec.tags, &owner);
                let body = create
                    .body()
                    .map_err(|e| user("BastionCreateFailed", e.to_string()))?;
                let id = self
                    .clients
                    .compute()
                    .create_server(body, &create.microversion().to_string())
                    .await
                    .map_err(|e| os("BastionCreateFailed", e))?;
                tracing::info!(server = %id, %name, "created the bastion server");
                let st = self.bastion_status();
                st.id = Some(id);
                st.state = Some("BUILD".into());
                self.save().await?;
                self.wait_bastion();
                return Ok(());
            }
        };
        let st = self.bastion_status();
        st.id = Some(server.id.clone());
        st.state = Some(server.status.clone());
        match server.status.as_str() {
            "ACTIVE" => {}
            "ERROR" => {
                let fault = server
                    .fault
                    .as_ref()
                    .map(|f| f.message.as_str())
                    .filter(|m| !m.is_empty())
                    .unwrap_or("no fault reported");
                return Err(user(
                    "BastionInstanceError",
                    format!("bastion server {} is in ERROR: {fault}", server.id),
                ));
            }
            other => {
                tracing::debug!(server = %server.id, status = other, "waiting for the bastion");
                self.wait_bastion();
                return Ok(());
            }
        }
        self.bastion_status().ip = port_ip(&port);
        if self.status.external_network.is_some() {
            let fip = self.ensure_bastion_fip(&port, &bastion).await?;
            self.bastion_status().floating_ip = Some(fip);
        }
        Ok(())
    }

    fn wait_bastion(&mut self) {
        self.bastion_requeue = Some(BASTION_REQUEUE);
    }

    async fn resolve_flavor(&self, spec: &OpenStackMachineSpec) -> Result<String, InfraError> {
        if let Some(id) = spec.flavor_id.as_ref().filter(|id| !id.is_empty()) {
            return Ok(id.clone());
        }
        let Some(name) = &spec.flavor else {
            return Err(user(
                "InvalidBastionSpec",
                "the bastion needs a flavor or flavorID",
            ));
        };
        let flavors = self
            .clients
            .compute()
            .flavors()
            .await
            .map_err(|e| os("FlavorNotFound", e))?;
        flavors
            .into_iter()
            .find(|f| &f.name == name)
            .map(|f| f.id)
            .ok_or_else(|| user("FlavorNotFound", format!("no flavor is named {name:?}")))
    }

    /// One of the spec's security groups, by ID or by every field of its filter.
    async fn bastion_security_group(
        &self,
        g: &crate::infra::api::types::SecurityGroupParam,
    ) -> Result<String, InfraError> {
        if let Some(id) = &g.id {
            return Ok(id.clone());
        }
        let Some(f) = &g.filter else {
            return Ok(String::new());
        };
        super::security_group_by_filter(self.clients, f, "spec.bastion.spec.securityGroups: ").await
    }

    /// The recorded port, else the one named like it on the network, else a new one.
    async fn ensure_bastion_port(
        &mut self,
        network_id: &str,
        spec: &OpenStackMachineSpec,
    ) -> Result<net::Port, InfraError> {
        let neutron = self.clients.network();
        let name = self.bastion_port_name();
        let recorded = self
            .status
            .bastion
            .as_ref()
            .and_then(|b| b.resources.as_ref())
            .and_then(|r| r.ports.first())
            .map(|p| p.id.clone());
        let mut found = match &recorded {
            Some(id) => match neutron.get::<net::Port>(id).await {
                Ok(p) => vec![p],
                Err(e) if e.is_not_found() => vec![],
                Err(e) => return Err(os("BastionPortFailed", e)),
            },
            None => vec![],
        };
        if found.is_empty() {
            found = neutron
                .list(&[
                    ("name", name.clone()),
                    ("network_id", network_id.to_owned()),
                ])
                .await
                .map_err(|e| os("BastionPortFailed", e))?;
        }
        let recorded = self.recorded_bastion_ports();
        let port = match self.pick("port", &name, found)? {
            Some(p) => {
                self.ensure_tags_of(&p, recorded.contains(&p.id)).await?;
                p
            }
            None => {
                let mut spec_groups = Vec::new();
                for g in &spec.security_groups {
                    let id = self.bastion_security_group(g).await?;
                    if !spec_groups.contains(&id) {
                        spec_groups.push(id);
                    }
                }
                let bastion_group = self
                    .status
                    .bastion_security_group
                    .as_ref()
                    .map(|g| g.id.as_str());
                let create = port_create(
                    name,
                    network_id,
                    self.names.port_description(),
                    bastion_group,
                    &spec_groups,
                );
                let p: net::Port = neutron
                    .create(create.body())
                    .await
                    .map_err(|e| os("BastionPortFailed", e))?;
                tracing::info!(port = %p.id, "created the bastion port");
                // Tagged before it is recorded: see `ensure_tags_of`.
                self.ensure_tags(&p).await?;
                self.bastion_status().resources = Some(MachineResources {
                    ports: vec![PortStatus { id: p.id.clone() }],
                });
                self.save().await?;
                p
            }
        };
        self.bastion_status().resources = Some(MachineResources {
            ports: vec![PortStatus {
                id: port.id.clone(),
            }],
        });
        Ok(port)
    }

    /// The recorded server, else the one named like it and carrying our
    /// ownership metadata.
    async fn find_bastion_server(&self) -> Result<Option<Server>, InfraError> {
        let nova = self.clients.compute();
        let recorded = self
            .status
            .bastion
            .as_ref()
            .and_then(|b| b.id.clone())
            .filter(|id| !id.is_empty());
        if let Some(id) = recorded {
            match nova.server(&id).await {
                Ok(s) => return Ok(Some(s)),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(os("BastionCreateFailed", e)),
            }
        }
        let name = self.names.bastion_name();
        let owner = owner_tag(&self.names);
        let mut found: Vec<Server> = nova
            .servers_named(&name_regex(&name))
            .await
            .map_err(|e| os("BastionCreateFailed", e))?
            .into_iter()
            .filter(|s| s.name == name)
            .filter(|s| s.metadata.get(OWNER_METADATA_KEY) == Some(&owner))
            .collect();
        if found.len() > 1 {
            return Err(user(
                "DuplicateResources",
                format!("several bastion servers are named {name:?}; remove the extra ones"),
            ));
        }
        Ok(found.pop())
    }

    /// The address of the floating IP on the bastion port, allocating or
    /// associating one when the port has none.
    async fn ensure_bastion_fip(
        &mut self,
        port: &net::Port,
        bastion: &Bastion,
    ) -> Result<String, InfraError> {
        let neutron = self.clients.network();
        let on_port: Vec<net::FloatingIp> = neutron
            .list(&[("port_id", port.id.clone())])
            .await
            .map_err(|e| os("FloatingIPError", e))?;
        if let Some(f) = on_port.first() {
            return Ok(f.floating_ip_address.clone());
        }
        let wanted = self
            .status
            .bastion
            .as_ref()
            .and_then(|b| b.floating_ip.clone())
            .or_else(|| bastion.floating_ip.clone());
        if let Some(ip) = &wanted {
            let existing: Vec<net::FloatingIp> = neutron
                .list(&[("floating_ip_address", ip.clone())])
                .await
                .map_err(|e| os("FloatingIPError", e))?;
            if let Some(f) = existing.first() {
                neutron
                    .update::<net::FloatingIp>(&f.id, json!({"port_id": port.id}))
                    .await
                    .map_err(|e| os("FloatingIPError", e))?;
                tracing::info!(fip = %ip, "associated the bastion floating IP");
                return Ok(ip.clone());
            }
        }
        let Some(ext) = self.status.external_network.clone() else {
            return Err(user(
                "FloatingIPError",
                "no external network for the bastion floating IP",
            ));
        };
        let mut body = json!({
            "floating_network_id": ext.id,
            "port_id": port.id,
            "description": self.bastion_fip_description(),
        });
        if let Some(ip) = &wanted {
            body["floating_ip_address"] = json!(ip);
        }
        let f: net::FloatingIp = neutron
            .create(body)
            .await
            .map_err(|e| os("FloatingIPError", e))?;
        tracing::info!(fip = %f.floating_ip_address, "allocated the bastion floating IP");
        self.bastion_status().floating_ip = Some(f.floating_ip_address.clone());
        self.save().await?;
        Ok(f.floating_ip_address)
    }

    /// Removes the bastion: server first (requeueing until Nova has it
    /// gone), then its floating IP (a user-given one is only disassociated)
    /// and its port. `true` once nothing is left.
    pub(super) async fn delete_bastion(&mut self) -> Result<bool, InfraError> {
        let nova = self.clients.compute();
        if let Some(server) = self.find_bastion_server().await? {
            if server.task_state.as_deref() != Some("deleting") && server.status != "DELETED" {
                match nova.delete_server(&server.id).await {
                    Ok(()) => tracing::info!(server = %server.id, "deleting the bastion server"),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(os("BastionDeleteFailed", e)),
                }
            }
            self.bastion_status().state = Some("DELETING".into());
            return Ok(false);
        }

        let neutron = self.clients.network();
        let name = self.bastion_port_name();
        let mut port_ids = self.recorded_bastion_ports();
        let mut query = vec![("name", name)];
        match &self.status.network {
            Some(n) => query.push(("network_id", n.network.id.clone())),
            None => query.push(("tags", owner_tag(&self.names))),
        }
        let named: Vec<net::Port> = neutron
            .list(&query)
            .await
            .map_err(|e| os("BastionDeleteFailed", e))?;
        for p in named {
            if !port_ids.contains(&p.id) {
                port_ids.push(p.id);
            }
        }

        let user_fip = self
            .spec
            .bastion
            .as_ref()
            .and_then(|b| b.floating_ip.clone());
        let mut fips: Vec<net::FloatingIp> = neutron
            .list(&[("description", self.bastion_fip_description())])
            .await
            .map_err(|e| os("BastionDeleteFailed", e))?;
        for id in &port_ids {
            for f in neutron
                .list::<net::FloatingIp>(&[("port_id", id.clone())])
                .await
                .map_err(|e| os("BastionDeleteFailed", e))?
            {
                if !fips.iter().any(|g| g.id == f.id) {
                    fips.push(f);
                }
            }
        }
        // Ours, or CAPO's for a cluster taken over: CAPO gives the bastion's address
        // the cluster's plain description. Any other address on the port is only
        // released from it.
        let allocated = [self.bastion_fip_description(), self.names.description()];
        for f in fips {
            let res = if user_fip.as_deref() == Some(f.floating_ip_address.as_str())
                || !allocated.contains(&f.description)
            {
                if f.port_id.is_none() {
                    continue;
                }
                neutron
                    .update::<net::FloatingIp>(&f.id, json!({"port_id": null}))
                    .await
                    .map(drop)
            } else {
                neutron.delete::<net::FloatingIp>(&f.id).await
            };
            match res {
                Ok(()) => {
                    tracing::info!(fip = %f.floating_ip_address, "released the bastion floating IP")
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(os("BastionDeleteFailed", e)),
            }
        }
        for id in &port_ids {
            match neutron.delete::<net::Port>(id).await {
                Ok(()) => tracing::info!(port = %id, "deleted the bastion port"),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(os("BastionDeleteFailed", e)),
            }
        }
        self.status.bastion = None;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::machine::ServerMetadata;
    use stackhook_openstack::compute::{BASE_MICROVERSION, SERVER_TAGS_MICROVERSION};

    #[test]
    fn nova_name_filter_is_anchored_and_escaped() {
        assert_eq!(name_regex("c1-bastion"), "^c1-bastion$");
        assert_eq!(name_regex("a.b"), "^a\\.b$");
    }

    #[test]
    fn only_an_enabled_bastion_is_wanted() {
        let on = Bastion::default();
        let off = Bastion {
            enabled: Some(false),
            ..Default::default()
        };
        assert!(wanted(Some(&on)).is_some());
        assert!(wanted(Some(&off)).is_none());
        assert!(wanted(None).is_none());
    }

    #[test]
    fn server_body_carries_port_key_zone_owner_and_tags() {
        let spec = OpenStackMachineSpec {
            ssh_key_name: Some("ops".into()),
            tags: vec!["m".into()],
            server_metadata: vec![ServerMetadata {
                key: "role".into(),
                value: "jump".into(),
            }],
            ..Default::default()
        };
        let bastion = Bastion {
            availability_zone: Some("az2".into()),
            ..Default::default()
        };
        let create = server_create(
            "c1-bastion",
            &BootRefs {
                image_id: "img",
                flavor_id: "flv",
                port_id: "port1",
            },
            &bastion,
            &spec,
            &["m".into(), "c".into()],
            "owner",
        );
        let body = create.body().unwrap();
        assert_eq!(create.microversion().to_string(), SERVER_TAGS_MICROVERSION);
        assert_eq!(body["name"], "c1-bastion");
        assert_eq!(body["networks"], json!([{"port": "port1"}]));
        assert_eq!(body["imageRef"], "img");
        assert_eq!(body["flavorRef"], "flv");
        assert_eq!(body["key_name"], "ops");
        assert_eq!(body["availability_zone"], "az2");
        assert_eq!(body["tags"], json!(["m", "c"]));
        assert_eq!(body["metadata"][OWNER_METADATA_KEY], "owner");
        assert_eq!(body["metadata"]["role"], "jump");

        let plain = server_create(
            "b",
            &BootRefs {
                image_id: "i",
                flavor_id: "f",
                port_id: "p",
            },
            &Bastion::default(),
            &OpenStackMachineSpec::default(),
            &[],
            "o",
        );
        assert_eq!(plain.microversion().to_string(), BASE_MICROVERSION);
        let plain = plain.body().unwrap();
        assert!(plain.get("tags").is_none() && plain.get("availability_zone").is_none());
        assert_eq!(plain["metadata"], json!({OWNER_METADATA_KEY: "o"}));
    }

    /// Each optional field of the bastion's server and port as a pack renders
    /// it unset (`''`, a list holding `''`) stays out of the body; set, it
    /// goes in.
    #[test]
    fn empty_optional_fields_stay_out_of_the_bastion_bodies() {
        type Case = (
            &'static str,
            &'static str,
            fn(&mut Bastion, &mut OpenStackMachineSpec),
            fn(&mut Bastion, &mut OpenStackMachineSpec),
        );
        let cases: [Case; 3] = [
            (
                "sshKeyName",
                "key_name",
                |_, s| s.ssh_key_name = Some(String::new()),
                |_, s| s.ssh_key_name = Some("ops".into()),
            ),
            (
                "availabilityZone",
                "availability_zone",
                |b, _| b.availability_zone = Some(String::new()),
                |b, _| b.availability_zone = Some("az2".into()),
            ),
            (
                "tags",
                "tags",
                |_, s| s.tags = vec![String::new()],
                |_, s| s.tags = vec!["t".into()],
            ),
        ];
        let refs = BootRefs {
            image_id: "img",
            flavor_id: "flv",
            port_id: "port1",
        };
        for (field, key, empty, set) in cases {
            let (mut bastion, mut spec) = (Bastion::default(), OpenStackMachineSpec::default());
            empty(&mut bastion, &mut spec);
            let create = server_create("c1-bastion", &refs, &bastion, &spec, &[], "owner");
            let body = create.body().unwrap();
            assert!(body.get(key).is_none(), "{field} empty: {body}");
            assert_eq!(
                create.microversion().to_string(),
                BASE_MICROVERSION,
                "{field} empty"
            );
            let (mut bastion, mut spec) = (Bastion::default(), OpenStackMachineSpec::default());
            set(&mut bastion, &mut spec);
            let body = server_create("c1-bastion", &refs, &bastion, &spec, &[], "owner")
                .body()
                .unwrap();
            assert!(body.get(key).is_some(), "{field} set: {body}");
        }

        // The port: a security group given by an empty ID is no group.
        let body = port_create(
            "c1-bastion-0".into(),
            "net",
            "d".into(),
            None,
            &[String::new()],
        )
        .body();
        assert!(body.get("security_groups").is_none(), "{body}");
        assert_eq!(
            body,
            json!({"name": "c1-bastion-0", "network_id": "net", "description": "d",
                "admin_state_up": true})
        );
        let groups = [String::new(), "sg2".to_owned()];
        let body = port_create(
            "c1-bastion-0".into(),
            "net",
            "d".into(),
            Some("sg1"),
            &groups,
        )
        .body();
        assert_eq!(body["security_groups"], json!(["sg1", "sg2"]));
    }

    /// Every machine field the bastion's server would leave out is named in the
    /// refusal; the fields it boots with are not.
    #[test]
    fn machine_fields_the_bastion_does_not_boot_with_are_named() {
        let spec: OpenStackMachineSpec = serde_json::from_value(json!({
            "flavor": "m1.small",
            "image": {"filter": {"name": "ubuntu"}},
            "sshKeyName": "ops",
            "securityGroups": [{"filter": {"name": "jump"}}],
            "tags": ["t"],
            "serverMetadata": [{"key": "k", "value": "v"}],
            "configDrive": true,
            "trunk": false,
        }))
        .unwrap();
        assert!(unsupported_bastion_fields(&spec).is_empty());
        let spec: OpenStackMachineSpec = serde_json::from_value(json!({
            "flavor": "m1.small",
            "image": {"id": "i"},
            "ports": [{}],
            "rootVolume": {"sizeGiB": 10},
            "additionalBlockDevices": [{"name": "data", "sizeGiB": 1, "storage": {"type": "Local"}}],
            "serverGroup": {"id": "sg"},
            "trunk": true,
            "schedulerHintAdditionalProperties": [{"name": "h", "value": {"type": "Bool", "bool": true}}],
            "identityRef": {"name": "other", "cloudName": "openstack"},
            "floatingIPPoolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "p"},
            "extensions": {"serverGroupPolicy": "anti-affinity"},
            "providerID": "openstack:///x",
        }))
        .unwrap();
        assert_eq!(
            unsupported_bastion_fields(&spec),
            vec![
                "spec.bastion.spec.ports",
                "spec.bastion.spec.rootVolume",
                "spec.bastion.spec.additionalBlockDevices",
                "spec.bastion.spec.serverGroup",
                "spec.bastion.spec.trunk",
                "spec.bastion.spec.schedulerHintAdditionalProperties",
                "spec.bastion.spec.identityRef",
                "spec.bastion.spec.floatingIPPoolRef",
                "spec.bastion.spec.extensions",
                "spec.bastion.spec.providerID",
            ]
        );
    }

    #[test]
    fn bastion_ip_prefers_ipv4() {
        let port = net::Port {
            fixed_ips: vec![
                net::FixedIp {
                    subnet_id: "s6".into(),
                    ip_address: "fd00::5".into(),
                },
                net::FixedIp {
                    subnet_id: "s4".into(),
                    ip_address: "10.0.0.5".into(),
                },
            ],
            ..Default::default()
        };
        assert_eq!(port_ip(&port).as_deref(), Some("10.0.0.5"));
        assert_eq!(port_ip(&net::Port::default()), None);
    }
}
