//! The Secret `<cluster>-bootstrap-vars`, end to end: the `stackhook` binary with
//! `--controllers` against a real API server (tests/support/kube.rs) and the
//! loopback cloud (tests/support/cloud.rs); skipped with one line when either is
//! missing.
//!
//! A Cluster and its OpenStackCluster become Ready; the Secret, owned by the
//! OpenStackCluster, holds every variable of the extensions table with the values
//! the cloud reports (read back here through its APIs), the NTP server the
//! cluster's spec chose over the flag and the management VIP the flag gave, and
//! no credential. A machine's address and reservation reach the inventory, the
//! variables and the cluster's status; a spec change reaches the Secret; nothing
//! is rewritten while nothing changes; a deleted Secret comes back. The
//! AfterControlPlaneInitialized hook, over HTTPS, answers that the Secret is current
//! and records an Event on the Cluster.

use crate::cloud;
use crate::infra;
use crate::kube_server;
use crate::replica;

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use replica::Replica;
use serde_json::{json, Value};
use stackhook::infra::api::names::{ClusterNames, SecurityGroupRole};
use stackhook::infra::api::{OpenStackCluster, OpenStackMachine};
use stackhook::infra::cluster::{owner_tag, OpenStackClusterInfra, PlatformConfig};
use stackhook_openstack::identity::Identity;
use stackhook_openstack::loadbalancing::{LoadBalancer, LoadBalancing};
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::Clients;

const NAME: &str = "vars";
const OSC: &str = "vars-k2x9d";
const CIDR: &str = "10.213.0.0/24";

fn cluster_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster");
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, "clusters"),
    )
}

#[test]
fn the_bootstrap_vars_secret_follows_the_cluster_and_its_machines() {
    let Some(clouds) = cloud::clouds_yaml() else {
        return;
    };
    let api = match kube_server::api_server() {
        Ok(api) => api,
        Err(why) => {
            eprintln!("skipping: no API server: {why}");
            return;
        }
    };
    let yaml = std::fs::read(clouds).expect("clouds.yaml");
    infra::runtime().block_on(async {
        let client = api.client().await;
        kube_server::apply_crds(&client, &api.capi_crds("cluster-api-v1.13.5")).await;
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_stackhook"))
            .arg("crds")
            .output()
            .expect("stackhook crds");
        kube_server::apply_crds(
            &client,
            &kube_server::yaml_documents(&String::from_utf8(out.stdout).unwrap()),
        )
        .await;
        kube_server::wait_for_preferred_version(&client, "cluster.x-k8s.io", "v1beta2").await;
        let ns = kube_server::namespace(&client, "vars").await;
        let check = infra::checker(&yaml, cloud::MEMBER);
        let outcome = AssertUnwindSafe(cases(&client, &api.kubeconfig, &ns, &yaml, &check))
            .catch_unwind()
            .await;
        if let Err(panic) = outcome {
            // Leave no cloud resources and no stuck finalizer behind.
            let oscs: Api<OpenStackCluster> = Api::namespaced(client.clone(), &ns);
            if let Ok(Some(osc)) = oscs.get_opt(OSC).await {
                let id = infra::identity(&ns, "creds", yaml.clone(), cloud::MEMBER);
                let infra_ = OpenStackClusterInfra::new(PlatformConfig::default());
                infra::delete(&infra_, &infra::scope(&ns, NAME), &osc, &id).await;
                let _ = oscs
                    .patch(
                        OSC,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
            }
            kube_server::delete_namespace(&client, &ns).await;
            std::panic::resume_unwind(panic);
        }
        kube_server::delete_namespace(&client, &ns).await;
    });
}

/// The Secret's keys, decoded.
fn contents(s: &Secret) -> BTreeMap<String, String> {
    s.data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8(v.0.clone()).expect("UTF-8")))
        .collect()
}

fn parse(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("YAML")
}

/// Waits for the Secret to satisfy `ok`; returns it.
async fn secret_where(
    secrets: &Api<Secret>,
    what: &str,
    mut ok: impl FnMut(&Secret) -> bool,
) -> Secret {
    let name = format!("{NAME}-bootstrap-vars");
    let mut found = None;
    kube_server::wait_up_to(Duration::from_secs(120), what, async || {
        found = secrets
            .get_opt(&name)
            .await
            .ok()
            .flatten()
            .filter(|s| ok(s));
        found.is_some()
    })
    .await;
    found.unwrap()
}

async fn cases(client: &Client, kubeconfig: &Path, ns: &str, clouds_yaml: &[u8], check: &Clients) {
    let names = ClusterNames::new(ns, NAME);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "creds"},
                "stringData": {"clouds.yaml": String::from_utf8(clouds_yaml.to_vec()).unwrap()}}))
            .unwrap(),
        )
        .await
        .expect("identity Secret");
    let clusters = cluster_api(client, ns);
    let cluster = clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": NAME, "namespace": ns},
                "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                    "kind": "OpenStackCluster", "name": OSC}}
            }))
            .unwrap(),
        )
        .await
        .expect("Cluster");
    let cluster_uid = cluster.uid().expect("uid");
    let oscs: Api<OpenStackCluster> = Api::namespaced(client.clone(), ns);
    oscs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
            "metadata": {"name": OSC, "namespace": ns,
                "labels": {"cluster.x-k8s.io/cluster-name": NAME},
                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                    "name": NAME, "uid": cluster_uid, "controller": true, "blockOwnerDeletion": true}]},
            "spec": {
                "identityRef": {"type": "Secret", "name": "creds", "cloudName": cloud::MEMBER},
                "managedSubnets": [{"cidr": CIDR}],
                "managedSecurityGroups": {},
                "apiServerLoadBalancer": {"enabled": true},
                "tags": ["stackhook-vars-test"],
                "extensions": {
                    "networking": {"kubeNetworkPlugin": "cilium",
                        "cilium": {"webhookEnable": true, "routingMode": "native"}},
                    "networkInterfaces": {"keepalived": "eth0", "flannel": "eth1"},
                    "loadBalancers": {"ingress": {"enabled": true}},
                    "platform": {"ntp": {"server": "ntp-a.example"}}
                }
            }
        }))
        .unwrap(),
    )
    .await
    .expect("OpenStackCluster");

    // The flags give the defaults; the cluster's spec overrides the NTP server.
    let r = Replica::start(
        kubeconfig,
        ns,
        "vars",
        &[
            "--ntp-server",
            "192.0.2.123",
            "--management-vip",
            "192.0.2.10",
        ],
    );
    let t = Instant::now();
    let mut ready = None;
    kube_server::wait_up_to(
        Duration::from_secs(300),
        "the OpenStackCluster to be Ready",
        async || {
            ready = oscs.get(OSC).await.ok().filter(|o| {
                o.status.as_ref().is_some_and(|s| s.ready)
                    && o.spec.control_plane_endpoint.is_some()
            });
            ready.is_some()
        },
    )
    .await;
    let ready = ready.unwrap();
    println!("vars: Ready after {:.1} s", t.elapsed().as_secs_f64());
    let secret = secret_where(&secrets, "the bootstrap vars with the endpoint", |s| {
        contents(s)
            .get("vars.yaml")
            .is_some_and(|v| parse(v)["cloud_master_vip"].is_string())
    })
    .await;
    let owner = &secret.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("OpenStackCluster", OSC)
    );
    assert_eq!(Some(&owner.uid), ready.metadata.uid.as_ref());
    assert_eq!(owner.controller, Some(true));

    // Every variable of the table, each with what the cloud says.
    let data = contents(&secret);
    let vars = parse(&data["vars.yaml"]);
    let project = check.identity.project().await.unwrap().expect("project");
    let subnet: Vec<net::Subnet> = check
        .network
        .list(&[("tags", owner_tag(&names))])
        .await
        .unwrap();
    let mut groups: Vec<String> = Vec::new();
    for role in [SecurityGroupRole::ControlPlane, SecurityGroupRole::Worker] {
        let sg: Vec<net::SecurityGroup> = check
            .network
            .list(&[("name", names.security_group_name(role))])
            .await
            .unwrap();
        groups.push(sg[0].id.clone());
    }
    let lb: Vec<LoadBalancer> = check
        .load_balancer
        .list(&[("name", names.load_balancer_name())])
        .await
        .unwrap();
    let ingress: Vec<net::Port> = check
        .network
        .list(&[("name", names.ingress_vip_port_name())])
        .await
        .unwrap();
    let fip: Vec<net::FloatingIp> = check
        .network
        .list(&[("description", format!("{} kubeapi", names.description()))])
        .await
        .unwrap();
    let endpoint = |types: &'static [&'static str]| async move {
        check.identity.catalog_endpoint(types).await.unwrap()
    };
    let expected = json!({
        "kube_network_plugin": "cilium",
        "cilium_openstack_project_id": project.id,
        "cilium_openstack_default_subnet_id": subnet[0].id,
        "cilium_openstack_security_group_ids": groups,
        "vpc_cni_webhook_enable": true,
        "master_virtual_vip": lb[0].vip_address,
        "ingress_virtual_vip": ingress[0].fixed_ips[0].ip_address,
        "keepalived_interface": "eth0",
        "harbor_addr": ingress[0].fixed_ips[0].ip_address,
        "cloud_master_vip": fip[0].floating_ip_address,
        "openstack_auth_domain": endpoint(&["identity"]).await,
        "openstack_cinder_domain": endpoint(&["block-storage", "volumev3"]).await,
        "openstack_nova_domain": endpoint(&["compute"]).await,
        "openstack_neutron_domain": endpoint(&["network"]).await,
        "openstack_project_name": project.name,
        "openstack_project_domain_name": project.domain.name,
        "openstack_region_name": "RegionOne",
        "ntp_server": "ntp-a.example",
        "vip_mgmt": "192.0.2.10",
        "flannel_interface": "eth1",
        "node_resources": {}
    });
    assert_eq!(vars, expected, "{}", data["vars.yaml"]);
    assert_eq!(
        ready
            .spec
            .control_plane_endpoint
            .as_ref()
            .map(|e| e.host.clone()),
        Some(fip[0].floating_ip_address.clone())
    );
    let cilium = parse(&data["cilium-values.yaml"]);
    assert_eq!(
        cilium["k8sServiceHost"],
        fip[0].floating_ip_address.as_str()
    );
    assert_eq!(cilium["k8sServicePort"], 6443);
    assert_eq!(cilium["routingMode"], "native");
    assert_eq!(cilium["ipv4NativeRoutingCIDR"], CIDR);
    assert_eq!(
        cilium["openstack"]["defaultSubnetID"],
        subnet[0].id.as_str()
    );
    assert_eq!(
        parse(&data["inventory.yaml"])["all"]["children"]["worker"]["hosts"],
        json!({})
    );
    let ext = ready
        .status
        .as_ref()
        .and_then(|s| s.extensions.clone())
        .expect("status.extensions");
    assert_eq!(
        ext.platform
            .and_then(|p| p.ntp)
            .and_then(|n| n.server)
            .as_deref(),
        Some("ntp-a.example")
    );
    assert_eq!(
        ext.networking
            .and_then(|n| n.cilium)
            .and_then(|c| c.webhook_enable),
        Some(true)
    );

    // No credential of any kind: not the member's password, not the application
    // credential's secret, not a Keystone token, no clouds.yaml keys.
    let member = cloud::entry(cloud::MEMBER).unwrap();
    let appcred = cloud::entry(cloud::MEMBER_APPCRED).unwrap();
    let admin = cloud::entry(cloud::ADMIN).unwrap();
    let all: String = data.values().cloned().collect();
    for needle in [
        member.password.as_str(),
        admin.password.as_str(),
        appcred.application_credential_secret.as_str(),
        "password",
        "application_credential",
        "gAAAAA",
    ] {
        assert!(!needle.is_empty());
        assert!(!all.contains(needle), "{needle:?} in the Secret: {all}");
    }

    // Nothing changes, nothing is written.
    let rv = secret.resource_version();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let still = secrets
        .get(&format!("{NAME}-bootstrap-vars"))
        .await
        .unwrap();
    assert_eq!(still.resource_version(), rv, "rewritten without a change");

    // A worker with an address and a reservation (the machine controller leaves
    // it alone: CAPI has not set its owner).
    let osms: Api<OpenStackMachine> = Api::namespaced(client.clone(), ns);
    osms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
            "metadata": {"name": "vars-md-0-a", "namespace": ns, "labels": {
                "cluster.x-k8s.io/cluster-name": NAME, "cluster.x-k8s.io/deployment-name": "vars-md-0-x"}},
            "spec": {"flavor": "m1.small", "image": {"filter": {"name": "ubuntu-2404-kube-v1.33.1"}},
                "extensions": {"networkInterfaces": {"keepalived": "ens4"}}}
        }))
        .unwrap(),
    )
    .await
    .expect("OpenStackMachine");
    let t = Instant::now();
    osms.patch_status(
        "vars-md-0-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "addresses": [{"type": "InternalIP", "address": "10.213.0.77"}],
            "extensions": {"nodeResources": {"vars-md-0-a": {"reserved": {"cpu": "60m", "memory": "612Mi"}}}}
        }})),
    )
    .await
    .expect("machine status");
    let with_machine = secret_where(&secrets, "the machine in the Secret", |s| {
        contents(s)
            .get("vars.yaml")
            .is_some_and(|v| parse(v)["node_resources"]["vars-md-0-a"]["memory"] == "612Mi")
    })
    .await;
    println!(
        "vars: a machine's reservation reached the Secret after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let inv = parse(&contents(&with_machine)["inventory.yaml"]);
    assert_eq!(
        inv["all"]["children"]["worker"]["hosts"]["vars-md-0-a"],
        json!({"ansible_host": "10.213.0.77", "role": "worker", "keepalived_interface": "ens4"})
    );
    let osc_now = oscs.get(OSC).await.unwrap();
    let nr = osc_now.status.unwrap().extensions.unwrap().node_resources;
    assert_eq!(nr["vars-md-0-a"].reserved["cpu"].0, "60m");

    // A change to the spec reaches the Secret.
    oscs.patch(
        OSC,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"extensions": {"platform": {"ntp": {"server": "ntp-b.example"}}}}}),
        ),
    )
    .await
    .expect("spec change");
    secret_where(&secrets, "the new NTP server in the Secret", |s| {
        contents(s)
            .get("vars.yaml")
            .is_some_and(|v| parse(v)["ntp_server"] == "ntp-b.example")
    })
    .await;

    // Deleted, it comes back with the same content.
    let before = secrets
        .get(&format!("{NAME}-bootstrap-vars"))
        .await
        .unwrap();
    secrets
        .delete(&format!("{NAME}-bootstrap-vars"), &DeleteParams::default())
        .await
        .unwrap();
    let t = Instant::now();
    let back = secret_where(&secrets, "the Secret to come back", |s| {
        s.uid() != before.uid()
    })
    .await;
    println!(
        "vars: a deleted Secret was back after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(back.data, before.data);

    // AfterControlPlaneInitialized, over HTTPS: current, and an Event on the Cluster.
    let hook_cluster = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": NAME, "namespace": ns, "uid": cluster_uid},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "OpenStackCluster", "name": OSC}}
    });
    let (resp, took) = r
        .call(
            "AfterControlPlaneInitialized",
            "after-control-plane-initialized",
            json!({"cluster": hook_cluster}),
        )
        .await;
    assert_eq!(resp["status"], "Success", "{resp}");
    assert_eq!(
        resp["message"],
        format!("bootstrap-vars: Secret {NAME}-bootstrap-vars is current")
    );
    println!(
        "vars: AfterControlPlaneInitialized answered in {:.1} ms",
        took.as_secs_f64() * 1000.0
    );
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut found = None;
    kube_server::wait_for("the Event on the Cluster", async || {
        found = events
            .list(&ListParams::default())
            .await
            .ok()
            .and_then(|l| {
                l.items.into_iter().find(|e| {
                    e.reason.as_deref() == Some("BootstrapVarsCurrent")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NAME)
                })
            });
        found.is_some()
    })
    .await;
    let e = found.unwrap();
    let regarding = e.regarding.unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("Cluster"));
    assert_eq!(regarding.uid.as_deref(), Some(cluster_uid.as_str()));
    assert_eq!(
        e.note.as_deref(),
        Some(
            format!("Secret {NAME}-bootstrap-vars with the bootstrap's values already current")
                .as_str()
        )
    );

    // Deletion: the machine, then the cloud resources, then the finalizer.
    osms.delete("vars-md-0-a", &DeleteParams::default())
        .await
        .unwrap();
    oscs.delete(OSC, &DeleteParams::default()).await.unwrap();
    kube_server::wait_up_to(
        Duration::from_secs(240),
        "the OpenStackCluster to go",
        async || matches!(oscs.get_opt(OSC).await, Ok(None)),
    )
    .await;
    infra::expect_none(&infra::inventory(check, &names).await);
    clusters
        .delete(NAME, &DeleteParams::default())
        .await
        .unwrap();
    drop(r);
}
