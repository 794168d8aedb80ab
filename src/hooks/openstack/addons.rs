//! `addons` (AfterControlPlaneUpgrade): the control plane has reached a new
//! Kubernetes version, so the cloud-controller-manager and the Cinder CSI driver
//! move to that minor's release. The hook rewrites the addons' resource set for
//! the version and holds until CAPI's ClusterResourceSetBinding shows every
//! resource applied with the new content; then CAPI goes on to the workers.

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{CloudHooks, Target};
use crate::addons::install::{self, CloudFacts, ClusterFacts, InstallError};
use crate::addons::resource_set_name;
use crate::hooks::{Answer, LifecycleHandler};
use crate::infra::cluster::CloudSource;
use crate::kubernetes::capi;
use crate::kubernetes::identity::read_identity;
use crate::kubernetes::resource_set::{self, ResourceSetApi};
use crate::sdk::lifecycle::{LifecycleEvent, UpgradeVersions};
use crate::sdk::Hook;
use std::sync::Arc;

pub struct AddonsHandler(pub Arc<CloudHooks>);

impl LifecycleHandler for AddonsHandler {
    fn name(&self) -> &str {
        "addons"
    }

    fn hooks(&self) -> &[Hook] {
        &[Hook::AfterControlPlaneUpgrade]
    }

    fn handle<'a>(&'a self, event: &'a LifecycleEvent) -> BoxFuture<'a, Answer> {
        async move {
            let hooks = &self.0;
            let (namespace, cluster, osc) = match hooks.target(event) {
                Target::Found {
                    namespace,
                    cluster,
                    osc,
                } => (namespace, cluster, osc),
                Target::NotOpenStack | Target::Missing(_) => return Answer::Proceed(None),
                Target::Loading => return hooks.loading(),
            };
            let Some(addons) = osc.spec.extensions.as_ref().and_then(|e| e.addons.clone()) else {
                return Answer::Proceed(None);
            };
            let UpgradeVersions::Reached(version) = &event.versions else {
                return Answer::Proceed(None);
            };
            let blocked = |message: String| Answer::Block {
                retry_after_seconds: hooks.settings.blocked_retry_after_seconds,
                message,
            };
            let api = match hooks
                .resource_sets
                .get_or_try_init(|| ResourceSetApi::discover(&hooks.client))
                .await
            {
                Ok(Some(api)) => api,
                Ok(None) => {
                    return Answer::Proceed(Some(format!(
                        "no {} API: addons not managed here",
                        resource_set::GROUP
                    )))
                }
                Err(e) => return blocked(format!("discovering the addons API: {e}")),
            };
            let identity = match read_identity(&hooks.client, &osc).await {
                Ok(i) => i,
                Err(e) => return blocked(format!("addons: {e}")),
            };
            let facts = match hooks.clouds.clients_for(&identity) {
                Ok(clients) => {
                    CloudFacts::read(&*clients, identity.cacert.clone(), addons.cinder_csi()).await
                }
                Err(e) => Err(e),
            };
            let facts = match facts {
                Ok(f) => f,
                Err(e) => return blocked(format!("addons: reading the cloud: {e}")),
            };
            let provider =
                capi::cloud_provider_cluster_name(&osc, event.cluster.raw(), event.cluster.name());
            let of_cluster = ClusterFacts::of(event.cluster.raw(), &cluster, provider);
            let done = match install::ensure(
                &hooks.client,
                api,
                &osc,
                &of_cluster,
                &facts,
                Some(version),
            )
            .await
            {
                Ok(d) => d,
                Err(e @ (InstallError::Render(_) | InstallError::NoVersion)) => {
                    return blocked(format!("addons for Kubernetes {version}: {e}"))
                }
                Err(e) => return blocked(e.to_string()),
            };
            if !done.changes.is_empty() {
                tracing::info!(
                    cluster = %cluster,
                    namespace = %namespace,
                    kubernetes = %version,
                    written = ?done.changes.written,
                    "addons moved to the control plane's version"
                );
            }
            match resource_set::not_applied(&hooks.client, api, &namespace, &cluster, &done.rendered)
                .await
            {
                Ok(pending) if pending.is_empty() => Answer::Proceed(Some(format!(
                    "addons for Kubernetes {version} ({}) applied",
                    done.rendered.minor
                ))),
                Ok(pending) => Answer::Block {
                    retry_after_seconds: hooks.settings.running_retry_after_seconds,
                    message: format!(
                        "waiting for CAPI to apply {} of ClusterResourceSet {} for Kubernetes {version}",
                        pending.join(", "),
                        resource_set_name(&cluster)
                    ),
                },
                Err(e) => blocked(format!("reading the ClusterResourceSetBinding: {e}")),
            }
        }
        .boxed()
    }
}
