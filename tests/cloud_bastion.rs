//! The bastion and the Octavia flavor of the OpenStackCluster cloud half,
//! against the loopback test cloud as the `member` user: a bastion boots
//! on a port with the bastion security group and gets a floating IP;
//! disabling it removes server, floating IP and port; a status write that
//! fails after every create never boots a second server; an unknown
//! load balancer flavor is the user's error. Skipped unless cloud tests are
//! enabled (see tests/support/cloud.rs).

use crate::cloud;
use crate::infra;

use std::time::Duration;

use infra::{runtime, unique, MemSink};
use stackhook::infra::api::cluster::{
    ApiServerLoadBalancer, Bastion, ManagedSecurityGroups, SubnetSpec,
};
use stackhook::infra::api::machine::OpenStackMachineSpec;
use stackhook::infra::api::names::{ClusterNames, SecurityGroupRole};
use stackhook::infra::api::types::{ImageFilter, ImageParam, OpenStackIdentityReference};
use stackhook::infra::api::{OpenStackCluster, OpenStackClusterSpec};
use stackhook::infra::cluster::{owner_tag, OpenStackClusterInfra, PlatformConfig};
use stackhook::infra::seam::{ClusterInfra, ClusterScope, IdentitySecret, InfraError};
use stackhook_openstack::compute::Compute;
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::Clients;

const NAMESPACE: &str = "sh-bastion";

fn identity(clouds_yaml: Vec<u8>) -> IdentitySecret {
    infra::identity(NAMESPACE, "cloud-creds", clouds_yaml, cloud::MEMBER)
}

fn bastion() -> Bastion {
    Bastion {
        spec: Some(OpenStackMachineSpec {
            flavor: Some("m1.tiny".into()),
            image: ImageParam {
                filter: Some(ImageFilter {
                    name: Some("ubuntu-2404-kube-v1.33.1".into()),
                    tags: vec![],
                }),
                ..Default::default()
            },
            ..Default::default()
        }),
        availability_zone: Some("az2".into()),
        ..Default::default()
    }
}

/// No load balancer (the API gets a floating IP), so passes are quick.
fn spec(cidr: &str) -> OpenStackClusterSpec {
    OpenStackClusterSpec {
        managed_subnets: vec![SubnetSpec {
            cidr: cidr.into(),
            dns_nameservers: vec![],
            allocation_pools: vec![],
        }],
        managed_security_groups: Some(ManagedSecurityGroups::default()),
        bastion: Some(Box::new(bastion())),
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

fn scope(name: &str) -> ClusterScope {
    infra::scope(NAMESPACE, name)
}

fn checker(clouds_yaml: &[u8]) -> Clients {
    infra::checker(clouds_yaml, cloud::MEMBER)
}

/// Converges, or returns the first user error as `(reason, message)`.
async fn converge(
    infra: &OpenStackClusterInfra,
    scope: &ClusterScope,
    osc: &mut OpenStackCluster,
    id: &IdentitySecret,
) -> Result<usize, (String, String)> {
    infra::converge(infra, scope, osc, id, 60).await
}

async fn bastion_servers(c: &Clients, names: &ClusterNames) -> usize {
    c.compute
        .servers_named(&format!("^{}$", names.bastion_name()))
        .await
        .unwrap()
        .len()
}

async fn bastion_fips(c: &Clients, names: &ClusterNames) -> Vec<net::FloatingIp> {
    c.network
        .list(&[("description", format!("{} bastion", names.description()))])
        .await
        .unwrap()
}

/// Nothing of the cluster left: servers by name, Neutron objects by tag,
/// floating IPs by description.
async fn expect_nothing_left(c: &Clients, names: &ClusterNames) {
    assert_eq!(bastion_servers(c, names).await, 0);
    assert!(bastion_fips(c, names).await.is_empty());
    let tag = [("tags", owner_tag(names))];
    assert!(c.network.list::<net::Port>(&tag).await.unwrap().is_empty());
    assert!(c
        .network
        .list::<net::SecurityGroup>(&tag)
        .await
        .unwrap()
        .is_empty());
    assert!(c
        .network
        .list::<net::Network>(&tag)
        .await
        .unwrap()
        .is_empty());
    let named: Vec<net::Port> = c
        .network
        .list(&[("name", format!("{}-0", names.bastion_name()))])
        .await
        .unwrap();
    assert!(named.is_empty());
}

#[test]
fn bastion_boots_gets_a_floating_ip_and_goes_when_disabled() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let name = unique("bst");
        let names = ClusterNames::new(NAMESPACE, &name);
        let id = identity(yaml.clone());
        let infra = OpenStackClusterInfra::new(PlatformConfig::default());
        let check = checker(&yaml);
        let scope = scope(&name);
        let mut osc = cluster(&name, spec("10.81.0.0/24"));

        converge(&infra, &scope, &mut osc, &id).await.unwrap();
        let status = osc.status.clone().unwrap();
        assert!(status.ready);
        let b = status.bastion.clone().expect("status.bastion");
        assert_eq!(b.name.as_deref(), Some(names.bastion_name().as_str()));
        assert_eq!(b.state.as_deref(), Some("ACTIVE"));
        let server = check
            .compute
            .server(b.id.as_deref().unwrap())
            .await
            .unwrap();
        assert_eq!(server.status, "ACTIVE");
        assert_eq!(server.name, names.bastion_name());
        assert_eq!(bastion_servers(&check, &names).await, 1);

        let port_id = b.resources.as_ref().unwrap().ports[0].id.clone();
        let port: net::Port = check.network.get(&port_id).await.unwrap();
        assert_eq!(port.device_id, server.id);
        assert_eq!(port.network_id, status.network.as_ref().unwrap().network.id);
        let sg_id = status.bastion_security_group.clone().unwrap().id;
        assert_eq!(port.security_groups, vec![sg_id.clone()]);
        assert_eq!(
            b.ip.as_deref(),
            port.fixed_ips.first().map(|f| f.ip_address.as_str())
        );
        let fips = bastion_fips(&check, &names).await;
        assert_eq!(fips.len(), 1);
        assert_eq!(fips[0].port_id.as_deref(), Some(port_id.as_str()));
        assert_eq!(
            b.floating_ip.as_deref(),
            Some(fips[0].floating_ip_address.as_str())
        );

        // A second run changes nothing.
        converge(&infra, &scope, &mut osc, &id).await.unwrap();
        assert_eq!(bastion_servers(&check, &names).await, 1);
        assert_eq!(bastion_fips(&check, &names).await.len(), 1);

        // Disable: server, floating IP, port and bastion group go.
        osc.spec.bastion.as_mut().unwrap().enabled = Some(false);
        converge(&infra, &scope, &mut osc, &id).await.unwrap();
        let status = osc.status.clone().unwrap();
        assert!(status.bastion.is_none());
        assert!(status.bastion_security_group.is_none());
        assert!(check
            .compute
            .server(&server.id)
            .await
            .unwrap_err()
            .is_not_found());
        assert!(check
            .network
            .get::<net::Port>(&port_id)
            .await
            .unwrap_err()
            .is_not_found());
        assert!(bastion_fips(&check, &names).await.is_empty());
        let groups: Vec<net::SecurityGroup> = check
            .network
            .list(&[(
                "name",
                names.security_group_name(SecurityGroupRole::Bastion),
            )])
            .await
            .unwrap();
        assert!(groups.is_empty());

        // Enable again, then delete the whole cluster with the bastion up.
        osc.spec.bastion = Some(Box::new(bastion()));
        converge(&infra, &scope, &mut osc, &id).await.unwrap();
        assert_eq!(bastion_servers(&check, &names).await, 1);
        infra::delete(&infra, &scope, &osc, &id).await;
        expect_nothing_left(&check, &names).await;
    });
}

#[test]
fn a_crash_after_the_server_create_boots_no_second_bastion() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let name = unique("bstcrash");
        let names = ClusterNames::new(NAMESPACE, &name);
        let id = identity(yaml.clone());
        let infra = OpenStackClusterInfra::new(PlatformConfig::default());
        let check = checker(&yaml);
        let scope = scope(&name);
        let mut osc = cluster(&name, spec("10.82.0.0/24"));
        // Status is never written: each pass starts from nothing and dies at
        // its first status write, i.e. right after its first create.
        let mut crashes = 0;
        let mut done = false;
        for _ in 0..60 {
            let sink = MemSink {
                fail_first: true,
                ..Default::default()
            };
            match infra.reconcile(&scope, &osc, &id, &sink).await {
                Err(InfraError::Sink(_)) => crashes += 1,
                Ok(o) if o.requeue_after.is_none() => {
                    done = true;
                    break;
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                Err(InfraError::Transient { .. }) => {
                    tokio::time::sleep(Duration::from_millis(300)).await
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(done, "never converged");
        // Network, subnet, router, 3 groups, bastion port, server, 2 FIPs.
        assert!(crashes >= 8, "only {crashes} simulated crashes");
        assert!(osc.status.is_none());
        assert_eq!(bastion_servers(&check, &names).await, 1);
        assert_eq!(bastion_fips(&check, &names).await.len(), 1);
        let ports: Vec<net::Port> = check
            .network
            .list(&[("name", format!("{}-0", names.bastion_name()))])
            .await
            .unwrap();
        assert_eq!(ports.len(), 1);
        converge(&infra, &scope, &mut osc, &id).await.unwrap();
        assert_eq!(bastion_servers(&check, &names).await, 1);
        infra::delete(&infra, &scope, &osc, &id).await;
        expect_nothing_left(&check, &names).await;
    });
}

#[test]
fn an_unknown_load_balancer_flavor_is_a_user_error() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let name = unique("lbflv");
        let names = ClusterNames::new(NAMESPACE, &name);
        let id = identity(yaml.clone());
        let infra = OpenStackClusterInfra::new(PlatformConfig::default());
        let check = checker(&yaml);
        let scope = scope(&name);
        let mut s = spec("10.83.0.0/24");
        s.bastion = None;
        s.api_server_load_balancer = Some(Box::new(ApiServerLoadBalancer {
            flavor: Some("no-such-flavor".into()),
            ..Default::default()
        }));
        let mut osc = cluster(&name, s);
        let (reason, message) = converge(&infra, &scope, &mut osc, &id)
            .await
            .expect_err("an unknown flavor must fail");
        assert_eq!(reason, "LoadBalancerFlavorNotFound", "{message}");
        let status = osc.status.clone().unwrap();
        assert_eq!(
            status.failure_reason.as_deref(),
            Some("LoadBalancerFlavorNotFound")
        );
        infra::delete(&infra, &scope, &osc, &id).await;
        expect_nothing_left(&check, &names).await;
    });
}
