//! stackhook SIGKILLed while the real CAPI creates, scales and deletes a cluster of
//! the shipped class, and started again at once on the same address (a container
//! restarted in its pod): after each of its first cloud writes in every phase, and at
//! pseudo-random moments between them (a server building, a load balancer coming
//! up). The cloud itself is then audited: one network, subnet, router, load balancer
//! and security group of each role for the cluster, one server per Machine and one
//! port per server; after the delete, nothing.

use super::*;

use stackhook::infra::api::names::{ClusterNames, SecurityGroupRole};
use stackhook_openstack::loadbalancing::{self as lb, LoadBalancing};

/// Kills per phase after a cloud write (the rest of the phase runs unharmed, so that
/// it can finish), and kills at random moments.
const AFTER_WRITES: [usize; 3] = [16, 4, 5];
const AT_RANDOM: [usize; 3] = [3, 1, 1];

/// Where the kills fell.
#[derive(Default)]
struct Killer {
    mark: Option<cloud::AccessMark>,
    /// The writes each kill followed (`service METHOD path`), or `random`.
    points: Vec<String>,
    /// A xorshift state: random moments that a failing run can repeat.
    seed: u64,
    next_random: Option<Instant>,
}

impl Killer {
    fn new(seed: u64) -> Killer {
        Killer {
            seed: seed | 1,
            ..Default::default()
        }
    }

    fn random_delay(&mut self) -> Duration {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        Duration::from_millis(500 + self.seed % 4000)
    }

    /// The cloud writes of stackhook since the last look, as `service METHOD path`.
    fn new_writes(&mut self, agent: &str) -> Vec<String> {
        let Some(mark) = &self.mark else {
            self.mark = Some(cloud::access_mark());
            return Vec::new();
        };
        let (seen, next) = cloud::write_points_since(mark, agent);
        self.mark = Some(next);
        seen
    }
}

/// Polls `done` until it holds, killing stackhook after each new cloud write while
/// `after_writes` kills are left and at random moments while `at_random` are.
#[allow(clippy::too_many_arguments)]
async fn killing_until<F: AsyncFn(&World) -> bool>(
    w: &mut World,
    k: &mut Killer,
    ns: &str,
    mut after_writes: usize,
    mut at_random: usize,
    limit: Duration,
    what: &str,
    done: F,
) {
    let started = Instant::now();
    let until = started + limit;
    k.mark = None;
    k.new_writes(&w.agent.clone());
    k.next_random = Some(Instant::now() + k.random_delay());
    loop {
        if done(w).await {
            w.step(what);
            return;
        }
        if Instant::now() > until {
            w.dump(ns).await;
            panic!(
                "{what}: not within {limit:?} (kills so far at {:?})",
                k.points
            );
        }
        let agent = w.agent.clone();
        let writes = k.new_writes(&agent);
        if after_writes > 0 && !writes.is_empty() {
            after_writes -= 1;
            k.points.push(writes.join(" + "));
            w.kill_and_restart();
        } else if at_random > 0 && k.next_random.is_some_and(|t| Instant::now() >= t) {
            at_random -= 1;
            k.points.push(format!(
                "at random, {:.1} s in ({what})",
                started.elapsed().as_secs_f64()
            ));
            w.kill_and_restart();
            k.next_random = Some(Instant::now() + k.random_delay());
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

async fn cluster_initialized(w: &World, ns: &str, name: &str) -> bool {
    let api: Api<DynamicObject> =
        Api::namespaced_with(w.client().await, ns, &capi::clusters(w.bed.release));
    api.get_opt(name)
        .await
        .ok()
        .flatten()
        .is_some_and(|c| condition_true(&c.data, "ControlPlaneInitialized"))
}

/// Worker Machines with a Node, not being deleted.
async fn worker_nodes(w: &World, ns: &str, prefix: &str) -> usize {
    w.machines(ns)
        .await
        .iter()
        .filter(|m| {
            m.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .filter(|m| {
            m.metadata.deletion_timestamp.is_none() && !m.data["status"]["nodeRef"].is_null()
        })
        .count()
}

/// The cluster's resources as the cloud lists them, by kind.
async fn audit(w: &World, ns: &str, name: &str) -> BTreeMap<&'static str, Vec<String>> {
    let names = ClusterNames::new(ns, name);
    let n = &w.os.network;
    let named = |v: Vec<(String, String)>, want: &str| -> Vec<String> {
        v.into_iter()
            .filter(|(n, _)| n == want)
            .map(|(_, id)| id)
            .collect()
    };
    let net_name = names.network_name();
    let networks: Vec<net::Network> = n
        .list(&[("name", net_name.clone())])
        .await
        .expect("networks");
    let subnets: Vec<net::Subnet> = n
        .list(&[("name", net_name.clone())])
        .await
        .expect("subnets");
    let routers: Vec<net::Router> = n
        .list(&[("name", net_name.clone())])
        .await
        .expect("routers");
    let mut groups = Vec::new();
    for role in [SecurityGroupRole::ControlPlane, SecurityGroupRole::Worker] {
        let g: Vec<net::SecurityGroup> = n
            .list(&[("name", names.security_group_name(role))])
            .await
            .expect("security groups");
        groups.extend(g.into_iter().map(|g| format!("{}={}", g.name, g.id)));
    }
    let balancers: Vec<lb::LoadBalancer> =
        w.os.load_balancer
            .list(&[("name", names.load_balancer_name())])
            .await
            .expect("load balancers");
    let mut out = BTreeMap::new();
    out.insert(
        "networks",
        named(
            networks.into_iter().map(|x| (x.name, x.id)).collect(),
            &net_name,
        ),
    );
    out.insert(
        "subnets",
        named(
            subnets.into_iter().map(|x| (x.name, x.id)).collect(),
            &net_name,
        ),
    );
    out.insert(
        "routers",
        named(
            routers.into_iter().map(|x| (x.name, x.id)).collect(),
            &net_name,
        ),
    );
    out.insert("security groups", groups);
    out.insert(
        "load balancers",
        balancers.into_iter().map(|b| b.id).collect(),
    );
    let servers = w.servers(name).await;
    let mut ports = Vec::new();
    for (server, _) in &servers {
        let p: Vec<net::Port> = n
            .list(&[("name", format!("{server}-0"))])
            .await
            .expect("ports");
        ports.extend(p.into_iter().map(|p| format!("{}={}", p.name, p.id)));
    }
    out.insert("servers", servers.into_iter().map(|(s, _)| s).collect());
    out.insert("ports", ports);
    out
}

/// One of each for the cluster, `servers` servers of distinct names with one port each.
fn assert_one_each(seen: &BTreeMap<&'static str, Vec<String>>, servers: usize, when: &str) {
    for kind in ["networks", "subnets", "routers", "load balancers"] {
        assert_eq!(seen[kind].len(), 1, "{when}: {kind} {:?}", seen[kind]);
    }
    assert_eq!(
        seen["security groups"].len(),
        2,
        "{when}: {:?}",
        seen["security groups"]
    );
    let distinct: BTreeSet<&String> = seen["servers"].iter().collect();
    assert_eq!(
        seen["servers"].len(),
        servers,
        "{when}: servers {:?}",
        seen["servers"]
    );
    assert_eq!(
        distinct.len(),
        servers,
        "{when}: servers {:?}",
        seen["servers"]
    );
    assert_eq!(
        seen["ports"].len(),
        servers,
        "{when}: ports {:?}",
        seen["ports"]
    );
}

pub async fn killed_at_any_moment(release: Release) {
    let _one = capi::ONE_BED.lock().await;
    let Some(mut w) = World::start(
        release,
        "kill",
        &[
            "--leader-election-lease-duration-seconds",
            "3",
            "--leader-election-renew-deadline-seconds",
            "2",
            "--leader-election-retry-period-seconds",
            "1",
        ],
    )
    .await
    else {
        return;
    };
    // The benchmark runs more rounds (README, "Benchmarks"): one cluster each, in turn.
    let rounds: usize = std::env::var("STACKHOOK_KILL_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let names: Vec<String> = (0..rounds)
        .map(|r| format!("kill-{:x}-{r}", std::process::id() & 0xfffff))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let ns = w.namespace("capi-kill", &refs).await;
    w.apply_kubeadm_class(&ns);
    w.wait_class_ready(&ns, "openstack-kubeadm").await;
    let _kubelet =
        StandInKubelet::start(w.client().await, w.bed.standin_client().await, release, &ns);
    let mut k = Killer::new(u64::from(std::process::id()));
    let mut per_round = Vec::new();
    for name in &names {
        let before = k.points.len();
        let (created, scaled, deleted) = one_round(&mut w, &mut k, &ns, name).await;
        per_round.push(format!(
            "{name}: create {created}, scale {scaled}, delete {deleted}"
        ));
        assert!(
            k.points.len() - before >= 20,
            "only {} kills in {name}: {:?}",
            k.points.len() - before,
            &k.points[before..]
        );
    }
    let distinct: BTreeSet<&String> = k
        .points
        .iter()
        .filter(|p| !p.starts_with("at random"))
        .collect();
    let random = k
        .points
        .iter()
        .filter(|p| p.starts_with("at random"))
        .count();
    println!(
        "BENCH killed: {} kills in {rounds} round(s) ({}): after {} distinct cloud writes, {random} at random: {:?}",
        k.points.len(),
        per_round.join("; "),
        distinct.len(),
        k.points
    );
    assert!(
        distinct.len() >= 12 && random >= 3,
        "{} distinct writes, {random} at random: {:?}",
        distinct.len(),
        k.points
    );
    w.bed.assert_loopback_only();
}

/// One cluster created, scaled and deleted through kills; the kills of each phase.
async fn one_round(w: &mut World, k: &mut Killer, ns: &str, name: &str) -> (usize, usize, usize) {
    let release = w.bed.release;
    let start = k.points.len();
    w.bed.point_at_standin(ns, name).await;
    // Create: killed after each of its first cloud writes, and while servers build.
    let cluster = w.minimal_cluster(ns, name, &[]);
    w.bed.apply(ns, &cluster);
    let prefix = format!("{name}-md-0-");
    let (ns_, prefix_) = (ns.to_owned(), prefix.clone());
    killing_until(
        w,
        k,
        ns,
        AFTER_WRITES[0],
        AT_RANDOM[0],
        Duration::from_secs(300),
        "created through kills: control plane initialized, one worker with a node",
        async |w: &World| {
            cluster_initialized(w, &ns_, name).await && worker_nodes(w, &ns_, &prefix_).await == 1
        },
    )
    .await;
    let created = k.points.len() - start;
    w.wait_workers(ns, name, 1).await;
    let seen = audit(w, ns, name).await;
    assert_one_each(&seen, 2, "after the create");

    // Scale the workers to two, killed again.
    w.set_topology(
        ns,
        name,
        "/spec/topology/workers/machineDeployments/0/replicas",
        json!(2),
    )
    .await;
    killing_until(
        w,
        k,
        ns,
        AFTER_WRITES[1],
        AT_RANDOM[1],
        Duration::from_secs(240),
        "scaled through kills: two workers with nodes",
        async |w: &World| worker_nodes(w, &ns_, &prefix_).await == 2,
    )
    .await;
    let scaled = k.points.len() - start - created;
    w.wait_workers(ns, name, 2).await;
    let seen = audit(w, ns, name).await;
    assert_one_each(&seen, 3, "after the scale-up");

    // Delete, killed again; nothing is left.
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(w.client().await, ns, &capi::clusters(release));
    clusters
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete the Cluster");
    let name_ = name.to_owned();
    killing_until(
        w,
        k,
        ns,
        AFTER_WRITES[2],
        AT_RANDOM[2],
        Duration::from_secs(300),
        "deleted through kills",
        async |w: &World| {
            let api: Api<DynamicObject> =
                Api::namespaced_with(w.client().await, &ns_, &capi::clusters(w.bed.release));
            matches!(api.get_opt(&name_).await, Ok(None))
        },
    )
    .await;
    let deleted = k.points.len() - start - created - scaled;
    w.assert_nothing_left(ns, name).await;
    let seen = audit(w, ns, name).await;
    for (kind, left) in &seen {
        assert!(left.is_empty(), "after the delete: {kind} left {left:?}");
    }
    let (sets, secrets) = w.addons_objects(ns).await;
    assert!(
        sets.is_empty() && secrets.is_empty(),
        "{sets:?} {secrets:?}"
    );
    (created, scaled, deleted)
}
