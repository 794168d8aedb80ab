//! Taking over machines CAPO v0.14 made: CAPO does a machine's Nova and Neutron work
//! in an `OpenStackServer` (v1alpha1, same name and namespace as the
//! OpenStackMachine) and records the server's ports there, not in the
//! OpenStackMachine. No controller here runs that kind, so on the first reconcile of
//! such a machine its state is adopted — instance ID, resolved spec, port IDs — into
//! the OpenStackMachine's status (a Kubernetes write only, nothing in the cloud), and
//! then CAPO's finalizer is taken off the OpenStackServer so that deleting the
//! Machine or the Cluster never waits on a finalizer nobody removes. The bastion's
//! OpenStackServer only has its finalizer released.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};

use crate::infra::api::names::SERVER_FINALIZER;
use crate::infra::api::{OpenStackMachine, OpenStackMachineStatus};

/// CAPO v0.14's `OpenStackServer` kind.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            "v1alpha1",
            "OpenStackServer",
        ),
        "openstackservers",
    )
}

/// Whether the machine may still have an OpenStackServer to adopt: machines this
/// controller made (or adopted) record their ports in `status.resources`.
pub fn may_need_adoption(osm: &OpenStackMachine) -> bool {
    osm.status.as_ref().is_none_or(|s| s.resources.is_none())
}

/// Adopts the OpenStackServer of `osm`, if CAPO left one that still carries its
/// finalizer: returns the machine with the adopted status (already written), or
/// `None` when there is nothing to adopt.
/// A cluster without CAPO's CRD answers 404 like a missing object.
pub async fn adopt(
    client: &Client,
    ns: &str,
    osm: &OpenStackMachine,
) -> Result<Option<OpenStackMachine>, kube::Error> {
    let servers: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource());
    let name = osm.name_any();
    let Some(server) = servers.get_opt(&name).await? else {
        return Ok(None);
    };
    // Released means adopted: the status recorded then is ours to change (a
    // deletion clears it), and the server is never read into it again.
    if !server.finalizers().iter().any(|f| f == SERVER_FINALIZER) {
        return Ok(None);
    }
    let mut status = osm.status.clone().unwrap_or_default();
    let changed = merge_server_status(&mut status, &server.data["status"]);
    let mut adopted = osm.clone();
    if changed {
        let api: Api<OpenStackMachine> = Api::namespaced(client.clone(), ns);
        let patch = json!({"status": {
            "instanceID": status.instance_id,
            "resolved": status.resolved,
            "resources": status.resources,
        }});
        adopted = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        tracing::info!(
            server = status.instance_id.as_deref().unwrap_or_default(),
            ports = status.resources.as_ref().map_or(0, |r| r.ports.len()),
            "adopted CAPO's OpenStackServer state"
        );
    }
    release_finalizer(&servers, &server).await?;
    Ok(Some(adopted))
}

/// Copies what the OpenStackServer's status knows and the machine's does not;
/// returns whether anything changed. A field that does not parse is left out (and
/// logged): the machine then falls back to finding its resources by name.
pub fn merge_server_status(status: &mut OpenStackMachineStatus, server: &Value) -> bool {
    let mut changed = false;
    if status.instance_id.is_none() {
        if let Some(id) = server["instanceID"].as_str().filter(|s| !s.is_empty()) {
            status.instance_id = Some(id.to_string());
            changed = true;
        }
    }
    let resolved_ports = status
        .resolved
        .as_ref()
        .is_some_and(|r| !r.ports.is_empty());
    if !resolved_ports && !server["resolved"].is_null() {
        match serde_json::from_value(server["resolved"].clone()) {
            Ok(r) => {
                status.resolved = Some(r);
                changed = true;
            }
            Err(e) => tracing::warn!(error = %e, "OpenStackServer status.resolved not adopted"),
        }
    }
    if status.resources.is_none() {
        let resources = if server["resources"].is_null() {
            json!({})
        } else {
            server["resources"].clone()
        };
        match serde_json::from_value(resources) {
            Ok(r) => {
                status.resources = Some(r);
                changed = true;
            }
            Err(e) => tracing::warn!(error = %e, "OpenStackServer status.resources not adopted"),
        }
    }
    changed
}

/// Takes CAPO's finalizer off the OpenStackServer (nothing else of it is changed).
/// Releases CAPO's finalizer on the OpenStackServer CAPO v0.14 keeps for a cluster's
/// bastion (`<OpenStackCluster>-bastion`); returns the server's `status.resources`
/// when there is one.
/// Nothing is copied: the bastion's server, port and floating IP carry CAPO's names,
/// so the cluster pass finds them by name and records them in its own status.
pub async fn release_bastion(
    client: &Client,
    ns: &str,
    cluster: &str,
) -> Result<Option<Value>, kube::Error> {
    let servers: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource());
    let Some(server) = servers.get_opt(&format!("{cluster}-bastion")).await? else {
        return Ok(None);
    };
    if server.finalizers().iter().any(|f| f == SERVER_FINALIZER) {
        release_finalizer(&servers, &server).await?;
    }
    // What CAPO recorded of the bastion's resources (its ports): adopted into the
    // OpenStackCluster's status, so the bastion pass finds them recorded.
    Ok(Some(server.data["status"]["resources"].clone()).filter(|r| r.is_object()))
}

async fn release_finalizer(
    servers: &Api<DynamicObject>,
    server: &DynamicObject,
) -> Result<(), kube::Error> {
    let finalizers = server.finalizers();
    let kept: Vec<&String> = finalizers
        .iter()
        .filter(|f| *f != SERVER_FINALIZER)
        .collect();
    let patch = json!({"metadata": {
        "finalizers": kept,
        "resourceVersion": server.resource_version(),
    }});
    servers
        .patch(
            &server.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    tracing::info!(server = %server.name_any(), "released CAPO's OpenStackServer finalizer");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_status_fills_only_what_the_machine_lacks() {
        let server = json!({
            "instanceID": "srv-1",
            "resolved": {"imageID": "img", "flavorID": "fl", "ports": [
                {"name": "m-0", "description": "Created by cluster-api-provider-openstack cluster ns-c", "networkID": "net", "fixedIPs": [{"subnet": "sub"}]}]},
            "resources": {"ports": [{"id": "port-1"}]},
        });
        let mut status = OpenStackMachineStatus::default();
        assert!(merge_server_status(&mut status, &server));
        assert_eq!(status.instance_id.as_deref(), Some("srv-1"));
        let resolved = status.resolved.as_ref().map(|r| r.ports.len());
        assert_eq!(resolved, Some(1));
        let ports: Vec<String> = status
            .resources
            .as_ref()
            .map(|r| r.ports.iter().map(|p| p.id.clone()).collect())
            .unwrap_or_default();
        assert_eq!(ports, ["port-1"]);
        // A second pass changes nothing.
        assert!(!merge_server_status(&mut status, &server));
    }

    #[test]
    fn the_machines_own_instance_id_wins() {
        let mut status = OpenStackMachineStatus {
            instance_id: Some("mine".into()),
            ..Default::default()
        };
        merge_server_status(&mut status, &json!({"instanceID": "theirs"}));
        assert_eq!(status.instance_id.as_deref(), Some("mine"));
        // No resources in the server: recorded as empty, so the machine is adopted once.
        assert!(status.resources.is_some());
    }
}
