//! `stackhook validate` as a CI job runs it: the real binary, its exit status and its
//! output, with Rust backtraces switched on; rendered objects checked against their
//! CRDs as the API server's strict field validation would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use stackhook::engine::PackEngine;
use stackhook::render::{self, crds::Schemas, Inputs};

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

/// Every example Cluster validates, at every CAPI release its apiVersion exists in.
#[test]
fn every_example_validates() {
    let dir = tempfile::tempdir().unwrap();
    let all = ["1.10", "1.11", "1.12", "1.13", "1.14"];
    let from_1_11 = &all[1..];
    let fixtures = root().join("tests/fixtures");
    let packs = fixtures.join("packs");
    let dev_test = root().join("clusterclasses/examples/dev-test-cluster.yaml");
    let external = dir.path().join("dev-test-external.yaml");
    std::fs::write(
        &external,
        std::fs::read_to_string(&dev_test)
            .unwrap()
            .replace("name: dev-test\n", "name: dev-test-external\n"),
    )
    .unwrap();
    let cases: Vec<Case> = vec![
        (
            dev_test,
            "clusterclasses/dev-test.yaml",
            root().join("templates"),
            vec![],
            from_1_11,
        ),
        (
            external,
            "tests/fixtures/classes/dev-test-external.yaml",
            root().join("templates"),
            vec!["--extensions", packs.to_str().unwrap()],
            from_1_11,
        ),
        (
            fixtures.join("classes/openstack-cilium-cluster.yaml"),
            "tests/fixtures/classes/openstack-cilium-v1beta1.yaml",
            fixtures.join("classes"),
            vec![],
            &all,
        ),
    ];
    run_all(&cases);
}

/// The shipped openstack-kubeadm examples. Their OpenStackCluster gets
/// `spec.extensions.networking.cilium` from the networking pack with fields the
/// OpenStackCluster CRD does not declare, so the API server would drop them (or refuse
/// the object under strict field validation): the pack and the CRD must agree first.
#[test]
#[ignore = "the networking pack writes spec.extensions.networking.cilium fields the OpenStackCluster CRD does not declare"]
fn every_openstack_kubeadm_example_fits_the_crds() {
    let dir = tempfile::tempdir().unwrap();
    let all = ["1.10", "1.11", "1.12", "1.13", "1.14"];
    let mut cases: Vec<Case> = vec![];
    for example in [
        "openstack-kubeadm-minimal.yaml",
        "openstack-kubeadm-ha.yaml",
        "openstack-kubeadm-keepalived.yaml",
    ] {
        let text =
            std::fs::read_to_string(root().join("clusterclasses/examples").join(example)).unwrap();
        let text = substitute(
            &text,
            &[
                ("CLUSTER_NAME", "c1"),
                (
                    "OPENSTACK_EXTERNAL_NETWORK_ID",
                    "0a9b7d2c-5e1f-4c3a-9b8d-6f2e1a3c4d5e",
                ),
            ],
        );
        let f = dir.path().join(example);
        std::fs::write(&f, text).unwrap();
        cases.push((
            f,
            "clusterclasses/openstack-kubeadm/base/clusterclass.yaml",
            root().join("templates/openstack-kubeadm"),
            vec![],
            &all,
        ));
    }
    run_all(&cases);
}

/// Cluster file, ClusterClass (relative to the repository), templates directory, more
/// arguments, CAPI releases.
type Case<'a> = (PathBuf, &'a str, PathBuf, Vec<&'a str>, &'a [&'a str]);

fn run_all(cases: &[Case<'_>]) {
    for (cluster, class, templates, extra, versions) in cases {
        for v in *versions {
            let mut args = extra.clone();
            args.extend(["--capi-version", v]);
            let out = validate(cluster, class, templates, &args);
            assert!(
                out.status.success(),
                "{} at {v}: {}",
                cluster.display(),
                text(&out.stderr)
            );
            assert!(text(&out.stdout).contains(": valid for ClusterClass "));
            assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
        }
    }
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
