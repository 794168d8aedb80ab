//! The rules of the managed security groups: CAPO's defaults, the user's
//! rule lists, and the CNI rules for the plugin named in
//! `spec.extensions.networking.kubeNetworkPlugin`.
//!
//! Kept free of I/O so the rule sets are unit-tested on their own.

use std::collections::BTreeSet;

use stackhook_openstack::networking::SecurityGroupRule;

use crate::infra::api::cluster::{
    EtherType, ManagedSecurityGroupName, OpenStackClusterSpec, RuleDirection, SecurityGroupRuleSpec,
};

/// One wanted Neutron rule. Equality ignores the description, as the diff
/// against Neutron's rules does.
#[derive(Clone, Debug, Eq)]
pub struct Rule {
    pub direction: &'static str,
    pub ethertype: &'static str,
    pub protocol: Option<String>,
    pub port_range_min: Option<i64>,
    pub port_range_max: Option<i64>,
    pub remote_group_id: Option<String>,
    pub remote_ip_prefix: Option<String>,
    pub description: String,
}

type Key = (
    &'static str,
    &'static str,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<String>,
);

impl Rule {
    fn key(&self) -> Key {
        (
            self.direction,
            self.ethertype,
            self.protocol.clone(),
            self.port_range_min,
            self.port_range_max,
            self.remote_group_id.clone(),
            normalize_prefix(self.remote_ip_prefix.as_deref()),
        )
    }

    /// Whether Neutron's rule is this one.
    pub fn matches(&self, r: &SecurityGroupRule) -> bool {
        let ethertype = if r.ethertype == "IPv6" {
            "IPv6"
        } else {
            "IPv4"
        };
        let direction = if r.direction == "egress" {
            "egress"
        } else {
            "ingress"
        };
        self.key()
            == (
                direction,
                ethertype,
                r.protocol.clone().map(|p| p.to_lowercase()),
                r.port_range_min,
                r.port_range_max,
                r.remote_group_id.clone(),
                normalize_prefix(r.remote_ip_prefix.as_deref()),
            )
    }

    /// The `POST /v2.0/security-group-rules` body.
    pub fn body(&self, group_id: &str) -> serde_json::Value {
        serde_json::json!({
            "security_group_id": group_id,
            "direction": self.direction,
            "ethertype": self.ethertype,
            "protocol": self.protocol,
            "port_range_min": self.port_range_min,
            "port_range_max": self.port_range_max,
            "remote_group_id": self.remote_group_id,
            "remote_ip_prefix": self.remote_ip_prefix,
            "description": self.description,
        })
    }
}

impl PartialEq for Rule {
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}

/// "Anywhere" is both an absent prefix and an all-zero one.
fn normalize_prefix(p: Option<&str>) -> Option<String> {
    match p {
        None | Some("0.0.0.0/0") | Some("::/0") => None,
        Some(p) => Some(p.to_owned()),
    }
}

/// IDs of the managed groups, as far as they exist.
#[derive(Clone, Debug, Default)]
pub struct GroupIds {
    pub control_plane: String,
    pub worker: String,
    pub bastion: Option<String>,
}

/// Desired rules per group.
#[derive(Clone, Debug, Default)]
pub struct RuleSets {
    pub control_plane: Vec<Rule>,
    pub worker: Vec<Rule>,
    pub bastion: Vec<Rule>,
}

fn rule(
    description: &str,
    protocol: Option<&str>,
    ports: Option<(i64, i64)>,
    remote_group: Option<&str>,
    remote_ip: Option<&str>,
) -> Rule {
    Rule {
        direction: "ingress",
        ethertype: "IPv4",
        protocol: protocol.map(str::to_owned),
        port_range_min: ports.map(|p| p.0),
        port_range_max: ports.map(|p| p.1),
        remote_group_id: remote_group.map(str::to_owned),
        remote_ip_prefix: remote_ip.map(str::to_owned),
        description: description.to_owned(),
    }
}

fn egress_any() -> Vec<Rule> {
    ["IPv4", "IPv6"]
        .into_iter()
        .map(|ethertype| Rule {
            direction: "egress",
            ethertype,
            protocol: None,
            port_range_min: None,
            port_range_max: None,
            remote_group_id: None,
            remote_ip_prefix: None,
            description: "Full open".to_owned(),
        })
        .collect()
}

/// Description, protocol and port range of one CNI rule.
type CniRule = (&'static str, &'static str, Option<(i64, i64)>);

/// CNI traffic between all nodes, by plugin name. CAPO leaves these to the
/// user's rule lists; we add them when the cluster names its CNI so that a
/// plain spec gives a working pod network.
fn cni_rules(plugin: &str) -> Vec<CniRule> {
    match plugin.to_ascii_lowercase().as_str() {
        "cilium" => vec![
            ("Cilium VXLAN", "udp", Some((8472, 8472))),
            ("Cilium health", "tcp", Some((4240, 4240))),
            ("Cilium Hubble", "tcp", Some((4244, 4244))),
            ("Cilium health ICMP", "icmp", None),
        ],
        "calico" => vec![
            ("Calico BGP", "tcp", Some((179, 179))),
            ("Calico IP-in-IP", "4", None),
            ("Calico VXLAN", "udp", Some((4789, 4789))),
            ("Calico Typha", "tcp", Some((5473, 5473))),
        ],
        "flannel" => vec![("Flannel VXLAN", "udp", Some((8472, 8472)))],
        _ => vec![],
    }
}

/// CAPO's rule sets for `spec`, given the group IDs and the IPv4 CIDRs of
/// the cluster subnets.
pub fn desired(spec: &OpenStackClusterSpec, ids: &GroupIds, subnet_cidrs: &[String]) -> RuleSets {
    let cp = ids.control_plane.as_str();
    let wk = ids.worker.as_str();
    let managed = spec.managed_security_groups.clone().unwrap_or_default();
    let api_port = spec.api_server_port.unwrap_or(6443);
    let mut sets = RuleSets {
        control_plane: egress_any(),
        worker: egress_any(),
        bastion: Vec::new(),
    };
    sets.control_plane.push(rule(
        "Kubernetes API",
        Some("tcp"),
        Some((api_port, api_port)),
        None,
        None,
    ));
    if managed.allow_all_in_cluster_traffic {
        for set in [&mut sets.control_plane, &mut sets.worker] {
            set.push(rule("In-cluster Ingress", None, None, Some(cp), None));
            set.push(rule("In-cluster Ingress", None, None, Some(wk), None));
        }
    } else {
        sets.control_plane.push(rule(
            "Etcd",
            Some("tcp"),
            Some((2379, 2380)),
            Some(cp),
            None,
        ));
        for (set, groups) in [
            (&mut sets.control_plane, [cp, wk]),
            (&mut sets.worker, [wk, cp]),
        ] {
            for g in groups {
                set.push(rule(
                    "Kubelet API",
                    Some("tcp"),
                    Some((10250, 10250)),
                    Some(g),
                    None,
                ));
            }
        }
        let plugin = spec
            .extensions
            .as_ref()
            .and_then(|e| e.networking.as_ref())
            .and_then(|n| n.kube_network_plugin.as_deref())
            .unwrap_or_default();
        for (desc, proto, ports) in cni_rules(plugin) {
            for set in [&mut sets.control_plane, &mut sets.worker] {
                for g in [cp, wk] {
                    set.push(rule(desc, Some(proto), ports, Some(g), None));
                }
            }
        }
    }
    for proto in ["tcp", "udp"] {
        for cidr in subnet_cidrs.iter().filter(|c| !c.contains(':')) {
            sets.worker.push(rule(
                "Node Port Services",
                Some(proto),
                Some((30000, 32767)),
                None,
                Some(cidr),
            ));
        }
        for g in [wk, cp] {
            sets.worker.push(rule(
                "Node Port Services",
                Some(proto),
                Some((30000, 32767)),
                Some(g),
                None,
            ));
        }
    }
    if let Some(lb) = spec
        .api_server_load_balancer
        .as_ref()
        .filter(|lb| lb.enabled != Some(false))
    {
        for p in &lb.additional_ports {
            sets.control_plane.push(rule(
                "Kubernetes API additional port",
                Some("tcp"),
                Some((*p, *p)),
                None,
                None,
            ));
        }
    }
    if let Some(bastion) = ids.bastion.as_deref() {
        for set in [&mut sets.control_plane, &mut sets.worker] {
            set.push(rule(
                "SSH",
                Some("tcp"),
                Some((22, 22)),
                Some(bastion),
                None,
            ));
        }
        sets.bastion = egress_any();
        sets.bastion
            .push(rule("SSH", Some("tcp"), Some((22, 22)), None, None));
    }
    let expand = |specs: &[SecurityGroupRuleSpec]| -> Vec<Rule> {
        specs.iter().flat_map(|s| user_rule(s, ids)).collect()
    };
    let all = expand(&managed.all_nodes_security_group_rules);
    sets.control_plane.extend(all.iter().cloned());
    sets.worker.extend(all);
    sets.control_plane
        .extend(expand(&managed.control_plane_nodes_security_group_rules));
    sets.worker
        .extend(expand(&managed.worker_nodes_security_group_rules));
    for set in [&mut sets.control_plane, &mut sets.worker, &mut sets.bastion] {
        dedup(set);
    }
    sets
}

/// One user rule; `remoteManagedGroups` gives one rule per group.
fn user_rule(s: &SecurityGroupRuleSpec, ids: &GroupIds) -> Vec<Rule> {
    let base = Rule {
        direction: match s.direction {
            RuleDirection::Ingress => "ingress",
            RuleDirection::Egress => "egress",
        },
        ethertype: match s.ether_type {
            Some(EtherType::IPv6) => "IPv6",
            _ => "IPv4",
        },
        protocol: s.protocol.as_ref().map(|p| p.to_lowercase()),
        port_range_min: s.port_range_min,
        port_range_max: s.port_range_max,
        remote_group_id: s.remote_group_id.clone(),
        remote_ip_prefix: s.remote_ip_prefix.clone(),
        description: s.description.clone().unwrap_or_else(|| s.name.clone()),
    };
    if s.remote_managed_groups.is_empty() {
        return vec![base];
    }
    s.remote_managed_groups
        .iter()
        .filter_map(|g| match g {
            ManagedSecurityGroupName::Controlplane => Some(ids.control_plane.clone()),
            ManagedSecurityGroupName::Worker => Some(ids.worker.clone()),
            ManagedSecurityGroupName::Bastion => ids.bastion.clone(),
        })
        .map(|id| Rule {
            remote_group_id: Some(id),
            ..base.clone()
        })
        .collect()
}

fn dedup(rules: &mut Vec<Rule>) {
    let mut seen = BTreeSet::new();
    rules.retain(|r| seen.insert(r.key()));
}

/// What to change: observed rules to delete and desired rules to create.
pub fn diff<'a>(
    desired: &'a [Rule],
    observed: &'a [SecurityGroupRule],
) -> (Vec<&'a SecurityGroupRule>, Vec<&'a Rule>) {
    diff_by(desired, observed, Rule::matches)
}

/// Like [`diff`], with descriptions compared too: for an [`unconfigured`] group.
/// Replacing Neutron's default egress rules then, before any machine uses the
/// group, leaves exactly CAPO's rules, so CAPO, which compares descriptions, finds
/// nothing to replace on a running cluster should it take the cluster back.
pub fn diff_exact<'a>(
    desired: &'a [Rule],
    observed: &'a [SecurityGroupRule],
) -> (Vec<&'a SecurityGroupRule>, Vec<&'a Rule>) {
    diff_by(desired, observed, |d, o| {
        d.matches(o) && o.description.as_deref().unwrap_or_default() == d.description
    })
}

/// Whether a group has only the rules Neutron gives every new group: egress
/// anywhere, without a description. A group stackhook or CAPO has set up always
/// has ingress rules too.
pub fn unconfigured(observed: &[SecurityGroupRule]) -> bool {
    observed.iter().all(|r| {
        r.direction == "egress"
            && r.description.as_deref().unwrap_or_default().is_empty()
            && r.protocol.is_none()
            && r.port_range_min.is_none()
            && r.remote_group_id.is_none()
            && normalize_prefix(r.remote_ip_prefix.as_deref()).is_none()
    })
}

fn diff_by<'a>(
    desired: &'a [Rule],
    observed: &'a [SecurityGroupRule],
    same: impl Fn(&Rule, &SecurityGroupRule) -> bool,
) -> (Vec<&'a SecurityGroupRule>, Vec<&'a Rule>) {
    let delete = observed
        .iter()
        .filter(|o| !desired.iter().any(|d| same(d, o)))
        .collect();
    let create = desired
        .iter()
        .filter(|d| !observed.iter().any(|o| same(d, o)))
        .collect();
    (delete, create)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::cluster::{ApiServerLoadBalancer, ManagedSecurityGroups};
    use crate::infra::api::extensions::{ClusterSpecExtensions, NetworkingSpec};

    fn ids() -> GroupIds {
        GroupIds {
            control_plane: "cp".into(),
            worker: "wk".into(),
            bastion: None,
        }
    }

    fn has(rules: &[Rule], proto: &str, port: i64, remote_group: Option<&str>) -> bool {
        rules.iter().any(|r| {
            r.protocol.as_deref() == Some(proto)
                && r.port_range_min == Some(port)
                && r.remote_group_id.as_deref() == remote_group
        })
    }

    #[test]
    fn capo_defaults() {
        let spec = OpenStackClusterSpec {
            managed_security_groups: Some(ManagedSecurityGroups::default()),
            api_server_load_balancer: Some(Box::new(ApiServerLoadBalancer {
                additional_ports: vec![8443],
                ..Default::default()
            })),
            ..Default::default()
        };
        let s = desired(&spec, &ids(), &["10.6.0.0/24".into()]);
        assert!(has(&s.control_plane, "tcp", 6443, None));
        assert!(has(&s.control_plane, "tcp", 8443, None));
        assert!(has(&s.control_plane, "tcp", 2379, Some("cp")));
        assert!(has(&s.control_plane, "tcp", 10250, Some("wk")));
        assert!(has(&s.worker, "tcp", 10250, Some("cp")));
        assert!(has(&s.worker, "udp", 30000, Some("cp")));
        assert!(s
            .worker
            .iter()
            .any(|r| r.remote_ip_prefix.as_deref() == Some("10.6.0.0/24")));
        assert!(!has(&s.worker, "tcp", 2379, Some("cp")));
        assert_eq!(
            s.control_plane
                .iter()
                .filter(|r| r.direction == "egress")
                .count(),
            2
        );
        assert!(s.bastion.is_empty());
        // No CNI named: no CNI rules.
        assert!(!has(&s.worker, "udp", 8472, Some("cp")));
    }

    #[test]
    fn cilium_and_allow_all() {
        let mut spec = OpenStackClusterSpec {
            managed_security_groups: Some(ManagedSecurityGroups::default()),
            extensions: Some(Box::new(ClusterSpecExtensions {
                networking: Some(NetworkingSpec {
                    kube_network_plugin: Some("cilium".into()),
                    ..Default::default()
                }),
                ..Default::default()
            })),
            ..Default::default()
        };
        let s = desired(&spec, &ids(), &[]);
        assert!(has(&s.worker, "udp", 8472, Some("cp")));
        assert!(has(&s.control_plane, "tcp", 4240, Some("wk")));
        spec.managed_security_groups = Some(ManagedSecurityGroups {
            allow_all_in_cluster_traffic: true,
            ..Default::default()
        });
        let s = desired(&spec, &ids(), &[]);
        assert!(!has(&s.control_plane, "tcp", 2379, Some("cp")));
        assert!(s
            .worker
            .iter()
            .any(|r| r.protocol.is_none() && r.remote_group_id.as_deref() == Some("cp")));
    }

    #[test]
    fn user_rules_expand_and_dedup() {
        let spec = OpenStackClusterSpec {
            managed_security_groups: Some(ManagedSecurityGroups {
                all_nodes_security_group_rules: vec![SecurityGroupRuleSpec {
                    name: "bgp".into(),
                    direction: RuleDirection::Ingress,
                    protocol: Some("TCP".into()),
                    port_range_min: Some(179),
                    port_range_max: Some(179),
                    remote_managed_groups: vec![
                        ManagedSecurityGroupName::Controlplane,
                        ManagedSecurityGroupName::Worker,
                        ManagedSecurityGroupName::Bastion,
                    ],
                    ..Default::default()
                }],
                worker_nodes_security_group_rules: vec![SecurityGroupRuleSpec {
                    name: "kubelet-again".into(),
                    direction: RuleDirection::Ingress,
                    protocol: Some("tcp".into()),
                    port_range_min: Some(10250),
                    port_range_max: Some(10250),
                    remote_group_id: Some("cp".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = desired(&spec, &ids(), &[]);
        // Bastion is not managed, so only two rules from the three groups.
        assert!(has(&s.worker, "tcp", 179, Some("cp")) && has(&s.worker, "tcp", 179, Some("wk")));
        assert_eq!(
            s.worker
                .iter()
                .filter(|r| r.port_range_min == Some(10250)
                    && r.remote_group_id.as_deref() == Some("cp"))
                .count(),
            1
        );
    }

    #[test]
    fn diff_matches_neutron_shapes() {
        let observed = vec![
            SecurityGroupRule {
                id: "e4".into(),
                direction: "egress".into(),
                ethertype: "IPv4".into(),
                ..Default::default()
            },
            SecurityGroupRule {
                id: "api".into(),
                direction: "ingress".into(),
                ethertype: "IPv4".into(),
                protocol: Some("tcp".into()),
                port_range_min: Some(6443),
                port_range_max: Some(6443),
                remote_ip_prefix: Some("0.0.0.0/0".into()),
                ..Default::default()
            },
            SecurityGroupRule {
                id: "stray".into(),
                direction: "ingress".into(),
                ethertype: "IPv4".into(),
                protocol: Some("tcp".into()),
                port_range_min: Some(1),
                port_range_max: Some(1),
                ..Default::default()
            },
        ];
        let wanted = vec![
            egress_any().remove(0),
            egress_any().remove(1),
            rule(
                "Kubernetes API",
                Some("tcp"),
                Some((6443, 6443)),
                None,
                None,
            ),
        ];
        let (delete, create) = diff(&wanted, &observed);
        assert_eq!(
            delete.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["stray"]
        );
        assert_eq!(create.len(), 1);
        assert_eq!(create[0].ethertype, "IPv6");
    }

    /// Neutron's default egress rules carry no description; CAPO's say "Full open".
    /// Only the exact diff replaces them.
    #[test]
    fn exact_diff_replaces_neutron_default_egress() {
        let defaults: Vec<SecurityGroupRule> = ["IPv4", "IPv6"]
            .into_iter()
            .map(|e| SecurityGroupRule {
                id: format!("default-{e}"),
                security_group_id: "cp".into(),
                direction: "egress".into(),
                ethertype: e.into(),
                protocol: None,
                port_range_min: None,
                port_range_max: None,
                remote_group_id: None,
                remote_ip_prefix: None,
                description: Some(String::new()),
            })
            .collect();
        let wanted = egress_any();
        assert!(unconfigured(&defaults));
        let (delete, create) = diff(&wanted, &defaults);
        assert!(delete.is_empty() && create.is_empty());
        let (delete, create) = diff_exact(&wanted, &defaults);
        assert_eq!(delete.len(), 2);
        assert_eq!(create.len(), 2);
        assert!(create.iter().all(|r| r.description == "Full open"));
        let mut capo = defaults.clone();
        for r in &mut capo {
            r.description = Some("Full open".into());
        }
        let (delete, create) = diff_exact(&wanted, &capo);
        assert!(delete.is_empty() && create.is_empty());
        assert!(!unconfigured(&capo));
    }
}
