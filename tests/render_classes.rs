//! The shipped ClusterClasses render their example Clusters (after `clusterctl
//! generate`-style substitution) through the embedded packs, and `validate` finds
//! nothing wrong with them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Value};
use stackhook::engine::clusterclass::{Cluster, ClusterClass};
use stackhook::engine::PackEngine;
use stackhook::render::{self, Inputs, Templates};
use stackhook::sdk::CapiVersion;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// clusterctl's substitution: `${NAME}` must be given, `${NAME:=default}` may be.
fn substitute(text: &str, given: &BTreeMap<&str, &str>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').expect("closing brace") + start;
        let inner = &rest[start + 2..end];
        let (name, default) = match inner.split_once(":=") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        let value = given
            .get(name)
            .copied()
            .or(default)
            .unwrap_or_else(|| panic!("${{{name}}} has no value and no default"));
        out.push_str(value);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn render_example(example: &str) -> Vec<Value> {
    let given = BTreeMap::from([
        ("CLUSTER_NAME", "c1"),
        (
            "OPENSTACK_EXTERNAL_NETWORK_ID",
            "0a9b7d2c-5e1f-4c3a-9b8d-6f2e1a3c4d5e",
        ),
    ]);
    let text =
        std::fs::read_to_string(root().join("clusterclasses/examples").join(example)).unwrap();
    let text = substitute(&text, &given);
    assert!(!text.contains("${"), "{text}");
    let cluster = render::yaml_documents(&text).unwrap().remove(0);
    let class_text = std::fs::read_to_string(
        root().join("clusterclasses/openstack-kubeadm/base/clusterclass.yaml"),
    )
    .unwrap();
    let class = render::yaml_documents(&class_text).unwrap().remove(0);
    let inputs = Inputs {
        cluster: Cluster::from_value(&cluster).unwrap(),
        class: ClusterClass::from_value(&class).unwrap(),
        templates: Templates::from_dir(&root().join("templates/openstack-kubeadm")).unwrap(),
        capi: CapiVersion::NEWEST,
    };
    let engine = PackEngine::embedded().unwrap();
    let problems = render::validate(&inputs, &engine);
    assert!(problems.is_empty(), "{example}: {problems:#?}");
    render::render(&inputs, &engine).unwrap_or_else(|e| panic!("{example}: {e}"))
}

fn find<'a>(objs: &'a [Value], kind: &str, name_part: &str) -> &'a Value {
    let found: Vec<&Value> = objs
        .iter()
        .filter(|o| {
            o["kind"] == kind
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.contains(name_part))
        })
        .collect();
    assert_eq!(found.len(), 1, "{kind} *{name_part}*: {found:#?}");
    found[0]
}

/// The control plane's machine template, found through the KubeadmControlPlane's
/// reference (CAPI names it `<cluster>-<random>`).
fn control_plane_machine(objs: &[Value]) -> &Value {
    let kcp = find(objs, "KubeadmControlPlane", "c1");
    let name = kcp["spec"]["machineTemplate"]["infrastructureRef"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    find(objs, "OpenStackMachineTemplate", &name)
}

#[test]
fn minimal_cluster() {
    let objs = render_example("openstack-kubeadm-minimal.yaml");
    let osc = &find(&objs, "OpenStackCluster", "c1")["spec"];
    assert_eq!(
        osc["identityRef"],
        json!({"type": "Secret", "name": "c1-cloud-config", "cloudName": "openstack"})
    );
    assert_eq!(
        osc["externalNetwork"]["id"],
        "0a9b7d2c-5e1f-4c3a-9b8d-6f2e1a3c4d5e"
    );
    assert_eq!(osc["apiServerLoadBalancer"]["enabled"], true);
    assert_eq!(
        osc["extensions"]["networking"]["kubeNetworkPlugin"],
        "cilium"
    );
    let kcp = &find(&objs, "KubeadmControlPlane", "c1")["spec"]["kubeadmConfigSpec"];
    assert_eq!(
        kcp["initConfiguration"]["skipPhases"],
        json!(["addon/kube-proxy"])
    );
    assert!(kcp["files"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["contentFrom"]["secret"]["name"] == "c1-bootstrap-vars"));
    // The user's kubelet arguments stay beside what the packs add.
    assert_eq!(
        kcp["initConfiguration"]["nodeRegistration"]["kubeletExtraArgs"]["cloud-provider"],
        "external"
    );
    let worker = &find(&objs, "OpenStackMachineTemplate", "md-0")["spec"]["template"]["spec"];
    assert_eq!(
        worker["image"],
        json!({"filter": {"name": "ubuntu-2404-kube-v1.33.1"}})
    );
    assert_eq!(worker["flavor"], "m1.medium");
}

#[test]
fn highly_available_cluster() {
    let objs = render_example("openstack-kubeadm-ha.yaml");
    let osc = &find(&objs, "OpenStackCluster", "c1")["spec"];
    assert_eq!(
        osc["apiServerLoadBalancer"],
        json!({"enabled": true, "provider": "amphora", "allowedCIDRs": ["0.0.0.0/0"]})
    );
    assert_eq!(
        osc["controlPlaneAvailabilityZones"],
        json!(["az1", "az2", "az3"])
    );
    assert_eq!(
        osc["extensions"]["loadBalancers"]["ingress"]["enabled"],
        true
    );
    let cp = &control_plane_machine(&objs)["spec"]["template"]["spec"];
    assert_eq!(cp["rootVolume"], json!({"sizeGiB": 50, "type": "ssd"}));
    assert_eq!(cp["extensions"]["serverGroupPolicy"], "anti-affinity");
    let gpu = &find(&objs, "OpenStackMachineTemplate", "gpu")["spec"]["template"]["spec"];
    assert_eq!(gpu["flavor"], "g1.large");
    let general = &find(&objs, "OpenStackMachineTemplate", "general")["spec"]["template"]["spec"];
    assert_eq!(general["flavor"], "m1.large");
    let kcp = &find(&objs, "KubeadmControlPlane", "c1")["spec"]["kubeadmConfigSpec"];
    assert_eq!(
        kcp["clusterConfiguration"]["apiServer"]["extraArgs"]["audit-log-path"],
        "/var/log/kubernetes/audit/audit.log"
    );
}

#[test]
fn keepalived_cluster() {
    let objs = render_example("openstack-kubeadm-keepalived.yaml");
    let osc = &find(&objs, "OpenStackCluster", "c1")["spec"];
    assert_eq!(osc["apiServerLoadBalancer"]["enabled"], false);
    assert_eq!(osc["apiServerFixedIP"], "10.6.0.5");
    assert_eq!(osc["disableAPIServerFloatingIP"], true);
    let cp = &control_plane_machine(&objs)["spec"]["template"]["spec"];
    assert_eq!(
        cp["ports"],
        json!([{"allowedAddressPairs": [{"ipAddress": "10.6.0.5"}]}])
    );
    let kcp = &find(&objs, "KubeadmControlPlane", "c1")["spec"]["kubeadmConfigSpec"];
    let paths: Vec<&str> = kcp["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"/etc/kubernetes/manifests/keepalived.yaml"),
        "{paths:?}"
    );
}
