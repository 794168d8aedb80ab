//! `stackhook validate` as a CI job runs it: the real binary, its exit status and its
//! output, with Rust backtraces switched on; rendered objects checked against their
//! CRDs as the API server's strict field validation would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use stackhook::engine::clusterclass::{Cluster, ClusterClass};
use stackhook::engine::PackEngine;
use stackhook::render::{self, crds::Schemas, Inputs, Report, Templates};
use stackhook::sdk::CapiVersion;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The binary with every backtrace switch on, as a developer's shell may have them.
fn stackhook(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stackhook"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LIB_BACKTRACE", "1")
        .output()
        .unwrap()
}

fn validate(cluster: &Path, class: &str, templates: &Path, extra: &[&str]) -> Output {
    let class = root().join(class);
    let mut args = vec![
        "validate",
        "--cluster",
        cluster.to_str().unwrap(),
        "--clusterclass",
        class.to_str().unwrap(),
        "--templates",
        templates.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    stackhook(&args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn assert_no_backtrace(stderr: &str) {
    assert!(
        !stderr.to_lowercase().contains("stack backtrace"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_failed_validate_prints_its_problems_and_exits_1_without_a_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster.yaml");
    let yaml =
        std::fs::read_to_string(root().join("clusterclasses/examples/dev-test-cluster.yaml"))
            .unwrap()
            .replace("0a9b7d2c-5e1f-4c3a-9b8d-6f2e1a3c4d5e", "not-a-uuid")
            .replace("value: m1.xlarge", "value: 7");
    std::fs::write(&cluster, yaml).unwrap();
    let out = validate(
        &cluster,
        "clusterclasses/dev-test.yaml",
        &root().join("templates"),
        &[],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(
        lines[0].starts_with("spec.topology.variables[externalNetworkID].value: "),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with(
            "spec.topology.workers.machineDeployments[1].variables.overrides[workerFlavor].value: "
        ),
        "{stderr}"
    );
    assert_eq!(lines[2], "Cluster default/dev1: 2 problem(s)");
    assert_no_backtrace(&stderr);

    // An input that cannot be read: the error and its cause, still no backtrace.
    let out = validate(
        &dir.path().join("missing.yaml"),
        "clusterclasses/dev-test.yaml",
        &root().join("templates"),
        &[],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("Error: "), "{stderr}");
    assert!(stderr.contains("missing.yaml"), "{stderr}");
    assert_no_backtrace(&stderr);
}

/// The dev-test templates with a wrong type and an undeclared field, in a directory.
fn broken_templates(dir: &Path) -> PathBuf {
    let t = std::fs::read_to_string(root().join("templates/dev-test.yaml")).unwrap();
    let edited = t
        .replacen(
            "      managedSecurityGroups:\n",
            "      apiServerPort: six-four-four-three\n      managedSecurityGroups:\n",
            1,
        )
        .replace(
            "  name: dev-test-default-worker\n  namespace: default\nspec:\n  template:\n    spec:\n      flavor: placeholder\n",
            "  name: dev-test-default-worker\n  namespace: default\nspec:\n  template:\n    spec:\n      flavour: m1.small\n      flavor: placeholder\n",
        );
    assert_ne!(t, edited);
    assert_eq!(edited.matches("flavour").count(), 1);
    let out = dir.join("templates");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("dev-test.yaml"), edited).unwrap();
    out
}

#[test]
fn rendered_objects_are_checked_against_their_crds() {
    let dir = tempfile::tempdir().unwrap();
    let templates = broken_templates(dir.path());
    let cluster = root().join("clusterclasses/examples/dev-test-cluster.yaml");
    let out = validate(&cluster, "clusterclasses/dev-test.yaml", &templates, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_no_backtrace(&stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    // One OpenStackCluster, three MachineDeployments' OpenStackMachineTemplates.
    assert_eq!(lines.len(), 5, "{stderr}");
    assert!(lines[0].starts_with("OpenStackCluster dev1-"), "{stderr}");
    assert!(
        lines[0]
            .ends_with(r#": spec.apiServerPort: "six-four-four-three" is not of type "integer""#),
        "{stderr}"
    );
    for (line, md) in lines[1..4].iter().zip(["md-0", "md-1", "md-2"]) {
        assert!(
            line.starts_with(&format!("OpenStackMachineTemplate dev1-{md}-")),
            "{stderr}"
        );
        assert!(
            line.ends_with(
                r#": spec.template.spec.flavour: unknown field "flavour": not declared in the schema"#
            ),
            "{stderr}"
        );
    }
    assert_eq!(lines[4], "Cluster default/dev1: 4 problem(s)");

    // Render itself does not check schemas: it prints what CAPI would create.
    let class = root().join("clusterclasses/dev-test.yaml");
    let out = stackhook(&[
        "render",
        "--cluster",
        cluster.to_str().unwrap(),
        "--clusterclass",
        class.to_str().unwrap(),
        "--templates",
        templates.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn crds_given_on_the_command_line_take_precedence() {
    let dir = tempfile::tempdir().unwrap();
    let crds = dir.path().join("crds");
    std::fs::create_dir(&crds).unwrap();
    // An OpenStackCluster CRD that also requires a bastion.
    std::fs::write(
        crds.join("openstackclusters.yaml"),
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: openstackclusters.infrastructure.cluster.x-k8s.io}
spec:
  group: infrastructure.cluster.x-k8s.io
  names: {kind: OpenStackCluster}
  versions:
  - name: v1beta1
    served: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [bastion]
            x-kubernetes-preserve-unknown-fields: true
"#,
    )
    .unwrap();
    let cluster = root().join("clusterclasses/examples/dev-test-cluster.yaml");
    let out = validate(
        &cluster,
        "clusterclasses/dev-test.yaml",
        &root().join("templates"),
        &["--crds", crds.to_str().unwrap()],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].starts_with("OpenStackCluster dev1-"), "{stderr}");
    assert!(
        lines[0].ends_with(r#": spec: "bastion" is a required property"#),
        "{stderr}"
    );
}

/// clusterctl's `${NAME}` and `${NAME:=default}`, for the examples that use them.
fn substitute(text: &str, given: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = start + rest[start..].find('}').unwrap();
        let inner = &rest[start + 2..end];
        let (name, default) = inner.split_once(":=").unwrap_or((inner, ""));
        let value = given
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(default, |(_, v)| v);
        out.push_str(value);
        rest = &rest[end + 1..];
    }
    out + rest
}

/// Templates from a directory or one file.
fn templates_at(p: &Path) -> Templates {
    if p.is_dir() {
        return Templates::from_dir(p).unwrap();
    }
    let docs = render::yaml_documents(&std::fs::read_to_string(p).unwrap()).unwrap();
    Templates::from_documents(
        "templates",
        docs.into_iter()
            .map(|d| (p.display().to_string(), d))
            .collect(),
    )
    .unwrap()
}

/// Every shipped example Cluster (and the test classes) validates, CRDs included, at
/// the oldest and the newest CAPI release its apiVersion exists in.
#[test]
fn every_example_validates() {
    let examples = root().join("clusterclasses/examples");
    let fixtures = root().join("tests/fixtures");
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    let kubeadm_values = [
        ("CLUSTER_NAME", "c1"),
        (
            "OPENSTACK_EXTERNAL_NETWORK_ID",
            "0a9b7d2c-5e1f-4c3a-9b8d-6f2e1a3c4d5e",
        ),
    ];
    let magnum_values = [
        ("CLUSTER_NAME", "kube-ex4mp"),
        ("CLUSTER_UUID", "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"),
        ("KUBERNETES_VERSION", "v1.31.4"),
        ("CONTROL_PLANE_FLAVOR", "m1.medium"),
        ("WORKER_FLAVOR", "m1.large"),
        ("IMAGE_ID", "9d3c5b1e-2f4a-4c7e-8b6d-1a0f3e5c7d92"),
        (
            "EXTERNAL_NETWORK_ID",
            "0b6f3e1a-7c2d-4a58-9e4f-5d1c8a2b7e63",
        ),
        (
            "CONTROL_PLANE_SERVER_GROUP_ID",
            "2c7a9e1f-4b6d-4f80-a3c5-7e9b1d3f5a20",
        ),
        (
            "WORKER_SERVER_GROUP_ID",
            "6a8e2c4f-1b3d-4e5f-9a7c-8d0b2e4f6a18",
        ),
    ];
    let dev_test = read(&examples.join("dev-test-cluster.yaml"));
    // (name, Cluster text, ClusterClass, templates, packs, oldest CAPI minor)
    let mut cases: Vec<(String, String, PathBuf, PathBuf, Option<PathBuf>, u16)> = vec![
        (
            "dev-test".into(),
            dev_test.clone(),
            root().join("clusterclasses/dev-test.yaml"),
            root().join("templates"),
            None,
            11,
        ),
        (
            "dev-test-external".into(),
            dev_test.replace("name: dev-test\n", "name: dev-test-external\n"),
            fixtures.join("classes/dev-test-external.yaml"),
            root().join("templates"),
            Some(fixtures.join("packs")),
            11,
        ),
        (
            "openstack-cilium".into(),
            read(&fixtures.join("classes/openstack-cilium-cluster.yaml")),
            fixtures.join("classes/openstack-cilium-v1beta1.yaml"),
            fixtures.join("classes"),
            None,
            10,
        ),
        (
            "magnum".into(),
            substitute(&read(&examples.join("magnum-cluster.yaml")), &magnum_values),
            root().join("clusterclasses/magnum-compatible.yaml"),
            root().join("templates/magnum-compatible.yaml"),
            None,
            10,
        ),
    ];
    cases.push((
        "openstack-kubeadm-bootstrap-vars".into(),
        read(&examples.join("openstack-kubeadm-bootstrap-vars-cluster.yaml")),
        root().join("clusterclasses/openstack-kubeadm-bootstrap-vars.yaml"),
        root().join("templates/openstack-kubeadm-bootstrap-vars.yaml"),
        None,
        10,
    ));
    for example in [
        "openstack-kubeadm-minimal.yaml",
        "openstack-kubeadm-ha.yaml",
        "openstack-kubeadm-keepalived.yaml",
    ] {
        cases.push((
            example.into(),
            substitute(&read(&examples.join(example)), &kubeadm_values),
            root().join("clusterclasses/openstack-kubeadm/base/clusterclass.yaml"),
            root().join("templates/openstack-kubeadm"),
            None,
            10,
        ));
    }
    let schemas = Schemas::built_in().unwrap();
    for (name, cluster, class, templates, packs, oldest) in &cases {
        assert!(!cluster.contains("${"), "{name}: {cluster}");
        let engine = match packs {
            Some(dir) => PackEngine::from_dir(dir).unwrap(),
            None => PackEngine::embedded().unwrap(),
        };
        let cluster = render::yaml_documents(cluster).unwrap().remove(0);
        let class = render::yaml_documents(&read(class)).unwrap().remove(0);
        for minor in [*oldest, CapiVersion::NEWEST.minor] {
            let inputs = Inputs {
                cluster: Cluster::from_value(&cluster).unwrap(),
                class: ClusterClass::from_value(&class).unwrap(),
                templates: templates_at(templates),
                capi: CapiVersion::new(minor),
            };
            let report = render::validate_with(&inputs, &engine, &schemas);
            assert_eq!(report, Report::default(), "{name} at 1.{minor}");
        }
    }

    // And through the binary: exit status 0, one line on stdout, nothing on stderr.
    let out = validate(
        &examples.join("dev-test-cluster.yaml"),
        "clusterclasses/dev-test.yaml",
        &root().join("templates"),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "Cluster default/dev1: valid for ClusterClass dev-test\n"
    );
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

#[test]
fn kinds_without_a_crd_are_listed_not_failed() {
    let inputs = Inputs::read(
        &root().join("clusterclasses/examples/dev-test-cluster.yaml"),
        &root().join("clusterclasses/dev-test.yaml"),
        &root().join("templates"),
    )
    .unwrap();
    let report =
        render::validate_with(&inputs, &PackEngine::embedded().unwrap(), &Schemas::empty());
    assert!(report.problems.is_empty(), "{report:?}");
    assert_eq!(
        report.unchecked,
        [
            "bootstrap.cluster.x-k8s.io/v1beta2 KubeadmConfigTemplate",
            "controlplane.cluster.x-k8s.io/v1beta2 KubeadmControlPlane",
            "infrastructure.cluster.x-k8s.io/v1beta1 OpenStackCluster",
            "infrastructure.cluster.x-k8s.io/v1beta1 OpenStackMachineTemplate",
        ]
    );
}

#[test]
fn a_bad_capi_version_is_refused() {
    let out = stackhook(&[
        "render",
        "--capi-version",
        "1.9",
        "--cluster",
        "c",
        "--clusterclass",
        "cc",
        "--templates",
        "t",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("unsupported CAPI version \"1.9\""),
        "{stderr}"
    );
}
