//! The managed security groups and their rules.

use serde_json::json;
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::CloudClients;

use super::rules::{self, GroupIds};
use super::{os, Pass};
use crate::infra::api::cluster::SecurityGroupStatus;
use crate::infra::api::names::SecurityGroupRole;
use crate::infra::seam::{InfraError, StatusSink};

const DESCRIPTION: &str = "Cluster API managed group";

impl<C: CloudClients, S: StatusSink> Pass<'_, C, S> {
    fn bastion_enabled(&self) -> bool {
        self.spec
            .bastion
            .as_ref()
            .is_some_and(|b| b.enabled != Some(false))
    }

    fn status_slot(&mut self, role: SecurityGroupRole) -> &mut Option<Box<SecurityGroupStatus>> {
        match role {
            SecurityGroupRole::ControlPlane => &mut self.status.control_plane_security_group,
            SecurityGroupRole::Worker => &mut self.status.worker_security_group,
            SecurityGroupRole::Bastion => &mut self.status.bastion_security_group,
        }
    }

    pub(super) async fn reconcile_security_groups(&mut self) -> Result<(), InfraError> {
        let mut roles = vec![SecurityGroupRole::ControlPlane, SecurityGroupRole::Worker];
        if self.bastion_enabled() {
            roles.push(SecurityGroupRole::Bastion);
        }
        let bastion_name = self.names.security_group_name(SecurityGroupRole::Bastion);
        // One list for all groups (Neutron ORs repeated filters); rules come embedded.
        let mut query: Vec<(&str, String)> = roles
            .iter()
            .map(|r| ("name", self.names.security_group_name(*r)))
            .collect();
        if !self.bastion_enabled() {
            query.push(("name", bastion_name.clone()));
        }
        let listed: Vec<net::SecurityGroup> = self
            .clients
            .network()
            .list(&query)
            .await
            .map_err(|e| os("SecurityGroupCreateFailed", e))?;

        let mut groups: Vec<(SecurityGroupRole, net::SecurityGroup)> = Vec::new();
        for role in roles {
            let name = self.names.security_group_name(role);
            let same: Vec<net::SecurityGroup> =
                listed.iter().filter(|g| g.name == name).cloned().collect();
            let recorded = self.status_slot(role).as_ref().map(|g| g.id.clone());
            let group = match self.pick("security group", &name, same)? {
                Some(g) => {
                    self.ensure_tags_of(&g, recorded.as_deref() == Some(g.id.as_str()))
                        .await?;
                    g
                }
                None => {
                    let g: net::SecurityGroup = self
                        .clients
                        .network()
                        .create(json!({"name": name, "description": DESCRIPTION}))
                        .await
                        .map_err(|e| os("SecurityGroupCreateFailed", e))?;
                    tracing::info!(group = %g.id, %name, "created security group");
                    // Tagged before it is recorded: see `ensure_tags_of`.
                    self.ensure_tags(&g).await?;
                    *self.status_slot(role) = Some(Box::new(SecurityGroupStatus {
                        name: g.name.clone(),
                        id: g.id.clone(),
                    }));
                    self.save().await?;
                    g
                }
            };
            *self.status_slot(role) = Some(Box::new(SecurityGroupStatus {
                name: group.name.clone(),
                id: group.id.clone(),
            }));
            groups.push((role, group));
        }

        // A disabled bastion's group goes, best effort, as in CAPO.
        if !self.bastion_enabled() {
            for g in listed.iter().filter(|g| g.name == bastion_name) {
                match self
                    .clients
                    .network()
                    .delete::<net::SecurityGroup>(&g.id)
                    .await
                {
                    Ok(()) => tracing::info!(group = %g.id, "deleted the bastion security group"),
                    Err(e) => {
                        tracing::warn!(group = %g.id, error = %e, "bastion security group not deleted yet")
                    }
                }
            }
            self.status.bastion_security_group = None;
        }

        let id_of = |role| {
            groups
                .iter()
                .find(|(r, _)| *r == role)
                .map(|(_, g)| g.id.clone())
        };
        let ids = GroupIds {
            control_plane: id_of(SecurityGroupRole::ControlPlane).unwrap_or_default(),
            worker: id_of(SecurityGroupRole::Worker).unwrap_or_default(),
            bastion: id_of(SecurityGroupRole::Bastion),
        };
        let cidrs: Vec<String> = self
            .status
            .network
            .as_ref()
            .map(|n| n.subnets.iter().map(|s| s.cidr.clone()).collect())
            .unwrap_or_default();
        let sets = rules::desired(self.spec, &ids, &cidrs);
        let mut bulk = true;
        for (role, group) in &groups {
            let wanted = match role {
                SecurityGroupRole::ControlPlane => &sets.control_plane,
                SecurityGroupRole::Worker => &sets.worker,
                SecurityGroupRole::Bastion => &sets.bastion,
            };
            // Rules are compared without descriptions, except in a group that has
            // only what Neutron gave it: rewriting a rule of a group in use only for
            // its description would open a gap in its traffic.
            let (delete, create) = if rules::unconfigured(&group.security_group_rules) {
                rules::diff_exact(wanted, &group.security_group_rules)
            } else {
                rules::diff(wanted, &group.security_group_rules)
            };
            for r in delete {
                match self
                    .clients
                    .network()
                    .delete::<net::SecurityGroupRule>(&r.id)
                    .await
                {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(os("SecurityGroupCreateFailed", e)),
                }
                tracing::info!(group = %group.id, rule = %r.id, "deleted security group rule");
            }
            self.create_rules(&group.id, &create, &mut bulk).await?;
        }
        Ok(())
    }

    /// The missing rules of one group: in one bulk request (Neutron takes
    /// one group per request and creates all or none, so a failure leaves
    /// nothing the next pass's diff would not see), or one by one where
    /// Neutron refuses bulk requests; `bulk` remembers that for the pass.
    async fn create_rules(
        &self,
        group_id: &str,
        rules: &[&rules::Rule],
        bulk: &mut bool,
    ) -> Result<(), InfraError> {
        let neutron = self.clients.network();
        if rules.len() > 1 && *bulk {
            let bodies = rules.iter().map(|r| r.body(group_id)).collect();
            match neutron.create_security_group_rules(bodies).await {
                Ok(created) => {
                    tracing::info!(group = %group_id, rules = created.len(), "created security group rules");
                    return Ok(());
                }
                Err(e) if net::bulk_unsupported(&e) => {
                    tracing::info!(error = %e, "Neutron refuses bulk requests; creating rules one by one");
                    *bulk = false;
                }
                Err(e) => return Err(os("SecurityGroupCreateFailed", e)),
            }
        }
        for r in rules {
            neutron
                .create::<net::SecurityGroupRule>(r.body(group_id))
                .await
                .map_err(|e| os("SecurityGroupCreateFailed", e))?;
        }
        Ok(())
    }
}
