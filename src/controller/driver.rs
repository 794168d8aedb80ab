//! What the OpenStackCluster and OpenStackMachine controllers do alike around their
//! own reconcile: count and time it, turn a panic into a retried error, back off per
//! object on transient failures, persist finalizers, and answer a user error with a
//! condition, a Warning Event and a slow retry.

use std::fmt::Debug;
use std::future::Future;
use std::time::Instant;

use futures::{FutureExt, Stream, StreamExt};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{self, Action};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

use super::backoff::Backoff;
use super::cluster::Timing;
use super::status::PatchStatusSink;
use crate::infra::api::names::conditions;
use crate::infra::api::types::Condition;
use crate::infra::api::{OpenStackClusterStatus, OpenStackMachineStatus};
use crate::infra::conditions::{self as cond, Severity};
use crate::infra::seam::{InfraError, SinkError};
use crate::metrics::{ControllerMetrics, ReconcileOutcome};

/// Why a reconcile failed; all variants are retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("apiserver: {}", api_message(.0))]
    Kube(#[from] kube::Error),
    /// From the cloud half. User errors are answered with a condition and an Event
    /// before they get here, so in practice this is a transient or a status-write error.
    #[error(transparent)]
    Infra(#[from] InfraError),
    #[error("reconcile panicked")]
    Panicked,
    #[error("object has no namespace")]
    NoNamespace,
    #[error("bootstrap vars: {0}")]
    BootstrapVars(#[from] crate::kubernetes::bootstrap_vars::VarsError),
}

/// An API server refusal as one line (`409 Conflict: <message>`); kube's own
/// `Display` appends the whole `Status` struct, which made every routine conflict a
/// screenful in the log.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}: {}", s.code, s.reason, s.message),
        other => other.to_string(),
    }
}

/// The object changed between the read this reconcile started from and its write
/// (a resourceVersion-guarded finalizer change): the watch brings the new version.
fn is_conflict(err: &ReconcileError) -> bool {
    matches!(err, ReconcileError::Kube(kube::Error::Api(s)) if s.code == 409)
}

/// How soon a reconcile that lost a write conflict runs again.
const CONFLICT_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

impl From<SinkError> for ReconcileError {
    fn from(e: SinkError) -> ReconcileError {
        ReconcileError::Infra(InfraError::Sink(e))
    }
}

/// What one reconcile decided, and how it ended for the metrics.
pub type Reconciled = Result<(Action, ReconcileOutcome), ReconcileError>;

/// A status type whose conditions a user error marks.
pub trait HasConditions {
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
}

impl HasConditions for OpenStackClusterStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

impl HasConditions for OpenStackMachineStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

/// Runs one reconcile of `obj`: counted and timed under `controller`, a panic turned
/// into [`ReconcileError::Panicked`] (a panic would end the whole controller stream),
/// and the object's backoff forgotten when it succeeds.
pub async fn counted<K: ResourceExt>(
    controller: &str,
    metrics: &ControllerMetrics,
    backoff: &Backoff,
    obj: &K,
    work: impl Future<Output = Reconciled>,
) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let result = std::panic::AssertUnwindSafe(work)
        .catch_unwind()
        .await
        .unwrap_or_else(|_| {
            tracing::error!("reconcile panicked");
            Err(ReconcileError::Panicked)
        });
    let outcome = match &result {
        Ok((_, outcome)) => *outcome,
        Err(ReconcileError::Infra(InfraError::Transient {
            unavailable: true, ..
        })) => ReconcileOutcome::unavailable,
        Err(_) => ReconcileOutcome::transient_error,
    };
    metrics.observe(controller, outcome, started.elapsed().as_secs_f64());
    if result.is_ok() {
        backoff.reset(&obj.namespace().unwrap_or_default(), &obj.name_any());
    }
    result.map(|(action, _)| action)
}

/// Transient failures: exponential backoff per object (or the cloud's `Retry-After`),
/// logged but no Event.
pub fn retry<K: ResourceExt>(backoff: &Backoff, obj: &K, err: &ReconcileError) -> Action {
    let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    if is_conflict(err) {
        // Routine with several writers (CAPI sets owner references and labels): no
        // backoff, no warning.
        tracing::debug!(namespace = %ns, name = %name, error = %err, "the object changed while it was reconciled; reconciling the new version");
        return Action::requeue(CONFLICT_RETRY);
    }
    let backoff = backoff.next(&ns, &name);
    let delay = match err {
        ReconcileError::Infra(InfraError::Transient {
            retry_after: Some(after),
            ..
        }) => *after,
        _ => backoff,
    };
    tracing::warn!(namespace = %ns, name = %name, error = %err, retry_in = ?delay, "reconcile failed; retrying");
    Action::requeue(delay)
}

pub fn has_finalizer(obj: &impl ResourceExt, finalizer: &str) -> bool {
    obj.finalizers().iter().any(|f| f == finalizer)
}

/// Merge-patches `metadata.finalizers`, guarded by the resourceVersion read so that a
/// concurrent change to the list is a conflict instead of lost. (kube's `finalizer`
/// helper removes the finalizer whenever cleanup returns `Ok`, which leaves no way to
/// say "still waiting" without an error.)
pub async fn set_finalizers<K>(
    api: &Api<K>,
    obj: &K,
    change: impl FnOnce(&mut Vec<String>),
) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut finalizers = obj.finalizers().to_vec();
    change(&mut finalizers);
    let patch = json!({
        "metadata": {
            "finalizers": finalizers,
            "resourceVersion": obj.resource_version(),
        }
    });
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Ready=False with the reason, a Warning Event, and a slow retry: the spec or a
/// Secret is wrong, and only a change by the user fixes it.
#[allow(clippy::too_many_arguments)]
pub async fn user_error<K, S>(
    recorder: &Recorder,
    timing: &Timing,
    obj: &K,
    sink: &PatchStatusSink<K, S>,
    action: &str,
    reason: &str,
    message: &str,
) -> Reconciled
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize + DeserializeOwned + Default + HasConditions,
{
    let mut status = sink.last();
    cond::mark_false(
        status.conditions_mut(),
        conditions::READY,
        reason,
        Severity::Error,
        message,
    );
    sink.write(&status).await?;
    let event = Event {
        type_: EventType::Warning,
        reason: reason.to_string(),
        note: Some(message.chars().take(1024).collect()),
        action: action.to_string(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::warn!(error = %e, "publishing the Event failed");
    }
    tracing::warn!(%reason, %message, "reconcile needs a change by the user");
    Ok((
        Action::requeue(timing.user_error),
        ReconcileOutcome::user_error,
    ))
}

/// Drives a controller's result stream to its end, logging what it reports.
pub async fn drain<K, E>(
    results: impl Stream<
        Item = Result<(ObjectRef<K>, Action), controller::Error<E, kube::runtime::watcher::Error>>,
    >,
) where
    K: Resource,
    K::DynamicType: Debug,
    E: std::error::Error + 'static,
{
    results
        .for_each(|result| async move {
            match result {
                Ok((obj, _)) => tracing::debug!(object = %obj, "reconciled"),
                Err(controller::Error::ReconcilerFailed(_, obj)) => {
                    tracing::debug!(object = %obj, "reconcile failed")
                }
                Err(e) => tracing::warn!(error = %e, "controller"),
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::OpenStackMachine;
    use std::time::Duration;

    fn api_error(code: u16, reason: &str) -> ReconcileError {
        let status: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "code": code, "reason": reason,
            "message": format!("Operation cannot be fulfilled on openstackmachines \"m1\": {reason}"),
        }))
        .expect("status");
        ReconcileError::Kube(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn a_conflict_is_retried_at_once_without_backoff_and_other_errors_back_off() {
        let backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));
        let obj = OpenStackMachine::new("m1", Default::default());
        for _ in 0..3 {
            assert_eq!(
                retry(&backoff, &obj, &api_error(409, "Conflict")),
                Action::requeue(CONFLICT_RETRY)
            );
        }
        // Conflicts did not advance the backoff: the first other error waits the base.
        assert_eq!(
            retry(&backoff, &obj, &api_error(500, "InternalError")),
            Action::requeue(Duration::from_secs(5))
        );
    }

    #[test]
    fn an_api_error_reads_as_one_line_without_the_status_struct() {
        let text = api_error(409, "Conflict").to_string();
        assert_eq!(
            text,
            "apiserver: 409 Conflict: Operation cannot be fulfilled on openstackmachines \"m1\": Conflict"
        );
        assert!(!text.contains("Status {"), "{text}");
    }
}
