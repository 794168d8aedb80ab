//! clusterclasses/openstack-kubeadm-bootstrap-vars.yaml through `stackhook render`
//! and `stackhook validate` (the binary): the user's choices land in the
//! OpenStackCluster's spec.extensions, valid against our CRD schema and type; the
//! kubeadm templates read the Secret the controller writes, by the name and keys
//! the controller uses; nothing the cloud decides is in a template.

use crate::crd_schema;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use stackhook::infra::api::OpenStackCluster;
use stackhook::infra::bootstrap::{secret_name, CILIUM_VALUES_KEY, INVENTORY_KEY, VARS_KEY};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn class() -> PathBuf {
    root().join("clusterclasses/openstack-kubeadm-bootstrap-vars.yaml")
}

fn stackhook(cmd: &str, cluster: &Path) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stackhook"));
    c.arg(cmd)
        .arg("--cluster")
        .arg(cluster)
        .arg("--clusterclass")
        .arg(class())
        .arg("--templates")
        .arg(root().join("templates"));
    if cmd == "render" {
        c.args(["-o", "json"]);
    }
    c.output().expect("running stackhook")
}

fn render(cluster: &Path) -> Vec<Value> {
    let out = stackhook("render", cluster);
    assert!(
        out.status.success(),
        "render failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON list")
}

/// A Cluster of the class with these `bootstrap` values, in a temporary file.
fn cluster_file(dir: &Path, name: &str, bootstrap: Option<Value>) -> PathBuf {
    let mut variables = vec![json!({"name": "imageName", "value": "ubuntu-2404-kube-v1.34.1"})];
    if let Some(b) = bootstrap {
        variables.push(json!({"name": "bootstrap", "value": b}));
    }
    let cluster = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"name": name, "namespace": "magnum-system"},
        "spec": {"topology": {"class": "openstack-kubeadm-bootstrap-vars", "version": "v1.34.1",
            "controlPlane": {"replicas": 1},
            "workers": {"machineDeployments": [{"class": "default-worker", "name": "md-0", "replicas": 1}]},
            "variables": variables}}
    });
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, serde_json::to_string(&cluster).unwrap()).unwrap();
    path
}

fn osc_schema() -> Value {
    let crd = stackhook::infra::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "OpenStackCluster")
        .expect("OpenStackCluster CRD");
    let s = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("schema");
    serde_json::to_value(s).unwrap()
}

/// `(path, secret name, key)` of every file the kubeadm object reads from a Secret.
fn secret_files(files: &Value) -> Vec<(String, String, String)> {
    files
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| {
            let s = f.pointer("/contentFrom/secret")?;
            Some((
                f["path"].as_str()?.to_string(),
                s["name"].as_str()?.to_string(),
                s["key"].as_str()?.to_string(),
            ))
        })
        .collect()
}

#[test]
fn the_example_cluster_reads_its_bootstrap_vars_secret() {
    let objs = render(
        &root().join("clusterclasses/examples/openstack-kubeadm-bootstrap-vars-cluster.yaml"),
    );
    let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "OpenStackCluster",
            "KubeadmControlPlane",
            "OpenStackMachineTemplate",
            "KubeadmConfigTemplate",
            "OpenStackMachineTemplate"
        ]
    );
    let osc = &objs[0];
    assert_eq!(
        osc["spec"]["extensions"],
        json!({
            "networking": {"kubeNetworkPlugin": "cilium",
                "cilium": {"webhookEnable": true, "routingMode": "native", "tunnelProtocol": "vxlan"}},
            "loadBalancers": {"ingress": {"enabled": true}},
            "networkInterfaces": {"keepalived": "eth0"},
            "platform": {"ntp": {"server": "ntp.edge1.example"}}
        })
    );
    let name = secret_name("edge1");
    assert_eq!(
        secret_files(&objs[1]["spec"]["kubeadmConfigSpec"]["files"]),
        [
            (
                "/etc/stackhook/vars.yaml".to_string(),
                name.clone(),
                VARS_KEY.to_string()
            ),
            (
                "/etc/stackhook/inventory.yaml".to_string(),
                name.clone(),
                INVENTORY_KEY.to_string()
            ),
            (
                "/etc/stackhook/cilium-values.yaml".to_string(),
                name.clone(),
                CILIUM_VALUES_KEY.to_string()
            ),
        ]
    );
    assert_eq!(
        secret_files(&objs[3]["spec"]["template"]["spec"]["files"]),
        [(
            "/etc/stackhook/vars.yaml".to_string(),
            name,
            VARS_KEY.to_string()
        )]
    );
    // Root-only files: they hold the project's IDs and the cloud's endpoints.
    for f in objs[1]["spec"]["kubeadmConfigSpec"]["files"]
        .as_array()
        .unwrap()
    {
        assert_eq!(f["permissions"], "0600");
    }
    // What the cloud decides is in no template: no IDs, VIPs or endpoints.
    let text = serde_json::to_string(&objs).unwrap();
    for absent in [
        "projectID",
        "defaultSubnetID",
        "securityGroupIDs",
        "vip\":\"1",
        "keystone",
    ] {
        assert!(!text.contains(absent), "{absent} in a rendered template");
    }
    let ok = stackhook(
        "validate",
        &root().join("clusterclasses/examples/openstack-kubeadm-bootstrap-vars-cluster.yaml"),
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

#[test]
fn every_choice_lands_in_spec_extensions_and_fits_the_crd() {
    let dir = tempfile::tempdir().unwrap();
    let full = cluster_file(
        dir.path(),
        "kube-ab12c",
        Some(json!({
            "kubeNetworkPlugin": "flannel",
            "cilium": {"routingMode": "tunnel", "tunnelProtocol": "geneve", "ipv4NativeRoutingCIDR": "10.0.0.0/8"},
            "ntpServer": "192.0.2.123",
            "managementVIP": "192.0.2.10",
            "keepalivedInterface": "eth0",
            "flannelInterface": "eth1",
            "cloudProviderClusterName": "5d12f6fd-a196-4bf0-ae4c-1f639a523a52"
        })),
    );
    let bare = cluster_file(dir.path(), "bare", None);
    let schema = osc_schema();
    for (path, want) in [
        (
            &full,
            json!({
                "networking": {"kubeNetworkPlugin": "flannel",
                    "cilium": {"webhookEnable": false, "routingMode": "tunnel", "tunnelProtocol": "geneve",
                        "ipv4NativeRoutingCIDR": "10.0.0.0/8"}},
                "loadBalancers": {"ingress": {"enabled": true}},
                "networkInterfaces": {"keepalived": "eth0", "flannel": "eth1"},
                "platform": {"ntp": {"server": "192.0.2.123"}, "management": {"vip": "192.0.2.10"}},
                "cloudProvider": {"clusterName": "5d12f6fd-a196-4bf0-ae4c-1f639a523a52"}
            }),
        ),
        (
            // Defaults only: no empty objects, nothing the controller would read as set.
            &bare,
            json!({
                "networking": {"kubeNetworkPlugin": "cilium",
                    "cilium": {"webhookEnable": false, "routingMode": "tunnel", "tunnelProtocol": "vxlan"}},
                "loadBalancers": {"ingress": {"enabled": true}}
            }),
        ),
    ] {
        let objs = render(path);
        let osc = &objs[0];
        assert_eq!(osc["spec"]["extensions"], want, "{}", path.display());
        let errors = crd_schema::schema_errors(&schema, osc);
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
        let typed: OpenStackCluster =
            serde_json::from_value(osc.clone()).expect("our type reads it");
        assert_eq!(serde_json::to_value(&typed.spec.extensions).unwrap(), want);
    }

    // A management VIP that is not an address is refused before CAPI sees it.
    let bad = cluster_file(
        dir.path(),
        "bad",
        Some(json!({"managementVIP": "mgmt.example"})),
    );
    let out = stackhook("validate", &bad);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("managementVIP"), "{stderr}");
}
