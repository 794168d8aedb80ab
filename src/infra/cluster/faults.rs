//! Fault tests of the cluster reconcile against the in-memory cloud of
//! `fake.rs`: a failed or lost write anywhere in the flow, a lost status
//! write, conflicts and busy load balancers. Each pass runs as the controller
//! runs it: the status it keeps is the last one written (or the outcome's),
//! a transient error means "again, later".

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::OsError;

use super::fake::{Calls, Effect, FakeCloud, Fault, Op};
use super::{CloudSource, OpenStackClusterInfra, PlatformConfig};
use crate::infra::api::cluster::{
    ApiServerLoadBalancer, Bastion, ManagedSecurityGroups, SubnetSpec,
};
use crate::infra::api::extensions::{ClusterSpecExtensions, IngressVipSpec, LoadBalancersSpec};
use crate::infra::api::machine::OpenStackMachineSpec;
use crate::infra::api::names::{conditions as cond, ClusterNames, SecurityGroupRole};
use crate::infra::api::types::{ApiEndpoint, ImageFilter, ImageParam};
use crate::infra::api::{OpenStackCluster, OpenStackClusterSpec, OpenStackClusterStatus};
use crate::infra::seam::{
    ClusterInfra, ClusterScope, DeleteProgress, IdentitySecret, InfraError, SinkError, StatusSink,
};

impl CloudSource for Arc<FakeCloud> {
    type Clients = FakeCloud;

    fn clients_for(&self, _: &IdentitySecret) -> Result<Arc<FakeCloud>, OsError> {
        Ok(self.clone())
    }
}

const NAMESPACE: &str = "ns";
const CLUSTER: &str = "c1";

/// Everything the flow can create: managed network with router, the three
/// security groups, a load balancer with two ports, the API floating IP,
/// the ingress VIP and a bastion with its floating IP.
fn full_spec() -> OpenStackClusterSpec {
    OpenStackClusterSpec {
        managed_subnets: vec![SubnetSpec {
            cidr: "10.6.0.0/24".into(),
            dns_nameservers: vec!["192.0.2.53".into()],
            allocation_pools: vec![],
        }],
        managed_security_groups: Some(ManagedSecurityGroups::default()),
        api_server_load_balancer: Some(Box::new(ApiServerLoadBalancer {
            additional_ports: vec![22623],
            allowed_cidrs: vec!["192.0.2.0/24".into()],
            ..Default::default()
        })),
        bastion: Some(Box::new(Bastion {
            spec: Some(OpenStackMachineSpec {
                flavor: Some("m1.small".into()),
                image: ImageParam {
                    filter: Some(ImageFilter {
                        name: Some("ubuntu".into()),
                        tags: vec!["k8s".into()],
                    }),
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        })),
        tags: vec!["team-a".into()],
        extensions: Some(Box::new(ClusterSpecExtensions {
            load_balancers: Some(LoadBalancersSpec {
                ingress: Some(IngressVipSpec {
                    enabled: Some(true),
                }),
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// Status writes in memory; the `fail_at`-th write of the whole run fails,
/// as a crash between a create and its status write would.
#[derive(Default)]
struct Sink {
    saved: Mutex<Option<OpenStackClusterStatus>>,
    writes: Arc<AtomicUsize>,
    fail_at: Option<usize>,
}

impl StatusSink for Sink {
    async fn save(&self, status: &OpenStackClusterStatus) -> Result<(), SinkError> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        if self.fail_at == Some(n) {
            return Err(SinkError("injected: status write lost".into()));
        }
        *self.saved.lock().unwrap() = Some(status.clone());
        Ok(())
    }
}

/// How one pass ended.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    Requeue(Duration),
    Converged,
    Transient {
        reason: String,
        retry_after: Option<Duration>,
    },
    User(String),
    SinkFailed,
    Deleted,
}

struct Run {
    cloud: Arc<FakeCloud>,
    infra: OpenStackClusterInfra<Arc<FakeCloud>>,
    osc: OpenStackCluster,
    sink_writes: Arc<AtomicUsize>,
    sink_fail_at: Option<usize>,
}

impl Run {
    fn new(spec: OpenStackClusterSpec) -> Self {
        let cloud = Arc::new(FakeCloud::new());
        let mut osc = OpenStackCluster::new(CLUSTER, spec);
        osc.metadata.namespace = Some(NAMESPACE.into());
        Self {
            infra: OpenStackClusterInfra::with_clouds(PlatformConfig::default(), cloud.clone()),
            cloud,
            osc,
            sink_writes: Arc::default(),
            sink_fail_at: None,
        }
    }

    fn sink(&self) -> Sink {
        Sink {
            saved: Mutex::new(None),
            writes: self.sink_writes.clone(),
            fail_at: self.sink_fail_at,
        }
    }

    fn scope(&self) -> ClusterScope {
        ClusterScope {
            namespace: NAMESPACE.into(),
            cluster_name: CLUSTER.into(),
            machines_remaining: 0,
        }
    }

    fn identity() -> IdentitySecret {
        IdentitySecret {
            namespace: NAMESPACE.into(),
            name: "creds".into(),
            resource_version: "1".into(),
            clouds_yaml: Vec::new().into(),
            cacert: None,
            cloud_name: "fake".into(),
            region: None,
        }
    }

    fn status(&self) -> OpenStackClusterStatus {
        self.osc.status.clone().unwrap_or_default()
    }

    /// One reconcile pass; the object keeps what the controller would.
    async fn pass(&mut self) -> Step {
        let sink = self.sink();
        let result = self
            .infra
            .reconcile(&self.scope(), &self.osc, &Self::identity(), &sink)
            .await;
        let saved = sink.saved.lock().unwrap().take();
        match result {
            Ok(outcome) => {
                self.osc.status = Some(outcome.status);
                if let Some((host, port)) = outcome.control_plane_endpoint {
                    self.osc.spec.control_plane_endpoint =
                        Some(Box::new(ApiEndpoint { host, port }));
                }
                match outcome.requeue_after {
                    Some(after) => Step::Requeue(after),
                    None => Step::Converged,
                }
            }
            Err(e) => {
                if saved.is_some() {
                    self.osc.status = saved;
                }
                step_of(e)
            }
        }
    }

    /// Passes until one converges or fails for the user; all their steps.
    async fn converge(&mut self) -> Vec<Step> {
        let mut steps = Vec::new();
        for _ in 0..60 {
            let step = self.pass().await;
            let done = matches!(step, Step::Converged | Step::User(_));
            steps.push(step);
            if done {
                return steps;
            }
        }
        panic!("no convergence: {steps:?}");
    }

    /// Delete passes until done.
    async fn delete(&mut self) -> Vec<Step> {
        let mut steps = Vec::new();
        for _ in 0..60 {
            let sink = self.sink();
            let step = match self
                .infra
                .delete(&self.scope(), &self.osc, &Self::identity(), &sink)
                .await
            {
                Ok(DeleteProgress::Done) => Step::Deleted,
                Ok(DeleteProgress::Requeue { after, .. }) => Step::Requeue(after),
                Err(e) => step_of(e),
            };
            if let Some(s) = sink.saved.lock().unwrap().take() {
                self.osc.status = Some(s);
            }
            let done = step == Step::Deleted;
            steps.push(step);
            if done {
                return steps;
            }
        }
        panic!("deletion did not finish: {steps:?}");
    }
}

fn step_of(e: InfraError) -> Step {
    match e {
        InfraError::Transient {
            reason,
            retry_after,
            ..
        } => Step::Transient {
            reason,
            retry_after,
        },
        InfraError::User { reason, message } => {
            eprintln!("user error: {reason}: {message}");
            Step::User(reason)
        }
        InfraError::Sink(_) => Step::SinkFailed,
    }
}

fn count(cloud: &FakeCloud, kind: &str, pred: impl Fn(&Value) -> bool) -> usize {
    cloud.objects(kind).iter().filter(|o| pred(o)).count()
}

fn named(name: &str) -> impl Fn(&Value) -> bool + '_ {
    move |o| o["name"] == name
}

/// Exactly one of everything `full_spec` asks for, and a ready status that
/// records each of them.
fn assert_one_of_each(run: &Run, context: &str) {
    let names = ClusterNames::new(NAMESPACE, CLUSTER);
    let cloud = &run.cloud;
    let net_name = names.network_name();
    let one = |kind: &str, pred: &dyn Fn(&Value) -> bool, what: &str| {
        let n = count(cloud, kind, pred);
        assert_eq!(n, 1, "{context}: {n} {what}");
    };
    one("networks", &named(&net_name), "networks");
    one("subnets", &named(&net_name), "subnets");
    one("routers", &named(&net_name), "routers");
    one(
        "ports",
        &|p| p["device_owner"] == "network:router_interface",
        "router interfaces",
    );
    for role in [
        SecurityGroupRole::ControlPlane,
        SecurityGroupRole::Worker,
        SecurityGroupRole::Bastion,
    ] {
        one(
            "security-groups",
            &named(&names.security_group_name(role)),
            "security groups",
        );
    }
    one(
        "loadbalancers",
        &named(&names.load_balancer_name()),
        "load balancers",
    );
    assert_eq!(
        count(cloud, "listeners", |_| true),
        2,
        "{context}: listeners"
    );
    assert_eq!(count(cloud, "pools", |_| true), 2, "{context}: pools");
    assert_eq!(
        count(cloud, "healthmonitors", |_| true),
        2,
        "{context}: health monitors"
    );
    assert_eq!(
        count(cloud, "floatingips", |_| true),
        2,
        "{context}: floating IPs (API and bastion)"
    );
    one(
        "ports",
        &named(&names.ingress_vip_port_name()),
        "ingress VIP ports",
    );
    one(
        "ports",
        &named(&format!("{}-0", names.bastion_name())),
        "bastion ports",
    );
    one("servers", &named(&names.bastion_name()), "bastion servers");

    let status = run.status();
    assert!(status.ready, "{context}: not ready");
    let lb = status.api_server_load_balancer.unwrap_or_default();
    assert_eq!(
        cloud.objects("loadbalancers")[0]["id"],
        lb.id,
        "{context}: status names another load balancer"
    );
    let bastion = status.bastion.unwrap_or_default();
    assert_eq!(
        bastion.id.as_deref(),
        cloud.objects("servers")[0]["id"].as_str(),
        "{context}: status names another bastion server"
    );
    assert!(
        bastion.floating_ip.is_some(),
        "{context}: bastion has no FIP"
    );
}

/// After convergence a further pass changes nothing in the cloud.
async fn assert_settled(run: &mut Run, context: &str) {
    let before = run.cloud.writes();
    assert_eq!(run.pass().await, Step::Converged, "{context}");
    assert_eq!(
        run.cloud.writes(),
        before,
        "{context}: a converged pass wrote"
    );
}

/// Deletion finishes and leaves nothing the cluster created.
async fn assert_deleted_cleanly(run: &mut Run, context: &str) {
    run.delete().await;
    assert_eq!(
        run.cloud.leftovers(),
        Vec::<String>::new(),
        "{context}: left behind"
    );
}

/// The steps that failed transiently. Every fault injected here is one a
/// retry gets past, so a user error fails the test.
fn transient_steps(steps: &[Step]) -> usize {
    steps
        .iter()
        .filter(|s| {
            assert!(
                !matches!(s, Step::User(_)),
                "a transient fault became a user error: {steps:?}"
            );
            matches!(s, Step::Transient { .. } | Step::SinkFailed)
        })
        .count()
}

async fn baseline() -> (usize, usize) {
    let mut run = Run::new(full_spec());
    let steps = run.converge().await;
    assert_eq!(transient_steps(&steps), 0, "{steps:?}");
    assert_one_of_each(&run, "without faults");
    let writes = run.cloud.writes();
    let saves = run.sink_writes.load(Ordering::SeqCst);
    assert_settled(&mut run, "without faults").await;
    assert_deleted_cleanly(&mut run, "without faults").await;
    (writes, saves)
}

#[tokio::test]
async fn every_write_of_the_flow_may_fail_or_lose_its_answer() {
    let (writes, _) = baseline().await;
    assert!(writes > 30, "the flow made only {writes} writes");
    for effect in [Effect::Status(503), Effect::Status(409), Effect::LoseAnswer] {
        for n in 1..=writes {
            let context = format!("{effect:?} on write {n}");
            let mut run = Run::new(full_spec());
            run.cloud.inject(Fault::nth(Calls::Writes, n, effect));
            let steps = run.converge().await;
            assert_eq!(run.cloud.fired(), 1, "{context}: fault did not fire");
            assert_eq!(transient_steps(&steps), 1, "{context}: {steps:?}");
            assert_one_of_each(&run, &context);
            assert_settled(&mut run, &context).await;
            assert_deleted_cleanly(&mut run, &context).await;
        }
    }
}

/// What another controller made and recorded in the status (CAPO, before a
/// takeover) carries the user's tags but not ours: a pass adopts it with no write.
/// What the status does not record, found by name, still gets the owner tag.
#[tokio::test]
async fn recorded_resources_without_the_owner_tag_are_adopted_without_a_write() {
    const KINDS: [&str; 4] = ["networks", "subnets", "routers", "security-groups"];
    let mut run = Run::new(full_spec());
    run.converge().await;
    let own = super::owner_tag(&ClusterNames::new(NAMESPACE, CLUSTER));
    let has = |o: &Value, tag: &str| {
        o["tags"]
            .as_array()
            .is_some_and(|t| t.contains(&Value::from(tag)))
    };
    for kind in KINDS {
        assert!(
            run.cloud.created(kind).iter().all(|o| has(o, &own)),
            "{kind}: made without the owner tag"
        );
        run.cloud.untag(kind, &own);
    }
    assert_settled(&mut run, "recorded, without the owner tag").await;
    for kind in KINDS {
        let made = run.cloud.created(kind);
        assert!(!made.is_empty(), "{kind}");
        assert!(
            made.iter().all(|o| !has(o, &own) && has(o, "team-a")),
            "{kind}: {made:?}"
        );
    }
    // The network forgotten by the status, as after a crash between its create and
    // the status write: found by name, it gets the owner tag.
    let mut status = run.status();
    status.network = None;
    run.osc.status = Some(status);
    assert_eq!(run.pass().await, Step::Converged);
    let net = run.cloud.created("networks");
    assert!(net.iter().all(|o| has(o, &own)), "{net:?}");
    assert_deleted_cleanly(&mut run, "after the adoption").await;
}

#[tokio::test]
async fn a_lost_status_write_after_any_create_adopts_what_was_created() {
    let (_, saves) = baseline().await;
    assert!(saves > 10, "only {saves} status writes");
    for n in 1..=saves {
        let context = format!("status write {n} lost");
        let mut run = Run::new(full_spec());
        run.sink_fail_at = Some(n);
        let steps = run.converge().await;
        assert_eq!(transient_steps(&steps), 1, "{context}: {steps:?}");
        assert!(steps.contains(&Step::SinkFailed), "{context}: {steps:?}");
        assert_one_of_each(&run, &context);
        assert_settled(&mut run, &context).await;
        assert_deleted_cleanly(&mut run, &context).await;
    }
}

#[tokio::test]
async fn every_delete_may_conflict_or_lose_its_answer_and_nothing_leaks() {
    let mut clean = Run::new(full_spec());
    clean.converge().await;
    let before = clean.cloud.writes();
    clean.delete().await;
    let deletes = clean.cloud.writes() - before;
    assert!(deletes > 10, "deletion made only {deletes} writes");
    for effect in [Effect::Status(409), Effect::Status(500), Effect::LoseAnswer] {
        for n in 1..=deletes {
            let context = format!("{effect:?} on deletion write {n}");
            let mut run = Run::new(full_spec());
            run.converge().await;
            run.cloud.inject(Fault::nth(Calls::Writes, n, effect));
            let steps = run.delete().await;
            assert_eq!(run.cloud.fired(), 1, "{context}: fault did not fire");
            assert!(
                steps.iter().all(|s| !matches!(s, Step::User(_))),
                "{context}: {steps:?}"
            );
            assert_eq!(run.cloud.leftovers(), Vec::<String>::new(), "{context}");
        }
    }
}

#[tokio::test]
async fn a_conflict_on_a_security_group_delete_is_retried_after_the_rest_is_gone() {
    let mut run = Run::new(full_spec());
    run.converge().await;
    run.cloud.inject(Fault::nth(
        Calls::Of(Op::Delete, "security-groups"),
        1,
        Effect::Status(409),
    ));
    let steps = run.delete().await;
    let (done, rest) = steps.split_last().unwrap();
    assert_eq!(*done, Step::Deleted);
    assert_eq!(
        rest.last(),
        Some(&Step::Transient {
            reason: "DeleteFailed".into(),
            retry_after: None
        }),
        "{steps:?}"
    );
    // Before it: the waits for the bastion server and the load balancer.
    assert!(rest[..rest.len() - 1]
        .iter()
        .all(|s| matches!(s, Step::Requeue(_))));
    assert_eq!(run.cloud.leftovers(), Vec::<String>::new());
}

#[tokio::test]
async fn a_failed_delete_pass_keeps_its_progress() {
    let mut run = Run::new(full_spec());
    run.converge().await;
    run.cloud.inject(Fault::nth(
        Calls::Of(Op::Delete, "security-groups"),
        2,
        Effect::Status(409),
    ));
    let scope = run.scope();
    let mut failed = false;
    for _ in 0..10 {
        let sink = run.sink();
        match run
            .infra
            .delete(&scope, &run.osc, &Run::identity(), &sink)
            .await
        {
            Err(InfraError::Transient { reason, .. }) => {
                assert_eq!(reason, "DeleteFailed");
                failed = true;
                break;
            }
            Ok(DeleteProgress::Requeue { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(failed);
    // The network side went before the security groups; one group is gone too.
    for kind in [
        "loadbalancers",
        "floatingips",
        "routers",
        "networks",
        "servers",
    ] {
        assert_eq!(run.cloud.created(kind), Vec::<Value>::new(), "{kind}");
    }
    assert_eq!(run.cloud.created("security-groups").len(), 2);
    assert_eq!(run.delete().await, vec![Step::Deleted]);
    assert_eq!(run.cloud.leftovers(), Vec::<String>::new());
}

#[tokio::test]
async fn a_lost_answer_to_the_load_balancer_create_adopts_it_by_name() {
    let mut run = Run::new(full_spec());
    run.cloud.inject(Fault::nth(
        Calls::Of(Op::Create, "loadbalancers"),
        1,
        Effect::LoseAnswer,
    ));
    let steps = run.converge().await;
    assert_eq!(
        steps.iter().filter(|s| matches!(s, Step::Transient { reason, .. } if reason == "APIEndpointConfigFailed")).count(),
        1,
        "{steps:?}"
    );
    assert_eq!(run.cloud.fired(), 1);
    assert_one_of_each(&run, "lost load balancer answer");
}

#[tokio::test]
async fn a_lost_answer_to_the_bastion_server_create_boots_no_second_server() {
    let mut run = Run::new(full_spec());
    run.cloud.set_nova_busy_reads(2);
    run.cloud.inject(Fault::nth(
        Calls::Of(Op::Create, "servers"),
        1,
        Effect::LoseAnswer,
    ));
    let steps = run.converge().await;
    assert!(
        steps.contains(&Step::Transient {
            reason: "BastionCreateFailed".into(),
            retry_after: None
        }),
        "{steps:?}"
    );
    assert_one_of_each(&run, "lost server answer");
}

/// A machine field the bastion does not boot with is refused by name before its
/// port or server is made; without it, a group named by filter (two share the
/// name, the description tells them apart) goes on the bastion's port.
#[tokio::test]
async fn a_bastion_field_it_cannot_honour_is_refused_before_its_port() {
    let mut spec = full_spec();
    if let Some(b) = spec.bastion.as_mut().and_then(|b| b.spec.as_mut()) {
        b.root_volume = Some(Box::default());
        b.security_groups = vec![serde_json::from_value(serde_json::json!(
            {"filter": {"name": "jump", "description": "ops"}}))
        .unwrap()];
    }
    let mut run = Run::new(spec);
    let mut ids = Vec::new();
    for description in ["ops", "other"] {
        let g: net::SecurityGroup = Networking::create(
            &*run.cloud,
            serde_json::json!({"name": "jump", "description": description}),
        )
        .await
        .unwrap();
        ids.push(g.id);
    }
    let steps = run.converge().await;
    match steps.last() {
        Some(Step::User(reason)) => assert_eq!(reason, "InvalidBastionSpec", "{steps:?}"),
        other => panic!("{other:?} in {steps:?}"),
    }
    let ready = run
        .status()
        .conditions
        .into_iter()
        .find(|c| c.type_ == cond::READY)
        .expect("Ready");
    assert!(
        ready
            .message
            .as_deref()
            .is_some_and(|m| m.contains("spec.bastion.spec.rootVolume")),
        "{ready:?}"
    );
    let bastion_port = format!("{}-0", ClusterNames::new(NAMESPACE, CLUSTER).bastion_name());
    assert!(run
        .cloud
        .objects("ports")
        .iter()
        .all(|p| p["name"] != bastion_port.as_str()));
    assert!(run.cloud.objects("servers").is_empty());

    if let Some(b) = run.osc.spec.bastion.as_mut().and_then(|b| b.spec.as_mut()) {
        b.root_volume = None;
    }
    let steps = run.converge().await;
    assert_eq!(steps.last(), Some(&Step::Converged), "{steps:?}");
    let ports = run.cloud.objects("ports");
    let port = ports
        .iter()
        .find(|p| p["name"] == bastion_port.as_str())
        .expect("the bastion's port");
    let groups = port["security_groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(groups.contains(&serde_json::json!(ids[0])), "{port}");
    assert!(!groups.contains(&serde_json::json!(ids[1])), "{port}");
}

/// As CAPO: the API listeners' allowed CIDRs take the bastion's addresses beside the
/// spec's, the subnet's and the router's, so the bastion reaches the API.
#[tokio::test]
async fn the_api_listeners_let_the_bastion_in() {
    let mut run = Run::new(full_spec());
    let steps = run.converge().await;
    assert_eq!(steps.last(), Some(&Step::Converged), "{steps:?}");
    let bastion = run.status().bastion.expect("bastion status");
    let fip = bastion.floating_ip.expect("bastion floating IP");
    let ip = bastion.ip.expect("bastion IP");
    let listeners = run.cloud.objects("listeners");
    assert!(!listeners.is_empty());
    for l in &listeners {
        let allowed: Vec<&str> = l["allowed_cidrs"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for want in [
            "192.0.2.0/24".to_owned(),
            format!("{fip}/32"),
            format!("{ip}/32"),
        ] {
            assert!(
                allowed.contains(&want.as_str()),
                "{want} not in {allowed:?}"
            );
        }
    }
    assert_settled(&mut run, "bastion addresses allowed").await;
}

#[tokio::test]
async fn a_busy_load_balancer_requeues_the_pass_and_is_never_written_to() {
    // Fully populated: one create, then the waits for that one change; step
    // by step (a provider refusing the populated create): a listener, pool
    // and monitor per port, each change waited for.
    for (populated, min_waits) in [(true, 3), (false, 7)] {
        let mut run = Run::new(full_spec());
        run.cloud.set_octavia_busy_reads(2);
        if !populated {
            run.cloud.refuse_populated();
        }
        let steps = run.converge().await;
        // A write to a PENDING_* load balancer would have been a 409, a transient step.
        assert_eq!(transient_steps(&steps), 0, "{steps:?}");
        let (last, waiting) = steps.split_last().unwrap();
        assert_eq!(*last, Step::Converged);
        assert!(waiting.len() >= min_waits, "{steps:?}");
        assert!(waiting
            .iter()
            .all(|s| *s == Step::Requeue(Duration::from_secs(2))));
        assert_one_of_each(&run, &format!("busy Octavia, populated: {populated}"));
    }
}

/// The listeners, pools and monitors as stored, without what differs
/// between two clouds (IDs and the references between them).
fn octavia_children(cloud: &FakeCloud) -> Vec<Value> {
    let mut all = Vec::new();
    for kind in ["listeners", "pools", "healthmonitors"] {
        let mut objs: Vec<Value> = cloud
            .objects(kind)
            .into_iter()
            .map(|mut o| {
                if let Some(o) = o.as_object_mut() {
                    for key in [
                        "id",
                        "loadbalancer_id",
                        "listener_id",
                        "pool_id",
                        "healthmonitor_id",
                    ] {
                        o.remove(key);
                    }
                }
                o
            })
            .collect();
        objs.sort_by_key(|o| o.to_string());
        all.push(json!({ kind: objs }));
    }
    all
}

#[tokio::test]
async fn a_new_load_balancer_is_created_fully_populated_as_the_steps_would_make_it() {
    let mut run = Run::new(full_spec());
    let steps = run.converge().await;
    assert_eq!(transient_steps(&steps), 0, "{steps:?}");
    assert_one_of_each(&run, "populated");
    for kind in ["listeners", "pools", "healthmonitors"] {
        assert_eq!(run.cloud.writes_of(Op::Create, kind), 0, "{kind}");
    }
    assert_eq!(run.cloud.writes_of(Op::Create, "loadbalancers"), 1);
    // Once per listener: the bastion's addresses join the allowed CIDRs when it has
    // them, after the load balancer was made.
    assert_eq!(run.cloud.writes_of(Op::Update, "listeners"), 2);

    // The same objects, field for field, as the step-by-step path makes.
    let mut steps_run = Run::new(full_spec());
    steps_run.cloud.refuse_populated();
    steps_run.converge().await;
    assert_one_of_each(&steps_run, "step by step");
    assert_eq!(steps_run.cloud.writes_of(Op::Create, "listeners"), 2);
    assert_eq!(
        octavia_children(&run.cloud),
        octavia_children(&steps_run.cloud)
    );
    let listener = &run.cloud.objects("listeners")[0];
    assert_eq!(
        listener["tags"],
        json!([
            "team-a",
            ClusterNames::new(NAMESPACE, CLUSTER).network_name()
        ])
    );
    assert!(listener["allowed_cidrs"]
        .as_array()
        .is_some_and(|a| a.contains(&json!("192.0.2.0/24"))));

    assert_settled(&mut run, "populated").await;
    assert_deleted_cleanly(&mut run, "populated").await;
}

#[tokio::test]
async fn a_populated_create_followed_by_a_normal_pass_makes_zero_writes() {
    // No bastion, API floating IP or ingress VIP: the load balancer is the
    // last thing the first pass creates.
    let mut spec = full_spec();
    spec.bastion = None;
    spec.disable_api_server_floating_ip = Some(true);
    spec.extensions = None;
    let mut run = Run::new(spec);
    assert_eq!(run.pass().await, Step::Requeue(Duration::from_secs(2)));
    assert_eq!(run.cloud.writes_of(Op::Create, "loadbalancers"), 1);
    let created = run.cloud.writes();
    assert_eq!(run.pass().await, Step::Converged);
    assert_eq!(
        run.cloud.writes(),
        created,
        "the pass after the create wrote"
    );
    assert!(run.status().ready);
    assert_eq!(count(&run.cloud, "listeners", |_| true), 2);
    assert_eq!(count(&run.cloud, "healthmonitors", |_| true), 2);
}

#[tokio::test]
async fn a_crash_after_the_populated_load_balancer_create_adds_nothing_to_it() {
    for effect in [Effect::LoseAnswer, Effect::Status(503)] {
        let context = format!("{effect:?} on the populated create");
        let mut run = Run::new(full_spec());
        run.cloud.set_octavia_busy_reads(1);
        run.cloud.inject(Fault::nth(
            Calls::Of(Op::Create, "loadbalancers"),
            1,
            effect,
        ));
        let steps = run.converge().await;
        assert_eq!(transient_steps(&steps), 1, "{context}: {steps:?}");
        assert_one_of_each(&run, &context);
        for kind in ["listeners", "pools", "healthmonitors"] {
            assert_eq!(
                run.cloud.writes_of(Op::Create, kind),
                0,
                "{context}: {kind}"
            );
        }
        assert_settled(&mut run, &context).await;
        assert_deleted_cleanly(&mut run, &context).await;
    }
}

#[tokio::test]
async fn a_listener_missing_from_an_existing_load_balancer_is_added_step_by_step() {
    let mut run = Run::new(full_spec());
    run.converge().await;
    // Someone deleted the additional port's listener (and with it its pool).
    let names = ClusterNames::new(NAMESPACE, CLUSTER);
    let gone = names.load_balancer_port_name(22623);
    let cloud = &run.cloud;
    let listener = cloud
        .objects("listeners")
        .into_iter()
        .find(|l| l["name"] == gone.as_str())
        .unwrap();
    let before = octavia_children(cloud);
    cloud.remove("listeners", listener["id"].as_str().unwrap());
    for kind in ["pools", "healthmonitors"] {
        for o in cloud.objects(kind) {
            if o["name"] == gone.as_str() {
                cloud.remove(kind, o["id"].as_str().unwrap());
            }
        }
    }
    let steps = run.converge().await;
    assert_eq!(transient_steps(&steps), 0, "{steps:?}");
    assert_eq!(run.cloud.writes_of(Op::Create, "loadbalancers"), 1);
    for kind in ["listeners", "pools", "healthmonitors"] {
        assert_eq!(run.cloud.writes_of(Op::Create, kind), 1, "{kind}");
    }
    assert_eq!(octavia_children(&run.cloud), before);
    assert_settled(&mut run, "repaired").await;
}

/// The rules of every group, as (group name, rule fields) without IDs.
fn rules_by_group(cloud: &FakeCloud) -> Vec<String> {
    let groups = cloud.objects("security-groups");
    let mut all: Vec<String> = cloud
        .objects("security-group-rules")
        .into_iter()
        .map(|mut r| {
            let group = groups
                .iter()
                .find(|g| g["id"] == r["security_group_id"])
                .map(|g| g["name"].clone())
                .unwrap_or_default();
            let ids: Vec<(Value, Value)> = groups
                .iter()
                .map(|g| (g["id"].clone(), g["name"].clone()))
                .collect();
            if let Some(o) = r.as_object_mut() {
                o.remove("id");
                o.remove("security_group_id");
                if let Some((_, name)) = ids
                    .iter()
                    .find(|(id, _)| o.get("remote_group_id") == Some(id))
                {
                    o.insert("remote_group_id".into(), name.clone());
                }
            }
            format!("{group} {r}")
        })
        .collect();
    all.sort();
    all
}

#[tokio::test]
async fn the_rules_of_each_group_are_created_in_one_request() {
    let mut run = Run::new(full_spec());
    let steps = run.converge().await;
    assert_eq!(transient_steps(&steps), 0, "{steps:?}");
    // Control plane, worker, bastion: one request each.
    assert_eq!(run.cloud.writes_of(Op::Create, "security-group-rules"), 3);
    let rules = rules_by_group(&run.cloud).len();
    assert!(rules > 12, "only {rules} rules");
    assert_settled(&mut run, "bulk rules").await;
}

#[tokio::test]
async fn neutron_refusing_bulk_requests_gets_the_same_rules_one_by_one() {
    let mut bulk = Run::new(full_spec());
    bulk.converge().await;
    let mut run = Run::new(full_spec());
    run.cloud.refuse_bulk();
    let steps = run.converge().await;
    assert_eq!(transient_steps(&steps), 0, "{steps:?}");
    let rules = rules_by_group(&run.cloud);
    assert_eq!(rules, rules_by_group(&bulk.cloud));
    // Neutron's two egress rules per new group are replaced by CAPO's, described.
    assert_eq!(
        run.cloud.writes_of(Op::Create, "security-group-rules"),
        rules.len()
    );
    assert_eq!(run.cloud.writes_of(Op::Delete, "security-group-rules"), 6);
    assert_one_of_each(&run, "no bulk");
    assert_settled(&mut run, "no bulk").await;
    assert_deleted_cleanly(&mut run, "no bulk").await;
}

#[tokio::test]
async fn a_crash_after_a_bulk_rule_create_creates_no_rule_twice() {
    let mut clean = Run::new(full_spec());
    clean.converge().await;
    let wanted = rules_by_group(&clean.cloud);
    for n in 1..=3 {
        for effect in [Effect::LoseAnswer, Effect::Status(409), Effect::Status(503)] {
            let context = format!("{effect:?} on bulk rule create {n}");
            let mut run = Run::new(full_spec());
            run.cloud.inject(Fault::nth(
                Calls::Of(Op::Create, "security-group-rules"),
                n,
                effect,
            ));
            let steps = run.converge().await;
            assert_eq!(run.cloud.fired(), 1, "{context}");
            // A duplicate would have been Neutron's 409, a second transient step.
            assert_eq!(transient_steps(&steps), 1, "{context}: {steps:?}");
            assert_eq!(rules_by_group(&run.cloud), wanted, "{context}");
            assert_one_of_each(&run, &context);
            assert_settled(&mut run, &context).await;
            assert_deleted_cleanly(&mut run, &context).await;
        }
    }
}

#[tokio::test]
async fn the_fake_refuses_what_neutron_and_octavia_refuse_in_bulk_and_nested_creates() {
    use stackhook_openstack::loadbalancing::{self as lb, LoadBalancing};
    let mut run = Run::new(full_spec());
    run.converge().await;
    let cloud = &run.cloud;
    let status = run.status();
    let cp = status.control_plane_security_group.unwrap().id;
    let wk = status.worker_security_group.unwrap().id;
    let rule = |group: &str, port: i64| {
        json!({"security_group_id": group, "direction": "ingress", "ethertype": "IPv4",
            "protocol": "tcp", "port_range_min": port, "port_range_max": port})
    };
    let before = cloud.objects("security-group-rules").len();
    let status_of = |e: OsError| e.status();
    // Two groups in one request.
    let e = cloud
        .create_security_group_rules(vec![rule(&cp, 1), rule(&wk, 1)])
        .await
        .unwrap_err();
    assert_eq!(status_of(e), Some(400));
    // One existing rule: none of the others is created.
    let e = cloud
        .create_security_group_rules(vec![rule(&cp, 2), rule(&cp, 6443)])
        .await
        .unwrap_err();
    assert_eq!(status_of(e), Some(409));
    let e = cloud.create_security_group_rules(vec![]).await.unwrap_err();
    assert_eq!(status_of(e), Some(400));
    assert_eq!(cloud.objects("security-group-rules").len(), before);

    // Parent IDs are not taken inside a populated create.
    let subnet = status.network.unwrap().subnets[0].id.clone();
    for listener in [
        json!({"name": "x", "protocol": "TCP", "protocol_port": 1, "loadbalancer_id": "lb"}),
        json!({"name": "x", "protocol": "TCP", "protocol_port": 1,
            "default_pool": {"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN", "listener_id": "l"}}),
        json!({"name": "x", "protocol": "TCP", "protocol_port": 1,
            "default_pool": {"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
                "healthmonitor": {"type": "TCP", "delay": 1, "timeout": 1, "max_retries": 1,
                    "pool_id": "p"}}}),
        json!({"name": "x", "protocol": "TCP"}),
    ] {
        let e = LoadBalancing::create::<lb::LoadBalancer>(
            &**cloud,
            json!({"name": "other", "vip_subnet_id": subnet, "listeners": [listener]}),
        )
        .await
        .unwrap_err();
        assert_eq!(status_of(e), Some(400));
    }
    assert_eq!(cloud.objects("loadbalancers").len(), 1);
}

#[tokio::test]
async fn while_octavia_works_the_cluster_is_not_ready_and_has_no_endpoint() {
    let mut run = Run::new(full_spec());
    run.cloud.set_octavia_busy_reads(3);
    assert_eq!(run.pass().await, Step::Requeue(Duration::from_secs(2)));
    let status = run.status();
    assert!(!status.ready);
    assert!(run.osc.spec.control_plane_endpoint.is_none());
    let api = status
        .conditions
        .iter()
        .find(|c| c.type_ == cond::API_ENDPOINT_READY)
        .unwrap();
    assert_eq!(api.status, "False");
    assert_eq!(api.reason.as_deref(), Some("LoadBalancerPending"));
    // The load balancer's ID is recorded before the first pass ends.
    assert!(status
        .api_server_load_balancer
        .is_some_and(|lb| !lb.id.is_empty()));
}

#[tokio::test]
async fn deletion_waits_for_a_busy_load_balancer_before_the_network() {
    let mut run = Run::new(full_spec());
    run.converge().await;
    run.cloud.set_octavia_busy_reads(2);
    let steps = run.delete().await;
    // Deleting the network under the load balancer's VIP port would be a 409.
    assert_eq!(transient_steps(&steps), 0, "{steps:?}");
    assert!(
        steps
            .iter()
            .filter(|s| **s == Step::Requeue(Duration::from_secs(3)))
            .count()
            >= 2,
        "{steps:?}"
    );
    assert_eq!(run.cloud.leftovers(), Vec::<String>::new());
}

#[tokio::test]
async fn a_bastion_still_building_does_not_hold_back_readiness() {
    let mut run = Run::new(full_spec());
    run.cloud.set_nova_busy_reads(15);
    let mut ready_while_building = false;
    for _ in 0..40 {
        let step = run.pass().await;
        let status = run.status();
        let building = status.bastion.as_ref().and_then(|b| b.state.as_deref()) == Some("BUILD");
        if status.ready && building {
            ready_while_building = true;
            assert_eq!(step, Step::Requeue(Duration::from_secs(5)));
        }
        if step == Step::Converged {
            break;
        }
    }
    assert!(ready_while_building);
    assert_one_of_each(&run, "slow Nova");
}

#[tokio::test]
async fn rejected_credentials_are_a_user_error_recorded_in_status() {
    let mut run = Run::new(full_spec());
    run.cloud
        .inject(Fault::every(Calls::All, Effect::Status(401)));
    assert_eq!(run.pass().await, Step::User("AuthenticationFailed".into()));
    let status = run.status();
    assert_eq!(
        status.failure_reason.as_deref(),
        Some("AuthenticationFailed")
    );
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == cond::READY)
        .unwrap();
    assert_eq!(ready.status, "False");
    assert_eq!(run.cloud.writes(), 0);
}

#[tokio::test]
async fn a_rate_limit_hands_its_retry_after_to_the_controller() {
    let mut run = Run::new(full_spec());
    run.cloud.inject(Fault::nth(
        Calls::Of(Op::List, "networks"),
        1,
        Effect::RateLimited(Duration::from_secs(7)),
    ));
    assert_eq!(
        run.pass().await,
        Step::Transient {
            reason: "ExternalNetworkNotFound".into(),
            retry_after: Some(Duration::from_secs(7))
        }
    );
    let steps = run.converge().await;
    assert_eq!(steps.last(), Some(&Step::Converged));
}

/// The API VIP without a load balancer: the keepalived endpoint.
const VIP: &str = "10.6.0.250";

fn keepalived_spec() -> OpenStackClusterSpec {
    OpenStackClusterSpec {
        managed_subnets: vec![SubnetSpec {
            cidr: "10.6.0.0/24".into(),
            dns_nameservers: vec![],
            allocation_pools: vec![],
        }],
        managed_security_groups: Some(ManagedSecurityGroups::default()),
        api_server_load_balancer: Some(Box::new(ApiServerLoadBalancer {
            enabled: Some(false),
            ..Default::default()
        })),
        disable_api_server_floating_ip: Some(true),
        api_server_fixed_ip: Some(VIP.into()),
        tags: vec!["team-a".into()],
        ..Default::default()
    }
}

/// A first pass that stops at the reservation (its port create fails), with the
/// network in place; then a port that is not ours takes [`VIP`] on it. `port` gives
/// the rest of that port's body.
async fn port_on_the_vip_before_the_reservation(run: &mut Run, mut port: Value) -> net::Port {
    run.cloud.inject(Fault::nth(
        Calls::Of(Op::Create, "ports"),
        1,
        Effect::Status(503),
    ));
    assert!(matches!(run.pass().await, Step::Transient { .. }));
    let network = run.status().network.unwrap();
    port["network_id"] = network.network.id.clone().into();
    port["fixed_ips"] =
        serde_json::json!([{"subnet_id": network.subnets[0].id, "ip_address": VIP}]);
    Networking::create(&*run.cloud, port).await.unwrap()
}

/// The ports holding `ip`.
fn holders(cloud: &FakeCloud, ip: &str) -> Vec<Value> {
    cloud
        .objects("ports")
        .into_iter()
        .filter(|p| {
            p["fixed_ips"]
                .as_array()
                .is_some_and(|a| a.iter().any(|f| f["ip_address"] == ip))
        })
        .collect()
}

/// One port, ours and tagged, reserves `ip`; status records it and the
/// cluster is ready with `ip` as its endpoint and published VIP.
fn assert_vip_reserved(run: &Run, ip: &str, context: &str) {
    let names = ClusterNames::new(NAMESPACE, CLUSTER);
    let ports = holders(&run.cloud, ip);
    assert_eq!(ports.len(), 1, "{context}: {ports:?}");
    let vip_ports: Vec<Value> = run
        .cloud
        .objects("ports")
        .into_iter()
        .filter(|p| p["name"] == names.api_vip_port_name())
        .collect();
    assert_eq!(vip_ports.len(), 1, "{context}: {vip_ports:?}");
    let port = &ports[0];
    assert_eq!(port["name"], names.api_vip_port_name(), "{context}");
    assert_eq!(port["device_owner"], "", "{context}");
    for tag in ["team-a".to_owned(), super::owner_tag(&names)] {
        assert!(
            port["tags"]
                .as_array()
                .unwrap()
                .contains(&Value::from(tag.clone())),
            "{context}: port lacks tag {tag}: {port}"
        );
    }
    let status = run.status();
    assert!(status.ready, "{context}: not ready");
    let recorded = status.api_server_vip_port.clone().unwrap_or_default();
    assert_eq!(
        port["id"], recorded.id,
        "{context}: status names another port"
    );
    assert_eq!(recorded.ip_address, ip, "{context}");
    assert_eq!(
        run.osc
            .spec
            .control_plane_endpoint
            .as_ref()
            .map(|e| e.host.as_str()),
        Some(ip),
        "{context}"
    );
    let published = status
        .extensions
        .and_then(|e| e.load_balancers)
        .and_then(|l| l.control_plane)
        .and_then(|c| c.vip);
    assert_eq!(published.as_deref(), Some(ip), "{context}");
}

#[tokio::test]
async fn the_keepalived_vip_is_reserved_once_whatever_fails_and_goes_with_the_cluster() {
    let mut run = Run::new(keepalived_spec());
    let steps = run.converge().await;
    assert_eq!(transient_steps(&steps), 0, "{steps:?}");
    assert_vip_reserved(&run, VIP, "without faults");
    let writes = run.cloud.writes();
    let saves = run.sink_writes.load(Ordering::SeqCst);
    assert_settled(&mut run, "without faults").await;
    assert_deleted_cleanly(&mut run, "without faults").await;

    for effect in [Effect::Status(503), Effect::LoseAnswer] {
        for n in 1..=writes {
            let context = format!("{effect:?} on write {n}");
            let mut run = Run::new(keepalived_spec());
            run.cloud.inject(Fault::nth(Calls::Writes, n, effect));
            let steps = run.converge().await;
            assert_eq!(run.cloud.fired(), 1, "{context}: fault did not fire");
            assert_eq!(transient_steps(&steps), 1, "{context}: {steps:?}");
            assert_vip_reserved(&run, VIP, &context);
            assert_settled(&mut run, &context).await;
            assert_deleted_cleanly(&mut run, &context).await;
        }
    }
    for n in 1..=saves {
        let context = format!("status write {n} lost");
        let mut run = Run::new(keepalived_spec());
        run.sink_fail_at = Some(n);
        let steps = run.converge().await;
        assert_eq!(transient_steps(&steps), 1, "{context}: {steps:?}");
        assert_vip_reserved(&run, VIP, &context);
        assert_settled(&mut run, &context).await;
        assert_deleted_cleanly(&mut run, &context).await;
    }
}

#[tokio::test]
async fn a_lost_answer_to_the_vip_port_create_adopts_the_port() {
    let mut run = Run::new(keepalived_spec());
    run.cloud.inject(Fault::nth(
        Calls::Of(Op::Create, "ports"),
        1,
        Effect::LoseAnswer,
    ));
    assert_eq!(
        run.pass().await,
        Step::Transient {
            reason: "APIServerVIPPortFailed".into(),
            retry_after: None
        }
    );
    // Created, but neither recorded nor tagged.
    assert_eq!(holders(&run.cloud, VIP).len(), 1);
    assert!(run.status().api_server_vip_port.is_none());
    let steps = run.converge().await;
    assert_eq!(steps.last(), Some(&Step::Converged), "{steps:?}");
    assert_vip_reserved(&run, VIP, "lost port answer");
    assert_deleted_cleanly(&mut run, "lost port answer").await;
}

#[tokio::test]
async fn an_api_vip_held_by_another_port_is_a_user_error_naming_that_port() {
    let mut run = Run::new(keepalived_spec());
    let foreign = port_on_the_vip_before_the_reservation(
        &mut run,
        serde_json::json!({
            "name": "someone-elses-port",
            "device_owner": "compute:az1",
            "device_id": "a-server-of-someone-else",
        }),
    )
    .await;

    assert_eq!(run.pass().await, Step::User("APIServerVIPInUse".into()));
    let status = run.status();
    let message = status.failure_message.clone().unwrap_or_default();
    assert!(
        message.contains(&foreign.id) && message.contains("someone-elses-port"),
        "{message}"
    );
    let api = status
        .conditions
        .iter()
        .find(|c| c.type_ == cond::API_ENDPOINT_READY)
        .unwrap();
    assert_eq!(
        (api.status.as_str(), api.reason.as_deref()),
        ("False", Some("APIServerVIPInUse"))
    );
    assert!(!status.ready);
    assert!(run.osc.spec.control_plane_endpoint.is_none());
    // Nothing of ours took or shares the address, and the other port is untouched.
    assert_eq!(holders(&run.cloud, VIP).len(), 1);
    assert_eq!(holders(&run.cloud, VIP)[0]["id"], foreign.id.as_str());

    // Once the address is free, the cluster reserves it and becomes ready.
    Networking::delete::<net::Port>(&*run.cloud, &foreign.id)
        .await
        .unwrap();
    let steps = run.converge().await;
    assert_eq!(steps.last(), Some(&Step::Converged), "{steps:?}");
    assert_vip_reserved(&run, VIP, "after the address was freed");
    assert_deleted_cleanly(&mut run, "after the address was freed").await;
}

/// CAPO's documentation has keepalived users create a port holding the address
/// themselves: such a port (bound to nothing, owned by no service) is the reservation,
/// used as it is and never deleted.
#[tokio::test]
async fn a_reservation_port_of_the_users_is_used_and_left_alone() {
    let mut run = Run::new(keepalived_spec());
    let reserved =
        port_on_the_vip_before_the_reservation(&mut run, serde_json::json!({"name": "my-api-vip"}))
            .await;

    let steps = run.converge().await;
    assert_eq!(steps.last(), Some(&Step::Converged), "{steps:?}");
    let status = run.status();
    assert!(status.ready);
    let recorded = status.api_server_vip_port.clone().unwrap();
    assert_eq!(
        (recorded.id.as_str(), recorded.name.as_str()),
        (reserved.id.as_str(), "my-api-vip")
    );
    let held = holders(&run.cloud, VIP);
    assert_eq!(held.len(), 1, "no second port for the address");
    assert_eq!(
        held[0]["tags"],
        serde_json::json!([]),
        "the user's port is not tagged"
    );

    // With a load balancer the reservation is given up: the user's port is forgotten,
    // not deleted.
    run.osc.spec.api_server_load_balancer = Some(Box::new(ApiServerLoadBalancer::default()));
    run.converge().await;
    assert!(run.status().api_server_vip_port.is_none());
    assert!(
        holders(&run.cloud, VIP)
            .iter()
            .any(|p| p["id"] == reserved.id.as_str()),
        "the user's port stays"
    );
}

#[tokio::test]
async fn a_changed_vip_or_a_load_balancer_releases_the_old_reservation() {
    let mut run = Run::new(keepalived_spec());
    run.converge().await;
    assert_vip_reserved(&run, VIP, "first address");

    run.osc.spec.api_server_fixed_ip = Some("10.6.0.251".into());
    run.osc.spec.control_plane_endpoint = None;
    run.converge().await;
    assert_eq!(holders(&run.cloud, VIP), Vec::<Value>::new());
    assert_vip_reserved(&run, "10.6.0.251", "changed address");

    // An Octavia load balancer takes the address itself.
    run.osc.spec.api_server_load_balancer = Some(Box::new(ApiServerLoadBalancer::default()));
    run.converge().await;
    let names = ClusterNames::new(NAMESPACE, CLUSTER);
    assert_eq!(
        count(&run.cloud, "ports", named(&names.api_vip_port_name())),
        0
    );
    assert!(run.status().api_server_vip_port.is_none());
    assert_eq!(
        run.cloud.objects("loadbalancers")[0]["vip_address"],
        "10.6.0.251"
    );
    assert_deleted_cleanly(&mut run, "load balancer").await;
}
