//! stackhook's CRDs and CAPO v0.14's on one real API server, in both orders: objects
//! of every kind stackhook serves (the CAPO-shaped fixtures in tests/fixtures/capo and
//! an OpenStackClusterIdentity), stored under the first set of CRDs, still read back
//! unchanged in every served version after the other set is server-side applied over
//! it, still list, and still decode into the controllers' Rust types. Under CAPO's
//! CRDs stackhook's `extensions` fields read as absent (CAPO's schema prunes them)
//! until stackhook's CRDs return.
//!
//! Needs `../shared/kube` (a private API server per order, since CAPO's CRDs must not
//! reach other tests) and CAPO's CRDs in `../shared/capi/crds/capo`.

use crate::kube_server;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::Client;
use serde_json::{json, Value};
use stackhook::infra::api::{
    OpenStackCluster, OpenStackClusterIdentity, OpenStackClusterTemplate, OpenStackMachine,
    OpenStackMachineTemplate,
};

const GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The kinds stackhook serves, with their plural.
const KINDS: [(&str, &str); 5] = [
    ("OpenStackCluster", "openstackclusters"),
    ("OpenStackClusterTemplate", "openstackclustertemplates"),
    ("OpenStackMachine", "openstackmachines"),
    ("OpenStackMachineTemplate", "openstackmachinetemplates"),
    ("OpenStackClusterIdentity", "openstackclusteridentities"),
];

fn capi_dir() -> PathBuf {
    match std::env::var_os("STACKHOOK_CAPI_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/capi"),
    }
}

/// CAPO's CRDs of the kinds stackhook serves (not OpenStackServer or
/// OpenStackFloatingIPPool, which stackhook does not install).
fn capo_crds() -> Vec<Value> {
    let dir = capi_dir().join("crds/capo");
    KINDS
        .iter()
        .flat_map(|(_, plural)| {
            let path = dir.join(format!("{GROUP}_{plural}.yaml"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            kube_server::yaml_documents(&text)
        })
        .collect()
}

/// What `stackhook crds` prints.
fn our_crds() -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_stackhook"))
        .arg("crds")
        .output()
        .expect("run stackhook crds");
    assert!(out.status.success(), "stackhook crds failed");
    let docs = kube_server::yaml_documents(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(docs.len(), KINDS.len());
    docs
}

/// Server-side applies `crds` as `manager` (taking over what another manager set, as
/// `kubectl apply --server-side --force-conflicts` does) and waits until each is
/// Established with every version served.
async fn apply_as(client: &Client, manager: &str, crds: &[Value]) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(manager).force();
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().expect("CRD name");
        api.patch(name, &params, &Patch::Apply(crd))
            .await
            .unwrap_or_else(|e| panic!("{manager} applying CRD {name}: {e}"));
    }
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().expect("CRD name");
        kube_server::wait_for(&format!("CRD {name} established"), async || {
            api.get(name).await.ok().is_some_and(|c| {
                c.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
        })
        .await;
    }
}

fn resource(kind: &str, version: &str) -> ApiResource {
    let plural = KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, p)| *p)
        .expect("known kind");
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, version, kind), plural)
}

fn api(client: &Client, ns: &str, kind: &str, version: &str) -> Api<DynamicObject> {
    let r = resource(kind, version);
    if kind == "OpenStackClusterIdentity" {
        Api::all_with(client.clone(), &r)
    } else {
        Api::namespaced_with(client.clone(), ns, &r)
    }
}

/// The objects to store: CAPO-shaped fixtures (status included) and an identity.
fn objects(ns: &str) -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/capo");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut out: Vec<Value> = files
        .iter()
        .flat_map(|p| kube_server::yaml_documents(&std::fs::read_to_string(p).expect("fixture")))
        .map(|mut o| {
            o["metadata"]["namespace"] = json!(ns);
            o
        })
        .collect();
    out.push(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "OpenStackClusterIdentity",
        "metadata": {"name": format!("shared-{ns}")},
        "spec": {"secretRef": {"name": "cloud-creds", "namespace": ns},
                 "namespaceSelector": {"matchExpressions": [
                     {"key": "tenant", "operator": "In", "values": ["blue", "green"]}]}}
    }));
    let kinds: std::collections::BTreeSet<&str> =
        out.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds.len(),
        KINDS.len(),
        "an object of every kind: {kinds:?}"
    );
    out
}

fn version_of(object: &Value) -> &str {
    object["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .map(|(_, v)| v)
        .expect("apiVersion")
}

/// Creates each object, then writes its status through /status where it has one.
async fn store(client: &Client, ns: &str, objects: &[Value]) {
    for o in objects {
        let kind = o["kind"].as_str().expect("kind");
        let name = o["metadata"]["name"].as_str().expect("name");
        let a = api(client, ns, kind, version_of(o));
        let mut body = o.clone();
        let status = body.as_object_mut().and_then(|m| m.remove("status"));
        a.create(
            &PostParams::default(),
            &serde_json::from_value(body).unwrap(),
        )
        .await
        .unwrap_or_else(|e| panic!("storing {kind} {name}: {e}"));
        if let Some(status) = status {
            a.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap_or_else(|e| panic!("status of {kind} {name}: {e}"));
        }
    }
}

/// Every object as read in every version its CRD serves now, without the server's
/// bookkeeping: `(kind, name, version)` → object.
async fn read_all(
    client: &Client,
    ns: &str,
    objects: &[Value],
) -> BTreeMap<(String, String, String), Value> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut out = BTreeMap::new();
    for o in objects {
        let kind = o["kind"].as_str().expect("kind");
        let name = o["metadata"]["name"].as_str().expect("name");
        let plural = KINDS.iter().find(|(k, _)| *k == kind).expect("kind").1;
        let crd = crds.get(&format!("{plural}.{GROUP}")).await.expect("CRD");
        let served: Vec<String> = crd
            .spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.clone())
            .collect();
        assert!(!served.is_empty(), "{kind}: no served version");
        for version in served {
            let a = api(client, ns, kind, &version);
            let got = a
                .get(name)
                .await
                .unwrap_or_else(|e| panic!("{kind} {name} does not read back in {version}: {e}"));
            let listed = a
                .list(&ListParams::default())
                .await
                .unwrap_or_else(|e| panic!("{kind} does not list in {version}: {e}"));
            assert!(
                listed
                    .items
                    .iter()
                    .any(|i| i.metadata.name.as_deref() == Some(name)),
                "{kind} {name} missing from the {version} list"
            );
            let mut value = serde_json::to_value(&got).expect("JSON");
            for volatile in ["managedFields", "resourceVersion", "generation"] {
                value["metadata"]
                    .as_object_mut()
                    .map(|m| m.remove(volatile));
            }
            decodes(kind, &value);
            out.insert((kind.to_string(), name.to_string(), version), value);
        }
    }
    out
}

/// The controllers read each kind through its Rust type.
fn decodes(kind: &str, value: &Value) {
    fn via<T: serde::de::DeserializeOwned>(kind: &str, v: &Value) {
        if let Err(e) = serde_json::from_value::<T>(v.clone()) {
            panic!("{kind} {} does not decode: {e}", v["metadata"]["name"]);
        }
    }
    match kind {
        "OpenStackCluster" => via::<OpenStackCluster>(kind, value),
        "OpenStackClusterTemplate" => via::<OpenStackClusterTemplate>(kind, value),
        "OpenStackMachine" => via::<OpenStackMachine>(kind, value),
        "OpenStackMachineTemplate" => via::<OpenStackMachineTemplate>(kind, value),
        "OpenStackClusterIdentity" => via::<OpenStackClusterIdentity>(kind, value),
        other => panic!("unexpected kind {other}"),
    }
}

/// `object` without stackhook's `extensions` fields, which CAPO's schema does not
/// declare: the API server prunes them from what it returns under CAPO's CRDs.
fn without_extensions(object: &Value) -> Value {
    let mut o = object.clone();
    for pointer in ["/spec", "/status", "/spec/template/spec"] {
        if let Some(Value::Object(m)) = o.pointer_mut(pointer) {
            m.remove("extensions");
        }
    }
    o
}

/// One order: `first` installed, objects stored, `second` applied over it; with
/// `second_is_capo`, stackhook's `extensions` fields are hidden until `first` is back.
fn switch(
    label: &str,
    first: (&str, Vec<Value>),
    second: (&str, Vec<Value>),
    second_is_capo: bool,
) {
    let server = kube_server::start_own(
        kube_server::kube_dir().canonicalize().expect("kube dir"),
        "stackhook-crds-capo-",
    );
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let client = server.client().await;
            apply_as(&client, first.0, &first.1).await;
            let ns = kube_server::namespace(&client, "crds-capo").await;
            let objects = objects(&ns);
            store(&client, &ns, &objects).await;
            let before = read_all(&client, &ns, &objects).await;

            apply_as(&client, second.0, &second.1).await;
            let after = read_all(&client, &ns, &objects).await;
            let mut hidden = 0;
            for (key, was) in &before {
                let now = after
                    .get(key)
                    .unwrap_or_else(|| panic!("{label}: {key:?} is no longer served"));
                if second_is_capo {
                    hidden += usize::from(*was != without_extensions(was));
                    assert_eq!(*now, without_extensions(was), "{label}: {key:?} reads back changed");
                } else {
                    assert_eq!(now, was, "{label}: {key:?} reads back changed");
                }
            }
            if second_is_capo {
                assert!(hidden > 0, "{label}: the fixtures carry no extensions to check");
                // Only hidden, not gone: etcd keeps them until the object is next
                // written, so putting stackhook's CRDs back shows them again.
                apply_as(&client, first.0, &first.1).await;
                let back = read_all(&client, &ns, &objects).await;
                assert_eq!(back, before, "{label}: extensions after stackhook's CRDs returned");
                apply_as(&client, second.0, &second.1).await;
            }
            // A write under the new CRDs keeps working (the controllers' status and
            // finalizer writes).
            let a = api(&client, &ns, "OpenStackMachine", "v1beta1");
            let name = objects
                .iter()
                .find(|o| o["kind"] == "OpenStackMachine")
                .and_then(|o| o["metadata"]["name"].as_str())
                .expect("a machine");
            a.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": ["openstackmachine.infrastructure.cluster.x-k8s.io"]}})),
            )
            .await
            .unwrap_or_else(|e| panic!("{label}: finalizer write: {e}"));
            a.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"ready": true}})),
            )
            .await
            .unwrap_or_else(|e| panic!("{label}: status write: {e}"));
        });
}

fn prerequisites() -> Result<(), String> {
    if !kube_server::kube_dir().join("up").is_file() {
        return Err(format!(
            "{} has no `up` (set {})",
            kube_server::kube_dir().display(),
            kube_server::ENV_KUBE_DIR
        ));
    }
    if !capi_dir().join("crds/capo").is_dir() {
        return Err(format!(
            "{} has no CAPO CRDs (set STACKHOOK_CAPI_DIR)",
            capi_dir().join("crds/capo").display()
        ));
    }
    Ok(())
}

#[test]
fn capo_objects_survive_stackhooks_crds() {
    if let Err(why) = prerequisites() {
        println!("skipping: {why}");
        return;
    }
    switch(
        "CAPO's CRDs, then stackhook's",
        ("clusterctl", capo_crds()),
        ("stackhook", our_crds()),
        false,
    );
}

#[test]
fn stackhook_objects_survive_capos_crds() {
    if let Err(why) = prerequisites() {
        println!("skipping: {why}");
        return;
    }
    switch(
        "stackhook's CRDs, then CAPO's",
        ("stackhook", our_crds()),
        ("clusterctl", capo_crds()),
        true,
    );
}
