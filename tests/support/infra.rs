//! Pieces shared by the tests that drive the OpenStackCluster cloud half against
//! the loopback cloud.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use stackhook::infra::api::names::{ClusterNames, SecurityGroupRole};
use stackhook::infra::api::types::ApiEndpoint;
use stackhook::infra::api::{OpenStackCluster, OpenStackClusterSpec, OpenStackClusterStatus};
use stackhook::infra::cluster::{owner_tag, OpenStackClusterInfra};
use stackhook::infra::seam::{
    ClusterInfra, ClusterScope, DeleteProgress, IdentitySecret, InfraError, SinkError, StatusSink,
};
use stackhook_openstack::loadbalancing::{self as lb, LoadBalancing};
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::{Clients, CloudConfig};

/// The longest pause between passes: the controllers wait 2–5 s for the cloud;
/// a test looks again sooner.
const PASS_PAUSE: Duration = Duration::from_secs(1);

/// Status writes kept in memory; optionally every pass's first write fails,
/// as a crash between a create and its status write would.
#[derive(Default)]
pub struct MemSink {
    pub saved: Mutex<Option<OpenStackClusterStatus>>,
    pub writes: AtomicUsize,
    pub fail_first: bool,
}

impl StatusSink for MemSink {
    async fn save(&self, status: &OpenStackClusterStatus) -> Result<(), SinkError> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst);
        if self.fail_first && n == 0 {
            return Err(SinkError("simulated crash before the status write".into()));
        }
        *self.saved.lock().unwrap() = Some(status.clone());
        Ok(())
    }
}

/// A name no other test process or test in this one uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A client of our own for checking what the cloud holds, as the `cloud` member.
pub fn checker(clouds_yaml: &[u8], cloud: &str) -> Clients {
    let config = CloudConfig::from_clouds_yaml(clouds_yaml, cloud, None).unwrap();
    Clients::new(config, None).unwrap()
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The identity Secret `namespace/name` holding `clouds_yaml`, for cloud `cloud`.
pub fn identity(namespace: &str, name: &str, clouds_yaml: Vec<u8>, cloud: &str) -> IdentitySecret {
    IdentitySecret {
        namespace: namespace.into(),
        name: name.into(),
        resource_version: "1".into(),
        clouds_yaml: clouds_yaml.into(),
        cacert: None,
        cloud_name: cloud.into(),
        region: None,
    }
}

pub fn cluster(namespace: &str, name: &str, spec: OpenStackClusterSpec) -> OpenStackCluster {
    let mut c = OpenStackCluster::new(name, spec);
    c.metadata.namespace = Some(namespace.into());
    c
}

pub fn scope(namespace: &str, name: &str) -> ClusterScope {
    ClusterScope {
        namespace: namespace.into(),
        cluster_name: name.into(),
        machines_remaining: 0,
    }
}

/// Runs reconcile passes as the controller would (status kept between passes) until
/// one asks for no requeue: the number of passes, or the first user error as
/// `(reason, message)`. Panics after `max_passes`.
pub async fn converge(
    infra: &OpenStackClusterInfra,
    scope: &ClusterScope,
    osc: &mut OpenStackCluster,
    id: &IdentitySecret,
    max_passes: usize,
) -> Result<usize, (String, String)> {
    for pass in 1..=max_passes {
        let sink = MemSink::default();
        match infra.reconcile(scope, osc, id, &sink).await {
            Ok(outcome) => {
                osc.status = Some(outcome.status);
                if let Some((host, port)) = outcome.control_plane_endpoint {
                    osc.spec.control_plane_endpoint = Some(Box::new(ApiEndpoint { host, port }));
                }
                match outcome.requeue_after {
                    None => return Ok(pass),
                    Some(after) => tokio::time::sleep(after.min(PASS_PAUSE)).await,
                }
            }
            Err(InfraError::Transient {
                reason, message, ..
            }) => {
                eprintln!("pass {pass}: transient {reason}: {message}");
                if let Some(s) = sink.saved.lock().unwrap().take() {
                    osc.status = Some(s);
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(InfraError::User { reason, message }) => {
                if let Some(s) = sink.saved.lock().unwrap().take() {
                    osc.status = Some(s);
                }
                return Err((reason, message));
            }
            Err(e) => panic!("pass {pass}: {e}"),
        }
    }
    panic!("not converged after {max_passes} passes");
}

/// Runs delete passes until done; the number of passes.
pub async fn delete(
    infra: &OpenStackClusterInfra,
    scope: &ClusterScope,
    osc: &OpenStackCluster,
    id: &IdentitySecret,
) -> usize {
    for pass in 1..=80 {
        let sink = MemSink::default();
        match infra.delete(scope, osc, id, &sink).await {
            Ok(DeleteProgress::Done) => return pass,
            Ok(DeleteProgress::Requeue { after, .. }) => {
                tokio::time::sleep(after.min(PASS_PAUSE)).await
            }
            Err(InfraError::Transient {
                reason, message, ..
            }) => {
                eprintln!("delete pass {pass}: transient {reason}: {message}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("delete pass {pass}: {e}"),
        }
    }
    panic!("deletion did not finish");
}

/// Resources of the cluster by kind: tagged with its owner tag, plus load
/// balancers and FIPs found by name/description.
pub async fn inventory(c: &Clients, names: &ClusterNames) -> BTreeMap<&'static str, usize> {
    let tag = [("tags", owner_tag(names))];
    let n = &c.network;
    let mut m = BTreeMap::new();
    m.insert(
        "networks",
        n.list::<net::Network>(&tag).await.unwrap().len(),
    );
    m.insert("subnets", n.list::<net::Subnet>(&tag).await.unwrap().len());
    m.insert("routers", n.list::<net::Router>(&tag).await.unwrap().len());
    m.insert("ports", n.list::<net::Port>(&tag).await.unwrap().len());
    m.insert(
        "security_groups",
        n.list::<net::SecurityGroup>(&tag).await.unwrap().len(),
    );
    let fips = n
        .list::<net::FloatingIp>(&[("description", format!("{} kubeapi", names.description()))])
        .await
        .unwrap();
    m.insert("floating_ips", fips.len());
    let lbs: Vec<lb::LoadBalancer> = c
        .load_balancer
        .list(&[("name", names.load_balancer_name())])
        .await
        .unwrap();
    m.insert("load_balancers", lbs.len());
    // Named resources too, in case a tag never got added.
    let named: Vec<net::Network> = n.list(&[("name", names.network_name())]).await.unwrap();
    m.insert("networks_by_name", named.len());
    let sgs: Vec<net::SecurityGroup> = n
        .list(&[
            (
                "name",
                names.security_group_name(SecurityGroupRole::ControlPlane),
            ),
            ("name", names.security_group_name(SecurityGroupRole::Worker)),
        ])
        .await
        .unwrap();
    m.insert("security_groups_by_name", sgs.len());
    m
}

pub fn expect_one_each(inv: &BTreeMap<&'static str, usize>) {
    let expected: BTreeMap<&str, usize> = [
        ("networks", 1),
        ("subnets", 1),
        ("routers", 1),
        // the ingress VIP port
        ("ports", 1),
        ("security_groups", 2),
        ("floating_ips", 1),
        ("load_balancers", 1),
        ("networks_by_name", 1),
        ("security_groups_by_name", 2),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        inv.iter()
            .map(|(k, v)| (*k, *v))
            .collect::<BTreeMap<_, _>>(),
        expected
    );
}

pub fn expect_none(inv: &BTreeMap<&'static str, usize>) {
    assert!(inv.values().all(|v| *v == 0), "left behind: {inv:?}");
}
