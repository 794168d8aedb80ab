//! `deploy/release.sh`: the files it writes hold what clusterctl's provider contract and
//! the Cluster API Operator ask for (read from their documentation and source, v1.13 and
//! v0.28), and nothing of the repository's classes and examples is lost on the way.
//! The same output goes through the real clusterctl and API server in tests/clusterctl.rs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const VERSION: &str = "v0.1.0";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn have_kubectl() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Runs the script; `Err` carries its stderr.
fn release(out: &Path, version: &str, env: &[(&str, &str)]) -> Result<String, (i32, String)> {
    let o = Command::new("bash")
        .arg(repo().join("deploy/release.sh"))
        .arg(out)
        .arg(version)
        .envs(env.iter().copied())
        .output()
        .expect("bash");
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err((
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        ))
    }
}

fn docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    docs_of(&text)
}

fn docs_of(text: &str) -> Vec<Value> {
    let all: Vec<Value> = serde_saphyr::from_multiple(text).expect("YAML");
    all.into_iter().filter(|d| !d.is_null()).collect()
}

fn kind(o: &Value) -> &str {
    o["kind"].as_str().unwrap_or_default()
}

/// One release per test binary run, written once.
fn released() -> Option<&'static Path> {
    static OUT: std::sync::OnceLock<Option<tempfile::TempDir>> = std::sync::OnceLock::new();
    OUT.get_or_init(|| {
        if !have_kubectl() {
            eprintln!("skipped: no kubectl (deploy/release.sh renders with `kubectl kustomize`)");
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        release(dir.path(), VERSION, &[]).unwrap_or_else(|(c, e)| panic!("release.sh {c}: {e}"));
        Some(dir)
    })
    .as_ref()
    .map(|d| d.path())
}

/// clusterctl's drone/envsubst forms: `${VAR}`, `${VAR:=d}`, `${VAR=d}`, `${VAR:-d}`.
fn variables(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        let end = after.find('}').expect("closed ${");
        let body = &after[..end];
        let name_end = body
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(body.len());
        let default = body[name_end..]
            .strip_prefix(":=")
            .or_else(|| body[name_end..].strip_prefix(":-"))
            .or_else(|| body[name_end..].strip_prefix('='))
            .map(str::to_string);
        out.push((body[..name_end].to_string(), default));
        rest = &after[end..];
    }
    out
}

/// What clusterctl does to the text before parsing it, with every default taken.
fn with_defaults(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after.find('}').expect("closed ${");
        let (_, default) = variables(&rest[i..i + 3 + end]).remove(0);
        out.push_str(&default.unwrap_or_default());
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_layout_is_clusterctls_local_repository_with_checksums() {
    let Some(out) = released() else { return };
    let infra = out.join("infrastructure-openstack").join(VERSION);
    let rtx = out.join("runtime-extension-stackhook").join(VERSION);
    for f in [
        infra.join("metadata.yaml"),
        infra.join("infrastructure-components.yaml"),
        infra.join("cluster-template.yaml"),
        rtx.join("metadata.yaml"),
        rtx.join("runtime-extension-components.yaml"),
        out.join(format!("operator/infrastructure-openstack-{VERSION}.yaml")),
        out.join(format!(
            "operator/runtime-extension-stackhook-{VERSION}.yaml"
        )),
        out.join(format!("operator/providers-{VERSION}.yaml")),
        out.join("clusterctl.yaml"),
    ] {
        assert!(f.is_file(), "{} missing", f.display());
    }
    // SHA256SUMS lists every other file, and each sum holds.
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).expect("SHA256SUMS");
    let listed: BTreeSet<String> = sums
        .lines()
        .map(|l| l.split_whitespace().nth(1).expect("sum line").to_string())
        .collect();
    let mut present = BTreeSet::new();
    let mut stack = vec![out.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("dir").flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                let rel = e
                    .path()
                    .strip_prefix(out)
                    .expect("prefix")
                    .display()
                    .to_string();
                if rel != "SHA256SUMS" {
                    present.insert(rel);
                }
            }
        }
    }
    assert_eq!(
        listed, present,
        "SHA256SUMS must list exactly the release's files"
    );
    let check = Command::new("sha256sum")
        .args(["--check", "--quiet", "SHA256SUMS"])
        .current_dir(out)
        .output()
        .expect("sha256sum");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );

    // clusterctl.yaml points each provider at its components file.
    let cfg: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(out.join("clusterctl.yaml")).unwrap())
            .expect("clusterctl.yaml");
    let providers = cfg["providers"].as_array().expect("providers");
    let by_name = |n: &str| {
        providers
            .iter()
            .find(|p| p["name"] == n)
            .unwrap_or_else(|| panic!("provider {n}"))
    };
    assert_eq!(by_name("openstack")["type"], "InfrastructureProvider");
    assert_eq!(by_name("stackhook")["type"], "RuntimeExtensionProvider");
    for p in providers {
        let url = p["url"].as_str().expect("url");
        let path = url.strip_prefix("file://").expect("a file:// URL");
        assert!(Path::new(path).is_file(), "{url} is not a file");
    }
}

#[test]
fn metadata_maps_the_release_series_to_the_v1beta1_contract() {
    let Some(out) = released() else { return };
    for p in ["infrastructure-openstack", "runtime-extension-stackhook"] {
        let m = &docs(&out.join(p).join(VERSION).join("metadata.yaml"))[0];
        // clusterctl >= 1.11 refuses anything else (its metadata validation).
        assert_eq!(m["apiVersion"], "clusterctl.cluster.x-k8s.io/v1alpha3");
        assert_eq!(m["kind"], "Metadata");
        let series = m["releaseSeries"].as_array().expect("releaseSeries");
        let this = series
            .iter()
            .find(|s| s["major"] == 0 && s["minor"] == 1)
            .expect("series 0.1 listed");
        // The CRDs implement CAPI's v1beta1 provider contract (their contract label).
        assert_eq!(this["contract"], "v1beta1");
    }
}

#[test]
fn components_follow_the_provider_contract() {
    let Some(out) = released() else { return };
    for (dir, file, label, crds) in [
        (
            "infrastructure-openstack",
            "infrastructure-components.yaml",
            "infrastructure-openstack",
            true,
        ),
        (
            "runtime-extension-stackhook",
            "runtime-extension-components.yaml",
            "runtime-extension-stackhook",
            false,
        ),
    ] {
        let path = out.join(dir).join(VERSION).join(file);
        let text = std::fs::read_to_string(&path).expect("components");
        // Every variable has a default: `clusterctl init` with nothing set works.
        let vars = variables(&text);
        assert!(!vars.is_empty(), "{file}: no variables");
        for (name, default) in &vars {
            assert!(
                name.starts_with("STACKHOOK_"),
                "{file}: ${{{name}}} lacks the provider prefix"
            );
            assert!(default.is_some(), "{file}: ${{{name}}} has no default");
        }
        let objs = docs_of(&with_defaults(&text));
        let namespaces: Vec<_> = objs.iter().filter(|o| kind(o) == "Namespace").collect();
        assert_eq!(
            namespaces.len(),
            1,
            "{file}: exactly one Namespace (the target namespace)"
        );
        assert_eq!(namespaces[0]["metadata"]["name"], "stackhook-system");
        let cluster_scoped = [
            "Namespace",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "ExtensionConfig",
        ];
        for o in &objs {
            let name = format!("{} {}", kind(o), o["metadata"]["name"]);
            assert_eq!(
                o["metadata"]["labels"]["cluster.x-k8s.io/provider"], label,
                "{file}: {name} lacks the provider label"
            );
            if !cluster_scoped.contains(&kind(o)) {
                assert_eq!(
                    o["metadata"]["namespace"], "stackhook-system",
                    "{file}: {name} outside the target namespace"
                );
            }
        }
        let crd_objs: Vec<_> = objs
            .iter()
            .filter(|o| kind(o) == "CustomResourceDefinition")
            .collect();
        if crds {
            let names: BTreeSet<_> = crd_objs
                .iter()
                .map(|c| c["spec"]["names"]["kind"].as_str().unwrap_or_default())
                .collect();
            for k in [
                "OpenStackCluster",
                "OpenStackClusterTemplate",
                "OpenStackMachine",
                "OpenStackMachineTemplate",
            ] {
                assert!(names.contains(k), "{file}: no CRD for {k}");
            }
            // The kinds CAPI references carry the contract label it resolves their
            // version by (the identity kind, v1alpha1 only, has no v1beta1 to name).
            for c in &crd_objs {
                let kind = c["spec"]["names"]["kind"].as_str().unwrap_or_default();
                if kind == "OpenStackClusterIdentity" {
                    continue;
                }
                assert_eq!(
                    c["metadata"]["labels"]["cluster.x-k8s.io/v1beta1"], "v1beta1",
                    "{file}: CRD {} lacks the contract label",
                    c["metadata"]["name"]
                );
            }
        } else {
            assert!(
                crd_objs.is_empty(),
                "{file}: the Runtime Extension alone ships no CRDs"
            );
        }
        // One Deployment whose container is `manager`, with values that are strings once
        // clusterctl substituted them (an unquoted 1.13 would be a number).
        let deploys: Vec<_> = objs.iter().filter(|o| kind(o) == "Deployment").collect();
        assert_eq!(deploys.len(), 1, "{file}: one Deployment");
        let c = &deploys[0]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            c["name"], "manager",
            "{file}: the container must be called manager"
        );
        assert_eq!(c["image"], format!("docker.io/library/stackhook:{VERSION}"));
        let env = c["env"].as_array().expect("env");
        let val = |n: &str| {
            env.iter()
                .find(|e| e["name"] == n)
                .map(|e| e["value"].clone())
                .unwrap_or(Value::Null)
        };
        // auto: the server finds the CAPI version in the management cluster.
        assert_eq!(val("STACKHOOK_CAPI_VERSION"), "auto");
        assert_eq!(val("STACKHOOK_LOG_FORMAT"), "json");
        assert_eq!(val("RUST_LOG"), "info");
        assert!(val("STACKHOOK_HANDLER_CONFIG").is_string());
        for e in env {
            assert!(
                e["value"].is_string(),
                "{file}: env {} is not a string",
                e["name"]
            );
        }
        assert_eq!(
            val("STACKHOOK_CONTROLLERS"),
            if crds {
                Value::from("true")
            } else {
                Value::Null
            }
        );
        // The ExtensionConfig CAPI calls the hooks through, in the contract's version.
        let ec: Vec<_> = objs
            .iter()
            .filter(|o| kind(o) == "ExtensionConfig")
            .collect();
        assert_eq!(ec.len(), 1, "{file}: one ExtensionConfig");
        assert_eq!(ec[0]["apiVersion"], "runtime.cluster.x-k8s.io/v1beta2");
        assert_eq!(ec[0]["metadata"]["name"], "stackhook");
        // cert-manager issues the serving certificate the Deployment mounts.
        let certs: Vec<_> = objs.iter().filter(|o| kind(o) == "Certificate").collect();
        let secret = deploys[0]["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find_map(|v| v["secret"]["secretName"].as_str())
            .expect("a Secret volume");
        assert!(
            certs.iter().any(|c| c["spec"]["secretName"] == secret),
            "{file}: no Certificate writes {secret}"
        );
        // The hook settings ConfigMap is valid handler config after substitution.
        let cm = objs
            .iter()
            .find(|o| kind(o) == "ConfigMap" && o["metadata"]["name"] == "stackhook-handler-config")
            .expect("handler ConfigMap");
        let handlers: Value =
            serde_saphyr::from_str(cm["data"]["handlers.yaml"].as_str().expect("handlers.yaml"))
                .expect("handlers YAML");
        assert_eq!(handlers["defaults"]["timeoutSeconds"], 10);
        assert_eq!(handlers["defaults"]["failurePolicy"], "Fail");
    }
}

#[test]
fn cluster_templates_and_classes_are_the_repositorys_own() {
    let Some(out) = released() else { return };
    let infra = out.join("infrastructure-openstack").join(VERSION);
    let mut classes = BTreeSet::new();
    for (flavor, example) in [
        ("", "openstack-kubeadm-minimal.yaml"),
        ("ha", "openstack-kubeadm-ha.yaml"),
        ("keepalived", "openstack-kubeadm-keepalived.yaml"),
        (
            "bootstrap-vars",
            "openstack-kubeadm-bootstrap-vars-cluster.yaml",
        ),
        ("magnum", "magnum-cluster.yaml"),
    ] {
        let name = if flavor.is_empty() {
            "cluster-template.yaml".to_string()
        } else {
            format!("cluster-template-{flavor}.yaml")
        };
        let text = std::fs::read_to_string(infra.join(&name)).expect("template");
        // The common variables of `clusterctl generate cluster`.
        let vars: BTreeSet<String> = variables(&text).into_iter().map(|(n, _)| n).collect();
        for v in [
            "CLUSTER_NAME",
            "KUBERNETES_VERSION",
            "OPENSTACK_CLOUD_YAML_B64",
        ] {
            assert!(vars.contains(v), "{name}: no ${{{v}}}");
        }
        // clusterctl asks for a variable whose default is empty as for one without.
        for (v, default) in variables(&text) {
            assert_ne!(
                default.as_deref(),
                Some(""),
                "{name}: ${{{v}}} has an empty default"
            );
        }
        let objs = docs_of(&with_defaults(&text));
        for o in &objs {
            assert!(
                o["metadata"].get("namespace").is_none(),
                "{name}: {} names a namespace; clusterctl sets the target namespace",
                kind(o)
            );
        }
        // The example's Cluster, unchanged but for its namespace.
        let mut example = docs_of(&with_defaults(
            &std::fs::read_to_string(repo().join("clusterclasses/examples").join(example)).unwrap(),
        ))
        .remove(0);
        // (The bootstrap-vars example has a fixed name; the template takes CLUSTER_NAME.)
        example["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        example["metadata"].as_object_mut().unwrap().remove("name");
        let mut cluster = objs
            .iter()
            .find(|o| kind(o) == "Cluster")
            .expect("Cluster")
            .clone();
        cluster["metadata"].as_object_mut().unwrap().remove("name");
        assert_eq!(cluster, example, "{name}: differs from the example");
        let cluster = objs.iter().find(|o| kind(o) == "Cluster").expect("Cluster");
        // Credentials: a Secret `clusterctl move` takes along.
        let secret = objs
            .iter()
            .find(|o| kind(o) == "Secret")
            .expect("identity Secret");
        assert_eq!(
            secret["metadata"]["labels"]["clusterctl.cluster.x-k8s.io/move"],
            "true"
        );
        classes.insert(
            cluster["spec"]["topology"]["class"]
                .as_str()
                .expect("class")
                .to_string(),
        );
    }
    // Every class a template names ships as clusterclass-<name>.yaml, with the
    // templates it references and no namespace and no variable anywhere.
    for class in &classes {
        let path = infra.join(format!("clusterclass-{class}.yaml"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("{} missing", path.display()));
        assert!(
            !text.contains("${"),
            "{class}: a ClusterClass file uses no variables"
        );
        let objs = docs_of(&text);
        let cc = objs
            .iter()
            .find(|o| kind(o) == "ClusterClass")
            .unwrap_or_else(|| panic!("{class}: no ClusterClass"));
        assert_eq!(cc["metadata"]["name"], class.as_str());
        assert!(!text.contains("namespace:"), "{class}: names a namespace");
        let present: BTreeSet<(String, String)> = objs
            .iter()
            .map(|o| {
                (
                    kind(o).to_string(),
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect();
        let mut refs = Vec::new();
        collect_refs(&cc["spec"], &mut refs);
        assert!(!refs.is_empty(), "{class}: no template references");
        for r in refs {
            assert!(
                present.contains(&r),
                "{class}: references {r:?}, which the file lacks"
            );
        }
    }
}

/// (kind, name) of every template reference of a ClusterClass spec, v1beta1 `ref` or
/// v1beta2 `templateRef`.
fn collect_refs(v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if (k == "ref" || k == "templateRef") && child.get("kind").is_some() {
                    out.push((
                        child["kind"].as_str().unwrap_or_default().to_string(),
                        child["name"].as_str().unwrap_or_default().to_string(),
                    ));
                } else {
                    collect_refs(child, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|c| collect_refs(c, out)),
        _ => {}
    }
}

fn configmap_components(cm: &Value) -> String {
    if cm["metadata"]["annotations"]["provider.cluster.x-k8s.io/compressed"] == "true" {
        use data_encoding::BASE64;
        let gz = BASE64
            .decode(
                cm["binaryData"]["components"]
                    .as_str()
                    .expect("binaryData.components")
                    .as_bytes(),
            )
            .expect("base64");
        let mut child = Command::new("gzip")
            .arg("-dc")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("gzip");
        {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(&gz)
                .expect("write");
        }
        let o = child.wait_with_output().expect("gzip");
        assert!(o.status.success(), "components are not gzip");
        String::from_utf8(o.stdout).expect("UTF-8")
    } else {
        cm["data"]["components"]
            .as_str()
            .expect("data.components")
            .to_string()
    }
}

#[test]
fn operator_configmaps_hold_the_release_and_the_examples_select_them() {
    let Some(out) = released() else { return };
    let providers = docs(&out.join(format!("operator/providers-{VERSION}.yaml")));
    for (kind_, dir, file) in [
        (
            "InfrastructureProvider",
            "infrastructure-openstack",
            "infrastructure-components.yaml",
        ),
        (
            "RuntimeExtensionProvider",
            "runtime-extension-stackhook",
            "runtime-extension-components.yaml",
        ),
    ] {
        let cm = &docs(&out.join(format!("operator/{dir}-{VERSION}.yaml")))[0];
        assert_eq!(kind(cm), "ConfigMap");
        let components = std::fs::read_to_string(out.join(dir).join(VERSION).join(file)).unwrap();
        let metadata =
            std::fs::read_to_string(out.join(dir).join(VERSION).join("metadata.yaml")).unwrap();
        assert!(
            cm["metadata"]["annotations"]["provider.cluster.x-k8s.io/compressed"].is_null(),
            "{dir}: under 1 MiB, kept as text"
        );
        assert_eq!(configmap_components(cm), components, "{dir}: components");
        assert_eq!(cm["data"]["metadata"], metadata.as_str(), "{dir}: metadata");
        assert_eq!(
            cm["metadata"]["labels"]["provider.cluster.x-k8s.io/version"],
            VERSION
        );
        // The example provider lives in the ConfigMap's namespace and its selector
        // matches the ConfigMap's labels.
        let p = providers
            .iter()
            .find(|p| kind(p) == kind_)
            .unwrap_or_else(|| panic!("{kind_}"));
        assert_eq!(p["apiVersion"], "operator.cluster.x-k8s.io/v1alpha2");
        assert_eq!(p["metadata"]["namespace"], cm["metadata"]["namespace"]);
        assert_eq!(p["spec"]["version"], VERSION);
        let want = p["spec"]["fetchConfig"]["selector"]["matchLabels"]
            .as_object()
            .expect("matchLabels");
        assert!(!want.is_empty());
        for (k, v) in want {
            assert_eq!(&cm["metadata"]["labels"][k], v, "{dir}: selector label {k}");
        }
        let other = if dir == "infrastructure-openstack" {
            "runtime-extension-stackhook"
        } else {
            "infrastructure-openstack"
        };
        let other_cm = &docs(&out.join(format!("operator/{other}-{VERSION}.yaml")))[0];
        assert!(
            want.iter()
                .any(|(k, v)| &other_cm["metadata"]["labels"][k] != v),
            "{kind_}'s selector also matches {other}'s ConfigMap; the operator refuses two"
        );
    }
}

#[test]
fn over_the_operators_limit_the_components_are_gzipped() {
    if released().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    release(
        dir.path(),
        VERSION,
        &[("STACKHOOK_CONFIGMAP_LIMIT_BYTES", "4096")],
    )
    .unwrap_or_else(|(c, e)| panic!("release.sh {c}: {e}"));
    let cm = &docs(
        &dir.path()
            .join(format!("operator/infrastructure-openstack-{VERSION}.yaml")),
    )[0];
    assert_eq!(
        cm["metadata"]["annotations"]["provider.cluster.x-k8s.io/compressed"],
        "true"
    );
    assert!(
        cm["data"].get("components").is_none(),
        "compressed components live in binaryData"
    );
    let components = std::fs::read_to_string(
        dir.path()
            .join("infrastructure-openstack")
            .join(VERSION)
            .join("infrastructure-components.yaml"),
    )
    .unwrap();
    assert_eq!(configmap_components(cm), components);
    let size = std::fs::metadata(
        dir.path()
            .join(format!("operator/infrastructure-openstack-{VERSION}.yaml")),
    )
    .unwrap()
    .len();
    assert!(
        size < components.len() as u64 / 2,
        "gzip should at least halve the YAML ({size} bytes)"
    );
}

#[test]
fn bad_versions_are_refused_with_a_reason() {
    if released().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = release(dir.path(), "0.1.0", &[]).expect_err("no leading v");
    assert_eq!(code, 64);
    assert!(err.contains("leading v"), "{err}");
    let (code, err) = release(dir.path(), "v7.3.0", &[]).expect_err("unknown series");
    assert_eq!(code, 65);
    assert!(err.contains("no release series 7.3"), "{err}");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing is written for a refused version"
    );
}
