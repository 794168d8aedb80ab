//! The read-only watch every replica runs, leader or not, so that the hook
//! handlers of every replica answer from current OpenStackClusters and
//! OpenStackMachines. It never writes to the apiserver.

use std::collections::HashSet;
use std::future::Future;

use futures::StreamExt;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};

use crate::hooks::results::{ClusterResult, ClusterResults};
use crate::infra::api::names::CLUSTER_NAME_LABEL;
use crate::infra::api::{OpenStackCluster, OpenStackMachine};
use crate::infra::bootstrap::MachineFacts;

/// Applies OpenStackCluster watch events to the store.
#[derive(Default)]
pub struct ClusterFeed {
    listing: HashSet<(String, String)>,
}

impl ClusterFeed {
    pub fn apply(&mut self, results: &ClusterResults, event: Event<OpenStackCluster>) {
        let key = |o: &OpenStackCluster| (o.namespace().unwrap_or_default(), o.name_any());
        match event {
            Event::Init => self.listing.clear(),
            Event::InitApply(o) => {
                let (ns, name) = key(&o);
                results.set(&ns, &name, ClusterResult::from_cluster(&o));
                self.listing.insert((ns, name));
            }
            Event::InitDone => {
                results.retain_clusters(&self.listing);
                self.listing.clear();
                results.set_clusters_synced();
            }
            Event::Apply(o) => {
                let (ns, name) = key(&o);
                results.set(&ns, &name, ClusterResult::from_cluster(&o));
            }
            Event::Delete(o) => {
                let (ns, name) = key(&o);
                results.remove(&ns, &name);
            }
        }
    }
}

/// Applies OpenStackMachine watch events to the store.
#[derive(Default)]
pub struct MachineFeed {
    listing: HashSet<(String, String)>,
}

impl MachineFeed {
    pub fn apply(&mut self, results: &ClusterResults, event: Event<OpenStackMachine>) {
        match event {
            Event::Init => self.listing.clear(),
            Event::InitApply(o) => {
                let ns = o.namespace().unwrap_or_default();
                if let Some(f) = MachineFacts::from_machine(&o) {
                    self.listing.insert((ns.clone(), f.name.clone()));
                    results.set_machine(&ns, f);
                }
            }
            Event::InitDone => {
                results.retain_machines(&self.listing);
                self.listing.clear();
                results.set_machines_synced();
            }
            Event::Apply(o) => {
                let ns = o.namespace().unwrap_or_default();
                match MachineFacts::from_machine(&o) {
                    Some(f) => {
                        results.set_machine(&ns, f);
                    }
                    None => results.remove_machine(&ns, &o.name_any()),
                }
            }
            Event::Delete(o) => {
                results.remove_machine(&o.namespace().unwrap_or_default(), &o.name_any())
            }
        }
    }
}

/// Watches until `shutdown` resolves. Watch errors are retried with kube's
/// default backoff; the store keeps its last state meanwhile.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    results: ClusterResults,
    shutdown: impl Future<Output = ()>,
) {
    let (clusters, machines): (Api<OpenStackCluster>, Api<OpenStackMachine>) = match &namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client, ns),
        ),
        None => (Api::all(client.clone()), Api::all(client)),
    };
    // Lists in the controllers' page size: pages of whole objects are most of the
    // memory while the lists run.
    let cluster_events =
        watcher::watcher(clusters, crate::kubernetes::watch::config()).default_backoff();
    let machine_events = watcher::watcher(
        machines,
        crate::kubernetes::watch::config().labels(CLUSTER_NAME_LABEL),
    )
    .default_backoff();
    let feed_clusters = {
        let results = results.clone();
        let mut feed = ClusterFeed::default();
        cluster_events.for_each(move |e| {
            match e {
                Ok(e) => feed.apply(&results, e),
                Err(e) => tracing::warn!(error = %e, "watching OpenStackClusters"),
            }
            async {}
        })
    };
    let feed_machines = {
        let mut feed = MachineFeed::default();
        machine_events.for_each(move |e| {
            match e {
                Ok(e) => feed.apply(&results, e),
                Err(e) => tracing::warn!(error = %e, "watching OpenStackMachines"),
            }
            async {}
        })
    };
    tracing::info!(
        namespace = namespace.as_deref().unwrap_or("<all>"),
        "watching OpenStackClusters and OpenStackMachines for the hooks"
    );
    tokio::select! {
        _ = futures::future::join(feed_clusters, feed_machines) => {}
        _ = shutdown => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::OpenStackClusterSpec;
    use serde_json::json;

    fn osc(name: &str) -> OpenStackCluster {
        let mut o = OpenStackCluster::new(name, OpenStackClusterSpec::default());
        o.metadata.namespace = Some("ns".into());
        o.metadata.managed_fields = Some(vec![Default::default()]);
        o
    }

    fn osm(name: &str, labelled: bool) -> OpenStackMachine {
        let labels = if labelled {
            json!({"cluster.x-k8s.io/cluster-name": "prod"})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachine",
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"flavor": "m1.small", "image": {"id": "i"}}
        }))
        .unwrap()
    }

    #[test]
    fn a_relist_drops_what_disappeared_meanwhile() {
        let r = ClusterResults::new();
        let mut f = ClusterFeed::default();
        f.apply(&r, Event::Init);
        f.apply(&r, Event::InitApply(osc("a")));
        f.apply(&r, Event::InitApply(osc("b")));
        assert!(!r.is_synced());
        f.apply(&r, Event::InitDone);
        let stored = r.get("ns", "a").unwrap().object.unwrap().decode().unwrap();
        assert!(
            stored.metadata.managed_fields.is_none(),
            "not kept in memory"
        );
        // The watch broke; b was deleted before the new list.
        f.apply(&r, Event::Init);
        f.apply(&r, Event::InitApply(osc("a")));
        f.apply(&r, Event::InitDone);
        assert!(r.get("ns", "b").is_none());
        f.apply(&r, Event::Delete(osc("a")));
        assert!(r.is_empty());

        let mut m = MachineFeed::default();
        m.apply(&r, Event::Init);
        m.apply(&r, Event::InitApply(osm("m1", true)));
        m.apply(&r, Event::InitApply(osm("m2", true)));
        m.apply(&r, Event::InitDone);
        assert!(r.is_synced());
        assert_eq!(r.machines("ns", "prod").len(), 2);
        m.apply(&r, Event::Apply(osm("m2", false)));
        m.apply(&r, Event::Delete(osm("m1", true)));
        assert!(r.machines("ns", "prod").is_empty());
    }
}
