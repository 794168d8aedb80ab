//! The keepalived endpoint against the loopback test cloud, as the non-admin
//! `member` user: an OpenStackCluster without a load balancer whose
//! `apiServerFixedIP` is reserved by a Neutron port of the cluster's, found
//! again after a crash, refused while another port holds the address, and
//! deleted with the cluster. Skipped unless cloud tests are enabled (see
//! tests/support/cloud.rs). Request counts print as `BENCH` lines with
//! `-- --nocapture --test-threads=1`.

use crate::cloud;
use crate::infra;

use infra::{expect_none, inventory, runtime, unique};
use serde_json::json;
use stackhook::infra::api::cluster::{ApiServerLoadBalancer, ManagedSecurityGroups, SubnetSpec};
use stackhook::infra::api::names::ClusterNames;
use stackhook::infra::api::types::{NetworkFilter, NetworkParam, OpenStackIdentityReference};
use stackhook::infra::api::{OpenStackCluster, OpenStackClusterSpec};
use stackhook::infra::cluster::{owner_tag, OpenStackClusterInfra, PlatformConfig};
use stackhook::infra::conditions::is_true as is_condition_true;
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::{CallCounts, Clients};

const NAMESPACE: &str = "vip-test";

fn keepalived_spec(vip: &str) -> OpenStackClusterSpec {
    OpenStackClusterSpec {
        managed_security_groups: Some(ManagedSecurityGroups::default()),
        api_server_load_balancer: Some(Box::new(ApiServerLoadBalancer {
            enabled: Some(false),
            ..Default::default()
        })),
        disable_api_server_floating_ip: Some(true),
        api_server_fixed_ip: Some(vip.into()),
        tags: vec!["stackhook-test".into()],
        identity_ref: OpenStackIdentityReference {
            name: "cloud-creds".into(),
            cloud_name: cloud::MEMBER.into(),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn cluster(name: &str, spec: OpenStackClusterSpec) -> OpenStackCluster {
    infra::cluster(NAMESPACE, name, spec)
}

fn counts(
    infra: &OpenStackClusterInfra,
    id: &stackhook::infra::seam::IdentitySecret,
) -> CallCounts {
    infra.clients_for(id).unwrap().session.stats().snapshot()
}

fn bench(phase: &str, passes: usize, c: CallCounts) {
    println!(
        "BENCH {phase}: passes={passes} reads={} writes={} auths={} retries={}",
        c.reads, c.writes, c.auths, c.retries
    );
}

/// The ports of `network` holding `ip`, as Neutron lists them.
async fn holders(c: &Clients, network: &str, ip: &str) -> Vec<net::Port> {
    c.network
        .list(&[
            ("network_id", network.to_owned()),
            ("fixed_ips", format!("ip_address={ip}")),
        ])
        .await
        .unwrap()
}

#[test]
fn a_keepalived_cluster_reserves_its_vip_as_a_port_and_releases_it() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let vip = "10.93.0.250";
        let name = unique("vip");
        let names = ClusterNames::new(NAMESPACE, &name);
        let id = infra::identity(NAMESPACE, "cloud-creds", yaml.clone(), cloud::MEMBER);
        let infra = OpenStackClusterInfra::new(PlatformConfig::default());
        let check = infra::checker(&yaml, cloud::MEMBER);
        let scope = infra::scope(NAMESPACE, &name);
        expect_none(&inventory(&check, &names).await);

        let mut spec = keepalived_spec(vip);
        spec.managed_subnets = vec![SubnetSpec {
            cidr: "10.93.0.0/24".into(),
            dns_nameservers: vec![],
            allocation_pools: vec![],
        }];
        let mut osc = cluster(&name, spec);
        let before = counts(&infra, &id);
        let passes = infra::converge(&infra, &scope, &mut osc, &id, 10)
            .await
            .unwrap_or_else(|(r, m)| panic!("user error {r}: {m}"));
        bench("keepalived create", passes, counts(&infra, &id) - before);

        let status = osc.status.clone().unwrap();
        assert!(status.ready);
        assert!(is_condition_true(&status.conditions, "APIEndpointReady"));
        assert!(status.api_server_load_balancer.is_none());
        let network = status.network.clone().unwrap().network.id;
        let ports = holders(&check, &network, vip).await;
        assert_eq!(ports.len(), 1, "{ports:?}");
        let port = &ports[0];
        assert_eq!(port.name, names.api_vip_port_name());
        assert_eq!(port.fixed_ips.len(), 1);
        assert_eq!(port.fixed_ips[0].ip_address, vip);
        assert_eq!(
            port.fixed_ips[0].subnet_id,
            status.network.as_ref().unwrap().subnets[0].id
        );
        assert!(port.device_owner.is_empty() && port.device_id.is_empty());
        assert!(port.description.contains("VIP"), "{}", port.description);
        assert!(port.tags.contains(&"stackhook-test".to_owned()));
        assert!(port.tags.contains(&owner_tag(&names)));
        let recorded = status.api_server_vip_port.clone().unwrap();
        assert_eq!(
            (recorded.id.as_str(), recorded.ip_address.as_str()),
            (port.id.as_str(), vip)
        );
        let endpoint = osc.spec.control_plane_endpoint.clone().unwrap();
        assert_eq!((endpoint.host.as_str(), endpoint.port), (vip, 6443));
        let published = status
            .extensions
            .and_then(|e| e.load_balancers)
            .and_then(|l| l.control_plane)
            .and_then(|c| c.vip);
        assert_eq!(published.as_deref(), Some(vip));

        // A second pass creates nothing; the reservation costs one read.
        let before = counts(&infra, &id);
        infra::converge(&infra, &scope, &mut osc, &id, 1)
            .await
            .unwrap_or_else(|(r, m)| panic!("user error {r}: {m}"));
        let steady = counts(&infra, &id) - before;
        bench("keepalived steady", 1, steady);
        assert_eq!(steady.writes, 0);
        let again = holders(&check, &network, vip).await;
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].id, port.id);

        let before = counts(&infra, &id);
        let passes = infra::delete(&infra, &scope, &osc, &id).await;
        bench("keepalived delete", passes, counts(&infra, &id) - before);
        match check.network.get::<net::Port>(&port.id).await {
            Err(e) if e.is_not_found() => {}
            other => panic!("the VIP port is still there: {other:?}"),
        }
        expect_none(&inventory(&check, &names).await);
    });
}

#[test]
fn on_a_users_network_a_bound_holder_is_refused_our_port_adopted_and_the_users_reservation_used() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let vip = "10.94.0.5";
        let name = unique("vip");
        let names = ClusterNames::new(NAMESPACE, &name);
        let id = infra::identity(NAMESPACE, "cloud-creds", yaml.clone(), cloud::MEMBER);
        let infra = OpenStackClusterInfra::new(PlatformConfig::default());
        let check = infra::checker(&yaml, cloud::MEMBER);
        let n = &check.network;
        let scope = infra::scope(NAMESPACE, &name);

        let user_net: net::Network = n
            .create(json!({"name": format!("vip-user-net-{name}")}))
            .await
            .unwrap();
        let user_subnet: net::Subnet = n
            .create(json!({"network_id": user_net.id, "ip_version": 4, "cidr": "10.94.0.0/24"}))
            .await
            .unwrap();
        // Bound to a device, as a server's or a service's port is.
        let foreign: net::Port = n
            .create(json!({
                "name": format!("vip-foreign-{name}"),
                "network_id": user_net.id,
                "device_owner": "compute:nova",
                "device_id": "2f0c1c7e-0000-4000-8000-000000000001",
                "fixed_ips": [{"subnet_id": user_subnet.id, "ip_address": vip}],
            }))
            .await
            .unwrap();

        let mut spec = keepalived_spec(vip);
        spec.network = Some(Box::new(NetworkParam {
            id: None,
            filter: Some(NetworkFilter {
                name: Some(user_net.name.clone()),
                ..Default::default()
            }),
        }));
        let mut osc = cluster(&name, spec);

        // 1. Another port holds the address: a user error that names it.
        let (reason, message) = infra::converge(&infra, &scope, &mut osc, &id, 3)
            .await
            .expect_err("the cluster took an address another port holds");
        assert_eq!(reason, "APIServerVIPInUse");
        assert!(message.contains(&foreign.id), "{message}");
        let status = osc.status.clone().unwrap();
        assert!(!status.ready);
        assert!(status.api_server_vip_port.is_none());
        let held = holders(&check, &user_net.id, vip).await;
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].id, foreign.id);
        // Neutron lets only an admin delete a port bound to a server.
        let admin = infra::checker(&yaml, cloud::ADMIN);
        admin
            .network
            .delete::<net::Port>(&foreign.id)
            .await
            .unwrap();

        // 2. Our port, created by a pass that died before recording or
        // tagging it: adopted, not duplicated.
        let ours: net::Port = n
            .create(json!({
                "name": names.api_vip_port_name(),
                "network_id": user_net.id,
                "fixed_ips": [{"subnet_id": user_subnet.id, "ip_address": vip}],
            }))
            .await
            .unwrap();
        infra::converge(&infra, &scope, &mut osc, &id, 10)
            .await
            .unwrap_or_else(|(r, m)| panic!("user error {r}: {m}"));
        let status = osc.status.clone().unwrap();
        assert!(status.ready);
        assert_eq!(status.api_server_vip_port.unwrap().id, ours.id);
        let held = holders(&check, &user_net.id, vip).await;
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].id, ours.id);
        assert!(held[0].tags.contains(&owner_tag(&names)));
        assert_eq!(osc.spec.control_plane_endpoint.clone().unwrap().host, vip);

        // 3. Deletion takes the port and leaves the user's network.
        infra::delete(&infra, &scope, &osc, &id).await;
        assert_eq!(holders(&check, &user_net.id, vip).await.len(), 0);
        expect_none(&inventory(&check, &names).await);
        let still: net::Network = n.get(&user_net.id).await.unwrap();
        assert_eq!(still.id, user_net.id);

        // 4. The user's own reservation (a port bound to nothing, as CAPO's
        // documentation asks keepalived users to make): used, not tagged, and left
        // in place when the cluster goes.
        let reserved: net::Port = n
            .create(json!({
                "name": format!("vip-reserved-{name}"),
                "network_id": user_net.id,
                "fixed_ips": [{"subnet_id": user_subnet.id, "ip_address": vip}],
            }))
            .await
            .unwrap();
        let mut again = cluster(&name, osc.spec.clone());
        again.spec.control_plane_endpoint = None;
        infra::converge(&infra, &scope, &mut again, &id, 10)
            .await
            .unwrap_or_else(|(r, m)| panic!("user error {r}: {m}"));
        let status = again.status.clone().unwrap();
        assert!(status.ready);
        assert_eq!(status.api_server_vip_port.unwrap().id, reserved.id);
        let held = holders(&check, &user_net.id, vip).await;
        assert_eq!(held.len(), 1, "no second port for the address");
        assert!(
            !held[0].tags.contains(&owner_tag(&names)),
            "the user's port is not tagged"
        );
        infra::delete(&infra, &scope, &again, &id).await;
        let kept: net::Port = n.get(&reserved.id).await.unwrap();
        assert_eq!(kept.id, reserved.id);
        expect_none(&inventory(&check, &names).await);
        n.delete::<net::Port>(&reserved.id).await.unwrap();
        n.delete::<net::Network>(&user_net.id).await.unwrap();
    });
}
