//! The CAPO-compatible CRDs: schema shape, metadata, and the behaviour of
//! the generated validation on hand-written CAPO-shaped objects.

use crate::crd_schema;

use std::collections::BTreeSet;

use crd_schema::{
    assert_rejected, cel_errors, fixture_dir, load, schema_errors, walk_rules, yaml_files,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::cel::{apply_defaults, compile_schema};
use serde_json::{json, Value};
use stackhook::infra::api::names::{ClusterNames, SecurityGroupRole};
use stackhook::infra::api::schema::check_structural;
use stackhook::infra::api::{
    try_crds, try_crds_yaml, OpenStackCluster, OpenStackClusterTemplate, OpenStackMachine,
    OpenStackMachineTemplate,
};

const KINDS: [&str; 4] = [
    "OpenStackCluster",
    "OpenStackClusterTemplate",
    "OpenStackMachine",
    "OpenStackMachineTemplate",
];

fn crds() -> Vec<CustomResourceDefinition> {
    try_crds().unwrap_or_else(|e| panic!("CRDs do not generate: {e}"))
}

fn crd(kind: &str) -> CustomResourceDefinition {
    crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"))
}

fn schema(kind: &str) -> Value {
    let crd = crd(kind);
    let s = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("schema");
    serde_json::to_value(s).expect("schema to JSON")
}

/// Serializes through the Rust type and back, as a controller would.
fn round_trip(kind: &str, value: &Value) -> Value {
    fn via<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Value {
        let typed: T = serde_json::from_value(v.clone())
            .unwrap_or_else(|e| panic!("does not deserialize: {e}"));
        serde_json::to_value(typed).expect("serializes")
    }
    match kind {
        "OpenStackCluster" => via::<OpenStackCluster>(value),
        "OpenStackClusterTemplate" => via::<OpenStackClusterTemplate>(value),
        "OpenStackMachine" => via::<OpenStackMachine>(value),
        "OpenStackMachineTemplate" => via::<OpenStackMachineTemplate>(value),
        other => panic!("unexpected kind {other}"),
    }
}

fn collect(node: &Value, key: &str, path: &str, out: &mut BTreeSet<String>) {
    let Value::Object(obj) = node else { return };
    if let Some(v) = obj.get(key) {
        out.insert(format!("{path}={v}"));
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (k, v) in props {
            collect(v, key, &format!("{path}.{k}"), out);
        }
    }
    if let Some(items) = obj.get("items") {
        collect(items, key, &format!("{path}[]"), out);
    }
    if let Some(ap @ Value::Object(_)) = obj.get("additionalProperties") {
        collect(ap, key, &format!("{path}{{*}}"), out);
    }
}

#[test]
fn every_schema_is_structural_with_single_types() {
    for kind in KINDS {
        let s = schema(kind);
        assert_eq!(check_structural(&s), Vec::new(), "{kind}");
        let mut problems = Vec::new();
        walk_rules(&s, "", &mut problems);
        assert!(problems.is_empty(), "{kind}: {problems:#?}");
        // Spot checks that the walk reached deep, Option-typed fields.
        let spec = if kind.ends_with("Template") {
            &s["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
        } else {
            &s["properties"]["spec"]
        };
        assert_eq!(
            s["properties"]["metadata"],
            json!({"type": "object"}),
            "{kind}"
        );
        if kind.contains("Machine") {
            assert_eq!(
                spec["properties"]["rootVolume"]["properties"]["sizeGiB"]["type"],
                "integer"
            );
            assert_eq!(spec["properties"]["flavor"]["type"], "string");
        } else {
            assert_eq!(
                spec["properties"]["bastion"]["properties"]["spec"]["properties"]["image"]["type"],
                "object"
            );
        }
    }
}

#[test]
fn every_cel_rule_compiles() {
    for kind in KINDS {
        let compiled = compile_schema(&schema(kind));
        let errors: Vec<String> = compiled
            .compilation_errors()
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{kind}: {errors:#?}");
        let mut rules = BTreeSet::new();
        collect(&schema(kind), "x-kubernetes-validations", "", &mut rules);
        assert!(!rules.is_empty(), "{kind} has no CEL rules");
    }
}

#[test]
fn defaults_are_exactly_capos() {
    let mut cluster = BTreeSet::new();
    collect(&schema("OpenStackCluster"), "default", "", &mut cluster);
    let cluster: BTreeSet<String> = cluster
        .into_iter()
        .filter(|p| !p.starts_with(".spec.bastion.spec."))
        .collect();
    let expected: BTreeSet<String> = [
        ".spec.apiServerLoadBalancer.enabled=true",
        ".spec.bastion.enabled=true",
        ".spec.identityRef.type=\"Secret\"",
        ".spec.managedSecurityGroups.allowAllInClusterTraffic=false",
        ".status.ready=false",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(cluster, expected);

    let mut machine = BTreeSet::new();
    collect(&schema("OpenStackMachine"), "default", "", &mut machine);
    let expected: BTreeSet<String> = [
        ".spec.additionalBlockDevices[].storage.volume.availabilityZone.from=\"Name\"",
        ".spec.identityRef.type=\"Secret\"",
        ".spec.rootVolume.availabilityZone.from=\"Name\"",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(machine, expected);
}

#[test]
fn crd_metadata_matches_capo() {
    let expected = [
        ("OpenStackCluster", "openstackclusters", "osc", true, 6),
        (
            "OpenStackClusterTemplate",
            "openstackclustertemplates",
            "osct",
            false,
            0,
        ),
        ("OpenStackMachine", "openstackmachines", "osm", true, 6),
        (
            "OpenStackMachineTemplate",
            "openstackmachinetemplates",
            "osmt",
            true,
            0,
        ),
    ];
    let all = crds();
    // The four above, then OpenStackClusterIdentity (its own test below).
    assert_eq!(all.len(), 5);
    for (c, (kind, plural, short, status, columns)) in all.iter().zip(expected) {
        assert_eq!(c.spec.names.kind, kind);
        assert_eq!(
            c.metadata.name.as_deref(),
            Some(format!("{plural}.infrastructure.cluster.x-k8s.io").as_str())
        );
        assert_eq!(c.spec.group, "infrastructure.cluster.x-k8s.io");
        assert_eq!(c.spec.scope, "Namespaced");
        assert_eq!(
            c.spec.names.short_names.as_deref(),
            Some(&[short.to_string()][..])
        );
        assert_eq!(
            c.spec.names.categories.as_deref(),
            Some(&["cluster-api".to_string()][..])
        );
        let labels = c.metadata.labels.as_ref().expect("labels");
        assert_eq!(
            labels.get("cluster.x-k8s.io/v1beta1").map(String::as_str),
            Some("v1beta1")
        );
        assert_eq!(c.spec.versions.len(), 1);
        let v = &c.spec.versions[0];
        assert_eq!(
            (v.name.as_str(), v.served, v.storage),
            ("v1beta1", true, true)
        );
        assert_eq!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            status,
            "{kind}"
        );
        assert_eq!(
            v.additional_printer_columns.as_ref().map_or(0, Vec::len),
            columns,
            "{kind}"
        );
    }
    let osm = crd("OpenStackMachine");
    let cols: Vec<_> = osm.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        cols,
        [
            (
                "Cluster",
                ".metadata.labels.cluster\\.x-k8s\\.io/cluster-name"
            ),
            ("InstanceState", ".status.instanceState"),
            ("Ready", ".status.ready"),
            ("ProviderID", ".spec.providerID"),
            (
                "Machine",
                ".metadata.ownerReferences[?(@.kind==\"Machine\")].name"
            ),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
}

#[test]
fn yaml_output_is_deterministic_and_applies_back() {
    let a = try_crds_yaml().expect("yaml");
    let b = try_crds_yaml().expect("yaml");
    assert_eq!(a, b);
    assert_eq!(stackhook::infra::crds_yaml(), a);
    let docs: Vec<&str> = a.split("---\n").filter(|d| !d.trim().is_empty()).collect();
    assert_eq!(docs.len(), 5);
    for (doc, kind) in docs
        .iter()
        .zip(KINDS.into_iter().chain(["OpenStackClusterIdentity"]))
    {
        let back: CustomResourceDefinition = serde_saphyr::from_str(doc).expect("CRD YAML parses");
        assert_eq!(back.spec.names.kind, kind);
    }
    // Integer bounds stay integers for readers that compare them as text.
    assert!(a.contains("maximum: 65535\n"), "apiServerPort bound");
    assert!(!a.contains("65535.0"));
    assert!(!a.contains("nullable"));
    assert_eq!(stackhook::infra::crds().len(), 5);
}

#[test]
fn valid_fixtures_validate_and_round_trip() {
    let files = yaml_files(&fixture_dir());
    assert!(files.len() >= 5, "fixtures: {files:?}");
    let mut kinds = BTreeSet::new();
    for path in files {
        let (_, object) = load(&path);
        let kind = object["kind"].as_str().expect("kind").to_owned();
        kinds.insert(kind.clone());
        let schema = schema(&kind);
        let defaulted = apply_defaults(&schema, &object);
        let errors = schema_errors(&schema, &defaulted);
        assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
        let cel = cel_errors(&schema, &defaulted, None);
        assert!(cel.is_empty(), "{}: {cel:#?}", path.display());
        // Nothing lost or invented: what comes back is what the apiserver
        // would store, defaults included.
        assert_eq!(round_trip(&kind, &object), defaulted, "{}", path.display());
        assert_eq!(
            round_trip(&kind, &defaulted),
            defaulted,
            "{}",
            path.display()
        );
    }
    assert_eq!(kinds.len(), 4, "every kind has a fixture");
}

#[test]
fn invalid_fixtures_are_rejected_by_capos_rule() {
    let files = yaml_files(&fixture_dir().join("invalid"));
    assert!(files.len() >= 20);
    for path in files {
        assert_rejected(&path, schema);
    }
}

#[test]
fn rust_types_reject_what_the_enums_reject() {
    for name in [
        "sg-direction-wrong",
        "identityref-type-wrong",
        "block-device-type-wrong",
        "machine-missing-image",
    ] {
        let (_, object) = load(&fixture_dir().join("invalid").join(format!("{name}.yaml")));
        let kind = object["kind"].as_str().expect("kind");
        let ok = match kind {
            "OpenStackCluster" => {
                serde_json::from_value::<OpenStackCluster>(object.clone()).is_ok()
            }
            _ => serde_json::from_value::<OpenStackMachine>(object.clone()).is_ok(),
        };
        assert!(!ok, "{name} deserialized");
    }
}

#[test]
fn identity_region_is_immutable_but_other_fields_are_not() {
    let schema = schema("OpenStackMachine");
    let (_, old) = load(&fixture_dir().join("machine-full.yaml"));
    let old = apply_defaults(&schema, &old);
    let mut new = old.clone();
    new["spec"]["identityRef"]["region"] = json!("RegionTwo");
    let errors = cel_errors(&schema, &new, Some(&old));
    assert!(
        errors.iter().any(|e| e.contains("region is immutable")),
        "{errors:#?}"
    );
    let mut renamed = old.clone();
    renamed["spec"]["identityRef"]["name"] = json!("other-secret");
    assert_eq!(
        cel_errors(&schema, &renamed, Some(&old)),
        Vec::<String>::new()
    );
}

#[test]
fn empty_objects_get_capos_defaults_in_schema_and_rust_alike() {
    let schema = schema("OpenStackCluster");
    let object = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "OpenStackCluster",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {
            "identityRef": {"name": "s", "cloudName": "c"},
            "apiServerLoadBalancer": {"monitor": {}},
            "managedSecurityGroups": {},
            "bastion": {"spec": {"flavor": "f", "image": {"id": "8c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"}}}
        }
    });
    let defaulted = apply_defaults(&schema, &object);
    assert_eq!(
        defaulted["spec"]["apiServerLoadBalancer"]["enabled"],
        json!(true)
    );
    // CAPO's CRD has no monitor defaults (its code has): neither has ours.
    assert_eq!(
        defaulted["spec"]["apiServerLoadBalancer"]["monitor"],
        json!({})
    );
    let osc: OpenStackCluster = serde_json::from_value(defaulted.clone()).unwrap();
    let m = osc
        .spec
        .api_server_load_balancer
        .unwrap()
        .monitor
        .unwrap()
        .settings();
    assert_eq!(
        (m.delay, m.timeout, m.max_retries, m.max_retries_down),
        (10, 5, 5, 3)
    );
    assert_eq!(defaulted["spec"]["bastion"]["enabled"], json!(true));
    assert_eq!(defaulted["spec"]["identityRef"]["type"], json!("Secret"));
    assert_eq!(schema_errors(&schema, &defaulted), Vec::<String>::new());
    assert_eq!(round_trip("OpenStackCluster", &object), defaulted);
}

#[test]
fn fixtures_read_into_the_fields_controllers_use() {
    let (_, object) = load(&fixture_dir().join("cluster-managed-subnets.yaml"));
    let osc: OpenStackCluster = serde_json::from_value(object).expect("cluster");
    let names = osc.cluster_names();
    assert_eq!(names, ClusterNames::new("default", "capi-quickstart"));
    let status = osc.status.as_ref().expect("status");
    assert_eq!(
        status
            .control_plane_security_group
            .as_ref()
            .map(|g| g.name.clone()),
        Some(names.security_group_name(SecurityGroupRole::ControlPlane))
    );
    assert_eq!(
        status.network.as_ref().map(|n| n.network.name.clone()),
        Some(names.network_name())
    );
    assert_eq!(
        status
            .api_server_load_balancer
            .as_ref()
            .map(|l| l.name.clone()),
        Some(names.load_balancer_name())
    );
    let ext = status.extensions.as_ref().expect("status extensions");
    let cilium = ext
        .networking
        .as_ref()
        .and_then(|n| n.cilium.as_ref())
        .expect("cilium");
    assert_eq!(cilium.security_group_ids.len(), 2);
    assert_eq!(cilium.webhook_enable, Some(true));
    let os = ext.open_stack.as_ref().expect("openStack");
    assert_eq!(
        (os.region.as_deref(), os.project_domain.as_deref()),
        (Some("RegionOne"), Some("Default"))
    );
    assert_eq!(
        ext.platform
            .as_ref()
            .and_then(|p| p.ntp.as_ref())
            .and_then(|n| n.server.as_deref()),
        Some("10.0.0.1")
    );
    let spec_ext = osc.spec.extensions.as_ref().expect("spec extensions");
    assert_eq!(
        spec_ext
            .networking
            .as_ref()
            .and_then(|n| n.kube_network_plugin.as_deref()),
        Some("cilium")
    );
    assert_eq!(
        spec_ext
            .network_interfaces
            .as_ref()
            .and_then(|n| n.flannel.as_deref()),
        Some("eth1")
    );

    let (_, object) = load(&fixture_dir().join("machine-full.yaml"));
    let osm: OpenStackMachine = serde_json::from_value(object).expect("machine");
    assert!(osm.is_control_plane());
    assert_eq!(osm.cluster_name(), Some("capi-quickstart"));
    assert_eq!(
        osm.spec.provider_id.as_deref(),
        Some(
            osm.provider_id_for("f29007c5-f672-4214-a508-b7cf4a17b3ed")
                .as_str()
        )
    );
    assert_eq!(
        osm.spec.ports[1].fields.vnic_type.as_deref(),
        Some("direct")
    );
    let reserved = &osm
        .status
        .as_ref()
        .and_then(|s| s.extensions.as_ref())
        .expect("ext")
        .node_resources["capi-quickstart-control-plane-82xck"]
        .reserved;
    assert_eq!(reserved.get("memory").map(|q| q.0.as_str()), Some("1Gi"));
}

/// `identityRef.type: ClusterIdentity` needs CAPO's cluster-scoped kind: same name,
/// scope, version and fields, and no CAPI contract label (no CAPI object names it).
#[test]
fn cluster_identity_crd_is_capos() {
    let c = crd("OpenStackClusterIdentity");
    assert_eq!(
        c.metadata.name.as_deref(),
        Some("openstackclusteridentities.infrastructure.cluster.x-k8s.io")
    );
    assert_eq!(c.spec.scope, "Cluster");
    assert_eq!(c.spec.names.short_names, Some(vec!["osci".to_string()]));
    let versions: Vec<(&str, bool, bool)> = c
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage))
        .collect();
    assert_eq!(versions, [("v1alpha1", true, true)]);
    assert!(
        c.spec.versions[0].subresources.is_none(),
        "CAPO's has no status"
    );
    assert!(c
        .metadata
        .labels
        .as_ref()
        .is_none_or(|l| !l.contains_key("cluster.x-k8s.io/v1beta1")));
    let s = schema("OpenStackClusterIdentity");
    assert_eq!(check_structural(&s), Vec::new());
    let spec = &s["properties"]["spec"];
    assert_eq!(spec["required"], json!(["secretRef"]));
    assert_eq!(
        spec["properties"]["secretRef"]["required"],
        json!(["name", "namespace"])
    );
    let selector = &spec["properties"]["namespaceSelector"];
    assert_eq!(selector["x-kubernetes-map-type"], "atomic");
    assert_eq!(
        selector["properties"]["matchLabels"]["additionalProperties"]["type"],
        "string"
    );
    let good = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "OpenStackClusterIdentity", "metadata": {"name": "shared"},
        "spec": {"secretRef": {"name": "creds", "namespace": "capo-system"},
                 "namespaceSelector": {"matchLabels": {"tenant": "blue"}}}});
    assert_eq!(schema_errors(&s, &good), Vec::<String>::new());
    let mut bad = good.clone();
    bad["spec"]["secretRef"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    assert!(
        !schema_errors(&s, &bad).is_empty(),
        "secretRef.namespace is required"
    );
}
