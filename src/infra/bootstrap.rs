//! What the node bootstrap reads at boot: the per-cluster Secret
//! `<cluster>-bootstrap-vars`, rendered from the OpenStackCluster (what the user
//! chose in `spec.extensions`, what the cloud decided in `status.extensions`) and
//! the cluster's OpenStackMachines.
//!
//! Values the cloud decides never go into templates: a template change rolls every
//! machine, a Secret change only reaches machines that boot afterwards. Nothing here
//! reads the identity Secret, so no credential can end up in the output.

use std::collections::BTreeMap;

use serde::Serialize;

use super::api::extensions::{
    CiliumRoutingMode, CiliumTunnelProtocol, ClusterSpecExtensions, ClusterStatusExtensions,
    NodeResources,
};
use super::api::names::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL};
use super::api::{OpenStackCluster, OpenStackMachine};
use kube::ResourceExt;

/// The Secret's name for a CAPI Cluster.
pub fn secret_name(cluster: &str) -> String {
    format!("{cluster}-bootstrap-vars")
}

/// Label on every bootstrap-vars Secret; the controller watches only these.
pub const SECRET_LABEL: &str = "stackhook.io/bootstrap-vars";
/// The Ansible variables.
pub const VARS_KEY: &str = "vars.yaml";
/// The Ansible inventory of the cluster's machines.
pub const INVENTORY_KEY: &str = "inventory.yaml";
/// Helm values for a kube-proxy-free Cilium.
pub const CILIUM_VALUES_KEY: &str = "cilium-values.yaml";
/// Label CAPI puts on the machines of a MachineDeployment.
pub const DEPLOYMENT_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// The MachineDeployment's name in the Cluster's topology, on its machines.
pub const TOPOLOGY_DEPLOYMENT_LABEL: &str = "topology.cluster.x-k8s.io/deployment-name";

/// The facts of one OpenStackMachine that the bootstrap and the hooks need; small
/// enough to keep for every machine on every replica.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineFacts {
    pub name: String,
    /// The CAPI Cluster (`cluster.x-k8s.io/cluster-name`).
    pub cluster_name: String,
    /// Labelled `cluster.x-k8s.io/control-plane` (KubeadmControlPlane sets it).
    pub control_plane: bool,
    /// `cluster.x-k8s.io/deployment-name`.
    pub deployment: Option<String>,
    /// `topology.cluster.x-k8s.io/deployment-name`: the entry in the Cluster's
    /// `spec.topology.workers.machineDeployments`.
    pub topology_deployment: Option<String>,
    /// `spec.flavor` (a name).
    pub flavor: Option<String>,
    /// `status.resolved.flavorID`, else `spec.flavorID`.
    pub flavor_id: Option<String>,
    /// Neutron ports a machine like this one takes (at least one).
    pub ports: usize,
    /// The first `InternalIP` in `status.addresses`.
    pub address: Option<String>,
    /// `status.extensions.nodeResources[name]`.
    pub node_resources: Option<NodeResources>,
    /// `spec.extensions.networkInterfaces.keepalived`: overrides the cluster's.
    pub keepalived_interface: Option<String>,
    /// Being deleted: no longer part of the inventory.
    pub deleting: bool,
}

impl MachineFacts {
    /// `None` for a machine not (yet) labelled with its cluster.
    pub fn from_machine(osm: &OpenStackMachine) -> Option<MachineFacts> {
        let name = osm.name_any();
        let cluster_name = osm.labels().get(CLUSTER_NAME_LABEL)?.clone();
        let status = osm.status.as_ref();
        Some(MachineFacts {
            control_plane: osm.labels().contains_key(CONTROL_PLANE_LABEL),
            deployment: osm.labels().get(DEPLOYMENT_LABEL).cloned(),
            topology_deployment: osm.labels().get(TOPOLOGY_DEPLOYMENT_LABEL).cloned(),
            flavor: osm.spec.flavor.clone().filter(|f| !f.is_empty()),
            flavor_id: status
                .and_then(|s| s.resolved.as_ref())
                .and_then(|r| r.flavor_id.clone())
                .or_else(|| osm.spec.flavor_id.clone())
                .filter(|f| !f.is_empty()),
            ports: osm.spec.ports.len().max(1),
            address: status.and_then(|s| {
                s.addresses
                    .iter()
                    .find(|a| a.type_ == "InternalIP")
                    .map(|a| a.address.clone())
            }),
            node_resources: status
                .and_then(|s| s.extensions.as_ref())
                .and_then(|e| e.node_resources.get(&name).cloned()),
            keepalived_interface: osm
                .spec
                .extensions
                .as_ref()
                .and_then(|e| e.network_interfaces.as_ref())
                .and_then(|n| n.keepalived.clone()),
            deleting: osm.metadata.deletion_timestamp.is_some(),
            name,
            cluster_name,
        })
    }
}

/// `status.extensions.nodeResources` of the cluster: each live machine's own.
pub fn node_resources(machines: &[MachineFacts]) -> BTreeMap<String, NodeResources> {
    machines
        .iter()
        .filter(|m| !m.deleting)
        .filter_map(|m| Some((m.name.clone(), m.node_resources.clone()?)))
        .collect()
}

/// Every variable name of the bootstrap's extensions table, in its order; each
/// is `null` until its value is known.
#[derive(Debug, Default, PartialEq, Serialize)]
pub struct Vars {
    pub kube_network_plugin: Option<String>,
    pub cilium_openstack_project_id: Option<String>,
    pub cilium_openstack_default_subnet_id: Option<String>,
    pub cilium_openstack_security_group_ids: Vec<String>,
    pub vpc_cni_webhook_enable: Option<bool>,
    pub master_virtual_vip: Option<String>,
    pub ingress_virtual_vip: Option<String>,
    pub keepalived_interface: Option<String>,
    pub harbor_addr: Option<String>,
    pub cloud_master_vip: Option<String>,
    pub openstack_auth_domain: Option<String>,
    pub openstack_cinder_domain: Option<String>,
    pub openstack_nova_domain: Option<String>,
    pub openstack_neutron_domain: Option<String>,
    pub openstack_project_name: Option<String>,
    pub openstack_project_domain_name: Option<String>,
    pub openstack_region_name: Option<String>,
    pub ntp_server: Option<String>,
    pub vip_mgmt: Option<String>,
    pub flannel_interface: Option<String>,
    /// Machine name → reserved resources (`cpu`, `memory`).
    pub node_resources: BTreeMap<String, BTreeMap<String, String>>,
}

impl Vars {
    /// Each value from the `spec.extensions` or `status.extensions` path the
    /// table names for it.
    pub fn from_cluster(osc: &OpenStackCluster) -> Vars {
        let spec = osc.spec.extensions.as_deref().cloned().unwrap_or_default();
        let status: ClusterStatusExtensions = osc
            .status
            .as_ref()
            .and_then(|s| s.extensions.as_deref().cloned())
            .unwrap_or_default();
        let cilium = status
            .networking
            .as_ref()
            .and_then(|n| n.cilium.clone())
            .unwrap_or_default();
        let lbs = status.load_balancers.clone().unwrap_or_default();
        let vip = |v: Option<crate::infra::api::extensions::VirtualIp>| v.and_then(|v| v.vip);
        let os = status.open_stack.clone().unwrap_or_default();
        let platform = status.platform.clone().unwrap_or_default();
        let interfaces = spec.network_interfaces.clone().unwrap_or_default();
        let ingress = vip(lbs.ingress);
        Vars {
            kube_network_plugin: spec
                .networking
                .as_ref()
                .and_then(|n| n.kube_network_plugin.clone()),
            cilium_openstack_project_id: cilium.project_id,
            cilium_openstack_default_subnet_id: cilium.default_subnet_id,
            cilium_openstack_security_group_ids: cilium.security_group_ids,
            vpc_cni_webhook_enable: cilium.webhook_enable,
            master_virtual_vip: vip(lbs.control_plane),
            harbor_addr: ingress.clone(),
            ingress_virtual_vip: ingress,
            keepalived_interface: interfaces.keepalived,
            cloud_master_vip: os.mgmt,
            openstack_auth_domain: os.keystone,
            openstack_cinder_domain: os.cinder,
            openstack_nova_domain: os.nova,
            openstack_neutron_domain: os.neutron,
            openstack_project_name: os.project,
            openstack_project_domain_name: os.project_domain,
            openstack_region_name: os.region,
            ntp_server: platform.ntp.and_then(|n| n.server),
            vip_mgmt: vip(platform.management),
            flannel_interface: interfaces.flannel,
            node_resources: status
                .node_resources
                .iter()
                .map(|(name, r)| {
                    let reserved = r
                        .reserved
                        .iter()
                        .map(|(k, q)| (k.clone(), q.0.clone()))
                        .collect();
                    (name.clone(), reserved)
                })
                .collect(),
        }
    }
}

/// One inventory host.
#[derive(Debug, PartialEq, Serialize)]
struct Host {
    #[serde(skip_serializing_if = "Option::is_none")]
    ansible_host: Option<String>,
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    keepalived_interface: Option<String>,
}

#[derive(Debug, Default, PartialEq, Serialize)]
struct Group {
    hosts: BTreeMap<String, Host>,
}

#[derive(Debug, Default, PartialEq, Serialize)]
struct Children {
    control_plane: Group,
    worker: Group,
}

#[derive(Debug, Default, PartialEq, Serialize)]
struct All {
    children: Children,
}

#[derive(Debug, Default, PartialEq, Serialize)]
struct Inventory {
    all: All,
}

fn inventory(machines: &[MachineFacts]) -> Inventory {
    let mut inv = Inventory::default();
    for m in machines.iter().filter(|m| !m.deleting) {
        let (group, role) = if m.control_plane {
            (&mut inv.all.children.control_plane, "control_plane")
        } else {
            (&mut inv.all.children.worker, "worker")
        };
        group.hosts.insert(
            m.name.clone(),
            Host {
                ansible_host: m.address.clone(),
                role,
                keepalived_interface: m.keepalived_interface.clone(),
            },
        );
    }
    inv
}

/// Cilium values that OpenStack and the cluster decide.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct CiliumValues {
    kube_proxy_replacement: bool,
    /// Without kube-proxy, Cilium reaches the API server by this address, not
    /// by the Service IP kube-proxy would have translated.
    k8s_service_host: Option<String>,
    k8s_service_port: Option<i32>,
    routing_mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tunnel_protocol: Option<&'static str>,
    #[serde(
        rename = "ipv4NativeRoutingCIDR",
        skip_serializing_if = "Option::is_none"
    )]
    ipv4_native_routing_cidr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auto_direct_node_routes: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ipam: Option<CiliumIpam>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hubble: Option<CiliumHubble>,
    openstack: CiliumOpenStack,
}

#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct CiliumIpam {
    mode: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    operator: Option<CiliumIpamOperator>,
}

#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct CiliumIpamOperator {
    #[serde(rename = "clusterPoolIPv4PodCIDRList")]
    cluster_pool_ipv4_pod_cidr_list: Vec<String>,
}

#[derive(Debug, PartialEq, Serialize)]
struct Enabled {
    enabled: bool,
}

#[derive(Debug, PartialEq, Serialize)]
struct CiliumHubble {
    enabled: bool,
    relay: Enabled,
    ui: Enabled,
}

#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct CiliumOpenStack {
    #[serde(rename = "projectID")]
    project_id: Option<String>,
    #[serde(rename = "defaultSubnetID")]
    default_subnet_id: Option<String>,
    #[serde(rename = "securityGroupIDs")]
    security_group_ids: Vec<String>,
}

fn cilium_values(osc: &OpenStackCluster) -> CiliumValues {
    let spec: ClusterSpecExtensions = osc.spec.extensions.as_deref().cloned().unwrap_or_default();
    let settings = spec.networking.and_then(|n| n.cilium).unwrap_or_default();
    let status = osc.status.as_ref();
    let cilium = status
        .and_then(|s| s.extensions.as_ref())
        .and_then(|e| e.networking.as_ref())
        .and_then(|n| n.cilium.clone())
        .unwrap_or_default();
    let endpoint = osc
        .spec
        .control_plane_endpoint
        .as_ref()
        .filter(|e| !e.host.is_empty());
    let native = settings.routing_mode == Some(CiliumRoutingMode::Native);
    let subnet_cidr = status
        .and_then(|s| s.network.as_ref())
        .and_then(|n| n.subnets.iter().find(|s| !s.cidr.contains(':')))
        .map(|s| s.cidr.clone());
    let ipam = settings
        .ipam
        .as_ref()
        .and_then(|i| Some((i.mode.clone()?, i.pool_cidr.clone())))
        .map(|(mode, pool)| CiliumIpam {
            operator: pool
                .filter(|_| mode == "cluster-pool")
                .map(|cidr| CiliumIpamOperator {
                    cluster_pool_ipv4_pod_cidr_list: vec![cidr],
                }),
            mode,
        });
    CiliumValues {
        kube_proxy_replacement: settings.kube_proxy_replacement.unwrap_or(true),
        k8s_service_host: endpoint.map(|e| e.host.clone()),
        k8s_service_port: endpoint.map(|e| e.port),
        routing_mode: if native { "native" } else { "tunnel" },
        tunnel_protocol: (!native).then_some(match settings.tunnel_protocol {
            Some(CiliumTunnelProtocol::Geneve) => "geneve",
            _ => "vxlan",
        }),
        ipv4_native_routing_cidr: native
            .then(|| settings.ipv4_native_routing_cidr.clone().or(subnet_cidr))
            .flatten(),
        // Nodes share the cluster subnet, so routes to each other's pods are direct.
        auto_direct_node_routes: native.then_some(true),
        ipam,
        hubble: settings.hubble.map(|on| CiliumHubble {
            enabled: on,
            relay: Enabled { enabled: on },
            ui: Enabled { enabled: on },
        }),
        openstack: CiliumOpenStack {
            project_id: cilium.project_id,
            default_subnet_id: cilium.default_subnet_id,
            security_group_ids: cilium.security_group_ids,
        },
    }
}

/// Why the Secret's content could not be produced.
#[derive(Debug, thiserror::Error)]
#[error("rendering {key}: {source}")]
pub struct RenderError {
    pub key: &'static str,
    #[source]
    pub source: serde_saphyr::SerializeError,
}

/// The Secret's keys and contents. `machines` are the cluster's machines, in any
/// order; the output does not depend on it.
pub fn render(
    osc: &OpenStackCluster,
    machines: &[MachineFacts],
) -> Result<BTreeMap<String, String>, RenderError> {
    Ok(BTreeMap::from([
        yaml(VARS_KEY, &Vars::from_cluster(osc))?,
        yaml(INVENTORY_KEY, &inventory(machines))?,
        yaml(CILIUM_VALUES_KEY, &cilium_values(osc))?,
    ]))
}

fn yaml<T: Serialize>(key: &'static str, v: &T) -> Result<(String, String), RenderError> {
    serde_saphyr::to_string(v)
        .map(|text| (key.to_string(), text))
        .map_err(|source| RenderError { key, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::cluster::{NetworkStatusWithSubnets, Subnet};
    use crate::infra::api::extensions::{
        CiliumIpamSpec, CiliumSpec, CiliumStatus, LoadBalancersStatus, NetworkInterfaces,
        NetworkingSpec, NetworkingStatus, NtpStatus, OpenStackStatus, PlatformStatus, VirtualIp,
    };
    use crate::infra::api::types::ApiEndpoint;
    use crate::infra::api::{OpenStackClusterSpec, OpenStackClusterStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::Value;

    /// Every variable of the bootstrap's extensions table.
    const TABLE: [&str; 21] = [
        "kube_network_plugin",
        "cilium_openstack_project_id",
        "cilium_openstack_default_subnet_id",
        "cilium_openstack_security_group_ids",
        "vpc_cni_webhook_enable",
        "master_virtual_vip",
        "ingress_virtual_vip",
        "keepalived_interface",
        "harbor_addr",
        "cloud_master_vip",
        "openstack_auth_domain",
        "openstack_cinder_domain",
        "openstack_nova_domain",
        "openstack_neutron_domain",
        "openstack_project_name",
        "openstack_project_domain_name",
        "openstack_region_name",
        "ntp_server",
        "vip_mgmt",
        "flannel_interface",
        "node_resources",
    ];

    fn reserved(cpu: &str, memory: &str) -> NodeResources {
        NodeResources {
            reserved: BTreeMap::from([
                ("cpu".to_string(), Quantity(cpu.into())),
                ("memory".to_string(), Quantity(memory.into())),
            ]),
        }
    }

    fn cluster() -> OpenStackCluster {
        let mut osc = OpenStackCluster::new(
            "prod-x1",
            OpenStackClusterSpec {
                control_plane_endpoint: Some(Box::new(ApiEndpoint {
                    host: "203.0.113.20".into(),
                    port: 6443,
                })),
                extensions: Some(Box::new(ClusterSpecExtensions {
                    networking: Some(NetworkingSpec {
                        kube_network_plugin: Some("cilium".into()),
                        cilium: Some(CiliumSpec {
                            webhook_enable: Some(true),
                            routing_mode: Some(CiliumRoutingMode::Native),
                            ..Default::default()
                        }),
                    }),
                    network_interfaces: Some(NetworkInterfaces {
                        keepalived: Some("eth0".into()),
                        flannel: Some("eth1".into()),
                    }),
                    ..Default::default()
                })),
                ..Default::default()
            },
        );
        osc.status = Some(OpenStackClusterStatus {
            network: Some(Box::new(NetworkStatusWithSubnets {
                subnets: vec![
                    Subnet {
                        name: "v6".into(),
                        id: "s6".into(),
                        cidr: "fd00::/64".into(),
                        tags: vec![],
                    },
                    Subnet {
                        name: "v4".into(),
                        id: "s4".into(),
                        cidr: "10.6.0.0/24".into(),
                        tags: vec![],
                    },
                ],
                ..Default::default()
            })),
            extensions: Some(Box::new(ClusterStatusExtensions {
                networking: Some(NetworkingStatus {
                    cilium: Some(CiliumStatus {
                        project_id: Some("p1".into()),
                        default_subnet_id: Some("s4".into()),
                        security_group_ids: vec!["sg-cp".into(), "sg-w".into()],
                        webhook_enable: Some(true),
                    }),
                }),
                load_balancers: Some(LoadBalancersStatus {
                    control_plane: Some(VirtualIp {
                        vip: Some("10.6.0.10".into()),
                    }),
                    ingress: Some(VirtualIp {
                        vip: Some("10.6.0.11".into()),
                    }),
                }),
                open_stack: Some(OpenStackStatus {
                    keystone: Some("https://keystone.example/v3".into()),
                    nova: Some("https://nova.example/v2.1".into()),
                    neutron: Some("https://neutron.example".into()),
                    cinder: Some("https://cinder.example/v3/p1".into()),
                    project: Some("tenant".into()),
                    project_domain: Some("Default".into()),
                    region: Some("RegionOne".into()),
                    mgmt: Some("203.0.113.20".into()),
                }),
                platform: Some(PlatformStatus {
                    ntp: Some(NtpStatus {
                        server: Some("ntp.example".into()),
                    }),
                    management: Some(VirtualIp {
                        vip: Some("192.0.2.10".into()),
                    }),
                }),
                node_resources: BTreeMap::from([(
                    "prod-cp-1".to_string(),
                    reserved("70m", "1126Mi"),
                )]),
            })),
            ..Default::default()
        });
        osc
    }

    fn machine(name: &str, cp: bool, address: Option<&str>) -> MachineFacts {
        MachineFacts {
            name: name.into(),
            cluster_name: "prod".into(),
            control_plane: cp,
            address: address.map(str::to_string),
            ..Default::default()
        }
    }

    fn parse(text: &str) -> Value {
        serde_saphyr::from_str(text).unwrap()
    }

    #[test]
    fn vars_hold_every_table_name_in_order_with_its_value() {
        let out = render(&cluster(), &[]).unwrap();
        let text = &out[VARS_KEY];
        let keys: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with(' ') && !l.starts_with('-'))
            .filter_map(|l| l.split(':').next())
            .collect();
        assert_eq!(keys, TABLE);
        let v = parse(text);
        assert_eq!(v["cilium_openstack_security_group_ids"][1], "sg-w");
        assert_eq!(v["vpc_cni_webhook_enable"], true);
        assert_eq!(v["master_virtual_vip"], "10.6.0.10");
        assert_eq!(v["ingress_virtual_vip"], "10.6.0.11");
        assert_eq!(v["harbor_addr"], "10.6.0.11");
        assert_eq!(v["cloud_master_vip"], "203.0.113.20");
        assert_eq!(v["openstack_auth_domain"], "https://keystone.example/v3");
        assert_eq!(v["openstack_cinder_domain"], "https://cinder.example/v3/p1");
        assert_eq!(v["ntp_server"], "ntp.example");
        assert_eq!(v["vip_mgmt"], "192.0.2.10");
        assert_eq!(v["keepalived_interface"], "eth0");
        assert_eq!(v["flannel_interface"], "eth1");
        assert_eq!(v["node_resources"]["prod-cp-1"]["memory"], "1126Mi");
    }

    #[test]
    fn unknown_values_are_null_but_present() {
        let osc = OpenStackCluster::new("bare", OpenStackClusterSpec::default());
        let v = parse(&render(&osc, &[]).unwrap()[VARS_KEY]);
        for name in TABLE {
            assert!(v.get(name).is_some(), "{name} missing");
        }
        assert_eq!(v["ntp_server"], Value::Null);
        assert_eq!(
            v["cilium_openstack_security_group_ids"],
            serde_json::json!([])
        );
    }

    #[test]
    fn inventory_groups_live_machines_by_role() {
        let mut gone = machine("prod-md-0-old", false, Some("10.6.0.99"));
        gone.deleting = true;
        let mut w = machine("prod-md-0-b", false, None);
        w.keepalived_interface = Some("ens4".into());
        let machines = [
            w,
            machine("prod-cp-1", true, Some("10.6.0.5")),
            gone,
            machine("prod-md-0-a", false, Some("10.6.0.7")),
        ];
        let text = render(&cluster(), &machines).unwrap()[INVENTORY_KEY].clone();
        let v = parse(&text);
        let groups = &v["all"]["children"];
        assert_eq!(
            groups["control_plane"]["hosts"]["prod-cp-1"],
            serde_json::json!({"ansible_host": "10.6.0.5", "role": "control_plane"})
        );
        let workers = groups["worker"]["hosts"].as_object().unwrap();
        assert_eq!(
            workers.keys().collect::<Vec<_>>(),
            ["prod-md-0-a", "prod-md-0-b"]
        );
        assert_eq!(
            workers["prod-md-0-b"],
            serde_json::json!({"role": "worker", "keepalived_interface": "ens4"})
        );
        // The same machines in another order give the same bytes.
        let mut reversed = machines.clone();
        reversed.reverse();
        assert_eq!(render(&cluster(), &reversed).unwrap()[INVENTORY_KEY], text);
    }

    #[test]
    fn cilium_values_follow_the_settings() {
        let v = parse(&render(&cluster(), &[]).unwrap()[CILIUM_VALUES_KEY]);
        assert_eq!(v["kubeProxyReplacement"], true);
        assert_eq!(v["k8sServiceHost"], "203.0.113.20");
        assert_eq!(v["k8sServicePort"], 6443);
        assert_eq!(v["routingMode"], "native");
        // Native routing without a CIDR of its own uses the cluster's IPv4 subnet.
        assert_eq!(v["ipv4NativeRoutingCIDR"], "10.6.0.0/24");
        assert_eq!(v["autoDirectNodeRoutes"], true);
        assert!(v.get("tunnelProtocol").is_none());
        assert_eq!(v["openstack"]["projectID"], "p1");
        assert_eq!(v["openstack"]["defaultSubnetID"], "s4");
        assert_eq!(
            v["openstack"]["securityGroupIDs"],
            serde_json::json!(["sg-cp", "sg-w"])
        );

        let mut tunnel = cluster();
        let c = tunnel
            .spec
            .extensions
            .as_mut()
            .and_then(|e| e.networking.as_mut())
            .and_then(|n| n.cilium.as_mut())
            .unwrap();
        c.routing_mode = None;
        c.tunnel_protocol = Some(CiliumTunnelProtocol::Geneve);
        c.kube_proxy_replacement = Some(false);
        c.hubble = Some(true);
        c.ipam = Some(CiliumIpamSpec {
            mode: Some("cluster-pool".into()),
            pool_cidr: Some("10.244.0.0/16".into()),
        });
        let v = parse(&render(&tunnel, &[]).unwrap()[CILIUM_VALUES_KEY]);
        assert_eq!(v["routingMode"], "tunnel");
        assert_eq!(v["tunnelProtocol"], "geneve");
        assert!(v.get("ipv4NativeRoutingCIDR").is_none());
        assert_eq!(v["kubeProxyReplacement"], false);
        assert_eq!(
            v["hubble"],
            serde_json::json!({"enabled": true, "relay": {"enabled": true}, "ui": {"enabled": true}})
        );
        assert_eq!(
            v["ipam"],
            serde_json::json!({"mode": "cluster-pool",
                "operator": {"clusterPoolIPv4PodCIDRList": ["10.244.0.0/16"]}})
        );
        // Unset, Cilium's chart defaults stay.
        let v = parse(&render(&cluster(), &[]).unwrap()[CILIUM_VALUES_KEY]);
        assert!(v.get("hubble").is_none() && v.get("ipam").is_none());
    }

    #[test]
    fn node_resources_skip_machines_being_deleted() {
        let mut a = machine("a", true, None);
        a.node_resources = Some(reserved("60m", "1Gi"));
        let mut b = machine("b", false, None);
        b.node_resources = Some(reserved("60m", "1Gi"));
        b.deleting = true;
        let c = machine("c", false, None);
        let nr = node_resources(&[a, b, c]);
        assert_eq!(nr.keys().collect::<Vec<_>>(), ["a"]);
    }
}
