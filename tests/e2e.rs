//! End to end against a real apiserver, opt-in: set `STACKHOOK_E2E_KUBECONFIG`
//! to a kubeconfig (a kind or k3d cluster is enough). Without it the test
//! prints a skip line and passes.
//!
//! It creates a namespace `stackhook-e2e-<suffix>`, an identity Secret, a CAPI
//! Cluster and an owned OpenStackCluster, runs the OpenStackCluster controller
//! in-process (watching only that namespace) with a cloud half that
//! converges at once, waits for `status.ready` and the finalizer, deletes the
//! object and waits for it to go. CRDs it had to install (the OpenStackCluster
//! CRD from the Rust types; minimal Cluster and Machine CRDs when CAPI is not
//! installed) are removed again; CRDs that were already there are left as
//! they were. Do not point it at a cluster where CAPO reconciles
//! OpenStackClusters: both controllers would act on the test object.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use tokio::sync::watch;

use stackhook::controller::capi::CapiResources;
use stackhook::controller::cluster::{self, ClusterContext, Timing};
use stackhook::controller::leader;
use stackhook::hooks::ClusterResults;
use stackhook::infra::api::extensions::{
    ClusterStatusExtensions, LoadBalancersStatus, NtpStatus, PlatformStatus, VirtualIp,
};
use stackhook::infra::api::{OpenStackCluster, OpenStackClusterStatus};
use stackhook::infra::seam::{
    ClusterInfra, ClusterOutcome, ClusterScope, DeleteProgress, IdentitySecret, InfraError,
    StatusSink,
};
use stackhook::metrics::ControllerMetrics;

const FINALIZER: &str = "openstackcluster.infrastructure.cluster.x-k8s.io";
const OSC_CRD: &str = "openstackclusters.infrastructure.cluster.x-k8s.io";
const CLUSTER_CRD: &str = "clusters.cluster.x-k8s.io";
const MACHINE_CRD: &str = "machines.cluster.x-k8s.io";
const WAIT: Duration = Duration::from_secs(90);

/// Converges in one pass; deletion takes two (one "still going" requeue).
#[derive(Clone, Default)]
struct ConvergingInfra {
    deletes: Arc<AtomicUsize>,
    reconciles: Arc<AtomicUsize>,
}

impl ClusterInfra for ConvergingInfra {
    async fn reconcile(
        &self,
        scope: &ClusterScope,
        _cluster: &OpenStackCluster,
        identity: &IdentitySecret,
        sink: &impl StatusSink,
    ) -> Result<ClusterOutcome, InfraError> {
        self.reconciles.fetch_add(1, Ordering::SeqCst);
        if identity.clouds_yaml.is_empty() {
            return Err(InfraError::User {
                reason: "InvalidIdentity".into(),
                message: "empty clouds.yaml".into(),
            });
        }
        let mut status: OpenStackClusterStatus = serde_json::from_value(json!({
            "network": {"id": "e2e-net", "name": format!("k8s-clusterapi-cluster-{}-{}", scope.namespace, scope.cluster_name)}
        }))
        .map_err(|e| InfraError::Transient {
            reason: "Test".into(),
            message: e.to_string(),
            retry_after: None,
        })?;
        sink.save(&status).await?;
        status.ready = true;
        status.extensions = Some(ClusterStatusExtensions {
            load_balancers: Some(LoadBalancersStatus {
                control_plane: Some(VirtualIp {
                    vip: Some("192.0.2.10".into()),
                }),
                ingress: None,
            }),
            platform: Some(PlatformStatus {
                ntp: Some(NtpStatus {
                    server: Some("192.0.2.123".into()),
                }),
                management: None,
            }),
            ..Default::default()
        });
        Ok(ClusterOutcome {
            status,
            control_plane_endpoint: Some(("192.0.2.10".into(), 6443)),
            requeue_after: None,
        })
    }

    async fn delete(
        &self,
        _scope: &ClusterScope,
        _cluster: &OpenStackCluster,
        _identity: &IdentitySecret,
        _sink: &impl StatusSink,
    ) -> Result<DeleteProgress, InfraError> {
        if self.deletes.fetch_add(1, Ordering::SeqCst) == 0 {
            return Ok(DeleteProgress::Requeue {
                after: Duration::from_secs(1),
                reason: "load balancer deleting".into(),
            });
        }
        Ok(DeleteProgress::Done)
    }
}

fn minimal_capi_crd(kind: &str, plural: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.cluster.x-k8s.io"), "labels": {"stackhook-e2e": "true"}},
        "spec": {
            "group": "cluster.x-k8s.io",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    })
}

/// Creates the CRD when it is absent; returns whether it did.
async fn ensure_crd(client: &Client, name: &str, crd: Value) -> bool {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    if api.get_opt(name).await.expect("reading CRDs").is_some() {
        println!("e2e: using the installed CRD {name}");
        return false;
    }
    let crd: CustomResourceDefinition = serde_json::from_value(crd).expect("CRD");
    api.create(&PostParams::default(), &crd)
        .await
        .unwrap_or_else(|e| panic!("creating CRD {name}: {e}"));
    tokio::time::timeout(
        WAIT,
        await_condition(api, name, conditions::is_crd_established()),
    )
    .await
    .unwrap_or_else(|_| panic!("CRD {name} not established in time"))
    .expect("watching the CRD");
    println!("e2e: installed CRD {name}");
    true
}

async fn wait_for<F>(what: &str, mut check: F)
where
    F: AsyncFnMut() -> bool,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstackcluster_lifecycle_against_a_real_apiserver() {
    let Ok(path) = std::env::var("STACKHOOK_E2E_KUBECONFIG") else {
        println!("skipping e2e: STACKHOOK_E2E_KUBECONFIG is not set");
        return;
    };
    let kc = Kubeconfig::read_from(&path).expect("reading STACKHOOK_E2E_KUBECONFIG");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    let client = Client::try_from(config).expect("client");

    let suffix = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            & 0xff_ffff
    );
    let ns = format!("stackhook-e2e-{suffix}");

    let osc_crd = stackhook::infra::crds()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(OSC_CRD))
        .expect("OpenStackCluster CRD generated");
    let mut created_crds = Vec::new();
    if ensure_crd(&client, OSC_CRD, serde_json::to_value(&osc_crd).unwrap()).await {
        created_crds.push(OSC_CRD);
    }
    if ensure_crd(
        &client,
        CLUSTER_CRD,
        minimal_capi_crd("Cluster", "clusters"),
    )
    .await
    {
        created_crds.push(CLUSTER_CRD);
    }
    if ensure_crd(
        &client,
        MACHINE_CRD,
        minimal_capi_crd("Machine", "machines"),
    )
    .await
    {
        created_crds.push(MACHINE_CRD);
    }

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": ns, "labels": {"stackhook-e2e": "true"}}}),
            )
            .unwrap(),
        )
        .await
        .expect("creating the namespace");
    println!("e2e: namespace {ns}");

    let outcome = AssertUnwindSafe(scenario(client.clone(), &ns))
        .catch_unwind()
        .await;
    cleanup(&client, &ns, &created_crds).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn scenario(client: Client, ns: &str) {
    let capi = CapiResources::discover(&client).await.expect("discovery");
    println!("e2e: cluster.x-k8s.io {}", capi.cluster.version);

    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "e2e-creds"},
                "stringData": {"clouds.yaml": "clouds:\n  openstack:\n    auth:\n      auth_url: https://keystone.invalid/v3\n"}
            }))
            .unwrap(),
        )
        .await
        .expect("creating the Secret");

    let infra_ref = if capi.cluster.version == "v1beta1" {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackCluster", "name": "e2e", "namespace": ns})
    } else {
        json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "OpenStackCluster", "name": "e2e"})
    };
    let clusters: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &capi.cluster);
    let cluster: DynamicObject = serde_json::from_value(json!({
        "apiVersion": capi.cluster.api_version,
        "kind": "Cluster",
        "metadata": {"name": "e2e", "namespace": ns},
        "spec": {"infrastructureRef": infra_ref}
    }))
    .unwrap();
    let cluster = clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("creating the Cluster");

    let oscs: Api<OpenStackCluster> = Api::namespaced(client.clone(), ns);
    let osc: OpenStackCluster = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "OpenStackCluster",
        "metadata": {
            "name": "e2e", "namespace": ns,
            "labels": {"cluster.x-k8s.io/cluster-name": "e2e"},
            "ownerReferences": [{
                "apiVersion": capi.cluster.api_version, "kind": "Cluster", "name": "e2e",
                "uid": cluster.uid().expect("Cluster uid"),
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {"identityRef": {"type": "Secret", "name": "e2e-creds", "cloudName": "openstack"}}
    }))
    .unwrap();
    oscs.create(&PostParams::default(), &osc)
        .await
        .expect("creating the OpenStackCluster");

    let infra = ConvergingInfra::default();
    let results = ClusterResults::new();
    let timing = Timing {
        backoff_base: Duration::from_millis(500),
        backoff_cap: Duration::from_secs(5),
        machines: Duration::from_secs(1),
        missing_cluster: Duration::from_secs(2),
        ..Timing::default()
    };
    let ctx = Arc::new(ClusterContext::new(
        client.clone(),
        infra.clone(),
        capi,
        results.clone(),
        ControllerMetrics::default(),
        timing,
    ));
    let (stop_tx, stop_rx) = watch::channel(false);
    let ns_owned = ns.to_string();
    let controller = tokio::spawn(async move {
        cluster::run(ctx, Some(&ns_owned), 2, leader::stopped(stop_rx)).await;
    });

    wait_for("status.ready, the finalizer and the endpoint", async || {
        let Ok(o) = oscs.get("e2e").await else {
            return false;
        };
        o.finalizers().iter().any(|f| f == FINALIZER)
            && o.status.as_ref().is_some_and(|s| s.ready)
            && o.spec.control_plane_endpoint.is_some()
    })
    .await;
    let o = oscs.get("e2e").await.unwrap();
    let status = o.status.clone().unwrap();
    assert_eq!(
        status.network.as_ref().map(|n| n.network.id.as_str()),
        Some("e2e-net")
    );
    assert_eq!(
        status
            .extensions
            .as_ref()
            .and_then(|e| e.platform.as_ref())
            .and_then(|p| p.ntp.as_ref())
            .and_then(|n| n.server.as_deref()),
        Some("192.0.2.123"),
        "status.extensions survived the CRD schema"
    );
    assert!(status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True"));
    let ep = o.spec.control_plane_endpoint.clone().unwrap();
    assert_eq!((ep.host.as_str(), ep.port), ("192.0.2.10", 6443));
    let r = results.get(ns, "e2e").expect("result stored");
    assert!(r.ready);
    assert_eq!(r.control_plane_vip.as_deref(), Some("192.0.2.10"));
    println!(
        "e2e: ready after {} reconcile(s)",
        infra.reconciles.load(Ordering::SeqCst)
    );

    oscs.delete("e2e", &DeleteParams::default())
        .await
        .expect("deleting the OpenStackCluster");
    wait_for("the OpenStackCluster to be gone", async || {
        matches!(oscs.get_opt("e2e").await, Ok(None))
    })
    .await;
    assert!(
        infra.deletes.load(Ordering::SeqCst) >= 2,
        "delete requeued once, then done"
    );
    assert!(results.get(ns, "e2e").is_none());

    let _ = stop_tx.send(true);
    tokio::time::timeout(Duration::from_secs(30), controller)
        .await
        .expect("controller stopped")
        .expect("controller task");
}

async fn cleanup(client: &Client, ns: &str, created_crds: &[&str]) {
    // A failed run may leave the finalizer; nothing else would remove it.
    let oscs: Api<OpenStackCluster> = Api::namespaced(client.clone(), ns);
    if let Ok(Some(_)) = oscs.get_opt("e2e").await {
        let _ = oscs
            .patch(
                "e2e",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if let Err(e) = namespaces.delete(ns, &DeleteParams::default()).await {
        println!("e2e: deleting namespace {ns}: {e}");
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        match namespaces.get_opt(ns).await {
            Ok(None) => break,
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in created_crds {
        if let Err(e) = crds.delete(name, &DeleteParams::default()).await {
            println!("e2e: deleting CRD {name}: {e}");
        }
    }
}
