//! The CRDs shipped in deploy/components/openstack-controllers/crds.yaml: that
//! they are what `stackhook crds` prints, that they are what CAPI needs from an
//! infrastructure provider in place of CAPO's, and that their schemas accept
//! CAPO v0.14 objects and reject broken ones.

use crate::crd_schema;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crd_schema::{
    assert_rejected, cel_errors, fixture_dir, load, schema_errors, walk_rules, yaml_files,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::cel::apply_defaults;
use serde_json::{json, Value};
use stackhook::infra::api::schema::check_structural;

const COMMITTED: &str = "deploy/components/openstack-controllers/crds.yaml";
const REGENERATE: &str =
    "cargo run --bin stackhook -- crds > deploy/components/openstack-controllers/crds.yaml";
const GROUP: &str = "infrastructure.cluster.x-k8s.io";

fn committed_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(COMMITTED)
}

fn committed_text() -> String {
    std::fs::read_to_string(committed_path())
        .unwrap_or_else(|e| panic!("{COMMITTED}: {e}; create it with `{REGENERATE}`"))
}

/// The committed CRDs as JSON, in file order.
fn committed() -> Vec<Value> {
    let text = committed_text();
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(&text).expect("crds.yaml is YAML");
    docs.into_iter().filter(|v| !v.is_null()).collect()
}

fn by_kind() -> BTreeMap<String, Value> {
    committed()
        .into_iter()
        .map(|crd| {
            let kind = crd["spec"]["names"]["kind"]
                .as_str()
                .expect("kind")
                .to_owned();
            (kind, crd)
        })
        .collect()
}

fn schema(kind: &str) -> Value {
    let crds = by_kind();
    let crd = crds
        .get(kind)
        .unwrap_or_else(|| panic!("{COMMITTED} has no CRD for {kind}"));
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// The OpenAPI and CEL verdicts on an object, after the schema's defaults.
fn verdict(object: &Value) -> (Vec<String>, Vec<String>) {
    let schema = schema(object["kind"].as_str().expect("kind"));
    let defaulted = apply_defaults(&schema, object);
    (
        schema_errors(&schema, &defaulted),
        cel_errors(&schema, &defaulted, None),
    )
}

#[test]
fn committed_crds_are_what_the_binary_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_stackhook"))
        .arg("crds")
        .output()
        .expect("run stackhook crds");
    assert!(
        out.status.success(),
        "stackhook crds failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).expect("UTF-8");
    let on_disk = committed_text();
    if printed != on_disk {
        let line = printed
            .lines()
            .zip(on_disk.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| printed.lines().count().min(on_disk.lines().count()));
        panic!(
            "{COMMITTED} is out of date with the Rust types (first difference at line {}); \
             regenerate it with `{REGENERATE}`",
            line + 1
        );
    }
    // What kubectl reads back is the same documents, in a fixed order.
    let docs = committed();
    // The four v1beta1 kinds and the v1alpha1 OpenStackClusterIdentity.
    assert_eq!(docs.len(), 5);
    for doc in &docs {
        let _: CustomResourceDefinition =
            serde_json::from_value(doc.clone()).expect("a CustomResourceDefinition");
    }
}

#[test]
fn committed_crds_replace_capos_for_capi() {
    // (kind, plural, short name, status subresource, printer columns), as CAPO
    // v0.14 declares them.
    let expected = [
        (
            "OpenStackCluster",
            "openstackclusters",
            "osc",
            true,
            &[
                "Cluster",
                "Ready",
                "Network",
                "Endpoint",
                "Bastion IP",
                "Age",
            ][..],
        ),
        (
            "OpenStackClusterTemplate",
            "openstackclustertemplates",
            "osct",
            false,
            &[][..],
        ),
        (
            "OpenStackMachine",
            "openstackmachines",
            "osm",
            true,
            &[
                "Cluster",
                "InstanceState",
                "Ready",
                "ProviderID",
                "Machine",
                "Age",
            ][..],
        ),
        (
            "OpenStackMachineTemplate",
            "openstackmachinetemplates",
            "osmt",
            true,
            &[][..],
        ),
    ];
    let docs = committed();
    // Then the cluster-scoped OpenStackClusterIdentity (tests/crds.rs checks it).
    assert_eq!(docs.len(), expected.len() + 1);
    assert_eq!(docs[expected.len()]["spec"]["scope"], "Cluster");
    for (crd, (kind, plural, short, status, columns)) in docs.iter().zip(expected) {
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1", "{kind}");
        assert_eq!(crd["kind"], "CustomResourceDefinition", "{kind}");
        assert_eq!(
            crd["metadata"]["name"],
            json!(format!("{plural}.{GROUP}")),
            "{kind}"
        );
        // CAPI finds the version implementing its v1beta1 contract by this label.
        assert_eq!(
            crd["metadata"]["labels"]["cluster.x-k8s.io/v1beta1"], "v1beta1",
            "{kind}"
        );
        let spec = &crd["spec"];
        assert_eq!(spec["group"], GROUP);
        assert_eq!(spec["scope"], "Namespaced", "{kind}");
        assert_eq!(spec["conversion"], json!({"strategy": "None"}), "{kind}");
        let names = &spec["names"];
        assert_eq!(names["kind"], kind);
        assert_eq!(names["plural"], plural);
        assert_eq!(names["singular"], json!(plural.trim_end_matches('s')));
        assert_eq!(names["shortNames"], json!([short]), "{kind}");
        assert_eq!(names["categories"], json!(["cluster-api"]), "{kind}");
        let versions = spec["versions"].as_array().expect("versions");
        assert_eq!(versions.len(), 1, "{kind}");
        let v = &versions[0];
        assert_eq!(
            (&v["name"], &v["served"], &v["storage"]),
            (&json!("v1beta1"), &json!(true), &json!(true)),
            "{kind}"
        );
        assert_eq!(
            v["subresources"]["status"] == json!({}),
            status,
            "{kind}: status subresource"
        );
        let got: Vec<&str> = v["additionalPrinterColumns"]
            .as_array()
            .map(|cols| cols.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(got, columns, "{kind}: printer columns");
    }
}

#[test]
fn committed_schemas_are_structural() {
    for (kind, crd) in by_kind() {
        let s = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert_eq!(check_structural(s), Vec::new(), "{kind}");
        let mut problems = Vec::new();
        walk_rules(s, "", &mut problems);
        assert!(problems.is_empty(), "{kind}: {problems:#?}");
        assert_eq!(s["type"], "object", "{kind}");
        for key in ["apiVersion", "kind", "metadata", "spec"] {
            assert!(s["properties"].get(key).is_some(), "{kind}: no {key}");
        }
    }
}

#[test]
fn capo_objects_validate_against_the_committed_schemas() {
    let files = yaml_files(&fixture_dir());
    let mut seen = Vec::new();
    for path in &files {
        let (_, object) = load(path);
        let (errors, cel) = verdict(&object);
        assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
        assert!(cel.is_empty(), "{}: {cel:#?}", path.display());
        seen.push(object);
    }
    // The shapes this file promises are really among them.
    let has = |kind: &str, pointers: &[&str]| {
        seen.iter().any(|o| {
            o["kind"] == kind
                && pointers
                    .iter()
                    .all(|p| o.pointer(p).is_some_and(|v| !v.is_null()))
        })
    };
    assert!(has(
        "OpenStackCluster",
        &[
            "/spec/managedSubnets/0/cidr",
            "/spec/apiServerLoadBalancer/enabled",
            "/spec/apiServerLoadBalancer/subnets/0",
            "/spec/bastion/spec/image",
            "/spec/bastion/spec/rootVolume",
        ]
    ));
    assert!(has(
        "OpenStackMachineTemplate",
        &[
            "/spec/template/spec/ports/1/fixedIPs/0/subnet/id",
            "/spec/template/spec/rootVolume/availabilityZone/name",
            "/spec/template/spec/serverGroup/id",
            "/spec/template/spec/additionalBlockDevices/1/storage/type",
        ]
    ));
    for kind in [
        "OpenStackCluster",
        "OpenStackClusterTemplate",
        "OpenStackMachine",
        "OpenStackMachineTemplate",
    ] {
        assert!(seen.iter().any(|o| o["kind"] == kind), "no {kind} fixture");
    }
}

#[test]
fn invalid_capo_objects_are_rejected_by_the_committed_schemas() {
    let files = yaml_files(&fixture_dir().join("invalid"));
    assert!(files.len() >= 20);
    for path in files {
        assert_rejected(&path, schema);
    }
}

/// Single broken fields in otherwise valid objects, so each rejection is
/// known to come from that field.
#[test]
fn broken_fields_of_valid_objects_are_rejected() {
    let (_, template) = load(&fixture_dir().join("machinetemplate-ports.yaml"));
    let (_, cluster) = load(&fixture_dir().join("cluster-lb-bastion.yaml"));
    let spec = "/spec/template/spec";
    let cases: Vec<(&Value, String, Value, &str)> = vec![
        (
            &template,
            format!("{spec}/rootVolume/sizeGiB"),
            json!(0),
            "schema",
        ),
        (
            &template,
            format!("{spec}/serverGroup"),
            json!({}),
            "schema",
        ),
        (
            &template,
            format!("{spec}/ports/0/network"),
            json!({"id": "not-a-uuid"}),
            "schema",
        ),
        (
            &template,
            format!("{spec}/additionalBlockDevices/0/storage/type"),
            json!("Ephemeral"),
            "schema",
        ),
        (
            &template,
            format!("{spec}/rootVolume/availabilityZone"),
            json!({"from": "Name"}),
            "cel",
        ),
        (
            &cluster,
            "/spec/managedSubnets".to_owned(),
            json!([{"dnsNameservers": ["10.0.0.53"]}]),
            "schema",
        ),
        (
            &cluster,
            "/spec/apiServerLoadBalancer/monitor/maxRetriesDown".to_owned(),
            json!(11),
            "schema",
        ),
        (
            &cluster,
            "/spec/bastion".to_owned(),
            json!({"enabled": true}),
            "cel",
        ),
    ];
    for (object, pointer, value, engine) in cases {
        let mut broken = object.clone();
        *broken
            .pointer_mut(&pointer)
            .unwrap_or_else(|| panic!("fixture has no {pointer}")) = value.clone();
        let (errors, cel) = verdict(&broken);
        match engine {
            "schema" => assert!(
                errors.iter().any(|e| e.starts_with(&pointer)),
                "{pointer} = {value}: wanted an OpenAPI error there, got {errors:#?}"
            ),
            _ => assert!(
                errors.is_empty() && !cel.is_empty(),
                "{pointer} = {value}: wanted only a CEL error, got {errors:#?} {cel:#?}"
            ),
        }
    }
}
