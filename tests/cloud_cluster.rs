//! The OpenStackCluster cloud half against the loopback test cloud, as the
//! non-admin `member` user: create a cluster's infrastructure, check every
//! resource through the APIs, change the spec, delete, and check nothing
//! tagged is left; a status write that fails after each create, and a proxy
//! that injects 409/429/502/503 into Neutron and Octavia traffic, must not
//! cause duplicates. Skipped unless cloud tests are enabled (see
//! tests/support/cloud.rs).
//!
//! Request counts per phase are printed as `BENCH` lines:
//! `STACKHOOK_CLOUD_TESTS=1 cargo test --test with_cloud cloud_cluster:: -- --nocapture --test-threads=1`

use crate::cloud;
use crate::infra;

use futures::FutureExt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use infra::{expect_none, expect_one_each, inventory, runtime, unique, MemSink};
use stackhook::infra::api::cluster::{
    ApiServerLoadBalancer, ManagedSecurityGroups, RuleDirection, SecurityGroupRuleSpec, SubnetSpec,
};
use stackhook::infra::api::extensions::{
    ClusterSpecExtensions, IngressVipSpec, LoadBalancersSpec, NetworkingSpec,
};
use stackhook::infra::api::names::ClusterNames;
use stackhook::infra::api::types::{ApiEndpoint, OpenStackIdentityReference};
use stackhook::infra::api::{OpenStackCluster, OpenStackClusterSpec};
use stackhook::infra::cluster::{OpenStackClusterInfra, PlatformConfig};
use stackhook::infra::conditions::is_true as is_condition_true;
use stackhook::infra::seam::{ClusterInfra, ClusterScope, IdentitySecret, InfraError};
use stackhook_openstack::loadbalancing::{self as lb, LoadBalancing};
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::{CallCounts, Clients, CloudConfig};

const NAMESPACE: &str = "sh-test";

fn identity(clouds_yaml: Vec<u8>, name: &str) -> IdentitySecret {
    infra::identity(NAMESPACE, name, clouds_yaml, cloud::MEMBER)
}

fn spec(cidr: &str) -> OpenStackClusterSpec {
    OpenStackClusterSpec {
        managed_subnets: vec![SubnetSpec {
            cidr: cidr.into(),
            dns_nameservers: vec!["192.0.2.53".into()],
            allocation_pools: vec![],
        }],
        managed_security_groups: Some(ManagedSecurityGroups::default()),
        api_server_load_balancer: Some(Box::new(ApiServerLoadBalancer::default())),
        tags: vec!["stackhook-test".into()],
        identity_ref: OpenStackIdentityReference {
            name: "cloud-creds".into(),
            cloud_name: cloud::MEMBER.into(),
            ..Default::default()
        },
        extensions: Some(Box::new(ClusterSpecExtensions {
            networking: Some(NetworkingSpec {
                kube_network_plugin: Some("cilium".into()),
                ..Default::default()
            }),
            load_balancers: Some(LoadBalancersSpec {
                ingress: Some(IngressVipSpec {
                    enabled: Some(true),
                }),
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn cluster(name: &str, spec: OpenStackClusterSpec) -> OpenStackCluster {
    infra::cluster(NAMESPACE, name, spec)
}

fn scope(name: &str) -> ClusterScope {
    infra::scope(NAMESPACE, name)
}

fn platform() -> PlatformConfig {
    PlatformConfig {
        ntp_server: Some("ntp.example.test".into()),
        management_vip: Some("192.0.2.10".into()),
    }
}

fn counts(infra: &OpenStackClusterInfra, id: &IdentitySecret) -> CallCounts {
    infra.clients_for(id).unwrap().session.stats().snapshot()
}

/// Converges within `max_passes`; a user error fails the test.
async fn converge(
    infra: &OpenStackClusterInfra,
    scope: &ClusterScope,
    osc: &mut OpenStackCluster,
    id: &IdentitySecret,
    max_passes: usize,
) -> usize {
    infra::converge(infra, scope, osc, id, max_passes)
        .await
        .unwrap_or_else(|(reason, message)| panic!("user error {reason}: {message}"))
}

/// An independent client for checks (own session, own counters).
fn checker(clouds_yaml: &[u8]) -> Clients {
    infra::checker(clouds_yaml, cloud::MEMBER)
}

fn bench(phase: &str, passes: usize, c: CallCounts) {
    println!(
        "BENCH {phase}: passes={passes} reads={} writes={} auths={} retries={}",
        c.reads, c.writes, c.auths, c.retries
    );
}

#[test]
fn creates_checks_updates_and_deletes_a_cluster() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let name = unique("cc");
        let names = ClusterNames::new(NAMESPACE, &name);
        let id = identity(yaml.clone(), "cloud-creds");
        let infra = OpenStackClusterInfra::new(platform());
        let check = checker(&yaml);
        let scope = scope(&name);
        expect_none(&inventory(&check, &names).await);

        // Create.
        let mut osc = cluster(&name, spec("10.77.0.0/24"));
        let before = counts(&infra, &id);
        let started = std::time::Instant::now();
        let passes = converge(&infra, &scope, &mut osc, &id, 60).await;
        bench("create", passes, counts(&infra, &id) - before);
        println!(
            "BENCH create: seconds={:.1}",
            started.elapsed().as_secs_f64()
        );
        expect_one_each(&inventory(&check, &names).await);

        let status = osc.status.clone().unwrap();
        assert!(status.ready);
        for c in [
            "Ready",
            "NetworkReady",
            "SecurityGroupsReady",
            "APIEndpointReady",
        ] {
            assert!(
                is_condition_true(&status.conditions, c),
                "{c}: {:?}",
                status.conditions
            );
        }
        let n = &check.network;
        // Network, subnet, router and its interface.
        let network_status = status.network.clone().unwrap();
        let network: net::Network = n.get(&network_status.network.id).await.unwrap();
        assert_eq!(network.name, names.network_name());
        assert!(network.tags.contains(&"stackhook-test".to_owned()));
        let subnet: net::Subnet = n.get(&network_status.subnets[0].id).await.unwrap();
        assert_eq!(subnet.cidr, "10.77.0.0/24");
        assert_eq!(subnet.network_id, network.id);
        assert_eq!(subnet.dns_nameservers, ["192.0.2.53"]);
        let public: Vec<net::Network> = n
            .list(&[("router:external", "true".to_owned())])
            .await
            .unwrap();
        assert_eq!(status.external_network.as_ref().unwrap().id, public[0].id);
        let router: net::Router = n.get(&status.router.as_ref().unwrap().id).await.unwrap();
        assert_eq!(
            router.external_gateway_info.unwrap().network_id,
            public[0].id
        );
        let router_ports: Vec<net::Port> = n
            .list(&[
                ("device_id", router.id.clone()),
                ("network_id", network.id.clone()),
            ])
            .await
            .unwrap();
        assert!(router_ports
            .iter()
            .any(|p| p.fixed_ips.iter().any(|f| f.subnet_id == subnet.id)));

        // Security groups and their rules.
        let cp_id = status.control_plane_security_group.clone().unwrap().id;
        let wk_id = status.worker_security_group.clone().unwrap().id;
        let cp: net::SecurityGroup = n.get(&cp_id).await.unwrap();
        let wk: net::SecurityGroup = n.get(&wk_id).await.unwrap();
        let has = |g: &net::SecurityGroup, proto: &str, port: i64, remote: Option<&str>| {
            g.security_group_rules.iter().any(|r| {
                r.direction == "ingress"
                    && r.protocol.as_deref() == Some(proto)
                    && r.port_range_min == Some(port)
                    && r.remote_group_id.as_deref() == remote
            })
        };
        assert!(has(&cp, "tcp", 6443, None));
        assert!(has(&cp, "tcp", 2379, Some(&cp_id)));
        assert!(has(&cp, "tcp", 10250, Some(&wk_id)));
        assert!(has(&wk, "tcp", 10250, Some(&cp_id)));
        assert!(has(&wk, "udp", 30000, Some(&cp_id)));
        assert!(has(&wk, "udp", 8472, Some(&cp_id)), "Cilium VXLAN");
        assert!(has(&cp, "tcp", 4240, Some(&wk_id)), "Cilium health");

        // Load balancer, listener, pool, monitor, floating IP.
        let lb_status = status.api_server_load_balancer.clone().unwrap();
        let balancer: lb::LoadBalancer = check.load_balancer.get(&lb_status.id).await.unwrap();
        assert_eq!(balancer.provisioning_status, "ACTIVE");
        assert_eq!(balancer.vip_subnet_id, subnet.id);
        let listeners: Vec<lb::Listener> = check
            .load_balancer
            .list(&[("loadbalancer_id", balancer.id.clone())])
            .await
            .unwrap();
        assert_eq!(listeners.len(), 1);
        assert_eq!(listeners[0].protocol_port, 6443);
        assert_eq!(listeners[0].name, names.load_balancer_port_name(6443));
        let pools: Vec<lb::Pool> = check
            .load_balancer
            .list(&[("loadbalancer_id", balancer.id.clone())])
            .await
            .unwrap();
        let monitor: lb::HealthMonitor = check
            .load_balancer
            .get(pools[0].healthmonitor_id.as_deref().unwrap())
            .await
            .unwrap();
        assert_eq!(
            (
                monitor.delay,
                monitor.timeout,
                monitor.max_retries,
                monitor.max_retries_down
            ),
            (10, 5, 5, 3)
        );
        let fips: Vec<net::FloatingIp> = n
            .list(&[("floating_ip_address", lb_status.ip.clone())])
            .await
            .unwrap();
        assert_eq!(fips.len(), 1);
        assert_eq!(fips[0].floating_network_id, public[0].id);
        let endpoint = osc.spec.control_plane_endpoint.clone().unwrap();
        assert_eq!(
            (endpoint.host.as_str(), endpoint.port),
            (lb_status.ip.as_str(), 6443)
        );
        assert_eq!(lb_status.internal_ip, balancer.vip_address);

        // Failure domains.
        let fd: Vec<&String> = status.failure_domains.keys().collect();
        assert_eq!(fd, ["az1", "az2"]);
        assert!(status
            .failure_domains
            .values()
            .all(|f| f.control_plane == Some(true)));

        // Extensions.
        let token = check.session.token().await.unwrap();
        let project = token.project.clone().unwrap();
        let ext = status.extensions.clone().unwrap();
        let cilium = ext.networking.unwrap().cilium.unwrap();
        assert_eq!(cilium.project_id.as_deref(), Some(project.id.as_str()));
        assert_eq!(
            cilium.default_subnet_id.as_deref(),
            Some(subnet.id.as_str())
        );
        assert_eq!(cilium.security_group_ids, [cp_id.clone(), wk_id.clone()]);
        let lbs = ext.load_balancers.unwrap();
        assert_eq!(
            lbs.control_plane.unwrap().vip.as_deref(),
            Some(balancer.vip_address.as_str())
        );
        let ingress_vip = lbs.ingress.unwrap().vip.unwrap();
        assert!(ingress_vip.starts_with("10.77.0."), "{ingress_vip}");
        let vip_ports: Vec<net::Port> = n
            .list(&[("name", names.ingress_vip_port_name())])
            .await
            .unwrap();
        assert_eq!(vip_ports[0].fixed_ips[0].ip_address, ingress_vip);
        let os = ext.open_stack.unwrap();
        assert_eq!(os.keystone.as_deref(), Some("http://127.0.0.1:17000/v3"));
        assert_eq!(os.nova.as_deref(), Some("http://127.0.0.1:17001/v2.1"));
        assert_eq!(os.neutron.as_deref(), Some("http://127.0.0.1:17004"));
        assert!(os
            .cinder
            .as_deref()
            .unwrap()
            .starts_with("http://127.0.0.1:17006/v3/"));
        assert_eq!(os.project.as_deref(), Some("stackhook"));
        assert_eq!(project.name, "stackhook");
        assert_eq!(os.project_domain.as_deref(), Some("Default"));
        assert_eq!(os.region.as_deref(), Some("RegionOne"));
        assert_eq!(os.mgmt.as_deref(), Some(lb_status.ip.as_str()));
        let platform = ext.platform.unwrap();
        assert_eq!(
            platform.ntp.unwrap().server.as_deref(),
            Some("ntp.example.test")
        );
        assert_eq!(
            platform.management.unwrap().vip.as_deref(),
            Some("192.0.2.10")
        );

        // Steady state: nothing to write.
        let before = counts(&infra, &id);
        let passes = converge(&infra, &scope, &mut osc, &id, 1).await;
        let steady = counts(&infra, &id) - before;
        bench("steady", passes, steady);
        assert_eq!(steady.writes, 0, "an unchanged cluster made writes");
        assert!(steady.reads <= 15, "{steady:?}");
        assert_eq!(steady.auths, 0);

        // Spec change: allowed CIDRs on the listener and one more rule.
        let managed = osc
            .spec
            .managed_security_groups
            .get_or_insert_with(Default::default);
        managed
            .all_nodes_security_group_rules
            .push(SecurityGroupRuleSpec {
                name: "node-exporter".into(),
                direction: RuleDirection::Ingress,
                protocol: Some("tcp".into()),
                port_range_min: Some(9100),
                port_range_max: Some(9100),
                remote_ip_prefix: Some("10.0.0.0/8".into()),
                ..Default::default()
            });
        osc.spec
            .api_server_load_balancer
            .as_mut()
            .unwrap()
            .allowed_cidrs = vec!["192.0.2.0/24".into()];
        let before = counts(&infra, &id);
        let passes = converge(&infra, &scope, &mut osc, &id, 30).await;
        bench("spec-change", passes, counts(&infra, &id) - before);
        for gid in [&cp_id, &wk_id] {
            let g: net::SecurityGroup = n.get(gid).await.unwrap();
            assert!(g
                .security_group_rules
                .iter()
                .any(|r| r.port_range_min == Some(9100)
                    && r.remote_ip_prefix.as_deref() == Some("10.0.0.0/8")));
        }
        let listener: lb::Listener = check.load_balancer.get(&listeners[0].id).await.unwrap();
        let mut allowed = listener.allowed_cidrs.unwrap_or_default();
        allowed.sort();
        assert!(allowed.contains(&"192.0.2.0/24".to_owned()), "{allowed:?}");
        assert!(allowed.contains(&"10.77.0.0/24".to_owned()), "{allowed:?}");
        expect_one_each(&inventory(&check, &names).await);
        let before = counts(&infra, &id);
        converge(&infra, &scope, &mut osc, &id, 1).await;
        assert_eq!((counts(&infra, &id) - before).writes, 0);

        // A node port may carry the ingress VIP; deletion must still clean up
        // ports named after the cluster.
        let node_port: net::Port = n
            .create(serde_json::json!({"name": format!("{name}-node-0"), "network_id": network.id}))
            .await
            .unwrap();
        let with_vip = n.allow_address(&node_port.id, &ingress_vip).await.unwrap();
        assert_eq!(with_vip.allowed_address_pairs.len(), 1);
        assert_eq!(with_vip.allowed_address_pairs[0].ip_address, ingress_vip);
        let again = n.allow_address(&node_port.id, &ingress_vip).await.unwrap();
        assert_eq!(again.allowed_address_pairs.len(), 1);

        // Delete.
        let before = counts(&infra, &id);
        let passes = infra::delete(&infra, &scope, &osc, &id).await;
        bench("delete", passes, counts(&infra, &id) - before);
        expect_none(&inventory(&check, &names).await);
        assert!(n
            .get::<net::Port>(&node_port.id)
            .await
            .unwrap_err()
            .is_not_found());
    });
}

#[test]
fn a_crash_after_every_create_leaves_no_duplicates() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let name = unique("crash");
        let names = ClusterNames::new(NAMESPACE, &name);
        let id = identity(yaml.clone(), "cloud-creds");
        let infra = OpenStackClusterInfra::new(platform());
        let check = checker(&yaml);
        let scope = scope(&name);
        let mut osc = cluster(&name, spec("10.78.0.0/24"));
        // The status never gets written: every pass starts from nothing and
        // dies at its first status write, i.e. right after its first create.
        let mut crashes = 0;
        for _ in 0..40 {
            let sink = MemSink {
                fail_first: true,
                ..Default::default()
            };
            match infra.reconcile(&scope, &osc, &id, &sink).await {
                Err(InfraError::Sink(_)) => crashes += 1,
                Ok(o) if o.requeue_after.is_none() => break,
                Ok(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                Err(InfraError::Transient { .. }) => {
                    tokio::time::sleep(Duration::from_millis(300)).await
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(crashes >= 6, "only {crashes} simulated crashes");
        assert!(osc.status.is_none());
        converge(&infra, &scope, &mut osc, &id, 30).await;
        expect_one_each(&inventory(&check, &names).await);
        infra::delete(&infra, &scope, &osc, &id).await;
        expect_none(&inventory(&check, &names).await);
    });
}

/// Forwards to one upstream; every `every`-th request fails: POSTs are
/// forwarded first and their answer replaced by 502 (a lost response),
/// other requests get 409, 503, 429 or 502 without reaching the service.
struct FaultProxy {
    upstream: String,
    every: u64,
    seen: AtomicU64,
    injected: AtomicU64,
    http: reqwest::Client,
    /// While set, requests are accepted and never answered, as a stopped service
    /// behaves; `held` counts them.
    hang: std::sync::atomic::AtomicBool,
    held: AtomicU64,
    /// When the first held request arrived.
    held_since: std::sync::Mutex<Option<std::time::Instant>>,
}

async fn proxy_handler(
    axum::extract::State(p): axum::extract::State<Arc<FaultProxy>>,
    req: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let n = p.seen.fetch_add(1, Ordering::SeqCst) + 1;
    if p.hang.load(Ordering::SeqCst) {
        p.held.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut since) = p.held_since.lock() {
            since.get_or_insert_with(std::time::Instant::now);
        }
        while p.hang.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        return (axum::http::StatusCode::SERVICE_UNAVAILABLE, "stopped").into_response();
    }
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 16 << 20)
        .await
        .unwrap_or_default();
    let inject = n % p.every == 0;
    let codes = [409u16, 503, 429, 502];
    if inject && parts.method != reqwest::Method::POST {
        p.injected.fetch_add(1, Ordering::SeqCst);
        let code = codes[(n / p.every) as usize % codes.len()];
        return (
            axum::http::StatusCode::from_u16(code).unwrap(),
            [("retry-after", "0")],
            format!("{{\"message\": \"injected {code}\"}}"),
        )
            .into_response();
    }
    let url = format!(
        "{}{}",
        p.upstream,
        parts
            .uri
            .path_and_query()
            .map(|x| x.as_str())
            .unwrap_or("/")
    );
    let mut fwd = p.http.request(parts.method.clone(), url).body(body);
    for (k, v) in parts.headers.iter() {
        if k != "host" && k != "content-length" {
            fwd = fwd.header(k, v);
        }
    }
    let resp = match fwd.send().await {
        Ok(r) => r,
        Err(e) => return (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    if inject {
        p.injected.fetch_add(1, Ordering::SeqCst);
        return (axum::http::StatusCode::BAD_GATEWAY, "lost response").into_response();
    }
    let status = resp.status();
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let bytes = resp.bytes().await.unwrap_or_default();
    (status, [("content-type", ct)], bytes).into_response()
}

/// clouds.yaml with these keys set on the member's entry.
fn member_with(yaml: &[u8], keys: &[(&str, serde_json::Value)]) -> Vec<u8> {
    let mut doc: serde_json::Value = serde_saphyr::from_slice(yaml).unwrap();
    let entry = doc["clouds"][cloud::MEMBER].as_object_mut().unwrap();
    for (k, v) in keys {
        entry.insert((*k).into(), v.clone());
    }
    serde_saphyr::to_string(&doc).unwrap().into_bytes()
}

async fn start_proxy(upstream: &str, every: u64) -> (SocketAddr, Arc<FaultProxy>) {
    let p = Arc::new(FaultProxy {
        upstream: upstream.into(),
        every,
        seen: AtomicU64::new(0),
        injected: AtomicU64::new(0),
        http: reqwest::Client::new(),
        hang: std::sync::atomic::AtomicBool::new(false),
        held: AtomicU64::new(0),
        held_since: std::sync::Mutex::new(None),
    });
    let app = axum::Router::new()
        .fallback(proxy_handler)
        .with_state(p.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, p)
}

#[test]
fn injected_faults_are_retried_without_duplicates() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let (net_addr, net_proxy) = start_proxy("http://127.0.0.1:17004", 4).await;
        let (lb_addr, lb_proxy) = start_proxy("http://127.0.0.1:17005", 3).await;
        let faulty = member_with(
            &yaml,
            &[
                (
                    "network_endpoint_override",
                    format!("http://{net_addr}").into(),
                ),
                (
                    "load_balancer_endpoint_override",
                    format!("http://{lb_addr}").into(),
                ),
            ],
        );

        let name = unique("fault");
        let names = ClusterNames::new(NAMESPACE, &name);
        let id = identity(faulty, "cloud-creds-proxied");
        let infra = OpenStackClusterInfra::new(platform());
        let check = checker(&yaml);
        let scope = scope(&name);
        let mut osc = cluster(&name, spec("10.79.0.0/24"));
        let before = counts(&infra, &id);
        let passes = converge(&infra, &scope, &mut osc, &id, 100).await;
        bench("create-with-faults", passes, counts(&infra, &id) - before);
        let injected =
            net_proxy.injected.load(Ordering::SeqCst) + lb_proxy.injected.load(Ordering::SeqCst);
        assert!(
            net_proxy.injected.load(Ordering::SeqCst) >= 5,
            "too few Neutron faults"
        );
        assert!(
            lb_proxy.injected.load(Ordering::SeqCst) >= 2,
            "too few Octavia faults"
        );
        println!("injected faults: {injected}");
        assert!(osc.status.as_ref().unwrap().ready);
        expect_one_each(&inventory(&check, &names).await);
        infra::delete(&infra, &scope, &osc, &id).await;
        expect_none(&inventory(&check, &names).await);
    });
}

#[test]
fn both_auth_types_reach_the_same_project_and_catalog() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let mut projects = Vec::new();
        for entry in [cloud::MEMBER, cloud::MEMBER_APPCRED] {
            let config = CloudConfig::from_clouds_yaml(&yaml, entry, None).unwrap();
            let clients = Clients::new(config, None).unwrap();
            let token = clients.session.token().await.unwrap();
            projects.push(token.project.clone().unwrap());
            let networks = clients.session.endpoint(&["network"]).await.unwrap();
            assert_eq!(networks, "http://127.0.0.1:17004");
            // A second call reuses the token.
            clients.session.token().await.unwrap();
            assert_eq!(clients.session.stats().snapshot().auths, 1);
        }
        assert_eq!(projects[0], projects[1]);
        assert_eq!(projects[0].name, "stackhook");
        // A region the catalog lacks is a clear error, not a wrong endpoint.
        let config = CloudConfig::from_clouds_yaml(&yaml, cloud::MEMBER, Some("Nowhere")).unwrap();
        let clients = Clients::new(config, None).unwrap();
        let err = clients.session.endpoint(&["network"]).await.unwrap_err();
        assert!(err.to_string().contains("Nowhere"), "{err}");
        // Wrong credentials are a user error, not a retryable one.
        let bad = String::from_utf8(yaml.clone())
            .unwrap()
            .replace("password: stackhook-cloud", "password: wrong");
        let config = CloudConfig::from_clouds_yaml(bad.as_bytes(), cloud::MEMBER, None).unwrap();
        let clients = Clients::new(config, None).unwrap();
        let err = clients.session.token().await.unwrap_err();
        assert!(err.is_auth() && !err.is_retryable(), "{err}");
    });
}

#[test]
fn existing_network_with_a_fixed_ip_and_a_floating_ip_without_load_balancer() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let check = checker(&yaml);
        let n = &check.network;
        let infra = OpenStackClusterInfra::new(PlatformConfig::default());
        let id = identity(yaml.clone(), "cloud-creds");

        // 1. The user's network, found by filter; the endpoint is a fixed IP.
        let name = unique("byo");
        let names = ClusterNames::new(NAMESPACE, &name);
        let user_net: net::Network = n
            .create(serde_json::json!({"name": format!("user-net-{name}")}))
            .await
            .unwrap();
        let user_subnet: net::Subnet = n
            .create(serde_json::json!({"network_id": user_net.id, "ip_version": 4, "cidr": "10.80.0.0/24"}))
            .await
            .unwrap();
        let mut s = spec("unused");
        s.managed_subnets.clear();
        s.api_server_load_balancer = None;
        s.disable_api_server_floating_ip = Some(true);
        s.api_server_fixed_ip = Some("10.80.0.5".into());
        s.network = Some(Box::new(stackhook::infra::api::types::NetworkParam {
            id: None,
            filter: Some(stackhook::infra::api::types::NetworkFilter {
                name: Some(user_net.name.clone()),
                ..Default::default()
            }),
        }));
        let mut osc = cluster(&name, s);
        let scope_ = scope(&name);
        converge(&infra, &scope_, &mut osc, &id, 10).await;
        let status = osc.status.clone().unwrap();
        assert!(status.ready);
        assert_eq!(status.network.as_ref().unwrap().network.id, user_net.id);
        assert_eq!(status.network.as_ref().unwrap().subnets[0].id, user_subnet.id);
        assert!(status.router.is_none());
        assert_eq!(
            osc.spec.control_plane_endpoint.as_deref(),
            Some(&ApiEndpoint { host: "10.80.0.5".into(), port: 6443 })
        );
        let ext = status.extensions.unwrap();
        assert_eq!(
            ext.load_balancers.as_ref().unwrap().control_plane.as_ref().unwrap().vip.as_deref(),
            Some("10.80.0.5")
        );
        assert!(ext.load_balancers.unwrap().ingress.unwrap().vip.unwrap().starts_with("10.80.0."));
        infra::delete(&infra, &scope_, &osc, &id).await;
        expect_none(&inventory(&check, &names).await);
        // The user's network is theirs: it stays.
        let still: net::Network = n.get(&user_net.id).await.unwrap();
        assert_eq!(still.id, user_net.id);
        n.delete::<net::Network>(&user_net.id).await.unwrap();

        // 2. Managed network, no load balancer: a floating IP alone.
        let name = unique("fip");
        let names = ClusterNames::new(NAMESPACE, &name);
        let mut s = spec("10.81.0.0/24");
        s.api_server_load_balancer = None;
        let mut osc = cluster(&name, s);
        let scope_ = scope(&name);
        converge(&infra, &scope_, &mut osc, &id, 10).await;
        let status = osc.status.clone().unwrap();
        assert!(status.ready && status.api_server_load_balancer.is_none());
        let host = osc.spec.control_plane_endpoint.clone().unwrap().host;
        let fips: Vec<net::FloatingIp> = n
            .list(&[("floating_ip_address", host.clone())])
            .await
            .unwrap();
        assert_eq!(fips.len(), 1);
        assert!(host.starts_with("203.0.113."), "{host}");
        // A second pass keeps the same address and writes nothing.
        let before = counts(&infra, &id);
        converge(&infra, &scope_, &mut osc, &id, 1).await;
        assert_eq!((counts(&infra, &id) - before).writes, 0);
        assert_eq!(osc.spec.control_plane_endpoint.clone().unwrap().host, host);
        infra::delete(&infra, &scope_, &osc, &id).await;
        expect_none(&inventory(&check, &names).await);
    });
}

/// Neutron's own view of a floating IP, with the `revision_number` every write bumps.
async fn raw_fip(c: &Clients, id: &str) -> serde_json::Value {
    c.session
        .request(
            reqwest::Method::GET,
            &["network"],
            &format!("/v2.0/floatingips/{id}"),
            &[],
            None,
            &vec![],
        )
        .await
        .expect("floating IP")
        .expect("a body")["floatingip"]
        .clone()
}

/// CAPO's second pass can leave a second floating IP with the cluster's description,
/// unattached, beside the one on the VIP port, and record the unattached one's address.
/// The VIP port's own floating IP is the API address: adopted; the stray one is
/// reported and never written to.
#[test]
fn a_stray_floating_ip_beside_the_attached_one_is_never_written_to() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let check = checker(&yaml);
        let n = &check.network;
        let infra = OpenStackClusterInfra::new(PlatformConfig::default());
        let id = identity(yaml.clone(), "cloud-creds");
        let name = unique("stray");
        let names = ClusterNames::new(NAMESPACE, &name);
        let mut s = spec("10.82.0.0/24");
        s.extensions = None;
        let mut osc = cluster(&name, s);
        let scope_ = scope(&name);
        converge(&infra, &scope_, &mut osc, &id, 30).await;
        let status = osc.status.clone().unwrap();
        let lb = status.api_server_load_balancer.clone().unwrap();
        let attached: Vec<net::FloatingIp> = n
            .list(&[("floating_ip_address", lb.ip.clone())])
            .await
            .unwrap();
        assert_eq!(attached.len(), 1);
        let attached = attached[0].clone();
        let vip_port = attached.port_id.clone().expect("the API floating IP on the VIP port");
        let ext = status.external_network.clone().unwrap().id;
        let stray: net::FloatingIp = n
            .create(serde_json::json!({"floating_network_id": ext, "description": attached.description}))
            .await
            .unwrap();
        let stray_before = raw_fip(&check, &stray.id).await;
        // The address the status recorded is the stray one.
        osc.status
            .as_mut()
            .unwrap()
            .api_server_load_balancer
            .as_mut()
            .unwrap()
            .ip = stray.floating_ip_address.clone();

        let outcome = std::panic::AssertUnwindSafe(async {
            let passes = converge(&infra, &scope_, &mut osc, &id, 5).await;
            let lb = osc.status.clone().unwrap().api_server_load_balancer.unwrap();
            assert_eq!(lb.ip, attached.floating_ip_address, "the attached address is the API's");
            let stray_after = raw_fip(&check, &stray.id).await;
            assert_eq!(
                stray_after["revision_number"], stray_before["revision_number"],
                "the stray floating IP was written to: {stray_after}"
            );
            assert!(stray_after["port_id"].is_null(), "{stray_after}");
            let on_port: Vec<net::FloatingIp> = n
                .list(&[("port_id", vip_port.clone())])
                .await
                .unwrap();
            assert_eq!(on_port.len(), 1);
            assert_eq!(on_port[0].id, attached.id);
            // Settled: the next pass writes nothing.
            let before = counts(&infra, &id);
            converge(&infra, &scope_, &mut osc, &id, 1).await;
            let again = counts(&infra, &id) - before;
            assert_eq!(again.writes, 0, "{again:?}");
            bench("stray floating IP adopted", passes, again);
        })
        .catch_unwind()
        .await;
        let _ = n.delete::<net::FloatingIp>(&stray.id).await;
        infra::delete(&infra, &scope_, &osc, &id).await;
        expect_none(&inventory(&check, &names).await);
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

/// Neutron accepts connections and never answers (as with its processes stopped):
/// a pass gives up on the one request after the cloud's `api_timeout`, without
/// sending it again, and says in the Ready condition which service did not answer;
/// a cluster whose identity reaches Neutron directly converges at the same time in
/// the same process (nothing is shared across identities); once Neutron answers again the
/// first cluster converges with nothing duplicated.
#[test]
fn a_neutron_that_never_answers_holds_a_pass_only_until_its_deadline() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let (net_addr, proxy) = start_proxy("http://127.0.0.1:17004", u64::MAX).await;
        let hung = member_with(
            &yaml,
            &[
                (
                    "network_endpoint_override",
                    format!("http://{net_addr}").into(),
                ),
                ("api_timeout", 2.into()),
            ],
        );
        let infra = OpenStackClusterInfra::new(platform());
        let check = checker(&yaml);

        let name = unique("hung");
        let names = ClusterNames::new(NAMESPACE, &name);
        let id = identity(hung, "cloud-creds-hung");
        let scope_a = scope(&name);
        let mut osc = cluster(&name, spec("10.83.0.0/24"));
        let other = unique("beside");
        let other_names = ClusterNames::new(NAMESPACE, &other);
        let other_id = identity(yaml.clone(), "cloud-creds");
        let scope_b = scope(&other);
        let mut s = spec("10.84.0.0/24");
        s.api_server_load_balancer = None;
        s.extensions = None;
        let mut beside = cluster(&other, s);

        proxy.hang.store(true, Ordering::SeqCst);
        let sink = MemSink::default();
        let (hung_pass, beside_passes) = tokio::join!(
            async {
                let r = infra.reconcile(&scope_a, &osc, &id, &sink).await;
                // Held from the hung request's arrival, not from the pass's start:
                // the token and the lookups before it take what the machine's load
                // makes them take.
                let since = *proxy.held_since.lock().unwrap();
                (r, since.map(|t| t.elapsed()))
            },
            converge(&infra, &scope_b, &mut beside, &other_id, 20),
        );
        let (result, took) = hung_pass;
        match result {
            Err(InfraError::Transient {
                message,
                unavailable,
                ..
            }) => {
                assert!(unavailable, "{message}");
                assert!(
                    message.contains("OpenStack network service (Neutron) is not answering")
                        && message.contains("no answer within 2 s"),
                    "{message}"
                );
            }
            other => panic!("a pass against a hung Neutron: {other:?}"),
        }
        // One request, given up on at its deadline, not sent again.
        assert_eq!(proxy.held.load(Ordering::SeqCst), 1);
        let took = took.expect("a request was held");
        assert!(
            took < Duration::from_secs(4),
            "the pass ended {took:?} after its request was held (api_timeout 2 s)"
        );
        let saved = sink
            .saved
            .lock()
            .unwrap()
            .clone()
            .expect("the outage in status");
        let ready = saved
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("a Ready condition");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("OpenStackUnavailable"));
        assert!(
            ready
                .message
                .as_deref()
                .is_some_and(|m| m.contains("network service (Neutron)")),
            "{ready:?}"
        );
        println!(
            "BENCH hung Neutron: pass gave up {:.1} s after its request was held (api_timeout 2 s), {} request held; \
             a cluster of another identity converged beside it in {beside_passes} pass(es)",
            took.as_secs_f64(),
            proxy.held.load(Ordering::SeqCst)
        );
        assert!(beside.status.as_ref().unwrap().ready);

        // Neutron answers again: the cluster comes up once, Ready again.
        proxy.hang.store(false, Ordering::SeqCst);
        osc.status = Some(saved);
        converge(&infra, &scope_a, &mut osc, &id, 60).await;
        let status = osc.status.clone().unwrap();
        assert!(status.ready);
        assert!(is_condition_true(&status.conditions, "Ready"));
        expect_one_each(&inventory(&check, &names).await);
        infra::delete(&infra, &scope_a, &osc, &id).await;
        infra::delete(&infra, &scope_b, &beside, &other_id).await;
        expect_none(&inventory(&check, &names).await);
        expect_none(&inventory(&check, &other_names).await);
    });
}

/// The `public` network's one subnet, as the cloud's `up` creates it.
async fn public_subnet(c: &Clients) -> (net::Network, net::Subnet) {
    let n = &c.network;
    let public: Vec<net::Network> = n
        .list(&[("router:external", "true".to_owned())])
        .await
        .unwrap();
    assert_eq!(public.len(), 1, "{public:?}");
    let subnets: Vec<net::Subnet> = n
        .list(&[("network_id", public[0].id.clone())])
        .await
        .unwrap();
    assert_eq!(subnets.len(), 1, "{subnets:?}");
    (public[0].clone(), subnets[0].clone())
}

fn condition(osc: &OpenStackCluster, type_: &str) -> stackhook::infra::api::types::Condition {
    osc.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_).cloned())
        .unwrap_or_else(|| panic!("no {type_} condition: {:?}", osc.status))
}

/// `spec.externalRouterIPs` (CAPO's `setRouterExternalIPs`): the managed router's
/// gateway on the external network gets one fixed IP per entry, its subnet found by
/// filter on that network or given by ID, at the entry's `fixedIP` when set; the
/// router's status lists the gateway's addresses. Neutron's default policy lets only
/// admins choose external fixed IPs: as the member, its refusal is the user's to see,
/// in `RouterReady` and `Ready`, naming the field.
#[test]
fn external_router_ips_are_the_router_gateway_s_fixed_ips() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let infra = OpenStackClusterInfra::new(PlatformConfig::default());
        let member = checker(&yaml);
        let admin = infra::checker(&yaml, cloud::ADMIN);
        let (public, public_subnet) = public_subnet(&member).await;
        // Outside the allocation pool (.10-.250): no floating IP can take it.
        let fixed = "203.0.113.253";
        let router_ips = |s: &mut OpenStackClusterSpec| {
            s.api_server_load_balancer = None;
            s.extensions = None;
            s.external_router_ips = serde_json::from_value(serde_json::json!([
                {"fixedIP": fixed, "subnet": {"filter": {"name": public_subnet.name}}},
                {"subnet": {"id": public_subnet.id}},
            ]))
            .unwrap();
        };

        // 1. The member: Neutron refuses by policy; the condition says so.
        let name = unique("rip-member");
        let names = ClusterNames::new(NAMESPACE, &name);
        let id = identity(yaml.clone(), "cloud-creds");
        let scope_ = scope(&name);
        let mut s = spec("10.87.0.0/24");
        router_ips(&mut s);
        let mut osc = cluster(&name, s);
        let outcome = std::panic::AssertUnwindSafe(async {
            let (reason, message) = infra::converge(&infra, &scope_, &mut osc, &id, 10)
                .await
                .expect_err("the member may not choose external fixed IPs");
            assert_eq!(reason, "RouterCreateFailed");
            assert!(
                message.starts_with("spec.externalRouterIPs: Neutron refused the router's external gateway fixed IPs (HTTP 403, by policy): ")
                    && message.contains("external_gateway_info:external_fixed_ips")
                    && message.contains("disallowed by policy"),
                "{message}"
            );
            let ready = condition(&osc, "Ready");
            assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("RouterCreateFailed")));
            assert_eq!(ready.message.as_deref(), Some(message.as_str()), "{ready:?}");
            let router = condition(&osc, "RouterReady");
            assert_eq!(router.status, "False", "{router:?}");
            assert!(router.message.as_deref().is_some_and(|m| m.contains(&message)), "{router:?}");
        })
        .catch_unwind()
        .await;
        infra::delete(&infra, &scope_, &osc, &id).await;
        expect_none(&inventory(&member, &names).await);
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }

        // 2. An admin: the gateway has both addresses, the status lists them.
        let name = unique("rip-admin");
        let names = ClusterNames::new(NAMESPACE, &name);
        let id = infra::identity(NAMESPACE, "cloud-creds-admin", yaml.clone(), cloud::ADMIN);
        let scope_ = scope(&name);
        let mut s = spec("10.88.0.0/24");
        s.identity_ref.cloud_name = cloud::ADMIN.into();
        router_ips(&mut s);
        let mut osc = cluster(&name, s);
        let outcome = std::panic::AssertUnwindSafe(async {
            converge(&infra, &scope_, &mut osc, &id, 20).await;
            let status = osc.status.clone().unwrap();
            assert!(status.ready);
            assert!(is_condition_true(&status.conditions, "RouterReady"));
            let recorded = status.router.clone().unwrap();
            let router: net::Router = admin.network.get(&recorded.id).await.unwrap();
            let gateway = router.external_gateway_info.clone().expect("a gateway");
            assert_eq!(gateway.network_id, public.id);
            assert_eq!(gateway.external_fixed_ips.len(), 2, "{gateway:?}");
            assert!(gateway
                .external_fixed_ips
                .iter()
                .all(|f| f.subnet_id == public_subnet.id));
            assert!(
                gateway.external_fixed_ips.iter().any(|f| f.ip_address == fixed),
                "{gateway:?}"
            );
            let mut on_router: Vec<String> = gateway
                .external_fixed_ips
                .iter()
                .map(|f| f.ip_address.clone())
                .collect();
            let mut in_status = recorded.ips.clone();
            on_router.sort();
            in_status.sort();
            assert_eq!(in_status, on_router, "status.router.ips");
            // Settled: the gateway is not written again.
            let before = counts(&infra, &id);
            converge(&infra, &scope_, &mut osc, &id, 1).await;
            let again = counts(&infra, &id) - before;
            assert_eq!(again.writes, 0, "{again:?}");
            assert_eq!(osc.status.as_ref().unwrap().router.as_ref().unwrap().ips, recorded.ips);
        })
        .catch_unwind()
        .await;
        infra::delete(&infra, &scope_, &osc, &id).await;
        expect_none(&inventory(&admin, &names).await);
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

/// `spec.apiServerLoadBalancer.network` and `.subnets` (CAPO's
/// `resolveLoadBalancerNetwork` and `getOrCreateAPILoadBalancer`): the VIP is on that
/// network, on the first subnet given (found within the network, by filter or ID),
/// not on the cluster's subnet; `status.apiServerLoadBalancer.loadBalancerNetwork`
/// reports it. A subnet off that network is the user's to fix, naming the field,
/// before any load balancer is made.
#[test]
fn the_api_load_balancer_vip_is_on_its_own_network_and_first_subnet() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    runtime().block_on(async move {
        let infra = OpenStackClusterInfra::new(PlatformConfig::default());
        let check = checker(&yaml);
        let n = &check.network;
        let id = identity(yaml.clone(), "cloud-creds");
        let name = unique("lbnet");
        let names = ClusterNames::new(NAMESPACE, &name);
        let scope_ = scope(&name);
        let vip_net: net::Network = n
            .create(serde_json::json!({"name": format!("{name}-vip")}))
            .await
            .unwrap();
        let mut vip_subnets = Vec::new();
        for (suffix, cidr) in [("a", "10.89.0.0/24"), ("b", "10.89.1.0/24")] {
            let s: net::Subnet = n
                .create(
                    serde_json::json!({"network_id": vip_net.id, "ip_version": 4,
                    "cidr": cidr, "name": format!("{name}-vip-{suffix}")}),
                )
                .await
                .unwrap();
            vip_subnets.push(s);
        }
        let (a, b) = (vip_subnets[0].clone(), vip_subnets[1].clone());
        let (_, public_subnet) = public_subnet(&check).await;
        let mut s = spec("10.90.0.0/24");
        s.extensions = None;
        // The VIP's network has no router: no floating IP can reach it.
        s.disable_api_server_floating_ip = Some(true);
        s.api_server_load_balancer = Some(Box::new(
            serde_json::from_value(serde_json::json!({
                "enabled": true,
                "network": {"filter": {"name": vip_net.name}},
                "subnets": [{"id": public_subnet.id}],
            }))
            .unwrap(),
        ));
        let mut osc = cluster(&name, s);
        let outcome = std::panic::AssertUnwindSafe(async {
            // 1. A subnet of another network: refused, no load balancer.
            let (reason, message) = infra::converge(&infra, &scope_, &mut osc, &id, 10)
                .await
                .expect_err("a subnet off the load balancer network");
            assert_eq!(reason, "LoadBalancerNetworkNotFound");
            assert!(
                message.starts_with(&format!(
                    "spec.apiServerLoadBalancer.subnets[0]: subnet {} is on network ",
                    public_subnet.id
                )) && message.contains(&vip_net.id),
                "{message}"
            );
            let c = condition(&osc, "APIEndpointReady");
            assert_eq!(c.status, "False", "{c:?}");
            assert!(
                c.message.as_deref().is_some_and(|m| m.contains(&message)),
                "{c:?}"
            );
            assert_eq!(
                condition(&osc, "Ready").message.as_deref(),
                Some(message.as_str())
            );
            assert_eq!(inventory(&check, &names).await["load_balancers"], 0);

            // 2. The second subnet of the network first (by filter), then the other.
            osc.spec.api_server_load_balancer.as_mut().unwrap().subnets =
                serde_json::from_value(serde_json::json!([
                    {"filter": {"name": b.name}},
                    {"id": a.id},
                ]))
                .unwrap();
            converge(&infra, &scope_, &mut osc, &id, 40).await;
            let status = osc.status.clone().unwrap();
            assert!(status.ready);
            let lb_status = status.api_server_load_balancer.clone().unwrap();
            let balancer: lb::LoadBalancer = check.load_balancer.get(&lb_status.id).await.unwrap();
            assert_eq!(balancer.vip_subnet_id, b.id, "the first subnet given");
            assert_eq!(balancer.vip_network_id, vip_net.id);
            assert!(
                balancer.vip_address.starts_with("10.89.1."),
                "{}",
                balancer.vip_address
            );
            let cluster_subnet = &status.network.as_ref().unwrap().subnets[0];
            assert_ne!(balancer.vip_subnet_id, cluster_subnet.id);
            let vip_port: net::Port = n.get(&balancer.vip_port_id).await.unwrap();
            assert_eq!(vip_port.network_id, vip_net.id);
            assert_eq!(vip_port.fixed_ips[0].subnet_id, b.id);
            assert_eq!(lb_status.internal_ip, balancer.vip_address);
            let lb_net = lb_status
                .load_balancer_network
                .clone()
                .expect("loadBalancerNetwork");
            assert_eq!(lb_net.network.id, vip_net.id);
            assert_eq!(lb_net.network.name, vip_net.name);
            let recorded: Vec<(&str, &str)> = lb_net
                .subnets
                .iter()
                .map(|s| (s.id.as_str(), s.cidr.as_str()))
                .collect();
            assert_eq!(
                recorded,
                [
                    (b.id.as_str(), "10.89.1.0/24"),
                    (a.id.as_str(), "10.89.0.0/24")
                ]
            );
            let endpoint = osc.spec.control_plane_endpoint.clone().unwrap();
            assert_eq!(endpoint.host, balancer.vip_address);
            // Settled: nothing written, the network not looked up again.
            let before = counts(&infra, &id);
            converge(&infra, &scope_, &mut osc, &id, 1).await;
            let again = counts(&infra, &id) - before;
            assert_eq!(again.writes, 0, "{again:?}");
            assert!(again.reads <= 15, "{again:?}");
            assert_eq!(
                osc.status
                    .as_ref()
                    .unwrap()
                    .api_server_load_balancer
                    .as_ref()
                    .unwrap()
                    .load_balancer_network,
                Some(lb_net)
            );
        })
        .catch_unwind()
        .await;
        infra::delete(&infra, &scope_, &osc, &id).await;
        expect_none(&inventory(&check, &names).await);
        for s in &vip_subnets {
            let _ = n.delete::<net::Subnet>(&s.id).await;
        }
        let _ = n.delete::<net::Network>(&vip_net.id).await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}
