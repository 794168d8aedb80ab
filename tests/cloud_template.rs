//! OpenStackMachineTemplate status for the cluster-autoscaler, through the real
//! binary (`--controllers`) with a real API server and the loopback cloud:
//! templates of a cluster get `status.capacity` from their Nova flavor (one the
//! test makes with a vGPU, and the cloud's `m1.medium`) and `status.nodeInfo`
//! from their Glance image's properties, read back the way the autoscaler's Cluster
//! API provider reads them; a changed image property reaches the status; a
//! template that names no cluster, or a paused one, is left alone.

use crate::cloud;
use crate::infra;
use crate::kube_server;
use crate::replica::Replica;

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::Client;
use reqwest::Method;
use serde_json::{json, Value};
use stackhook::infra::api::{OpenStackCluster, OpenStackMachineTemplate};
use stackhook_openstack::Clients;

/// What the test made in the cloud, removed whatever happens.
#[derive(Default)]
struct Made {
    flavor: Option<String>,
    image: Option<String>,
}

async fn call(
    c: &Clients,
    method: Method,
    service: &str,
    path: &str,
    body: Option<Value>,
) -> Value {
    c.session
        .request(
            method.clone(),
            &[service],
            path,
            &[],
            body.as_ref(),
            &vec![],
        )
        .await
        .unwrap_or_else(|e| panic!("{method} {service} {path}: {e}"))
        .unwrap_or(Value::Null)
}

/// A quantity as `resource.ParseQuantity` reads the forms Kubernetes writes for
/// whole numbers: plain, or with a binary suffix.
fn quantity(q: &str) -> u64 {
    for (suffix, shift) in [("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40)] {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<u64>().expect("a whole number") << shift;
        }
    }
    q.parse().expect("a plain quantity")
}

/// `status.capacity` as the autoscaler reads it (`NestedStringMap`), parsed; `None`
/// while the template has none.
async fn capacity(
    api: &Api<OpenStackMachineTemplate>,
    name: &str,
) -> Option<BTreeMap<String, u64>> {
    let t = api.get(name).await.expect("template");
    let raw = serde_json::to_value(&t).expect("json");
    let cap = raw.pointer("/status/capacity")?.as_object()?.clone();
    Some(
        cap.iter()
            .map(|(k, v)| (k.clone(), quantity(v.as_str().expect("a string quantity"))))
            .collect(),
    )
}

async fn node_info(api: &Api<OpenStackMachineTemplate>, name: &str) -> Value {
    let t = api.get(name).await.expect("template");
    serde_json::to_value(&t).expect("json")["status"]["nodeInfo"].clone()
}

#[test]
fn machine_templates_tell_the_autoscaler_what_their_machines_will_be() {
    let Some(clouds) = cloud::clouds_yaml() else {
        return;
    };
    let api = match kube_server::api_server() {
        Ok(a) => a,
        Err(why) => {
            eprintln!("skipping: no API server: {why}");
            return;
        }
    };
    let clouds_yaml = std::fs::read(clouds).expect("clouds.yaml");
    infra::runtime().block_on(async {
        let client = api.client().await;
        crate::cloud_hooks::crds(&client).await;
        kube_server::apply_crds(&client, &api.capi_crds("cluster-api-v1.13.5")).await;
        let ns = kube_server::namespace(&client, "tpl").await;
        let admin = infra::checker(&clouds_yaml, cloud::ADMIN);
        let member = infra::checker(&clouds_yaml, cloud::MEMBER);
        let mut made = Made::default();
        let outcome = AssertUnwindSafe(cases(
            &client,
            &api.kubeconfig,
            &ns,
            &clouds_yaml,
            &admin,
            &member,
            &mut made,
        ))
        .catch_unwind()
        .await;
        if let Some(id) = made.flavor {
            let _ = admin
                .session
                .request(
                    Method::DELETE,
                    &["compute"],
                    &format!("/flavors/{id}"),
                    &[],
                    None,
                    &vec![],
                )
                .await;
        }
        if let Some(id) = made.image {
            let _ = member
                .session
                .request(
                    Method::DELETE,
                    &["image"],
                    &format!("/v2/images/{id}"),
                    &[],
                    None,
                    &vec![],
                )
                .await;
        }
        kube_server::delete_namespace(&client, &ns).await;
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    });
}

async fn cases(
    client: &Client,
    kubeconfig: &std::path::Path,
    ns: &str,
    clouds_yaml: &[u8],
    admin: &Clients,
    member: &Clients,
    made: &mut Made,
) {
    // A flavor with one vGPU, and an arm64 Linux image, both this run's own.
    let flavor_name = infra::unique("tpl-gpu");
    let f = call(
        admin,
        Method::POST,
        "compute",
        "/flavors",
        Some(json!({"flavor": {
        "name": flavor_name, "vcpus": 4, "ram": 6144, "disk": 30}})),
    )
    .await;
    let flavor_id = f["flavor"]["id"].as_str().expect("flavor id").to_string();
    made.flavor = Some(flavor_id.clone());
    call(
        admin,
        Method::POST,
        "compute",
        &format!("/flavors/{flavor_id}/os-extra_specs"),
        Some(json!({"extra_specs": {"resources:VGPU": "1"}})),
    )
    .await;
    let image_name = infra::unique("tpl-image");
    let i = call(
        member,
        Method::POST,
        "image",
        "/v2/images",
        Some(json!({
        "name": image_name, "disk_format": "raw", "container_format": "bare",
        "os_type": "linux", "architecture": "aarch64"})),
    )
    .await;
    let image_id = i["id"].as_str().expect("image id").to_string();
    made.image = Some(image_id.clone());

    // The cluster the templates belong to: its Cluster names its OpenStackCluster,
    // whose identity is the member's.
    let text = std::str::from_utf8(clouds_yaml).expect("UTF-8");
    let all: Value = serde_saphyr::from_str(text).expect("clouds.yaml");
    let entry = json!({"clouds": {"openstack": all["clouds"][cloud::MEMBER].clone()}});
    kube_server::identity_secret(client, ns, "tpl-creds", &entry.to_string()).await;
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster");
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk));
    for (name, paused) in [("tpl", false), ("tpl-paused", true)] {
        clusters
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"paused": paused,
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "OpenStackCluster", "name": "tpl-x7k2p"}}}))
                .unwrap(),
            )
            .await
            .expect("Cluster");
    }
    let oscs: Api<OpenStackCluster> = Api::namespaced(client.clone(), ns);
    oscs.create(&PostParams::default(), &serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster",
        "metadata": {"name": "tpl-x7k2p", "namespace": ns},
        "spec": {"identityRef": {"type": "Secret", "name": "tpl-creds", "cloudName": "openstack"}}
    })).unwrap())
    .await
    .expect("OpenStackCluster");

    let templates: Api<OpenStackMachineTemplate> = Api::namespaced(client.clone(), ns);
    let template = |name: &str, labels: Value, spec: Value| -> OpenStackMachineTemplate {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachineTemplate",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"template": {"spec": spec}}}))
        .unwrap()
    };
    let of_cluster = json!({"cluster.x-k8s.io/cluster-name": "tpl"});
    for t in [
        template(
            "tpl-md-0",
            of_cluster.clone(),
            json!({"flavor": "m1.medium",
            "image": {"filter": {"name": image_name}}}),
        ),
        template(
            "tpl-gpu",
            of_cluster.clone(),
            json!({"flavor": flavor_name,
            "image": {"id": image_id}, "rootVolume": {"sizeGiB": 25}}),
        ),
        template(
            "tpl-paused",
            json!({"cluster.x-k8s.io/cluster-name": "tpl-paused"}),
            json!({"flavor": "m1.medium", "image": {"id": image_id}}),
        ),
        template(
            "tpl-orphan",
            json!({}),
            json!({"flavor": "m1.medium",
            "image": {"id": image_id}}),
        ),
    ] {
        templates
            .create(&PostParams::default(), &t)
            .await
            .expect("template");
    }

    let _r = Replica::start(kubeconfig, ns, "tpl-lease", &[]);
    let mut md = None;
    let mut gpu = None;
    kube_server::wait_up_to(
        Duration::from_secs(90),
        "both templates' capacity",
        async || {
            md = capacity(&templates, "tpl-md-0").await;
            gpu = capacity(&templates, "tpl-gpu").await;
            md.is_some() && gpu.is_some()
        },
    )
    .await;
    let (md, gpu) = (md.unwrap(), gpu.unwrap());
    // The cloud's m1.medium: 2 vCPUs, 4096 MiB, a 40 GB disk.
    let gib = 1u64 << 30;
    assert_eq!(
        md,
        BTreeMap::from([
            ("cpu".to_string(), 2),
            ("ephemeral-storage".to_string(), 40 * gib),
            ("memory".to_string(), 4096 << 20),
            ("storage".to_string(), 40 * gib),
        ])
    );
    // The vGPU flavor with a 25 GiB root volume in place of its 30 GB disk.
    assert_eq!(
        gpu,
        BTreeMap::from([
            ("cpu".to_string(), 4),
            ("ephemeral-storage".to_string(), 25 * gib),
            ("memory".to_string(), 6144 << 20),
            ("nvidia.com/gpu".to_string(), 1),
            ("storage".to_string(), 25 * gib),
        ])
    );
    // The autoscaler scales from zero when cpu and memory are both known.
    assert!(md.contains_key("cpu") && md.contains_key("memory"));
    assert_eq!(
        node_info(&templates, "tpl-md-0").await,
        json!({"operatingSystem": "linux", "architecture": "arm64"})
    );
    assert_eq!(
        node_info(&templates, "tpl-gpu").await,
        json!({"operatingSystem": "linux", "architecture": "arm64"})
    );
    assert_eq!(
        capacity(&templates, "tpl-orphan").await,
        None,
        "a template of no cluster got a status"
    );
    assert_eq!(
        capacity(&templates, "tpl-paused").await,
        None,
        "a template of a paused cluster got a status"
    );

    // The image becomes x86_64: the next look at the template says so.
    let _ = member
        .session
        .request(
            Method::PATCH,
            &["image"],
            &format!("/v2/images/{image_id}"),
            &[],
            Some(&json!([{"op": "replace", "path": "/architecture", "value": "x86_64"}])),
            &vec![(
                "content-type",
                "application/openstack-images-v2.1-json-patch".to_string(),
            )],
        )
        .await
        .expect("image property changed");
    templates
        .patch(
            "tpl-md-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"touched": "1"}}})),
        )
        .await
        .expect("annotate");
    kube_server::wait_up_to(
        Duration::from_secs(60),
        "the new architecture",
        async || node_info(&templates, "tpl-md-0").await["architecture"] == "amd64",
    )
    .await;
}
