//! A cluster in the shapes CAPO users write, for the tests in which the real
//! `capo-manager` and stackhook hand a cluster to each other: the objects, what
//! must not change across the switch, and what is left in the cloud.
//! Used with `support/capi.rs`, `support/cloud.rs` and `support/kube.rs`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::Client;
use serde_json::{json, Value};

use super::capi::{self, condition_true};
use super::cloud;
pub use super::kube_server::poll;
use stackhook::infra::api::names::{ClusterNames, SecurityGroupRole};
use stackhook_openstack::blockstorage::{BlockStorage, VolumeFilter};
use stackhook_openstack::compute::Compute;
use stackhook_openstack::loadbalancing::{self as lb, LoadBalancing};
use stackhook_openstack::networking::{self as net, Networking};

/// One cluster: its name, its two Machines (control plane first, then a worker),
/// its managed subnet, and how the API endpoint is made.
pub struct Shape {
    pub cluster: &'static str,
    /// The control-plane machine first, then workers.
    pub machines: &'static [&'static str],
    pub cidr: &'static str,
    /// `spec.apiServerFixedIP` instead of a `controlPlaneEndpoint` given by the user:
    /// stackhook then reserves the address with a port of its own.
    pub fixed_ip: Option<&'static str>,
    /// stackhook's `spec.extensions.serverGroupPolicy` on the control-plane machine
    /// (a server group stackhook creates; CAPO does not know the field).
    pub server_group_policy: Option<&'static str>,
    /// An API load balancer with a floating IP, instead of a fixed endpoint.
    pub load_balancer: bool,
    /// Block devices as CAPO users give them: the first worker boots from a root
    /// volume, the second gets an additional volume `data`.
    pub volumes: bool,
    /// A bastion (`<cluster>-bastion`) with CAPO's defaults.
    pub bastion: bool,
}

impl Shape {
    pub fn names(&self, ns: &str) -> ClusterNames {
        ClusterNames::new(ns.to_string(), self.cluster.to_string())
    }
}

/// Held while a test runs CAPO: CAPO's requests are told from stackhook's in the
/// cloud's access log by User-Agent, which is the same for every CAPO, so two tests
/// with CAPO would count each other's. A file lock, because nextest runs each test in
/// a process of its own; the scheduler keeps them apart (`.config/nextest.toml`), the
/// lock makes it certain.
pub async fn one_capo_at_a_time() -> std::fs::File {
    let path = std::env::temp_dir().join("stackhook-capo.lock");
    tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        file.lock()
            .unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
        file
    })
    .await
    .expect("lock task")
}

/// CAPO's requests: gophercloud's User-Agent, with CAPO's name when it sets one.
pub fn is_capo(ua: &str) -> bool {
    ua.contains("gophercloud") || ua.contains("cluster-api-provider-openstack")
}

/// The test cloud's clouds.yaml with its member entry as `openstack`.
pub fn openstack_entry(clouds_yaml: &str) -> String {
    let v: Value = serde_saphyr::from_str(clouds_yaml).expect("clouds.yaml");
    let member = v["clouds"][cloud::MEMBER].clone();
    serde_json::to_string(&json!({"clouds": {"openstack": member}})).expect("json")
}

/// The cluster as a CAPO user writes it: CAPI's Cluster (v1beta2) and CAPO's own
/// v1beta1 objects, with plain Machines and their bootstrap data Secrets (so no
/// control-plane provider or workload cluster is needed).
/// `server_group`: the ID of an existing server group for the control-plane machine
/// (`spec.serverGroup`, which CAPO only refers to).
pub fn cluster_yaml(shape: &Shape, tag: &str, server_group: Option<&str>) -> String {
    let cluster = shape.cluster;
    let mut spec = json!({
        "identityRef": {"type": "Secret", "name": "capo-cloud", "cloudName": "openstack"},
        "managedSubnets": [{"cidr": shape.cidr}],
        "managedSecurityGroups": {"allowAllInClusterTraffic": true},
        "tags": [tag],
    });
    if shape.load_balancer {
        spec["apiServerLoadBalancer"] = json!({"enabled": true});
        spec["externalNetwork"] = json!({"filter": {"name": "public"}});
    } else {
        spec["disableAPIServerFloatingIP"] = json!(true);
        match shape.fixed_ip {
            Some(ip) => spec["apiServerFixedIP"] = json!(ip),
            None => {
                let host = shape.cidr.replace(".0/24", ".250");
                spec["controlPlaneEndpoint"] = json!({"host": host, "port": 6443});
            }
        }
    }
    if shape.bastion {
        spec["bastion"] = json!({"enabled": true, "spec": {"flavor": "m1.tiny",
            "image": {"filter": {"name": "ubuntu-2404-kube-v1.33.1"}}}});
    }
    let mut docs = vec![
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": cluster},
            "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                "kind": "OpenStackCluster", "name": cluster}}}),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
            "metadata": {"name": cluster, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
            "spec": spec}),
    ];
    for (i, m) in shape.machines.iter().enumerate() {
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
        let mut spec = json!({"flavor": "m1.tiny",
                              "image": {"filter": {"name": "ubuntu-2404-kube-v1.33.1"}}});
        if i == 0 {
            labels["cluster.x-k8s.io/control-plane"] = json!("");
            if let Some(policy) = shape.server_group_policy {
                spec["extensions"] = json!({"serverGroupPolicy": policy});
            }
            if let Some(id) = server_group {
                spec["serverGroup"] = json!({"id": id});
            }
        }
        if shape.volumes && i == 1 {
            spec["rootVolume"] = json!({"sizeGiB": 1});
        }
        if shape.volumes && i == 2 {
            spec["additionalBlockDevices"] =
                json!([{"name": "data", "sizeGiB": 1, "storage": {"type": "Volume"}}]);
        }
        docs.push(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{m}-bootstrap"), "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": "#cloud-config\n", "format": "cloud-config"}}));
        docs.push(json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
            "metadata": {"name": m, "labels": labels},
            "spec": spec}));
        docs.push(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": m, "labels": labels},
            "spec": {"clusterName": cluster, "version": "v1.33.1",
                     "bootstrap": {"dataSecretName": format!("{m}-bootstrap")},
                     "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                         "kind": "OpenStackMachine", "name": m}}}),
        );
    }
    docs.iter()
        .map(|d| serde_json::to_string(d).expect("json"))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

pub fn openstack_clusters(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &capi::infra("OpenStackCluster", "openstackclusters"),
    )
}

pub fn openstack_machines(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &capi::infra("OpenStackMachine", "openstackmachines"),
    )
}

/// CAPO v0.14's per-machine server objects.
pub fn openstack_servers(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                "infrastructure.cluster.x-k8s.io",
                "v1alpha1",
                "OpenStackServer",
            ),
            "openstackservers",
        ),
    )
}

/// What a switch of controllers must not change: IDs in status, Ready, providerIDs,
/// and the servers in the cloud.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    pub cluster_ids: Vec<String>,
    pub cluster_ready: bool,
    /// Per machine: instance ID, providerID, Ready.
    pub machines: BTreeMap<String, (String, String, bool)>,
    pub servers: Vec<String>,
}

pub async fn snapshot(
    client: &Client,
    ns: &str,
    shape: &Shape,
    os: &stackhook_openstack::Clients,
) -> Snapshot {
    let c = openstack_clusters(client, ns)
        .get(shape.cluster)
        .await
        .expect("OpenStackCluster");
    let s = &c.data["status"];
    let mut cluster_ids: Vec<String> = [
        &s["network"]["id"],
        &s["network"]["subnets"][0]["id"],
        &s["router"]["id"],
        &s["controlPlaneSecurityGroup"]["id"],
        &s["workerSecurityGroup"]["id"],
    ]
    .iter()
    .map(|v| v.as_str().unwrap_or("<none>").to_string())
    .collect();
    cluster_ids.push(c.data["spec"]["controlPlaneEndpoint"].to_string());
    if shape.bastion {
        cluster_ids.push(s["bastion"]["id"].as_str().unwrap_or("<none>").to_string());
    }
    if shape.load_balancer {
        let lb = &s["apiServerLoadBalancer"];
        for v in [&lb["id"], &lb["ip"], &lb["internalIP"]] {
            cluster_ids.push(v.as_str().unwrap_or("<none>").to_string());
        }
    }
    let osm = openstack_machines(client, ns);
    let mut machines = BTreeMap::new();
    for m in shape.machines {
        let o = osm.get(m).await.expect("OpenStackMachine");
        let text = |v: &Value| v.as_str().unwrap_or("<none>").to_string();
        machines.insert(
            m.to_string(),
            (
                text(&o.data["status"]["instanceID"]),
                text(&o.data["spec"]["providerID"]),
                condition_true(&o.data, "Ready"),
            ),
        );
    }
    Snapshot {
        cluster_ids,
        cluster_ready: condition_true(&c.data, "Ready") || s["ready"] == true,
        machines,
        servers: servers(os, shape).await,
    }
}

/// `name id` of the cloud's servers named like the shape's machines.
pub async fn servers(os: &stackhook_openstack::Clients, shape: &Shape) -> Vec<String> {
    let prefix = format!("^{}-", shape.cluster);
    let mut servers: Vec<String> = os
        .compute
        .servers_named(&prefix)
        .await
        .expect("servers")
        .into_iter()
        .filter(|s| shape.machines.contains(&s.name.as_str()))
        .map(|s| format!("{} {}", s.name, s.id))
        .collect();
    servers.sort();
    servers
}

/// What is left in the cloud of the cluster: by its tag and by the names CAPO and
/// stackhook give.
pub async fn leftovers(
    os: &stackhook_openstack::Clients,
    ns: &str,
    shape: &Shape,
    tag: &str,
) -> BTreeMap<String, usize> {
    let names = shape.names(ns);
    let n = &os.network;
    let by_tag = [("tags", tag.to_string())];
    let mut m = BTreeMap::new();
    m.insert(
        "networks (tag)".into(),
        n.list::<net::Network>(&by_tag)
            .await
            .expect("networks")
            .len(),
    );
    m.insert(
        "subnets (tag)".into(),
        n.list::<net::Subnet>(&by_tag).await.expect("subnets").len(),
    );
    m.insert(
        "routers (tag)".into(),
        n.list::<net::Router>(&by_tag).await.expect("routers").len(),
    );
    m.insert(
        "ports (tag)".into(),
        n.list::<net::Port>(&by_tag).await.expect("ports").len(),
    );
    m.insert(
        "security groups (tag)".into(),
        n.list::<net::SecurityGroup>(&by_tag)
            .await
            .expect("sgs")
            .len(),
    );
    m.insert(
        "networks (name)".into(),
        n.list::<net::Network>(&[("name", names.network_name())])
            .await
            .expect("networks")
            .len(),
    );
    let mut sgs = 0;
    for role in [SecurityGroupRole::ControlPlane, SecurityGroupRole::Worker] {
        sgs += n
            .list::<net::SecurityGroup>(&[("name", names.security_group_name(role))])
            .await
            .expect("sgs")
            .len();
    }
    m.insert("security groups (name)".into(), sgs);
    let lbs: Vec<lb::LoadBalancer> = os
        .load_balancer
        .list(&[("name", names.load_balancer_name())])
        .await
        .expect("lbs");
    m.insert("load balancers (name)".into(), lbs.len());
    let mut ports = 0;
    for machine in shape.machines {
        ports += n
            .list::<net::Port>(&[("name", format!("{machine}-0"))])
            .await
            .expect("ports")
            .len();
    }
    m.insert("machine ports (name)".into(), ports);
    m.insert(
        "API VIP port (name)".into(),
        n.list::<net::Port>(&[("name", names.api_vip_port_name())])
            .await
            .expect("ports")
            .len(),
    );
    m.insert("servers (name)".into(), servers(os, shape).await.len());
    m.insert(
        "bastion server (name)".into(),
        os.compute
            .servers_named(&format!("^{}$", names.bastion_name()))
            .await
            .expect("servers")
            .len(),
    );
    m.insert(
        "bastion port (name)".into(),
        n.list::<net::Port>(&[("name", format!("{}-0", names.bastion_name()))])
            .await
            .expect("ports")
            .len(),
    );
    let mut volumes = 0;
    for machine in shape.machines {
        for suffix in ["root", "data"] {
            let filter = VolumeFilter::named(&format!("{machine}-{suffix}"));
            volumes += os
                .block_storage
                .volumes(&filter)
                .await
                .map_or(0, |v| v.len());
        }
    }
    m.insert("volumes (name)".into(), volumes);
    m.insert(
        "floating IPs (tag)".into(),
        n.list::<net::FloatingIp>(&by_tag)
            .await
            .expect("floating IPs")
            .len(),
    );
    let group = format!("{}-control-plane", shape.cluster);
    m.insert(
        "server groups (name)".into(),
        os.compute
            .server_groups()
            .await
            .expect("server groups")
            .iter()
            .filter(|g| g.name == group)
            .count(),
    );
    m
}

/// Whether both machines have a providerID and are Ready.
pub async fn machines_ready(client: &Client, ns: &str, shape: &Shape) -> bool {
    let osm = openstack_machines(client, ns);
    let mut all = true;
    for m in shape.machines {
        all &= osm.get_opt(m).await.ok().flatten().is_some_and(|o| {
            o.data["spec"]["providerID"].is_string() && condition_true(&o.data, "Ready")
        });
    }
    all
}

/// Deletes servers named like the shape's machines and its control plane's server
/// groups: a killed run leaves them, and the next would count them as its own.
pub async fn clear_leftovers(os: &stackhook_openstack::Clients, shape: &Shape) {
    let prefix = format!("^{}-", shape.cluster);
    let mine = async || -> Vec<String> {
        os.compute
            .servers_named(&prefix)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|s| shape.machines.contains(&s.name.as_str()))
            .map(|s| s.id)
            .collect()
    };
    for id in mine().await {
        let _ = os.compute.delete_server(&id).await;
    }
    poll(Duration::from_secs(60), async || mine().await.is_empty()).await;
    for m in shape.machines {
        let ports: Vec<net::Port> = os
            .network
            .list(&[("name", format!("{m}-0"))])
            .await
            .unwrap_or_default();
        for p in ports {
            let _ = os.network.delete::<net::Port>(&p.id).await;
        }
    }
    // Volumes of the machines that no server holds (a crashed run's).
    for m in shape.machines {
        for name in [format!("{m}-root"), format!("{m}-data")] {
            for v in os
                .block_storage
                .volumes(&VolumeFilter::named(&name))
                .await
                .unwrap_or_default()
            {
                if v.attachments.is_empty() {
                    let _ = os.block_storage.delete_volume(&v.id).await;
                }
            }
        }
    }
    // A bastion a crashed run left, its port, and floating IPs described as this
    // cluster's that nothing holds (CAPO's text ends with `<namespace>-<cluster>`).
    let bastion = format!("{}-bastion", shape.cluster);
    for s in os
        .compute
        .servers_named(&format!("^{bastion}$"))
        .await
        .unwrap_or_default()
    {
        let _ = os.compute.delete_server(&s.id).await;
    }
    poll(Duration::from_secs(60), async || {
        os.compute
            .servers_named(&format!("^{bastion}$"))
            .await
            .is_ok_and(|s| s.is_empty())
    })
    .await;
    let ports: Vec<net::Port> = os
        .network
        .list(&[("name", format!("{bastion}-0"))])
        .await
        .unwrap_or_default();
    for p in ports {
        let _ = os.network.delete::<net::Port>(&p.id).await;
    }
    let fips: Vec<net::FloatingIp> = os.network.list(&[]).await.unwrap_or_default();
    let ours = format!("-{}", shape.cluster);
    for f in fips {
        let described = f.description.ends_with(&ours)
            || f.description.ends_with(&format!("{ours} kubeapi"))
            || f.description.ends_with(&format!("{ours} bastion"));
        if described && f.port_id.is_none() {
            let _ = os.network.delete::<net::FloatingIp>(&f.id).await;
        }
    }
    let group = format!("{}-control-plane", shape.cluster);
    for g in os.compute.server_groups().await.unwrap_or_default() {
        if g.name == group {
            let _ = os.compute.delete_server_group(&g.id).await;
        }
    }
}

/// Resident memory (KiB) and CPU seconds (user + system) of a process, from `/proc`.
pub fn proc_usage(pid: u32) -> Option<(u64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces: utime and stime are the
    // 12th and 13th of them, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(") ")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some((rss, ticks as f64 / 100.0))
}

/// The PID `up` recorded for a manager (`CAPO`, `CAPI`, …).
pub fn manager_pid(env: &BTreeMap<String, String>, manager: &str) -> Option<u32> {
    let file = env.get(&format!("{manager}_PID_FILE"))?;
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// One line of the side-by-side measurements, for BENCHMARKS.md.
pub fn measured(
    controller: &str,
    phase: &str,
    secs: f64,
    requests: &BTreeMap<String, u64>,
    usage: Option<(u64, f64)>,
) {
    let (rss, cpu) = usage.map_or(("-".to_string(), "-".to_string()), |(r, c)| {
        (format!("{:.0}", r as f64 / 1024.0), format!("{c:.2}"))
    });
    println!(
        "side-by-side: {controller} | {phase} | {secs:.1} s | {} requests | {} writes | RSS {rss} MiB | CPU {cpu} s total | {requests:?}",
        requests.values().sum::<u64>(),
        cloud::writes(requests),
    );
}

/// A soft-anti-affinity server group made beforehand, as CAPO users do for
/// `spec.serverGroup`; its ID.
pub async fn create_server_group(os: &stackhook_openstack::Clients, name: &str) -> String {
    use stackhook_openstack::compute::{ServerGroupPolicy, ServerGroupRules};
    os.compute
        .create_server_group(
            name,
            ServerGroupPolicy::SoftAntiAffinity,
            &ServerGroupRules::default(),
        )
        .await
        .expect("server group")
        .id
}

/// What the cloud holds for a cluster of `shape`, field by field, with every ID
/// replaced by the name of what it names and the cluster's namespace and name by
/// `<ns>` and `<cluster>`: two clusters of one shape, made by CAPO and by stackhook,
/// compare equal where they are made alike. `owner_tags` are left out of every tag list
/// and server metadata key `owner_key` too (stackhook's marks of what it made).
pub async fn fingerprint(
    os: &stackhook_openstack::Clients,
    ns: &str,
    shape: &Shape,
    owner_key: &str,
) -> Value {
    let names = shape.names(ns);
    let owner_tag = format!("k8s-clusterapi-cluster-{ns}-{}", shape.cluster);
    let n = &os.network;
    let net_name = names.network_name();
    let mut id_names: BTreeMap<String, String> = BTreeMap::new();
    let tags = |t: &[String]| -> Vec<String> {
        let mut t: Vec<String> = t.iter().filter(|x| **x != owner_tag).cloned().collect();
        t.sort();
        t
    };
    let networks: Vec<net::Network> = n.list(&[]).await.expect("networks");
    for x in &networks {
        id_names.insert(x.id.clone(), format!("network {}", x.name));
    }
    let subnets: Vec<net::Subnet> = n.list(&[]).await.expect("subnets");
    for x in &subnets {
        id_names.insert(x.id.clone(), format!("subnet {}", x.name));
    }
    let roles = [
        SecurityGroupRole::ControlPlane,
        SecurityGroupRole::Worker,
        SecurityGroupRole::Bastion,
    ];
    let mut groups = Vec::new();
    for role in roles {
        let g: Vec<net::SecurityGroup> = n
            .list(&[("name", names.security_group_name(role))])
            .await
            .expect("security groups");
        for g in &g {
            id_names.insert(g.id.clone(), format!("group {}", g.name));
        }
        groups.extend(g);
    }
    let name_of = |id: &str| {
        id_names
            .get(id)
            .cloned()
            .unwrap_or_else(|| "<other>".into())
    };
    let mut out = serde_json::Map::new();
    let ours: Vec<Value> = networks
        .iter()
        .filter(|x| x.name == net_name)
        .map(|x| json!({"name": x.name, "tags": tags(&x.tags), "subnets": x.subnets.len()}))
        .collect();
    out.insert("networks".into(), json!(ours));
    let ours: Vec<Value> = subnets
        .iter()
        .filter(|x| x.name == net_name)
        .map(|x| {
            json!({"name": x.name, "network": name_of(&x.network_id), "cidr": x.cidr,
                "ip_version": x.ip_version, "dns": x.dns_nameservers,
                "pools": x.allocation_pools.iter().map(|p| format!("{}-{}", p.start, p.end)).collect::<Vec<_>>(),
                "tags": tags(&x.tags)})
        })
        .collect();
    out.insert("subnets".into(), json!(ours));
    let routers: Vec<net::Router> = n
        .list(&[("name", net_name.clone())])
        .await
        .expect("routers");
    let mut ours = Vec::new();
    for r in &routers {
        let ports: Vec<net::Port> = n
            .list(&[("device_id", r.id.clone())])
            .await
            .expect("router ports");
        let mut interfaces: Vec<String> = ports
            .iter()
            .filter(|p| p.device_owner.contains("router_interface"))
            .flat_map(|p| p.fixed_ips.iter().map(|f| name_of(&f.subnet_id)))
            .collect();
        interfaces.sort();
        let gateway = r
            .external_gateway_info
            .as_ref()
            .map(|g| json!({"network": name_of(&g.network_id), "ips": g.external_fixed_ips.len()}));
        ours.push(
            json!({"name": r.name, "tags": tags(&r.tags), "gateway": gateway,
            "interfaces": interfaces}),
        );
    }
    out.insert("routers".into(), json!(ours));
    let mut ours = Vec::new();
    for g in &groups {
        let mut rules: Vec<String> = g
            .security_group_rules
            .iter()
            .map(|r| {
                format!(
                    "{} {} {} {:?}-{:?} from {} {}",
                    r.direction,
                    r.ethertype,
                    r.protocol.clone().unwrap_or_else(|| "any".into()),
                    r.port_range_min,
                    r.port_range_max,
                    r.remote_group_id.as_deref().map_or("-".into(), name_of),
                    r.remote_ip_prefix.clone().unwrap_or_else(|| "-".into()),
                )
            })
            .collect();
        rules.sort();
        ours.push(json!({"name": g.name, "tags": tags(&g.tags), "rules": rules}));
    }
    out.insert("security groups".into(), json!(ours));
    // Servers and their ports, volumes and floating IPs.
    let flavors: BTreeMap<String, String> = os
        .compute
        .flavors()
        .await
        .expect("flavors")
        .into_iter()
        .map(|f| (f.id, f.name))
        .collect();
    let fips: Vec<net::FloatingIp> = n.list(&[]).await.expect("floating IPs");
    let mut servers = Vec::new();
    let mut machines: Vec<String> = shape.machines.iter().map(|m| m.to_string()).collect();
    if shape.bastion {
        machines.push(names.bastion_name());
    }
    for m in &machines {
        let found = os
            .compute
            .servers_named(&format!("^{m}$"))
            .await
            .expect("servers");
        for s in found.iter().filter(|s| s.name == *m) {
            let ports: Vec<net::Port> =
                n.list(&[("device_id", s.id.clone())]).await.expect("ports");
            let ports: Vec<Value> = ports
                .iter()
                .map(|p| {
                    let mut sgs: Vec<String> = p.security_groups.iter().map(|g| name_of(g)).collect();
                    sgs.sort();
                    let fip: Vec<&str> = fips
                        .iter()
                        .filter(|f| f.port_id.as_deref() == Some(p.id.as_str()))
                        .map(|f| f.description.as_str())
                        .collect();
                    json!({"name": p.name, "network": name_of(&p.network_id),
                        "subnets": p.fixed_ips.iter().map(|f| name_of(&f.subnet_id)).collect::<Vec<_>>(),
                        "security groups": sgs, "tags": tags(&p.tags), "description": p.description,
                        "port security": p.port_security_enabled,
                        "address pairs": p.allowed_address_pairs.len(), "floating IPs": fip})
                })
                .collect();
            let mut volumes = Vec::new();
            for v in &s.volumes_attached {
                if let Ok(vol) = os.block_storage.volume(&v.id).await {
                    volumes.push(
                        json!({"name": vol.name, "size": vol.size, "bootable": vol.bootable,
                        "type": vol.volume_type}),
                    );
                }
            }
            let metadata: BTreeMap<&String, &String> =
                s.metadata.iter().filter(|(k, _)| *k != owner_key).collect();
            let flavor = s
                .flavor
                .original_name
                .clone()
                .or_else(|| s.flavor.id.as_ref().and_then(|id| flavors.get(id).cloned()));
            servers.push(json!({"name": s.name, "status": s.status, "flavor": flavor,
                "image": s.image_id.is_some(), "key": s.key_name, "metadata": metadata,
                "tags": tags(&s.tags), "ports": ports, "volumes": volumes}));
        }
    }
    out.insert("servers".into(), json!(servers));
    if shape.load_balancer {
        let l = &os.load_balancer;
        let balancers: Vec<lb::LoadBalancer> = l
            .list(&[("name", names.load_balancer_name())])
            .await
            .expect("load balancers");
        let mut ours = Vec::new();
        for b in &balancers {
            let listeners: Vec<lb::Listener> = l
                .list(&[("loadbalancer_id", b.id.clone())])
                .await
                .expect("listeners");
            let mut ls: Vec<Value> = listeners
                .iter()
                .map(|x| {
                    let mut cidrs = x.allowed_cidrs.clone().unwrap_or_default();
                    cidrs.sort();
                    json!({"name": x.name, "port": x.protocol_port, "allowed": cidrs})
                })
                .collect();
            ls.sort_by_key(|v| v.to_string());
            let pools: Vec<lb::Pool> = l
                .list(&[("loadbalancer_id", b.id.clone())])
                .await
                .expect("pools");
            let mut ps = Vec::new();
            for p in &pools {
                let members = l.members(&p.id, &[]).await.expect("members");
                let mut ms: Vec<String> = members
                    .iter()
                    .map(|m| {
                        format!(
                            "{} :{} on {}",
                            m.name,
                            m.protocol_port,
                            m.subnet_id.as_deref().map_or("-".into(), name_of)
                        )
                    })
                    .collect();
                ms.sort();
                let monitor = match &p.healthmonitor_id {
                    Some(id) => l.get::<lb::HealthMonitor>(id).await.ok().map(|h| {
                        json!({"name": h.name, "delay": h.delay, "timeout": h.timeout,
                            "retries": h.max_retries, "retries down": h.max_retries_down})
                    }),
                    None => None,
                };
                ps.push(json!({"name": p.name, "members": ms, "monitor": monitor}));
            }
            ps.sort_by_key(|v| v.to_string());
            let vip_fips: Vec<&str> = fips
                .iter()
                .filter(|f| f.port_id.as_deref() == Some(b.vip_port_id.as_str()))
                .map(|f| f.description.as_str())
                .collect();
            ours.push(
                json!({"name": b.name, "vip network": name_of(&b.vip_network_id),
                "vip subnet": name_of(&b.vip_subnet_id), "provider": b.provider,
                "tags": tags(&b.tags), "listeners": ls, "pools": ps, "floating IPs": vip_fips}),
            );
        }
        out.insert("load balancers".into(), json!(ours));
    }
    // Names and descriptions carry the namespace and the cluster's name.
    let text = serde_json::to_string(&Value::Object(out)).expect("json");
    let text = text
        .replace(ns, "<ns>")
        .replace(&format!("{}-", shape.cluster), "<cluster>-")
        .replace(&format!("-{}\"", shape.cluster), "-<cluster>\"")
        .replace(&format!("-{} ", shape.cluster), "-<cluster> ")
        .replace(&format!(" {}\"", shape.cluster), " <cluster>\"");
    serde_json::from_str(&text).expect("json")
}

/// Where two fingerprints differ: JSON pointer, then both values.
pub fn differences(a: &Value, b: &Value, at: &str, out: &mut Vec<(String, Value, Value)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                differences(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{at}/{k}"),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(p, q, &format!("{at}/{i}"), out);
            }
        }
        _ if a != b => out.push((at.to_string(), a.clone(), b.clone())),
        _ => {}
    }
}
