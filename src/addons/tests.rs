use super::*;
use crate::infra::api::extensions::{AddonToggle, ClusterSpecExtensions, CniAddon};
use crate::infra::api::types::ApiEndpoint;
use crate::infra::api::OpenStackClusterSpec;

const CLOUDS: &str = "clouds:\n  openstack:\n    region_name: RegionOne\n    auth:\n      auth_url: http://127.0.0.1:5000/v3\n      application_credential_id: ac-1\n      application_credential_secret: s3cret\n";

/// Kinds without a namespace, as the Kubernetes API defines them.
const CLUSTER_SCOPED: &[&str] = &[
    "ClusterRole",
    "ClusterRoleBinding",
    "CSIDriver",
    "StorageClass",
    "PriorityClass",
    "CustomResourceDefinition",
];

fn osc(addons: AddonsSpec) -> OpenStackCluster {
    let mut o = OpenStackCluster::new("prod-x", OpenStackClusterSpec::default());
    o.spec.extensions = Some(Box::new(ClusterSpecExtensions {
        addons: Some(addons),
        ..Default::default()
    }));
    o.spec.control_plane_endpoint = Some(Box::new(ApiEndpoint {
        host: "203.0.113.10".into(),
        port: 6443,
    }));
    o.status = Some(
        serde_json::from_value(json!({
            "ready": true,
            "externalNetwork": {"name": "public", "id": "ext-1"},
            "network": {"name": "n", "id": "net-1", "subnets": [{"name": "s", "id": "sub-1", "cidr": "10.6.0.0/24"}]},
        }))
        .unwrap(),
    );
    o
}

fn types() -> Vec<VolumeType> {
    ["__DEFAULT__", "fast-ssd", "Gold Tier"]
        .iter()
        .map(|n| VolumeType {
            id: format!("id-{n}"),
            name: n.to_string(),
            ..Default::default()
        })
        .collect()
}

fn render_with(addons: AddonsSpec, version: &str) -> Rendered {
    let osc = osc(addons.clone());
    let cloud = CloudConfig::from_clouds_yaml(CLOUDS.as_bytes(), "openstack", None).unwrap();
    let types = types();
    render(&Inputs {
        cluster: "prod",
        provider_cluster_name: "prod-uuid",
        addons: &addons,
        osc: &osc,
        cloud: &cloud,
        cacert: Some(b"-----BEGIN CERTIFICATE-----\n"),
        volume_types: &types,
        default_volume_type: Some("fast-ssd"),
        kubernetes_version: version,
        pod_cidr: Some("192.168.0.0/16"),
    })
    .expect("render")
}

fn docs(rendered: &Rendered) -> Vec<Value> {
    let mut all = Vec::new();
    for data in rendered.parts.values() {
        for text in data.values() {
            let docs: Vec<Value> = serde_saphyr::from_str_multiple(text).expect("YAML");
            all.extend(docs.into_iter().filter(|d| !d.is_null()));
        }
    }
    all
}

fn containers<'a>(docs: &'a [Value], kind: &str, name: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .flat_map(|d| {
            d.pointer("/spec/template/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .collect()
}

fn args_of(c: &[&Value]) -> Vec<String> {
    c.iter()
        .flat_map(|c| {
            c["args"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(c["command"].as_array().into_iter().flatten())
        })
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect()
}

#[test]
fn every_object_is_whole_and_namespaced_where_kubernetes_wants_it() {
    for minor in ["v1.31.0", "v1.33.1", "v1.36.2"] {
        let r = render_with(AddonsSpec::default(), minor);
        assert_eq!(
            r.parts.keys().copied().collect::<Vec<_>>(),
            Part::ALL.to_vec()
        );
        let all = docs(&r);
        assert!(all.len() > 20, "{minor}: {} objects", all.len());
        for d in &all {
            let kind = d["kind"].as_str().expect("kind");
            assert!(d["apiVersion"].is_string(), "{kind} without apiVersion");
            assert!(d["metadata"]["name"].is_string(), "{kind} without a name");
            let ns = d["metadata"]["namespace"].as_str();
            if CLUSTER_SCOPED.contains(&kind) {
                assert_eq!(ns, None, "{kind} is cluster-scoped");
            } else {
                assert_eq!(ns, Some("kube-system"), "{kind} {}", d["metadata"]["name"]);
            }
        }
        for data in r.parts.values() {
            for text in data.values() {
                assert!(!text.contains("<no value>"));
                assert!(text.len() < MAX_OBJECT_BYTES / 2);
            }
        }
    }
}

#[test]
fn ccm_and_csi_follow_the_minor_and_carry_the_cleanup_s_cluster_name() {
    let r = render_with(AddonsSpec::default(), "v1.33.1");
    assert_eq!(r.minor, "1.33");
    let all = docs(&r);
    let ccm = containers(&all, "DaemonSet", "openstack-cloud-controller-manager");
    assert!(ccm[0]["image"].as_str().unwrap().ends_with(":v1.33.1"));
    assert!(args_of(&ccm).contains(&"--cluster-name=prod-uuid".to_string()));
    let csi: Vec<&Value> = containers(&all, "Deployment", "csi-cinder-controllerplugin")
        .into_iter()
        .filter(|c| c["image"].as_str().unwrap().contains("cinder-csi-plugin"))
        .collect();
    assert!(csi[0]["image"].as_str().unwrap().ends_with(":v1.33.1"));
    assert!(args_of(&csi).contains(&"--cluster=prod-uuid".to_string()));
    let newer = render_with(AddonsSpec::default(), "v1.34.7");
    assert_eq!(newer.minor, "1.34");
    assert_ne!(
        newer.parts[&Part::CloudControllerManager],
        r.parts[&Part::CloudControllerManager]
    );
    // The cloud's facts and the CNI do not depend on the minor.
    assert_eq!(newer.parts[&Part::CloudConfig], r.parts[&Part::CloudConfig]);
    assert_eq!(newer.parts[&Part::Cni], r.parts[&Part::Cni]);
}

#[test]
fn cloud_config_holds_the_cluster_s_ids_and_the_ca() {
    let all = docs(&render_with(AddonsSpec::default(), "v1.33.1"));
    let secret = all
        .iter()
        .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == "cloud-config")
        .expect("kube-system/cloud-config");
    let conf = BASE64
        .decode(secret["data"]["cloud.conf"].as_str().unwrap().as_bytes())
        .unwrap();
    let conf = String::from_utf8(conf).unwrap();
    for want in [
        "application-credential-id = \"ac-1\"",
        "subnet-id = \"sub-1\"",
        "floating-network-id = \"ext-1\"",
        "region = \"RegionOne\"",
        "ca-file = \"/etc/config/ca.crt\"",
    ] {
        assert!(conf.contains(want), "{want} not in {conf}");
    }
    assert!(secret["data"]["ca.crt"].is_string());
}

#[test]
fn one_storage_class_per_volume_type_and_cinder_s_default_is_the_default() {
    let all = docs(&render_with(AddonsSpec::default(), "v1.33.1"));
    let classes: Vec<&Value> = all.iter().filter(|d| d["kind"] == "StorageClass").collect();
    let names: Vec<&str> = classes
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "csi-cinder-default",
            "csi-cinder-fast-ssd",
            "csi-cinder-gold-tier"
        ]
    );
    let defaults: Vec<&str> = classes
        .iter()
        .filter(|c| {
            c["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
        })
        .map(|c| c["parameters"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(defaults, ["fast-ssd"]);
    assert!(classes.iter().all(|c| c["provisioner"] == CSI_DRIVER));
    assert!(all
        .iter()
        .any(|d| d["kind"] == "CSIDriver" && d["metadata"]["name"] == CSI_DRIVER));
}

#[test]
fn cilium_gets_the_pod_cidr_the_endpoint_and_the_chosen_release() {
    let chosen = versions::cilium_releases()
        .into_iter()
        .find(|v| *v != versions::cilium(None).unwrap().0)
        .unwrap();
    let r = render_with(
        AddonsSpec {
            cni: Some(CniAddon {
                plugin: Some(CniPlugin::Cilium),
                cilium_version: Some(chosen.to_string()),
            }),
            ..Default::default()
        },
        "v1.33.1",
    );
    assert_eq!(r.cilium_version.as_deref(), Some(chosen));
    let all = docs(&r);
    let config = all
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "cilium-config")
        .expect("cilium-config");
    assert_eq!(config["data"]["cluster-pool-ipv4-cidr"], "192.168.0.0/16");
    let agent = containers(&all, "DaemonSet", "cilium");
    assert!(agent[0]["image"]
        .as_str()
        .unwrap()
        .ends_with(&format!(":v{chosen}")));
    let env: Vec<(String, String)> = agent[0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?.into(), e["value"].as_str()?.into())))
        .collect();
    assert!(env.contains(&("KUBERNETES_SERVICE_HOST".into(), "203.0.113.10".into())));
    assert!(env.contains(&("KUBERNETES_SERVICE_PORT".into(), "6443".into())));
}

#[test]
fn each_addon_turns_off_on_its_own() {
    let off = Some(AddonToggle {
        enabled: Some(false),
    });
    let r = render_with(
        AddonsSpec {
            cloud_controller_manager: off.clone(),
            cinder_csi: None,
            cni: Some(CniAddon {
                plugin: Some(CniPlugin::None),
                cilium_version: None,
            }),
        },
        "v1.33.1",
    );
    assert_eq!(
        r.parts.keys().copied().collect::<Vec<_>>(),
        [Part::CloudConfig, Part::CinderCsi]
    );
    let none = render_with(
        AddonsSpec {
            cloud_controller_manager: off.clone(),
            cinder_csi: off,
            cni: Some(CniAddon {
                plugin: Some(CniPlugin::None),
                cilium_version: None,
            }),
        },
        "v1.33.1",
    );
    assert!(none.parts.is_empty(), "no credentials without CCM or CSI");
}

#[test]
fn the_pack_offers_exactly_the_shipped_cilium_releases() {
    let pack: Value =
        serde_saphyr::from_str(include_str!("../../extensions/addons-v1.yaml")).unwrap();
    let offered: Vec<String> = pack
        .pointer("/variables/0/schema/openAPIV3Schema/properties/cni/properties/ciliumVersion/enum")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .collect();
    assert_eq!(offered, versions::cilium_releases());
}

#[test]
fn storage_class_names_are_kubernetes_names() {
    assert_eq!(storage_class_name("__DEFAULT__"), "csi-cinder-default");
    assert_eq!(storage_class_name("SSD (fast)"), "csi-cinder-ssd-fast");
    assert_eq!(storage_class_name("___"), "csi-cinder-type");
    assert!(storage_class_name(&"x".repeat(400)).len() <= 253);
}
