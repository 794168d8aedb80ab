//! The OpenStack calls of the machine flow against the loopback test cloud, as
//! the non-admin `member` user: Cinder volumes (plain and bootable from an
//! image), Nova server groups on both sides of microversion 2.64 (negotiated,
//! and with the session capped at 2.63 as on the Magnum management cloud), a
//! server booted from a volume into a server group on a port made the way
//! CAPO makes them, and an Octavia pool member added and removed. Every test
//! deletes what it created, also when it fails. Skipped unless cloud tests are
//! enabled (see tests/support/cloud.rs):
//! `STACKHOOK_CLOUD_TESTS=1 cargo test --test with_cloud cloud_machine_client::`

use crate::cloud;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use stackhook_openstack::blockstorage::{BlockStorage, Volume, VolumeCreate, VolumeFilter};
use stackhook_openstack::compute::{
    BlockDevice, Compute, Microversion, Nova, ServerCreate, ServerGroupPolicy, ServerGroupRules,
    POLICY_BODY,
};
use stackhook_openstack::image::Images;
use stackhook_openstack::loadbalancing::{self as lb, LoadBalancing};
use stackhook_openstack::networking::{self as net, AddressPair, FixedIpRequest, Networking};
use stackhook_openstack::{Clients, CloudConfig, OsError};

const IMAGE: &str = "ubuntu-2404-kube-v1.33.1";
const FLAVOR: &str = "m1.tiny";

type Outcome = Result<(), String>;

fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "shm-{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

fn clients(clouds_yaml: &std::path::Path) -> Clients {
    let text = std::fs::read(clouds_yaml).unwrap();
    let config = CloudConfig::from_clouds_yaml(&text, cloud::MEMBER, None).unwrap();
    Clients::new(config, None).unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn os(what: &str) -> impl Fn(OsError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn ensure(ok: bool, message: impl Into<String>) -> Outcome {
    if ok {
        Ok(())
    } else {
        Err(message.into())
    }
}

/// Polls `probe` every second until it gives a value, for at most `timeout`.
async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `Some(())` once a GET answers 404.
fn gone<T>(r: Result<T, OsError>) -> Result<Option<()>, String> {
    match r {
        Err(e) if e.is_not_found() => Ok(Some(())),
        Err(e) => Err(e.to_string()),
        Ok(_) => Ok(None),
    }
}

async fn volume_settled(c: &Clients, id: &str, what: &str) -> Result<Volume, String> {
    wait_for(what, Duration::from_secs(180), || async {
        let v = c.block_storage.volume(id).await.map_err(os("get volume"))?;
        if v.is_failed() {
            return Err(format!("volume {id} went to {}", v.status));
        }
        Ok((!v.status.ends_with("ing")).then_some(v))
    })
    .await
}

async fn lb_active(c: &Clients, id: &str) -> Result<(), String> {
    wait_for("load balancer ACTIVE", Duration::from_secs(180), || async {
        let l: lb::LoadBalancer = c.load_balancer.get(id).await.map_err(os("get LB"))?;
        ensure(
            !l.provisioning_status.starts_with("ERROR"),
            "load balancer in ERROR",
        )?;
        Ok(l.is_active().then_some(()))
    })
    .await
}

/// Octavia refuses writes while the load balancer is `PENDING_*` (409);
/// like a reconcile, try again until it takes the call.
async fn octavia_write<T, F, Fut>(what: &str, mut write: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, OsError>>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match write().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_conflict() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(format!("{what}: {e}")),
        }
    }
}

/// What a test created, deleted in dependency order whatever happened.
#[derive(Default)]
struct Created {
    load_balancers: Vec<String>,
    servers: Vec<String>,
    volumes: Vec<String>,
    server_groups: Vec<String>,
    ports: Vec<String>,
    networks: Vec<String>,
}

impl Created {
    /// Deletes everything and waits until it is gone; returns what failed.
    async fn clean(&mut self, c: &Clients) -> Vec<String> {
        let mut errors = Vec::new();
        let mut note = |r: Result<(), String>| {
            if let Err(e) = r {
                errors.push(e);
            }
        };
        for id in self.load_balancers.drain(..) {
            note(lb_gone(c, &id).await);
        }
        let servers: Vec<String> = self.servers.drain(..).collect();
        for id in &servers {
            if let Err(e) = c.compute.delete_server(id).await {
                if !e.is_not_found() {
                    note(Err(format!("delete server {id}: {e}")));
                }
            }
        }
        for id in &servers {
            note(
                wait_for("server deleted", Duration::from_secs(180), || async {
                    gone(c.compute.server(id).await)
                })
                .await,
            );
        }
        for id in self.volumes.drain(..) {
            note(volume_gone(c, &id).await);
        }
        for id in self.server_groups.drain(..) {
            match c.compute.delete_server_group(&id).await {
                Err(e) if !e.is_not_found() => note(Err(format!("delete group {id}: {e}"))),
                _ => {}
            }
        }
        for id in self.ports.drain(..) {
            match c.network.delete::<net::Port>(&id).await {
                Err(e) if !e.is_not_found() => note(Err(format!("delete port {id}: {e}"))),
                _ => {}
            }
        }
        for id in self.networks.drain(..) {
            match c.network.delete::<net::Network>(&id).await {
                Err(e) if !e.is_not_found() => note(Err(format!("delete network {id}: {e}"))),
                _ => {}
            }
        }
        errors
    }
}

async fn lb_gone(c: &Clients, id: &str) -> Outcome {
    wait_for(
        "load balancer deletable",
        Duration::from_secs(180),
        || async {
            match c.load_balancer.delete_load_balancer_cascade(id).await {
                Ok(()) => Ok(Some(())),
                Err(e) if e.is_not_found() => Ok(Some(())),
                Err(e) if e.is_conflict() => Ok(None),
                Err(e) => Err(format!("delete LB {id}: {e}")),
            }
        },
    )
    .await?;
    wait_for(
        "load balancer deleted",
        Duration::from_secs(180),
        || async { gone(c.load_balancer.get::<lb::LoadBalancer>(id).await) },
    )
    .await
}

/// Waits for the volume to leave `creating`/`detaching`, deletes it and
/// waits for the 404.
async fn volume_gone(c: &Clients, id: &str) -> Outcome {
    let settled = wait_for("volume deletable", Duration::from_secs(180), || async {
        match c.block_storage.volume(id).await {
            Err(e) if e.is_not_found() => Ok(Some(false)),
            Err(e) => Err(e.to_string()),
            Ok(v) => Ok((v.is_available() || v.is_failed()).then_some(true)),
        }
    })
    .await?;
    if settled {
        match c.block_storage.delete_volume(id).await {
            Err(e) if !e.is_not_found() => return Err(format!("delete volume {id}: {e}")),
            _ => {}
        }
    }
    wait_for("volume deleted", Duration::from_secs(180), || async {
        gone(c.block_storage.volume(id).await)
    })
    .await
}

/// Runs `body`, then deletes what it recorded; fails with the first of the
/// body's error and the cleanup's errors.
fn run_with_cleanup<F>(name: &str, body: F)
where
    F: for<'a> FnOnce(
        &'a Clients,
        &'a mut Created,
    ) -> std::pin::Pin<Box<dyn Future<Output = Outcome> + 'a>>,
{
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let c = clients(&path);
    let rt = runtime();
    let mut created = Created::default();
    let outcome = rt.block_on(body(&c, &mut created));
    let leftovers = rt.block_on(created.clean(&c));
    if let Err(e) = outcome {
        panic!("{name}: {e} (cleanup errors: {leftovers:?})");
    }
    assert!(
        leftovers.is_empty(),
        "{name}: cleanup failed: {leftovers:?}"
    );
}

async fn image_id(c: &Clients) -> Result<String, String> {
    let images = c
        .image
        .list(&[("name", IMAGE.to_owned())])
        .await
        .map_err(os("list images"))?;
    images
        .first()
        .map(|i| i.id.clone())
        .ok_or_else(|| format!("no image {IMAGE}"))
}

async fn flavor_id(c: &Clients) -> Result<String, String> {
    let flavors = c.compute.flavors().await.map_err(os("list flavors"))?;
    flavors
        .iter()
        .find(|f| f.name == FLAVOR)
        .map(|f| f.id.clone())
        .ok_or_else(|| format!("no flavor {FLAVOR}"))
}

/// A network with one subnet: what a machine's port hangs from.
async fn network(c: &Clients, created: &mut Created, name: &str) -> Result<net::Subnet, String> {
    let n: net::Network = c
        .network
        .create(json!({ "name": name }))
        .await
        .map_err(os("create network"))?;
    created.networks.push(n.id.clone());
    c.network
        .create(
            json!({"name": name, "network_id": n.id, "cidr": "10.77.0.0/24",
            "ip_version": 4}),
        )
        .await
        .map_err(os("create subnet"))
}

#[test]
fn volume_reaches_available_is_found_and_deleted() {
    run_with_cleanup("volume", |c, created| {
        Box::pin(async move {
            let name = unique("vol");
            let metadata: BTreeMap<String, String> =
                [("stackhook-test".to_owned(), name.clone())].into();
            let v = c
                .block_storage
                .create_volume(&VolumeCreate {
                    name: name.clone(),
                    size_gib: 1,
                    description: Some("machine client test".into()),
                    metadata: metadata.clone(),
                    ..Default::default()
                })
                .await
                .map_err(os("create volume"))?;
            created.volumes.push(v.id.clone());
            ensure(v.name == name && v.size == 1, format!("created {v:?}"))?;

            let v = volume_settled(c, &v.id, "volume available").await?;
            ensure(v.is_available(), format!("volume is {}", v.status))?;
            ensure(!v.bootable, "a blank volume is not bootable")?;
            ensure(v.metadata == metadata, format!("metadata {:?}", v.metadata))?;

            let by_name = c
                .block_storage
                .volumes(&VolumeFilter::named(&name))
                .await
                .map_err(os("list by name"))?;
            ensure(
                by_name.len() == 1 && by_name[0].id == v.id,
                format!("by name: {by_name:?}"),
            )?;
            let by_metadata = c
                .block_storage
                .volumes(&VolumeFilter {
                    name: None,
                    metadata,
                })
                .await
                .map_err(os("list by metadata"))?;
            ensure(
                by_metadata.iter().map(|v| &v.id).eq([&v.id]),
                format!("by metadata: {by_metadata:?}"),
            )?;
            let other = c
                .block_storage
                .volumes(&VolumeFilter::named(&unique("nothing")))
                .await
                .map_err(os("list by an unused name"))?;
            ensure(other.is_empty(), format!("unused name matched {other:?}"))?;

            c.block_storage
                .delete_volume(&v.id)
                .await
                .map_err(os("delete volume"))?;
            wait_for("volume gone", Duration::from_secs(120), || async {
                gone(c.block_storage.volume(&v.id).await)
            })
            .await?;
            created.volumes.clear();
            Ok(())
        })
    });
}

#[test]
fn bootable_volume_from_the_test_image() {
    run_with_cleanup("bootable volume", |c, created| {
        Box::pin(async move {
            let image = image_id(c).await?;
            let v = c
                .block_storage
                .create_volume(&VolumeCreate {
                    name: unique("root"),
                    size_gib: 1,
                    availability_zone: Some("az2".into()),
                    image_id: Some(image),
                    ..Default::default()
                })
                .await
                .map_err(os("create volume from image"))?;
            created.volumes.push(v.id.clone());
            let v = volume_settled(c, &v.id, "bootable volume available").await?;
            ensure(v.is_available(), format!("volume is {}", v.status))?;
            ensure(v.bootable, "a volume made from an image is bootable")?;
            ensure(
                v.availability_zone.as_deref() == Some("az2"),
                format!("zone {:?}", v.availability_zone),
            )?;
            Ok(())
        })
    });
}

#[test]
fn server_groups_at_the_negotiated_microversion_and_pinned_to_2_63() {
    run_with_cleanup("server groups", |c, created| {
        Box::pin(async move {
            // Negotiated once per client: the second call makes no request.
            let before = c.session.stats().snapshot();
            let at = c.compute.microversion().await.map_err(os("negotiate"))?;
            let again = c.compute.microversion().await.map_err(os("negotiate"))?;
            let reads = (c.session.stats().snapshot() - before).reads;
            ensure(
                at == again && reads == 1,
                format!("{reads} reads to negotiate"),
            )?;
            ensure(at >= POLICY_BODY, format!("the test cloud negotiated {at}"))?;

            let soft = ServerGroupPolicy::SoftAntiAffinity;
            let none = ServerGroupRules::default();
            let new = c
                .compute
                .create_server_group(&unique("sg-new"), soft, &none)
                .await
                .map_err(os("create at the negotiated version"))?;
            created.server_groups.push(new.id.clone());
            ensure(
                new.policy.as_deref() == Some("soft-anti-affinity"),
                format!("{new:?}"),
            )?;

            let two = ServerGroupRules {
                max_server_per_host: Some(2),
            };
            let ruled = c
                .compute
                .create_server_group(&unique("sg-rules"), ServerGroupPolicy::AntiAffinity, &two)
                .await
                .map_err(os("create with rules"))?;
            created.server_groups.push(ruled.id.clone());
            let read = c
                .compute
                .server_group(&ruled.id)
                .await
                .map_err(os("get with rules"))?;
            ensure(
                read.rules.max_server_per_host == Some(2),
                format!("rules {:?}", read.rules),
            )?;

            // The Magnum management cloud's pin: the `policies` body.
            let pinned =
                Nova::new(c.session.clone()).with_max_microversion(Microversion::new(2, 63));
            ensure(
                pinned
                    .microversion()
                    .await
                    .map_err(os("negotiate pinned"))?
                    == Microversion::new(2, 63),
                "the cap is not applied",
            )?;
            let old = pinned
                .create_server_group(&unique("sg-263"), soft, &none)
                .await
                .map_err(os("create at 2.63"))?;
            created.server_groups.push(old.id.clone());
            ensure(
                old.policy.as_deref() == Some("soft-anti-affinity"),
                format!("{old:?}"),
            )?;
            let err = pinned
                .create_server_group(&unique("sg-bad"), ServerGroupPolicy::AntiAffinity, &two)
                .await
                .err()
                .ok_or("rules accepted at 2.63")?;
            ensure(
                matches!(err, OsError::Invalid { .. }),
                format!("rules at 2.63: {err}"),
            )?;
            let ancient =
                Nova::new(c.session.clone()).with_max_microversion(Microversion::new(2, 14));
            let err = ancient
                .create_server_group(&unique("sg-bad"), soft, &none)
                .await
                .err()
                .ok_or("a soft policy accepted at 2.14")?;
            ensure(
                matches!(err, OsError::Invalid { .. }) && err.to_string().contains("2.15"),
                format!("soft policy at 2.14: {err}"),
            )?;

            // Each group read back in both shapes, with its policy.
            for group in [&new, &old] {
                for client in [&c.compute, &pinned] {
                    let g = client
                        .server_group(&group.id)
                        .await
                        .map_err(os("get group"))?;
                    ensure(
                        g.policy.as_deref() == Some("soft-anti-affinity") && g.name == group.name,
                        format!("read back {g:?}"),
                    )?;
                }
            }
            let listed = pinned.server_groups().await.map_err(os("list at 2.63"))?;
            for id in [&new.id, &old.id, &ruled.id] {
                ensure(
                    listed.iter().any(|g| &g.id == id),
                    format!("{id} not listed"),
                )?;
            }

            for id in created.server_groups.drain(..).collect::<Vec<_>>() {
                c.compute
                    .delete_server_group(&id)
                    .await
                    .map_err(os("delete group"))?;
                let e = c.compute.server_group(&id).await.err();
                ensure(
                    e.as_ref().is_some_and(OsError::is_not_found),
                    format!("group {id} still there: {e:?}"),
                )?;
            }
            Ok(())
        })
    });
}

/// The member's clouds.yaml entry with `setting` added, as an operator would write it.
fn member_with(clouds_yaml: &[u8], setting: &str) -> Clients {
    let text = String::from_utf8(clouds_yaml.to_vec()).unwrap();
    let entry = format!("  {}:\n", cloud::MEMBER);
    assert!(text.contains(&entry), "no {} entry", cloud::MEMBER);
    let text = text.replacen(&entry, &format!("{entry}    {setting}\n"), 1);
    let config = CloudConfig::from_clouds_yaml(text.as_bytes(), cloud::MEMBER, None).unwrap();
    Clients::new(config, None).unwrap()
}

/// `compute_default_microversion` (or a `compute_api_version` with a microversion) in
/// the identity Secret's clouds.yaml caps what the Nova client negotiates and sends:
/// server groups take the pre-2.64 body, and a server create that needs more than the
/// cap is refused before it reaches Nova.
#[test]
fn clouds_yaml_caps_the_nova_microversion() {
    let Some(path) = cloud::clouds_yaml() else {
        return;
    };
    let yaml = std::fs::read(&path).unwrap();
    let rt = runtime();
    let plain = clients(&path);
    let mut created = Created::default();
    let outcome: Outcome = rt.block_on(async {
        let uncapped = plain
            .compute
            .microversion()
            .await
            .map_err(os("negotiate"))?;
        ensure(
            uncapped >= POLICY_BODY,
            format!("this Nova offers {uncapped}"),
        )?;

        let pinned = member_with(&yaml, "compute_default_microversion: \"2.63\"");
        let at = pinned
            .compute
            .microversion()
            .await
            .map_err(os("negotiate capped"))?;
        ensure(at == Microversion::new(2, 63), format!("negotiated {at}"))?;
        let group = pinned
            .compute
            .create_server_group(
                &unique("sg-cap"),
                ServerGroupPolicy::SoftAntiAffinity,
                &ServerGroupRules::default(),
            )
            .await
            .map_err(os("create at the cap"))?;
        created.server_groups.push(group.id.clone());
        // Only the pre-2.64 answer carries `policies`; read back at the top version
        // Nova still knows it by its single policy.
        ensure(
            group.policy.as_deref() == Some("soft-anti-affinity"),
            format!("{group:?}"),
        )?;
        let err = pinned
            .compute
            .create_server_group(
                &unique("sg-cap"),
                ServerGroupPolicy::AntiAffinity,
                &ServerGroupRules {
                    max_server_per_host: Some(1),
                },
            )
            .await
            .err()
            .ok_or("rules accepted under a 2.63 cap")?;
        ensure(matches!(err, OsError::Invalid { .. }), format!("{err}"))?;

        let client_spelling = member_with(&yaml, "compute_api_version: '2.60'");
        let at = client_spelling
            .compute
            .microversion()
            .await
            .map_err(os("negotiate 2.60"))?;
        ensure(at == Microversion::new(2, 60), format!("negotiated {at}"))?;

        // Server tags need 2.53: under a 2.50 cap the create never leaves the client.
        let low = member_with(&yaml, "compute_default_microversion: '2.50'");
        let before = low.session.stats().snapshot();
        let err = low
            .compute
            .create_server(json!({"name": unique("never")}), "2.53")
            .await
            .err()
            .ok_or("a 2.53 create accepted under a 2.50 cap")?;
        ensure(
            matches!(err, OsError::Invalid { .. }) && err.to_string().contains("2.50"),
            format!("{err}"),
        )?;
        let sent = low.session.stats().snapshot() - before;
        ensure(sent.writes == 0, format!("{sent:?}"))?;
        Ok(())
    });
    let leftovers = rt.block_on(created.clean(&plain));
    if let Err(e) = outcome {
        panic!("{e} (cleanup errors: {leftovers:?})");
    }
    assert!(leftovers.is_empty(), "cleanup failed: {leftovers:?}");
}

#[test]
fn server_boots_from_a_volume_into_a_server_group() {
    run_with_cleanup("boot from volume", |c, created| {
        Box::pin(async move {
            let name = unique("bfv");
            let (image, flavor) = (image_id(c).await?, flavor_id(c).await?);
            let subnet = network(c, created, &name).await?;

            // The port as CAPO makes it, found again by name, tag and device.
            let port = c
                .network
                .create_port(&net::PortCreate {
                    name: format!("{name}-0"),
                    network_id: subnet.network_id.clone(),
                    description: Some("machine client test".into()),
                    fixed_ips: vec![FixedIpRequest {
                        subnet_id: Some(subnet.id.clone()),
                        ip_address: None,
                    }],
                    allowed_address_pairs: vec![AddressPair {
                        ip_address: "10.77.0.250".into(),
                        mac_address: None,
                    }],
                    tags: vec![name.clone()],
                    ..Default::default()
                })
                .await
                .map_err(os("create port"))?;
            created.ports.push(port.id.clone());
            ensure(
                port.fixed_ips.first().map(|f| f.subnet_id.as_str()) == Some(subnet.id.as_str())
                    && port.tags == [name.clone()]
                    && port.allowed_address_pairs.len() == 1
                    && port.port_security_enabled == Some(true),
                format!("port {port:?}"),
            )?;
            let tagged: Vec<net::Port> = c
                .network
                .list(&[("tags", name.clone())])
                .await
                .map_err(os("ports by tag"))?;
            ensure(tagged.iter().map(|p| &p.id).eq([&port.id]), "port by tag")?;
            let named: Vec<net::Port> = c
                .network
                .list(&[("name", port.name.clone())])
                .await
                .map_err(os("ports by name"))?;
            ensure(named.iter().map(|p| &p.id).eq([&port.id]), "port by name")?;
            let p = c
                .network
                .allow_address(&port.id, "10.77.0.251")
                .await
                .map_err(os("allow an address"))?;
            ensure(p.allowed_address_pairs.len() == 2, "pair not added")?;
            let p = c
                .network
                .disallow_address(&port.id, "10.77.0.250")
                .await
                .map_err(os("disallow an address"))?;
            ensure(
                p.allowed_address_pairs
                    .iter()
                    .map(|a| a.ip_address.as_str())
                    .eq(["10.77.0.251"]),
                format!("pairs {:?}", p.allowed_address_pairs),
            )?;

            // Volumes first, as CAPO: the root from the image, and a data disk.
            let root = c
                .block_storage
                .create_volume(&VolumeCreate {
                    name: format!("{name}-root"),
                    size_gib: 1,
                    availability_zone: Some("az1".into()),
                    image_id: Some(image),
                    ..Default::default()
                })
                .await
                .map_err(os("create root volume"))?;
            created.volumes.push(root.id.clone());
            let data = c
                .block_storage
                .create_volume(&VolumeCreate {
                    name: format!("{name}-etcd"),
                    size_gib: 1,
                    availability_zone: Some("az1".into()),
                    ..Default::default()
                })
                .await
                .map_err(os("create data volume"))?;
            created.volumes.push(data.id.clone());
            for id in [&root.id, &data.id] {
                let v = volume_settled(c, id, "volume available").await?;
                ensure(v.is_available(), format!("volume {id} is {}", v.status))?;
            }

            let group = c
                .compute
                .create_server_group(
                    &name,
                    ServerGroupPolicy::SoftAntiAffinity,
                    &ServerGroupRules::default(),
                )
                .await
                .map_err(os("create server group"))?;
            created.server_groups.push(group.id.clone());

            let request = ServerCreate {
                name: name.clone(),
                flavor_id: flavor.clone(),
                image_id: None,
                port_ids: vec![port.id.clone()],
                user_data: Some(b"#cloud-config\n{}\n".to_vec().into()),
                availability_zone: Some("az1".into()),
                metadata: [("stackhook-test".to_owned(), name.clone())].into(),
                tags: vec!["stackhook-test".into()],
                config_drive: Some(true),
                block_devices: vec![
                    BlockDevice::boot_volume(&root.id, true),
                    BlockDevice::data_volume(&data.id, Some("etcd")),
                ],
                server_group_id: Some(group.id.clone()),
                ..Default::default()
            };
            let at = request.microversion();
            ensure(
                at <= c.compute.microversion().await.map_err(os("negotiate"))?,
                "needs more than the cloud has",
            )?;
            let id = c
                .compute
                .create_server(request.body().map_err(os("server body"))?, &at.to_string())
                .await
                .map_err(os("create server"))?;
            created.servers.push(id.clone());

            let server = wait_for("server ACTIVE", Duration::from_secs(300), || async {
                let s = c.compute.server(&id).await.map_err(os("get server"))?;
                if s.is_error() {
                    return Err(format!("server in ERROR: {:?}", s.fault));
                }
                Ok(s.is_active().then_some(s))
            })
            .await?;
            ensure(
                server.availability_zone.as_deref() == Some("az1"),
                format!("zone {:?}", server.availability_zone),
            )?;
            ensure(
                server.image_id.is_none(),
                "booted from an image, not the volume",
            )?;
            ensure(
                server.flavor.id.as_deref() == Some(flavor.as_str()),
                format!("flavor {:?}", server.flavor),
            )?;
            ensure(
                server.tags == ["stackhook-test"] && server.metadata["stackhook-test"] == name,
                format!("tags {:?}, metadata {:?}", server.tags, server.metadata),
            )?;
            let attached: BTreeMap<&str, bool> = server
                .volumes_attached
                .iter()
                .map(|v| (v.id.as_str(), v.delete_on_termination))
                .collect();
            ensure(
                attached == BTreeMap::from([(root.id.as_str(), true), (data.id.as_str(), true)]),
                format!("attached {attached:?}"),
            )?;
            ensure(
                server.addresses.values().flatten().any(|a| {
                    Some(a.addr.as_str()) == port.fixed_ips.first().map(|f| f.ip_address.as_str())
                }),
                format!("addresses {:?}", server.addresses),
            )?;
            let g = c
                .compute
                .server_group(&group.id)
                .await
                .map_err(os("get group"))?;
            ensure(
                g.members == [id.clone()],
                format!("members {:?}", g.members),
            )?;
            let on_server: Vec<net::Port> = c
                .network
                .list(&[("device_id", id.clone())])
                .await
                .map_err(os("ports by device"))?;
            ensure(
                on_server.iter().map(|p| &p.id).eq([&port.id]),
                "port by device",
            )?;
            let root_now = c
                .block_storage
                .volume(&root.id)
                .await
                .map_err(os("get root"))?;
            ensure(
                root_now.is_in_use() && root_now.attachments.iter().any(|a| a.server_id == id),
                format!("root volume {:?}", root_now.status),
            )?;

            // Deleting the server takes both volumes with it.
            c.compute
                .delete_server(&id)
                .await
                .map_err(os("delete server"))?;
            wait_for("server gone", Duration::from_secs(180), || async {
                gone(c.compute.server(&id).await)
            })
            .await?;
            created.servers.clear();
            for v in [&root.id, &data.id] {
                wait_for(
                    "volume deleted with its server",
                    Duration::from_secs(180),
                    || async { gone(c.block_storage.volume(v).await) },
                )
                .await?;
            }
            created.volumes.clear();
            let p: net::Port = c.network.get(&port.id).await.map_err(os("get port"))?;
            ensure(p.device_id.is_empty(), "the port is still bound")?;
            Ok(())
        })
    });
}

#[test]
fn octavia_member_added_to_a_pool_and_removed() {
    run_with_cleanup("member", |c, created| {
        Box::pin(async move {
            let name = unique("lb");
            let subnet = network(c, created, &name).await?;
            let l: lb::LoadBalancer = c
                .load_balancer
                .create(json!({"name": name, "vip_subnet_id": subnet.id}))
                .await
                .map_err(os("create LB"))?;
            created.load_balancers.push(l.id.clone());
            lb_active(c, &l.id).await?;
            let listener: lb::Listener = octavia_write("create listener", || {
                c.load_balancer
                    .create(json!({"name": name, "loadbalancer_id": l.id,
                    "protocol": "TCP", "protocol_port": 6443}))
            })
            .await?;
            lb_active(c, &l.id).await?;
            let pool: lb::Pool = octavia_write("create pool", || {
                c.load_balancer
                    .create(json!({"name": name, "listener_id": listener.id,
                    "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}))
            })
            .await?;
            lb_active(c, &l.id).await?;

            let member_name = format!("{name}-cp-0");
            // No subnet_id, as CAPO: the member is on the VIP's subnet.
            // (With one, the test cloud's noop network driver fails the
            // member's deletion and leaves it in ERROR.)
            let member = octavia_write("create member", || {
                c.load_balancer.create_member(
                    &pool.id,
                    json!({"name": member_name, "address": "10.77.0.5",
                        "protocol_port": 6443}),
                )
            })
            .await?;
            ensure(
                member.address == "10.77.0.5" && member.protocol_port == 6443,
                format!("member {member:?}"),
            )?;
            lb_active(c, &l.id).await?;
            let m = c
                .load_balancer
                .member(&pool.id, &member.id)
                .await
                .map_err(os("get member"))?;
            ensure(
                m.provisioning_status == "ACTIVE" && m.name == member_name,
                format!("member now {m:?}"),
            )?;
            let listed = c
                .load_balancer
                .members(&pool.id, &[("name", member_name.clone())])
                .await
                .map_err(os("list members by name"))?;
            ensure(
                listed.iter().map(|m| &m.id).eq([&member.id]),
                "member by name",
            )?;
            let others = c
                .load_balancer
                .members(&pool.id, &[("name", unique("nobody"))])
                .await
                .map_err(os("list members by another name"))?;
            ensure(others.is_empty(), "another name matched")?;

            octavia_write("delete member", || {
                c.load_balancer.delete_member(&pool.id, &member.id)
            })
            .await?;
            lb_active(c, &l.id).await?;
            let e = c.load_balancer.member(&pool.id, &member.id).await.err();
            ensure(
                e.as_ref().is_some_and(OsError::is_not_found),
                format!("member still there: {e:?}"),
            )?;
            let left = c
                .load_balancer
                .members(&pool.id, &[])
                .await
                .map_err(os("list members"))?;
            ensure(left.is_empty(), format!("members left: {left:?}"))?;
            Ok(())
        })
    });
}
