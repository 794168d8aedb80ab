//! The plan of the shipped dev-test class and its example Cluster, edited in memory.

use serde_json::Value;

use super::*;
use crate::engine::PackEngine;

const CLASS: &str = include_str!("../../clusterclasses/dev-test.yaml");
const TEMPLATES: &str = include_str!("../../templates/dev-test.yaml");
const CLUSTER: &str = include_str!("../../clusterclasses/examples/dev-test-cluster.yaml");

fn set(cluster: &str) -> ObjectSet {
    let mut docs = Vec::new();
    for (file, text) in [
        ("class", CLASS),
        ("templates", TEMPLATES),
        ("cluster", cluster),
    ] {
        for d in render::yaml_documents(text).unwrap() {
            docs.push((file.to_string(), d));
        }
    }
    ObjectSet::from_documents("test", docs).unwrap()
}

fn plan_of(new_cluster: &str, minor: u16) -> Plan {
    let engine = PackEngine::embedded().unwrap();
    plan(
        &set(CLUSTER),
        &set(new_cluster),
        &engine,
        &Options {
            capi: CapiVersion::new(minor),
            cluster: None,
        },
    )
    .unwrap()
}

fn one(p: &Plan) -> &ClusterPlan {
    assert_eq!(p.clusters.len(), 1, "{p:#?}");
    &p.clusters[0]
}

#[test]
fn the_same_inputs_plan_nothing() {
    let p = plan_of(CLUSTER, 14);
    assert_eq!(one(&p).status, Status::Unchanged, "{p:#?}");
    assert_eq!(p.exit_code(), 0);
}

#[test]
fn an_override_rotates_one_deployments_template_and_names_the_variable() {
    let p = plan_of(
        &CLUSTER.replace("value: m1.xlarge", "value: m1.2xlarge"),
        14,
    );
    let c = one(&p);
    assert_eq!(p.exit_code(), 2, "{p:#?}");
    let roles: Vec<&str> = c.templates.iter().map(|t| t.role.as_str()).collect();
    assert_eq!(roles, ["machineDeployment/md-1/infrastructure"], "{c:#?}");
    let t = &c.templates[0];
    assert_eq!(t.action, Action::Rotate);
    assert_eq!(t.changes[0].path, "spec.template.spec.flavor");
    assert_eq!(t.changes[0].new, Some(Value::from("m1.2xlarge")));
    assert!(t.causes[0].cause.contains("workerFlavor"), "{t:#?}");
    assert_eq!(c.rollouts.len(), 1);
    assert_eq!(
        (c.rollouts[0].name.as_str(), c.rollouts[0].replicas),
        ("md-1", Some(1))
    );
}

#[test]
fn replicas_are_a_scale_without_rollout() {
    let p = plan_of(&CLUSTER.replacen("replicas: 2", "replicas: 5", 1), 13);
    let c = one(&p);
    assert_eq!(p.exit_code(), 3, "{p:#?}");
    assert!(c.rollouts.is_empty());
    assert_eq!(c.in_place.len(), 1);
    assert_eq!(c.in_place[0].effect, Effect::Scale);
    assert_eq!(c.in_place[0].name, "md-0");
}

#[test]
fn a_version_upgrade_rolls_the_control_plane_then_every_deployment() {
    let p = plan_of(&CLUSTER.replace("version: v1.33.1", "version: v1.34.0"), 12);
    let c = one(&p);
    assert_eq!(p.exit_code(), 2);
    let targets: Vec<(&str, &str, Effect)> = c
        .rollouts
        .iter()
        .map(|r| (r.target.as_str(), r.name.as_str(), r.effect))
        .collect();
    assert_eq!(
        targets,
        [
            ("controlPlane", "", Effect::Upgrade),
            ("machineDeployment", "md-0", Effect::Upgrade),
            ("machineDeployment", "md-1", Effect::Upgrade),
            ("machineDeployment", "md-2", Effect::Upgrade),
        ],
        "{c:#?}"
    );
}

#[test]
fn a_variable_that_fails_validation_makes_the_plan_invalid() {
    let p = plan_of(
        &CLUSTER.replace("value: [10.0.0.2, 10.0.0.3]", "value: 7"),
        14,
    );
    let c = one(&p);
    assert_eq!(c.status, Status::Invalid);
    assert!(
        c.problems.iter().any(|p| p.contains("dnsNameservers")),
        "{c:#?}"
    );
    assert_eq!(p.exit_code(), 1);
}

#[test]
fn a_deployment_added_and_one_removed() {
    let edited = CLUSTER.replace("name: md-2", "name: md-3");
    let p = plan_of(&edited, 14);
    let c = one(&p);
    assert_eq!(c.created.len(), 1, "{c:#?}");
    assert_eq!(c.created[0].name, "md-3");
    assert_eq!(c.deleted.len(), 1);
    assert_eq!(c.deleted[0].name, "md-2");
    assert_eq!(p.exit_code(), 3);
}
