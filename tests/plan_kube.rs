//! `stackhook plan --kubeconfig`: the "from" side read from a real API server carrying
//! CAPI's v1.13.5 CRDs and ours, where the dev-test ClusterClass, its templates and the
//! dev1 Cluster of tests/fixtures/plan/base were applied. Unchanged files plan nothing
//! (what the API server stores and defaults does not show as a change); a changed
//! override plans the rotation a directory plan finds.
//!
//! Needs `../shared/kube` (or `STACKHOOK_KUBE_DIR`); without it the test says so and
//! passes. It always starts an API server of its own: the plan reads every Cluster the
//! server has.

use crate::kube_server;

use std::path::{Path, PathBuf};
use std::process::Command;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/plan")
}

fn our_crds() -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_stackhook"))
        .arg("crds")
        .output()
        .expect("running stackhook crds");
    assert!(out.status.success());
    kube_server::yaml_documents(&String::from_utf8(out.stdout).expect("UTF-8"))
}

const DEV_TEST: [&str; 3] = [
    "class-dev-test.yaml",
    "templates-dev-test.yaml",
    "cluster-dev1.yaml",
];

async fn apply(client: &kube::Client, doc: &Value) {
    let api_version = doc["apiVersion"].as_str().expect("apiVersion");
    let kind = doc["kind"].as_str().expect("kind");
    let name = doc["metadata"]["name"].as_str().expect("name");
    let (g, v) = api_version.split_once('/').expect("group/version");
    let (ar, _) = kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(g, v, kind))
        .await
        .unwrap_or_else(|e| panic!("{api_version} {kind}: {e}"));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    api.patch(
        name,
        &PatchParams::apply(kube_server::MANAGER).force(),
        &Patch::Apply(doc),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
}

fn plan(kubeconfig: &Path, to: &Path) -> (Value, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_stackhook"))
        .args(["plan", "--kubeconfig"])
        .arg(kubeconfig)
        .arg("--to")
        .arg(to)
        .args(["--capi-version", "1.13", "-o", "json"])
        .output()
        .expect("running stackhook plan");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{stderr}", String::from_utf8_lossy(&out.stdout)));
    (json, out.status.code().expect("exit status"))
}

#[test]
fn the_management_cluster_is_the_from_side() {
    let dir = kube_server::kube_dir();
    if !dir.join("crds").is_dir() {
        eprintln!(
            "skipping: {} does not exist (set STACKHOOK_KUBE_DIR to the folder with `up` and CAPI's CRDs)",
            dir.display()
        );
        return;
    }
    let api = kube_server::start_own(
        dir.canonicalize().expect("kube dir"),
        "stackhook-plan-kube-",
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = api.client().await;
        kube_server::apply_crds(&client, &api.capi_crds("cluster-api-v1.13.5")).await;
        kube_server::apply_crds(&client, &our_crds()).await;
        kube_server::wait_for_preferred_version(&client, "cluster.x-k8s.io", "v1beta2").await;
        for f in DEV_TEST {
            let text = std::fs::read_to_string(fixtures().join("base").join(f)).expect("fixture");
            for d in kube_server::yaml_documents(&text) {
                apply(&client, &d).await;
            }
        }
    });

    let tmp = tempfile::tempdir().expect("tempdir");
    for f in DEV_TEST {
        std::fs::copy(fixtures().join("base").join(f), tmp.path().join(f)).expect("copy");
    }
    let (p, code) = plan(&api.kubeconfig, tmp.path());
    assert_eq!(code, 0, "{p:#}");
    assert_eq!(p["clusters"][0]["name"], "dev1");
    assert_eq!(p["clusters"][0]["status"], "unchanged", "{p:#}");

    let cluster = tmp.path().join("cluster-dev1.yaml");
    let text = std::fs::read_to_string(&cluster).expect("cluster");
    std::fs::write(
        &cluster,
        text.replace("value: m1.xlarge", "value: m1.2xlarge"),
    )
    .expect("write");
    let (p, code) = plan(&api.kubeconfig, tmp.path());
    assert_eq!(code, 2, "{p:#}");
    let c = &p["clusters"][0];
    assert_eq!(
        c["templates"].as_array().expect("templates").len(),
        1,
        "{c:#}"
    );
    assert_eq!(
        c["templates"][0]["role"],
        "machineDeployment/md-1/infrastructure"
    );
    assert_eq!(c["templates"][0]["action"], "rotate");
    assert_eq!(c["rollouts"][0]["name"], "md-1");
    assert_eq!(c["rollouts"][0]["replicas"], 1);
}
