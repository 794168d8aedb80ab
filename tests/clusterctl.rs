//! stackhook installed, upgraded and described the way CAPI users do it: the real
//! `clusterctl` (v1.13.4, `shared/capi`) reads the release `deploy/release.sh` writes
//! (tests/support/clusterctl.rs) and installs it on a real API server (`shared/kube`);
//! the Cluster API Operator's ConfigMaps go to the same API server.
//!
//! The tests in which the real CAPI managers run as well (`clusterctl generate cluster`
//! accepted by CAPI's webhooks, `clusterctl move`) are in tests/capi.rs.
//!
//! Each skips with one line where `shared/` or kubectl is absent.

use crate::clusterctl;
use crate::kube_server;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const V1: &str = "v0.1.0";
/// A changed release: another image, so that the upgrade visibly replaces the Deployment.
const V2: &str = "v0.1.1";
const V2_IMAGE: &str = "registry.example.com/stackhook/stackhook:v0.1.1";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn capi_dir() -> PathBuf {
    match std::env::var_os("STACKHOOK_CAPI_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => root().join("../shared/capi"),
    }
}

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("kubectl: {e}"))?;
    {
        let mut pipe = child.stdin.take().expect("stdin");
        if let Some(text) = stdin {
            pipe.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn get_json(kubeconfig: &Path, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    let text = kubectl(kubeconfig, &a, None).unwrap_or_else(|e| panic!("kubectl {a:?}: {e}"));
    serde_json::from_str(&text).expect("kubectl JSON")
}

fn docs(text: &str) -> Vec<Value> {
    let all: Vec<Value> = serde_saphyr::from_multiple(text).expect("YAML");
    all.into_iter().filter(|d| !d.is_null()).collect()
}

/// The repository and an API server, or why this machine cannot run the test.
fn setup() -> Option<(clusterctl::Repo, kube_server::ApiServer)> {
    if Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        println!("skipping clusterctl: no kubectl");
        return None;
    }
    let kube_dir = kube_server::kube_dir();
    if !kube_dir.join("up").is_file() {
        println!("skipping clusterctl: {} does not exist", kube_dir.display());
        return None;
    }
    let repo = match clusterctl::Repo::new(
        &root(),
        &capi_dir(),
        &kube_dir,
        &[(V1, &[]), (V2, &[("STACKHOOK_RELEASE_IMAGE", V2_IMAGE)])],
    ) {
        Ok(r) => r,
        Err(why) => {
            println!("skipping clusterctl: {why}");
            return None;
        }
    };
    let kube_dir = kube_dir.canonicalize().expect("kube dir");
    let api = kube_server::start_own(kube_dir, "stackhook-clusterctl-");
    Some((repo, api))
}

fn deployment(kubeconfig: &Path) -> Value {
    get_json(
        kubeconfig,
        &["deployment", "stackhook", "-n", "stackhook-system"],
    )
}

fn env_of(deploy: &Value, name: &str) -> Value {
    deploy["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["name"] == name))
        .map(|e| e["value"].clone())
        .unwrap_or(Value::Null)
}

/// `generate provider` (clusterctl's own checks of the components), a server-side dry
/// run of what it prints, `init`, `upgrade plan`, `upgrade apply`, `delete` keeping the
/// CRDs: each step against the real API server, with objects stored on the way.
#[test]
fn clusterctl_installs_upgrades_and_removes_stackhook() {
    let Some((repo, api)) = setup() else { return };
    let kc = &api.kubeconfig;

    // Variables as an operator sets them reach the objects (CAPI 1.10's pair here).
    let generated = repo
        .run(
            None,
            &[
                "generate",
                "provider",
                "--infrastructure",
                &format!("openstack:{V1}"),
            ],
            &[
                ("STACKHOOK_CAPI_VERSION", "1.10"),
                ("STACKHOOK_EXTENSIONCONFIG_VERSION", "v1alpha1"),
                ("STACKHOOK_CONTROLLERS", "false"),
            ],
        )
        .unwrap_or_else(|e| panic!("generate provider: {e}"));
    let objs = docs(&generated);
    let deploy = objs
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("Deployment");
    assert_eq!(env_of(deploy, "STACKHOOK_CAPI_VERSION"), "1.10");
    assert_eq!(env_of(deploy, "STACKHOOK_CONTROLLERS"), "false");
    let ec = objs
        .iter()
        .find(|o| o["kind"] == "ExtensionConfig")
        .expect("ExtensionConfig");
    assert_eq!(ec["apiVersion"], "runtime.cluster.x-k8s.io/v1alpha1");
    // clusterctl added its labels to every object.
    for o in &objs {
        assert_eq!(
            o["metadata"]["labels"]["cluster.x-k8s.io/provider"], "infrastructure-openstack",
            "{} {}",
            o["kind"], o["metadata"]["name"]
        );
    }

    let init = repo
        .init(&root(), kc, V1)
        .unwrap_or_else(|e| panic!("clusterctl init: {e}"));
    assert!(init.contains("Skipping installing cert-manager"), "{init}");
    assert!(init.contains("infrastructure-openstack"), "{init}");
    // The inventory names stackhook as the openstack infrastructure provider.
    let inventory = get_json(kc, &["providers.clusterctl.cluster.x-k8s.io", "-A"]);
    let ours = inventory["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|p| p["metadata"]["name"] == "infrastructure-openstack")
        .expect("infrastructure-openstack in the inventory")
        .clone();
    assert_eq!(ours["metadata"]["namespace"], "stackhook-system");
    assert_eq!(ours["version"], V1);
    assert_eq!(ours["type"], "InfrastructureProvider");
    // Defaults substituted: the server finds the CAPI version itself.
    let d = deployment(kc);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["name"],
        "manager"
    );
    assert_eq!(env_of(&d, "STACKHOOK_CAPI_VERSION"), "auto");
    assert_eq!(env_of(&d, "STACKHOOK_CONTROLLERS"), "true");
    // `clusterctl move` finds the kinds to move by clusterctl's CRD label.
    let crds = get_json(
        kc,
        &[
            "crd",
            "-l",
            "cluster.x-k8s.io/provider=infrastructure-openstack",
        ],
    );
    let crds = crds["items"].as_array().expect("items");
    assert!(crds.len() >= 4, "{} CRDs", crds.len());
    for c in crds {
        assert!(
            c["metadata"]["labels"]
                .get("clusterctl.cluster.x-k8s.io")
                .is_some(),
            "{} lacks clusterctl's label",
            c["metadata"]["name"]
        );
    }
    let ec = get_json(kc, &["extensionconfig", "stackhook"]);
    assert_eq!(ec["apiVersion"], "runtime.cluster.x-k8s.io/v1beta2");

    // The Runtime Extension alone passes the server's dry run too (beside CAPO).
    let rtx = repo
        .run(
            None,
            &[
                "generate",
                "provider",
                "--runtime-extension",
                &format!("stackhook:{V1}"),
            ],
            &[],
        )
        .unwrap_or_else(|e| panic!("generate provider --runtime-extension: {e}"));
    assert!(!rtx.contains("CustomResourceDefinition"));
    kubectl(kc, &["apply", "--dry-run=server", "-f", "-"], Some(&rtx))
        .unwrap_or_else(|e| panic!("dry run of the runtime extension: {e}"));

    // Objects stored under v0.1.0's CRDs.
    let ns = "clusterctl-upgrade";
    kubectl(kc, &["create", "namespace", ns], None).expect("namespace");
    let stored = format!(
        r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: OpenStackClusterTemplate
metadata: {{name: kept, namespace: {ns}}}
spec:
  template:
    spec:
      identityRef: {{name: kept-cloud-config, cloudName: openstack}}
      managedSecurityGroups: {{allowAllInClusterTraffic: true}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: OpenStackMachineTemplate
metadata: {{name: kept, namespace: {ns}}}
spec:
  template:
    spec:
      flavor: m1.medium
      image: {{filter: {{name: ubuntu-2404-kube-v1.33.1}}}}
      sshKeyName: ""
"#
    );
    kubectl(kc, &["apply", "-f", "-"], Some(&stored))
        .unwrap_or_else(|e| panic!("stored objects: {e}"));
    let before = get_json(
        kc,
        &[
            "openstackmachinetemplates,openstackclustertemplates",
            "-n",
            ns,
        ],
    );

    // upgrade plan reads both releases' metadata.
    let plan = repo
        .run(Some(kc), &["upgrade", "plan"], &[])
        .unwrap_or_else(|e| panic!("upgrade plan: {e}"));
    let row = plan
        .lines()
        .find(|l| l.starts_with("infrastructure-openstack"))
        .unwrap_or_else(|| panic!("no row for stackhook: {plan}"));
    assert!(row.contains(V1) && row.contains(V2), "{row}");

    let applied = repo
        .run(
            Some(kc),
            &[
                "upgrade",
                "apply",
                "--infrastructure",
                &format!("stackhook-system/openstack:{V2}"),
            ],
            &[],
        )
        .unwrap_or_else(|e| panic!("upgrade apply: {e}"));
    println!("{applied}");
    let inventory = get_json(
        kc,
        &[
            "provider",
            "infrastructure-openstack",
            "-n",
            "stackhook-system",
        ],
    );
    assert_eq!(inventory["version"], V2);
    let d = deployment(kc);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        V2_IMAGE
    );
    // Stored objects are kept, unchanged and readable.
    let after = get_json(
        kc,
        &[
            "openstackmachinetemplates,openstackclustertemplates",
            "-n",
            ns,
        ],
    );
    let specs = |l: &Value| -> Vec<Value> {
        l["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|o| o["spec"].clone())
            .collect()
    };
    assert_eq!(specs(&before), specs(&after));
    assert_eq!(specs(&after).len(), 2);

    // The first step of replacing one `openstack` provider by another: delete it
    // without --include-crd. The controllers go, the CRDs and every object stay.
    repo.run(Some(kc), &["delete", "--infrastructure", "openstack"], &[])
        .unwrap_or_else(|e| panic!("delete: {e}"));
    assert!(
        kubectl(
            kc,
            &["get", "deployment", "stackhook", "-n", "stackhook-system"],
            None
        )
        .is_err(),
        "the Deployment is gone after delete"
    );
    let kept = get_json(
        kc,
        &[
            "openstackmachinetemplates,openstackclustertemplates",
            "-n",
            ns,
        ],
    );
    assert_eq!(specs(&kept), specs(&before));
    // And installing again (here: stackhook itself) takes the same objects over.
    let again = repo
        .init_again(kc, &["--infrastructure", &format!("openstack:{V2}")])
        .unwrap_or_else(|e| panic!("init after delete: {e}"));
    assert!(again.contains("infrastructure-openstack"), "{again}");
    let kept = get_json(
        kc,
        &[
            "openstackmachinetemplates,openstackclustertemplates",
            "-n",
            ns,
        ],
    );
    assert_eq!(specs(&kept), specs(&before));
}

/// The operator's form: the ConfigMaps and the example providers are accepted by the
/// API server, and what the operator's fetchConfig.selector selects is exactly one
/// ConfigMap per provider whose components are the release's.
#[test]
fn operator_configmaps_are_selected_by_the_example_providers() {
    let Some((repo, api)) = setup() else { return };
    let kc = &api.kubeconfig;
    let out = repo.path();
    let crds = root().join("tests/fixtures/cluster-api-operator/crds.yaml");
    kubectl(
        kc,
        &["apply", "--server-side", "-f", &crds.display().to_string()],
        None,
    )
    .unwrap_or_else(|e| panic!("operator CRDs: {e}"));
    kubectl(
        kc,
        &[
            "wait",
            "--for=condition=established",
            "--timeout=60s",
            "crd",
            "-l",
            "stackhook-test=operator-api",
        ],
        None,
    )
    .expect("established");
    for v in [V1, V2] {
        let providers = out.join(format!("operator/providers-{v}.yaml"));
        let files = [
            providers.clone(),
            out.join(format!("operator/infrastructure-openstack-{v}.yaml")),
            out.join(format!("operator/runtime-extension-stackhook-{v}.yaml")),
        ];
        for f in &files {
            kubectl(
                kc,
                &["apply", "--server-side", "-f", &f.display().to_string()],
                None,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        }
    }
    // Both versions' ConfigMaps are in the namespace; each provider's selector (as it
    // stands after the v0.1.1 example was applied) picks exactly one: v0.1.1's.
    for (kind, dir, file) in [
        (
            "infrastructureprovider",
            "infrastructure-openstack",
            "infrastructure-components.yaml",
        ),
        (
            "runtimeextensionprovider",
            "runtime-extension-stackhook",
            "runtime-extension-components.yaml",
        ),
    ] {
        let list = get_json(kc, &[kind, "-n", "stackhook-system"]);
        let p = &list["items"][0];
        assert_eq!(p["spec"]["version"], V2);
        let labels = p["spec"]["fetchConfig"]["selector"]["matchLabels"]
            .as_object()
            .expect("matchLabels");
        let selector: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect();
        let cms = get_json(
            kc,
            &[
                "configmap",
                "-n",
                "stackhook-system",
                "-l",
                &selector.join(","),
            ],
        );
        let cms = cms["items"].as_array().expect("items");
        assert_eq!(
            cms.len(),
            1,
            "{kind}: the operator refuses a selector matching {}",
            cms.len()
        );
        let cm = &cms[0];
        assert_eq!(
            cm["metadata"]["labels"]["provider.cluster.x-k8s.io/version"],
            V2
        );
        let components =
            std::fs::read_to_string(out.join(dir).join(V2).join(file)).expect("components");
        assert_eq!(
            cm["data"]["components"],
            components.as_str(),
            "{kind}: components"
        );
        // The operator reads the contract from `metadata`.
        let meta: Value =
            serde_saphyr::from_str(cm["data"]["metadata"].as_str().expect("metadata"))
                .expect("metadata YAML");
        assert_eq!(meta["kind"], "Metadata");
        // What the operator hands to clusterctl's library: components that clusterctl
        // itself turns into objects (generate provider reads the same file).
        let secret = get_json(
            kc,
            &["secret", "stackhook-variables", "-n", "stackhook-system"],
        );
        assert!(secret["data"]["STACKHOOK_CAPI_VERSION"].is_string());
    }
}
