//! Which Cluster API the management cluster runs, read from the Cluster CRD it serves.
//!
//! Discovery may list only hooks the calling CAPI knows (one unknown hook and CAPI
//! refuses the whole extension), and request and response shapes changed between
//! minors. clusterctl and the CAPI operator upgrade the CRDs before the controllers,
//! and a CAPI manager asks every extension for Discovery again when it starts, so
//! following this one CRD serves an upgraded CAPI its catalogue without a restart.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;

use crate::sdk::CapiVersion;

pub const CLUSTER_CRD: &str = "clusters.cluster.x-k8s.io";

/// The CAPI minor the hook server answers as; written by [`follow`], read per call,
/// and shown as the `stackhook_capi_minor_served` gauge.
#[derive(Debug)]
pub struct ServedCapi {
    minor: AtomicU16,
    gauge: Gauge,
}

impl ServedCapi {
    pub fn new(v: CapiVersion, gauge: Gauge) -> Arc<ServedCapi> {
        gauge.set(i64::from(v.minor));
        Arc::new(ServedCapi {
            minor: AtomicU16::new(v.minor),
            gauge,
        })
    }

    pub fn get(&self) -> CapiVersion {
        CapiVersion::new(self.minor.load(Ordering::Relaxed))
    }

    /// Returns the previous version when it changed.
    pub fn set(&self, v: CapiVersion) -> Option<CapiVersion> {
        let old = CapiVersion::new(self.minor.swap(v.minor, Ordering::Relaxed));
        self.gauge.set(i64::from(v.minor));
        (old != v).then_some(old)
    }
}

/// Each minor added fields to the `v1beta2` Cluster schema; the newest one present
/// names the release. A schema newer than all of them is served as the newest
/// supported minor.
const MARKERS: &[(u16, &[&str])] = &[
    (14, &["status", "controlPlane", "upgradePlan"]),
    (13, &["spec", "topology", "controlPlane", "taints"]),
    (
        12,
        &[
            "spec",
            "topology",
            "controlPlane",
            "healthCheck",
            "checks",
            "unhealthyMachineConditions",
        ],
    ),
];

fn has_path(schema: &JSONSchemaProps, path: &[&str]) -> bool {
    let mut at = schema;
    for key in path {
        match at.properties.as_ref().and_then(|p| p.get(*key)) {
            Some(next) => at = next,
            None => return false,
        }
    }
    true
}

/// The CAPI minor whose Cluster CRD this is: 1.10 serves no `v1beta2`, 1.11 the first.
pub fn from_cluster_crd(crd: &CustomResourceDefinition) -> CapiVersion {
    let v1beta2 = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == "v1beta2" && v.served)
        .and_then(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref());
    let Some(schema) = v1beta2 else {
        return CapiVersion::new(10);
    };
    MARKERS
        .iter()
        .find(|(_, path)| has_path(schema, path))
        .map(|(minor, _)| CapiVersion::new(*minor))
        .unwrap_or(CapiVersion::new(11))
}

/// Reads the Cluster CRD once. `None` when CAPI is not installed or the CRD cannot be
/// read (a warning says why).
pub async fn detect(client: &Client) -> Option<CapiVersion> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    match tokio::time::timeout(Duration::from_secs(10), api.get_opt(CLUSTER_CRD)).await {
        Ok(Ok(Some(crd))) => Some(from_cluster_crd(&crd)),
        Ok(Ok(None)) => {
            tracing::warn!(crd = CLUSTER_CRD, "Cluster API is not installed yet");
            None
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, crd = CLUSTER_CRD, "cannot read the Cluster CRD to learn the CAPI version");
            None
        }
        Err(_) => {
            tracing::warn!(crd = CLUSTER_CRD, "reading the Cluster CRD timed out");
            None
        }
    }
}

/// Keeps `served` at the version the Cluster CRD says until `stop` is raised.
pub async fn follow(client: Client, served: Arc<ServedCapi>, mut stop: watch::Receiver<bool>) {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={CLUSTER_CRD}"));
    let mut crds = watcher(api, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            next = crds.next() => match next {
                Some(Ok(crd)) => {
                    let now = from_cluster_crd(&crd);
                    if let Some(before) = served.set(now) {
                        tracing::info!(from = %before, to = %now, "the management cluster's CAPI changed; serving its hook catalogue");
                    }
                }
                Some(Err(e)) => tracing::warn!(error = %e, "watching the Cluster CRD"),
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(versions: serde_json::Value) -> CustomResourceDefinition {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": CLUSTER_CRD},
            "spec": {
                "group": "cluster.x-k8s.io",
                "names": {"kind": "Cluster", "plural": "clusters"},
                "scope": "Namespaced",
                "versions": versions,
            }
        }))
        .unwrap()
    }

    fn version(name: &str, served: bool, properties: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "name": name, "served": served, "storage": served,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": properties}}
        })
    }

    fn obj(props: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": props})
    }

    #[test]
    fn each_minor_is_told_by_the_fields_it_added() {
        let v1beta1 = version("v1beta1", true, serde_json::json!({}));
        assert_eq!(
            from_cluster_crd(&crd(serde_json::json!([v1beta1]))).minor,
            10
        );
        // v1beta2 present but not served is still 1.10.
        let unserved = version("v1beta2", false, serde_json::json!({}));
        assert_eq!(
            from_cluster_crd(&crd(serde_json::json!([v1beta1, unserved]))).minor,
            10
        );
        let topo = |cp: serde_json::Value| serde_json::json!({"spec": obj(serde_json::json!({"topology": obj(serde_json::json!({"controlPlane": obj(cp)}))}))});
        let v11 = version(
            "v1beta2",
            true,
            topo(serde_json::json!({"replicas": {"type": "integer"}})),
        );
        assert_eq!(
            from_cluster_crd(&crd(serde_json::json!([v1beta1, v11]))).minor,
            11
        );
        let v12 = version(
            "v1beta2",
            true,
            topo(
                serde_json::json!({"healthCheck": obj(serde_json::json!({"checks": obj(serde_json::json!({"unhealthyMachineConditions": {"type": "array"}}))}))}),
            ),
        );
        assert_eq!(
            from_cluster_crd(&crd(serde_json::json!([v1beta1, v12]))).minor,
            12
        );
        let v13 = version(
            "v1beta2",
            true,
            topo(serde_json::json!({"taints": {"type": "array"}})),
        );
        assert_eq!(
            from_cluster_crd(&crd(serde_json::json!([v1beta1, v13]))).minor,
            13
        );
        let v14 = version(
            "v1beta2",
            true,
            serde_json::json!({"status": obj(serde_json::json!({"controlPlane": obj(serde_json::json!({"upgradePlan": {"type": "array"}}))}))}),
        );
        assert_eq!(
            from_cluster_crd(&crd(serde_json::json!([v1beta1, v14]))).minor,
            14
        );
    }

    #[test]
    fn a_change_is_reported_once() {
        let gauge = Gauge::default();
        let s = ServedCapi::new(CapiVersion::new(10), gauge.clone());
        assert_eq!(gauge.get(), 10);
        assert_eq!(s.set(CapiVersion::new(13)), Some(CapiVersion::new(10)));
        assert_eq!(s.set(CapiVersion::new(13)), None);
        assert_eq!(s.get().minor, 13);
        assert_eq!(gauge.get(), 13);
    }
}
