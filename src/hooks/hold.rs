//! Holds: an operator pauses a lifecycle step of one cluster with an annotation.
//!
//! `hooks.stackhook.io/hold-upgrade: "waiting for change window"` on a Cluster makes the
//! upgrade hooks answer "retry later" with a message quoting the reason; removing the
//! annotation releases the hold on the next call.

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{Answer, LifecycleHandler};
use crate::sdk::lifecycle::LifecycleEvent;
use crate::sdk::Hook;

pub const PREFIX: &str = "hooks.stackhook.io/";
/// Overrides the default wait for one cluster (seconds, 1..=3600).
pub const RETRY_ANNOTATION: &str = "hooks.stackhook.io/hold-retry-after-seconds";

/// The annotations (without prefix) that hold each hook, in the order they are reported.
pub fn hold_annotations(hook: Hook) -> &'static [&'static str] {
    match hook {
        Hook::BeforeClusterCreate => &["hold-create"],
        Hook::BeforeClusterUpgrade => &["hold-upgrade"],
        Hook::BeforeControlPlaneUpgrade => &["hold-upgrade", "hold-control-plane-upgrade"],
        Hook::AfterControlPlaneUpgrade => &["hold-after-control-plane-upgrade"],
        Hook::BeforeWorkersUpgrade => &["hold-upgrade", "hold-workers-upgrade"],
        Hook::AfterWorkersUpgrade => &["hold-after-workers-upgrade"],
        Hook::AfterClusterUpgrade => &["hold-after-upgrade"],
        Hook::BeforeClusterDelete => &["hold-delete"],
        _ => &[],
    }
}

pub const HOLDABLE: [Hook; 8] = [
    Hook::BeforeClusterCreate,
    Hook::BeforeClusterUpgrade,
    Hook::BeforeControlPlaneUpgrade,
    Hook::AfterControlPlaneUpgrade,
    Hook::BeforeWorkersUpgrade,
    Hook::AfterWorkersUpgrade,
    Hook::AfterClusterUpgrade,
    Hook::BeforeClusterDelete,
];

pub struct HoldHandler {
    default_retry_after_seconds: u32,
}

impl HoldHandler {
    pub fn new(default_retry_after_seconds: u32) -> Self {
        HoldHandler {
            default_retry_after_seconds: default_retry_after_seconds.max(1),
        }
    }

    /// Pure decision, so it can be tested without a server.
    pub fn evaluate(&self, event: &LifecycleEvent) -> Answer {
        let mut reasons = Vec::new();
        for short in hold_annotations(event.hook) {
            let key = format!("{PREFIX}{short}");
            if let Some(reason) = event.cluster.annotation(&key) {
                if reason.is_empty() {
                    reasons.push(format!("held by annotation {key}"));
                } else {
                    reasons.push(format!("held by annotation {key}: {reason:?}"));
                }
            }
        }
        if reasons.is_empty() {
            return Answer::Proceed(None);
        }
        let retry = event
            .cluster
            .annotation(RETRY_ANNOTATION)
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|v| (1..=3600).contains(v))
            .unwrap_or(self.default_retry_after_seconds);
        Answer::Block {
            retry_after_seconds: retry,
            message: reasons.join(", "),
        }
    }
}

impl LifecycleHandler for HoldHandler {
    fn name(&self) -> &str {
        "hold"
    }

    fn hooks(&self) -> &[Hook] {
        &HOLDABLE
    }

    fn handle<'a>(&'a self, event: &'a LifecycleEvent) -> BoxFuture<'a, Answer> {
        let answer = self.evaluate(event);
        async move { answer }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::cluster::Cluster;
    use crate::sdk::lifecycle::UpgradeVersions;
    use serde_json::json;

    fn event(hook: Hook, annotations: serde_json::Value) -> LifecycleEvent {
        LifecycleEvent {
            hook,
            settings: Default::default(),
            cluster: Cluster::from_value(
                json!({"metadata": {"name": "c", "annotations": annotations}}),
            )
            .unwrap(),
            versions: UpgradeVersions::None,
            control_plane_upgrades: vec![],
            workers_upgrades: vec![],
        }
    }

    #[test]
    fn holds_and_releases() {
        let h = HoldHandler::new(30);
        let held = event(
            Hook::BeforeClusterUpgrade,
            json!({"hooks.stackhook.io/hold-upgrade": "waiting for change window"}),
        );
        assert_eq!(
            h.evaluate(&held),
            Answer::Block {
                retry_after_seconds: 30,
                message: "held by annotation hooks.stackhook.io/hold-upgrade: \"waiting for change window\"".into()
            }
        );
        let released = event(Hook::BeforeClusterUpgrade, json!({}));
        assert_eq!(h.evaluate(&released), Answer::Proceed(None));
        // Another hook's annotation does not hold this one.
        let other = event(
            Hook::BeforeClusterDelete,
            json!({"hooks.stackhook.io/hold-upgrade": "x"}),
        );
        assert_eq!(h.evaluate(&other), Answer::Proceed(None));
    }

    #[test]
    fn retry_override_is_bounded() {
        let h = HoldHandler::new(30);
        let e = event(
            Hook::BeforeClusterDelete,
            json!({"hooks.stackhook.io/hold-delete": "", RETRY_ANNOTATION: "5"}),
        );
        assert_eq!(
            h.evaluate(&e),
            Answer::Block {
                retry_after_seconds: 5,
                message: "held by annotation hooks.stackhook.io/hold-delete".into()
            }
        );
        let e = event(
            Hook::BeforeClusterDelete,
            json!({"hooks.stackhook.io/hold-delete": "", RETRY_ANNOTATION: "0"}),
        );
        assert!(matches!(
            h.evaluate(&e),
            Answer::Block {
                retry_after_seconds: 30,
                ..
            }
        ));
    }
}
