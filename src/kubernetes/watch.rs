//! The controllers' watches, shaped for memory: at 1,000 clusters and 3,000 machines
//! the watch caches are most of the process.
//!
//! - The OpenStackCluster and OpenStackMachine caches hold each object without what no
//!   reconcile reads: `metadata.managedFields` (as large as spec and status together
//!   for server-side applied objects) and kubectl's last-applied copy of the object.
//! - CAPI's Clusters and Machines are watched for their metadata only, and mapped to
//!   the infrastructure object through its owner reference in the cache; their spec
//!   and status are read by GET when a reconcile needs them.
//! - The initial list arrives page by page, so no more than one page of whole objects
//!   is held before trimming.
//!
//! A change to an object's status alone (most of them our own writes) starts no
//! reconcile, as in CAPO: the cache still takes it, and what the reconcile does next
//! was already decided by the pass that wrote it.

use std::collections::hash_map::DefaultHasher;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};

use futures::Stream;
use kube::api::{ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{predicates, watcher, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// CAPI's and CAPO's sharding label: with `--watch-filter=V`, only objects whose
/// label is `V` are reconciled, so several managers can split the clusters.
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";

/// kubectl's client-side apply copy of the whole object.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Objects per list request while the caches fill, unless `--watch-page-size` says
/// otherwise; a page of whole objects is the most a watch holds before trimming. At
/// 1,000 clusters and 3,000 machines, pages of 50 instead of 100 left 5 MiB less
/// memory in use after the first sync (BENCHMARKS.md), for a few seconds more of it.
pub const PAGE_SIZE: u32 = 50;

static PAGE: AtomicU32 = AtomicU32::new(PAGE_SIZE);

/// Sets the page size of every watch started afterwards (the process does it once,
/// from its flags, before the first watch).
pub fn set_page_size(objects: u32) {
    PAGE.store(objects.max(1), Ordering::Relaxed);
}

/// Drops what no reconcile reads before an object enters a cache.
pub fn trim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// The watch settings every watch uses.
///
/// Not streaming lists (`sendInitialEvents`): they would hold no page at all, but an
/// API server needs the WatchList feature and etcd's watch progress requests for them,
/// and without those the watch fails instead of falling back.
pub fn config() -> watcher::Config {
    watcher::Config::default().page_size(PAGE.load(Ordering::Relaxed))
}

/// The label selector of `--watch-filter`: the label equal to `filter`.
pub fn filter_selector(filter: &str) -> String {
    format!("{WATCH_FILTER_LABEL}={filter}")
}

/// A trimmed cache of `K` and the stream of its changed objects, which a controller
/// takes as its trigger (the stream also fills the cache). With a `filter`, only
/// objects carrying it as their watch-filter label are listed and watched: every
/// other trigger maps through this cache, and kube's controller skips what is not
/// in it, so nothing outside the shard is reconciled.
pub fn cached<K>(
    api: Api<K>,
    filter: Option<&str>,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let config = match filter {
        Some(f) => config().labels(&filter_selector(f)),
        None => config(),
    };
    let stream = watcher(api, config)
        .default_backoff()
        .modify(trim::<K>)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(beyond_status::<K>, Default::default());
    (reader, stream)
}

/// A hash of everything a reconcile reacts to: the spec (through `generation`),
/// labels, annotations, finalizers, owners and the deletion mark; not the status.
pub fn beyond_status<K: Resource>(obj: &K) -> Option<u64> {
    let meta = obj.meta();
    let mut h = DefaultHasher::new();
    meta.generation.hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    meta.finalizers.hash(&mut h);
    for o in meta.owner_references.iter().flatten() {
        (&o.api_version, &o.kind, &o.name, &o.uid).hash(&mut h);
    }
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(&mut h);
    Some(h.finish())
}

/// Metadata-only watch of a CAPI kind (`resource`), in `namespace` or everywhere,
/// passing on only objects whose spec changed (`generation`: pause, bootstrap data,
/// deletion). CAPI rewrites their status often, and nothing in it starts a reconcile.
pub fn metadata(
    client: Client,
    namespace: Option<&str>,
    resource: &ApiResource,
) -> impl Stream<Item = Result<PartialObjectMeta<DynamicObject>, watcher::Error>> + Send + 'static {
    let api: Api<PartialObjectMeta<DynamicObject>> = match namespace {
        Some(ns) => Api::namespaced_with(client, ns, resource),
        None => Api::all_with(client, resource),
    };
    watcher(api, config())
        .default_backoff()
        .modify(trim::<PartialObjectMeta<DynamicObject>>)
        .touched_objects()
        .predicate_filter(predicates::generation, Default::default())
}

/// Metadata-only changes, deletions included, of the objects of `K` that carry
/// `label` (any value).
pub fn labelled_metadata<K>(
    api: Api<PartialObjectMeta<K>>,
    label: &str,
) -> impl Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    watcher(api, config().labels(label))
        .default_backoff()
        .modify(trim::<PartialObjectMeta<K>>)
        .touched_objects()
}

/// Objects of `K` as they were when they were deleted (their metadata only): what a
/// reconcile of their siblings may be waiting for. Only the watch's delete events
/// count; the object they carry is the last stored one, finalizers and all.
pub fn deleted<K>(
    api: Api<PartialObjectMeta<K>>,
) -> impl Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    use futures::TryStreamExt;
    watcher(api, config())
        .default_backoff()
        .try_filter_map(|event| {
            std::future::ready(Ok(match event {
                watcher::Event::Delete(o) => Some(o),
                _ => None,
            }))
        })
}

/// The cached control-plane siblings of a control-plane object that went: the
/// others in its namespace with the same cluster label and the control-plane label.
pub fn control_plane_siblings<K>(cache: &Store<K>, gone: &impl ResourceExt) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    use crate::infra::api::names::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL};
    let labels = gone.labels();
    let (Some(cluster), true) = (
        labels.get(CLUSTER_NAME_LABEL),
        labels.contains_key(CONTROL_PLANE_LABEL),
    ) else {
        return Vec::new();
    };
    let (ns, name) = (gone.namespace(), gone.name_any());
    cache
        .state_filter(|o| {
            o.namespace() == ns
                && o.name_any() != name
                && o.labels().get(CLUSTER_NAME_LABEL) == Some(cluster)
                && o.labels().contains_key(CONTROL_PLANE_LABEL)
                && o.meta().deletion_timestamp.is_none()
        })
        .iter()
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

/// The cached objects in `owner`'s namespace that name it as their owner of `kind`
/// (CAPI's own references), or, before CAPI set the reference, carry `label` with
/// its name.
pub fn owned_by<K>(
    cache: &Store<K>,
    kind: &str,
    label: Option<&str>,
    owner: &impl ResourceExt,
) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    let (Some(ns), Some(name)) = (owner.namespace(), owner.meta().name.clone()) else {
        return Vec::new();
    };
    cache
        .state_filter(|o| {
            o.namespace().as_deref() == Some(ns.as_str())
                && (o
                    .owner_references()
                    .iter()
                    .any(|r| r.kind == kind && r.name == name && is_capi(&r.api_version))
                    || label.is_some_and(|l| o.labels().get(l) == Some(&name)))
        })
        .iter()
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

fn is_capi(api_version: &str) -> bool {
    api_version.split('/').next() == Some(crate::kubernetes::capi::GROUP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::{OpenStackMachine, OpenStackMachineSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference};
    use kube::runtime::watcher::Event;

    #[test]
    fn trimming_keeps_what_reconciles_read() {
        let mut m = OpenStackMachine::new("m", OpenStackMachineSpec::default());
        m.metadata.namespace = Some("ns".into());
        m.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            ..Default::default()
        }]);
        m.metadata.annotations = Some(
            [
                (LAST_APPLIED.to_string(), "{...}".to_string()),
                ("cluster.x-k8s.io/paused".to_string(), String::new()),
            ]
            .into(),
        );
        m.metadata.finalizers = Some(vec!["f".into()]);
        m.metadata.resource_version = Some("7".into());
        m.metadata.uid = Some("u".into());
        trim(&mut m);
        assert_eq!(m.metadata.managed_fields, None);
        assert_eq!(
            m.annotations().keys().collect::<Vec<_>>(),
            vec!["cluster.x-k8s.io/paused"]
        );
        assert_eq!(m.finalizers(), ["f".to_string()]);
        assert_eq!(m.resource_version().as_deref(), Some("7"));
        assert_eq!(m.uid().as_deref(), Some("u"));

        let mut only_last_applied = OpenStackMachine::new("m", OpenStackMachineSpec::default());
        only_last_applied.metadata.annotations =
            Some([(LAST_APPLIED.to_string(), "{}".to_string())].into());
        trim(&mut only_last_applied);
        assert_eq!(only_last_applied.metadata.annotations, None);
    }

    fn machine(
        ns: &str,
        name: &str,
        owner: Option<(&str, &str)>,
        cluster: &str,
    ) -> OpenStackMachine {
        let mut m = OpenStackMachine::new(name, OpenStackMachineSpec::default());
        m.metadata.namespace = Some(ns.into());
        m.metadata.labels = Some(
            [(
                "cluster.x-k8s.io/cluster-name".to_string(),
                cluster.to_string(),
            )]
            .into(),
        );
        m.metadata.owner_references = owner.map(|(api_version, owner)| {
            vec![OwnerReference {
                api_version: api_version.into(),
                kind: "Machine".into(),
                name: owner.into(),
                uid: "u".into(),
                ..Default::default()
            }]
        });
        m
    }

    #[test]
    fn a_gone_control_plane_machine_wakes_its_siblings_only() {
        let (reader, mut writer) = reflector::store::<OpenStackMachine>();
        let cp = |ns: &str, name: &str, cluster: &str| {
            let mut m = machine(ns, name, None, cluster);
            m.labels_mut()
                .insert("cluster.x-k8s.io/control-plane".into(), String::new());
            m
        };
        let mut deleting = cp("a", "cp-3", "c");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        for m in [
            cp("a", "cp-1", "c"),
            cp("a", "cp-2", "c"),
            deleting,
            cp("a", "other-1", "d"),
            cp("b", "cp-1", "c"),
            machine("a", "md-1", None, "c"),
        ] {
            writer.apply_watcher_event(&Event::Apply(m));
        }
        let gone = cp("a", "cp-2", "c");
        assert_eq!(
            control_plane_siblings(&reader, &gone),
            vec![ObjectRef::new("cp-1").within("a")]
        );
        let worker = machine("a", "md-2", None, "c");
        assert!(control_plane_siblings(&reader, &worker).is_empty());
    }

    #[test]
    fn owners_map_to_the_cached_objects_they_own() {
        let (reader, mut writer) = reflector::store::<OpenStackMachine>();
        for m in [
            machine(
                "a",
                "osm-1",
                Some(("cluster.x-k8s.io/v1beta2", "machine-1")),
                "c",
            ),
            machine(
                "b",
                "osm-1",
                Some(("cluster.x-k8s.io/v1beta2", "machine-1")),
                "c",
            ),
            machine("a", "osm-2", Some(("example.com/v1", "machine-1")), "c"),
            machine("a", "osm-3", None, "c"),
        ] {
            writer.apply_watcher_event(&Event::Apply(m));
        }
        let owner: PartialObjectMeta<DynamicObject> = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "machine-1", "namespace": "a"}
        }))
        .unwrap();
        let found = owned_by(&reader, "Machine", None, &owner);
        assert_eq!(found, vec![ObjectRef::new("osm-1").within("a")]);
        let cluster: PartialObjectMeta<DynamicObject> = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "a"}
        }))
        .unwrap();
        let mut by_label = owned_by(
            &reader,
            "Cluster",
            Some("cluster.x-k8s.io/cluster-name"),
            &cluster,
        );
        by_label.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(
            by_label,
            ["osm-1", "osm-2", "osm-3"]
                .map(|n| ObjectRef::new(n).within("a"))
                .to_vec()
        );
    }
}
