//! `stackhook plan` as a CI job runs it: the real binary on the fixtures of
//! tests/fixtures/plan (the shipped openstack-kubeadm and dev-test classes, their
//! templates and example Clusters), one row per kind of change, each checked for the
//! templates it rotates, the machines it rolls, what it applies in place and the exit
//! status. Each row's directory holds only the files that differ from `base/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/plan")
}

fn stackhook(args: &[&str], cwd: Option<&Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stackhook"));
    c.args(args).env("RUST_BACKTRACE", "1");
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    c.output().unwrap()
}

/// `base/` with the row's files laid over it, in a fresh directory.
fn side(row: &str, into: &Path) {
    std::fs::create_dir_all(into).unwrap();
    for dir in ["base", row] {
        for e in std::fs::read_dir(fixtures().join(dir)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, into.join(p.file_name().unwrap())).unwrap();
        }
    }
}

/// The plan of `row` as JSON and the exit status.
fn plan(row: &str, extra: &[&str]) -> (Value, i32) {
    let tmp = tempfile::tempdir().unwrap();
    let to = tmp.path().join("to");
    side(row, &to);
    let from = fixtures().join("base");
    let packs = fixtures().join("packs");
    let mut args = vec![
        "plan",
        "--from",
        from.to_str().unwrap(),
        "--to",
        to.to_str().unwrap(),
        "--extensions",
        packs.to_str().unwrap(),
        "--capi-version",
        "1.13",
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = stackhook(&args, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "{row}: {stderr}");
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{row}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    (json, out.status.code().unwrap())
}

fn cluster<'a>(plan: &'a Value, name: &str) -> &'a Value {
    plan["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no Cluster {name} in {plan:#}"))
}

/// `role action` of every changed object.
fn objects(c: &Value) -> Vec<String> {
    c["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            format!(
                "{} {}",
                t["role"].as_str().unwrap(),
                t["action"].as_str().unwrap()
            )
        })
        .collect()
}

/// `target/name effect replicas` of every rollout.
fn rollouts(c: &Value) -> Vec<String> {
    c["rollouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}/{} {} {}",
                r["target"].as_str().unwrap(),
                r["name"].as_str().unwrap(),
                r["effect"].as_str().unwrap(),
                r["replicas"]
            )
        })
        .collect()
}

fn causes(c: &Value) -> Vec<String> {
    c["templates"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["causes"].as_array().unwrap().iter())
        .map(|a| a["cause"].as_str().unwrap().to_string())
        .collect()
}

fn unchanged(plan: &Value, name: &str) {
    assert_eq!(cluster(plan, name)["status"], "unchanged", "{plan:#}");
}

#[test]
fn no_change_is_exit_zero() {
    let (p, code) = plan("base", &[]);
    assert_eq!(code, 0, "{p:#}");
    unchanged(&p, "prod1");
    unchanged(&p, "dev1");
}

#[test]
fn a_pack_variable_of_the_machine_template_rotates_it_and_rolls_the_workers() {
    let (p, code) = plan("worker-flavor", &[]);
    assert_eq!(code, 2);
    let c = cluster(&p, "prod1");
    assert_eq!(
        objects(c),
        ["machineDeployment/md-0/infrastructure rotate"],
        "{c:#}"
    );
    let t = &c["templates"][0];
    assert_eq!(t["kind"], "OpenStackMachineTemplate");
    assert_eq!(t["changes"][0]["path"], "spec.template.spec.flavor");
    assert_eq!(t["changes"][0]["old"], "m1.medium");
    assert_eq!(t["changes"][0]["new"], "m1.large");
    assert_eq!(rollouts(c), ["machineDeployment/md-0 rollout 2"]);
    assert!(causes(c)[0].contains("openstackWorker.flavor"), "{c:#}");
    unchanged(&p, "dev1");
}

#[test]
fn a_pack_variable_of_the_kubeadm_config_template_rotates_only_that() {
    let (p, code) = plan("worker-kubeadm", &[]);
    assert_eq!(code, 2);
    let c = cluster(&p, "prod1");
    assert_eq!(
        objects(c),
        ["machineDeployment/md-0/bootstrap rotate"],
        "{c:#}"
    );
    assert_eq!(c["templates"][0]["kind"], "KubeadmConfigTemplate");
    assert_eq!(rollouts(c), ["machineDeployment/md-0 rollout 2"]);
    assert!(causes(c)[0].contains("kubernetes (MachineDeployment md-0 override)"));
}

#[test]
fn worker_replicas_scale_in_place() {
    let (p, code) = plan("worker-replicas", &[]);
    assert_eq!(code, 3);
    let c = cluster(&p, "prod1");
    assert!(objects(c).is_empty() && rollouts(c).is_empty(), "{c:#}");
    let i = &c["inPlace"][0];
    assert_eq!(
        (&i["effect"], &i["path"], &i["old"], &i["new"]),
        (&"scale".into(), &"replicas".into(), &2.into(), &4.into())
    );
}

#[test]
fn a_label_is_propagated_without_rollout() {
    let (p, code) = plan("worker-labels", &[]);
    assert_eq!(code, 3);
    let c = cluster(&p, "prod1");
    assert!(rollouts(c).is_empty(), "{c:#}");
    assert!(objects(c).iter().all(|o| !o.ends_with(" rotate")), "{c:#}");
    let i = &c["inPlace"][0];
    assert_eq!(i["effect"], "inPlace");
    assert_eq!(i["name"], "md-0");
    assert!(i["path"].as_str().unwrap().starts_with("metadata"));
}

#[test]
fn a_version_upgrade_rolls_control_plane_then_workers_without_rotating_templates() {
    let (p, code) = plan("version-upgrade", &[]);
    assert_eq!(code, 2);
    let c = cluster(&p, "prod1");
    assert_eq!(
        rollouts(c),
        [
            "controlPlane/ upgrade 3",
            "machineDeployment/md-0 upgrade 2"
        ]
    );
    assert_eq!(objects(c), ["controlPlane patch"], "{c:#}");
    assert_eq!(c["templates"][0]["changes"][0]["path"], "spec.version");
}

#[test]
fn an_inline_patch_edit_rotates_every_workers_bootstrap_template() {
    let (p, code) = plan("inline-patch", &[]);
    assert_eq!(code, 2);
    let c = cluster(&p, "dev1");
    assert_eq!(
        objects(c),
        [
            "machineDeployment/md-0/bootstrap rotate",
            "machineDeployment/md-1/bootstrap rotate",
            "machineDeployment/md-2/bootstrap rotate"
        ]
    );
    assert_eq!(
        rollouts(c),
        [
            "machineDeployment/md-0 rollout 2",
            "machineDeployment/md-1 rollout 1",
            "machineDeployment/md-2 rollout 1"
        ]
    );
    assert!(
        causes(c).iter().all(|x| x.contains("patch node-labels")),
        "{c:#}"
    );
    unchanged(&p, "prod1");
}

#[test]
fn a_new_pack_version_rotates_what_the_new_version_writes() {
    let (p, code) = plan("pack-version", &[]);
    assert_eq!(code, 2);
    let c = cluster(&p, "prod1");
    assert_eq!(
        objects(c),
        ["machineDeployment/md-0/infrastructure rotate"],
        "{c:#}"
    );
    assert_eq!(rollouts(c), ["machineDeployment/md-0 rollout 2"]);
    let why = causes(c);
    assert!(
        why[0].contains("openstack-v1-generate-patches")
            && why[0].contains("openstack-v2-generate-patches"),
        "{why:?}"
    );
}

#[test]
fn a_machine_deployment_added_is_created_without_rollout() {
    let (p, code) = plan("md-added", &[]);
    assert_eq!(code, 3);
    let c = cluster(&p, "prod1");
    assert_eq!(c["created"][0]["kind"], "MachineDeployment");
    assert_eq!(c["created"][0]["name"], "md-1");
    assert_eq!(c["created"][0]["replicas"], 3);
    assert!(rollouts(c).is_empty() && objects(c).is_empty(), "{c:#}");
}

#[test]
fn a_variable_that_fails_validation_is_exit_one_with_its_path() {
    let (p, code) = plan("invalid-variable", &[]);
    assert_eq!(code, 1);
    let c = cluster(&p, "prod1");
    assert_eq!(c["status"], "invalid");
    let problem = c["problems"][0].as_str().unwrap();
    assert!(
        problem.starts_with("spec.topology.variables[openstackControlPlane].value.flavor"),
        "{problem}"
    );
}

#[test]
fn the_cluster_flag_narrows_the_plan() {
    let (p, code) = plan("inline-patch", &["--cluster", "prod1"]);
    assert_eq!(code, 0);
    assert_eq!(p["clusters"].as_array().unwrap().len(), 1);
    let out = stackhook(
        &[
            "plan",
            "--from",
            fixtures().join("base").to_str().unwrap(),
            "--to",
            fixtures().join("base").to_str().unwrap(),
            "--cluster",
            "nope",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no Cluster nope"));
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_git_revision_is_the_from_side_and_markdown_is_for_the_pull_request() {
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("skipping: no git");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path();
    let clusters = repo.join("clusters");
    side("base", &clusters);
    git(repo, &["init", "-q"]);
    git(repo, &["add", "."]);
    git(repo, &["commit", "-qm", "base"]);
    side("worker-flavor", &clusters);
    let packs = fixtures().join("packs");
    // `REV` alone takes the path of --to; `REV:PATH` names it.
    for from in ["HEAD", "HEAD:clusters"] {
        let out = stackhook(
            &[
                "plan",
                "--from",
                from,
                "--to",
                "clusters",
                "--extensions",
                packs.to_str().unwrap(),
                "-o",
                "markdown",
            ],
            Some(repo),
        );
        let md = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{from}: {md}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(md.contains("| default/prod1 | openstack-kubeadm | machines roll | MachineDeployment md-0 (2) |"), "{md}");
        assert!(
            md.contains("`spec.template.spec.flavor` | `\"m1.medium\"` → `\"m1.large\"`"),
            "{md}"
        );
    }
    let out = stackhook(
        &["plan", "--from", "no-such-rev", "--to", "clusters"],
        Some(repo),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a revision"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
