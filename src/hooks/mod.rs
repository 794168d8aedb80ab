//! Lifecycle hooks: a registry of handlers per hook, combined into one answer.
//! The holds and the handlers that act on the cloud ([`openstack`]) register here
//! without touching the server.

pub mod hold;
pub mod openstack;
pub mod results;
pub mod upgrade_plan;

pub use results::{ClusterResult, ClusterResults};

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::sdk::lifecycle::LifecycleEvent;
use crate::sdk::{CapiVersion, CommonResponse, Hook, ResponseStatus, RetryResponse};

/// What one handler says about one lifecycle call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Go ahead; the optional message is informational.
    Proceed(Option<String>),
    /// Ask CAPI to call again after `retry_after_seconds` (> 0).
    Block {
        retry_after_seconds: u32,
        message: String,
    },
    /// Report a failure: CAPI retries with backoff and surfaces the message (≥ 1.14).
    Fail(String),
}

pub trait LifecycleHandler: Send + Sync + 'static {
    /// A stable name: answers are combined in name order so messages are deterministic.
    fn name(&self) -> &str;
    fn hooks(&self) -> &[Hook];
    fn handle<'a>(&'a self, event: &'a LifecycleEvent) -> BoxFuture<'a, Answer>;
}

/// Handlers per hook, kept sorted by name, and the controllers' results they read.
#[derive(Default, Clone)]
pub struct Registry {
    handlers: BTreeMap<Hook, BTreeMap<String, Arc<dyn LifecycleHandler>>>,
    results: ClusterResults,
}

/// The combined answer for one call, before it is shaped into a wire response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Combined {
    pub status: ResponseStatus,
    pub retry_after_seconds: u32,
    pub message: String,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry whose handlers read `results`, the store this replica's watch fills.
    pub fn with_results(results: ClusterResults) -> Self {
        Registry {
            handlers: BTreeMap::new(),
            results,
        }
    }

    /// What the infrastructure controllers last published, per cluster. Handlers get
    /// it at registration; the process hands the same store to the controllers.
    pub fn results(&self) -> &ClusterResults {
        &self.results
    }

    pub fn register(&mut self, handler: Arc<dyn LifecycleHandler>) {
        for hook in handler.hooks() {
            self.handlers
                .entry(*hook)
                .or_default()
                .insert(handler.name().to_string(), handler.clone());
        }
    }

    pub fn handler_names(&self, hook: Hook) -> Vec<String> {
        self.handlers
            .get(&hook)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Runs every handler of the event's hook and combines their answers.
    pub async fn dispatch(&self, event: &LifecycleEvent, capi: CapiVersion) -> Combined {
        let mut answers = Vec::new();
        if let Some(handlers) = self.handlers.get(&event.hook) {
            let futures = handlers.values().map(|h| async move {
                let answer = h.handle(event).await;
                (h.name().to_string(), answer)
            });
            answers = futures::future::join_all(futures).await;
        }
        combine(event.hook, capi, answers)
    }
}

/// The most blocking answer wins: any failure fails the call; otherwise any block
/// blocks it, with the shortest non-zero wait (as CAPI itself aggregates handlers, so a
/// released hold is noticed soonest). Messages are prefixed by handler name and joined
/// in name order, which keeps Cluster conditions stable across calls.
pub fn combine(hook: Hook, capi: CapiVersion, answers: Vec<(String, Answer)>) -> Combined {
    let mut answers = answers;
    answers.sort_by(|a, b| a.0.cmp(&b.0));
    let blocking = hook.is_blocking(capi);
    let mut failures = Vec::new();
    let mut blocks = Vec::new();
    let mut notes = Vec::new();
    let mut retry: u32 = 0;
    for (name, answer) in answers {
        match answer {
            Answer::Fail(m) => failures.push(format!("{name}: {m}")),
            Answer::Block {
                retry_after_seconds,
                message,
            } if blocking && retry_after_seconds > 0 => {
                retry = if retry == 0 {
                    retry_after_seconds
                } else {
                    retry.min(retry_after_seconds)
                };
                blocks.push(format!("{name}: {message}"));
            }
            // A hook CAPI does not treat as blocking cannot be held; keep the message.
            Answer::Block { message, .. } => notes.push(format!("{name}: {message}")),
            Answer::Proceed(Some(m)) if !m.is_empty() => notes.push(format!("{name}: {m}")),
            Answer::Proceed(_) => {}
        }
    }
    if !failures.is_empty() {
        Combined {
            status: ResponseStatus::Failure,
            retry_after_seconds: 0,
            message: failures.join("; "),
        }
    } else if !blocks.is_empty() {
        Combined {
            status: ResponseStatus::Success,
            retry_after_seconds: retry,
            message: blocks.join("; "),
        }
    } else {
        Combined {
            status: ResponseStatus::Success,
            retry_after_seconds: 0,
            message: notes.join("; "),
        }
    }
}

/// The wire shape of a combined answer: retry hooks always carry `retryAfterSeconds`.
pub enum LifecycleResponse {
    Common(CommonResponse),
    Retry(RetryResponse),
}

impl Combined {
    pub fn into_response(self, hook: Hook, capi: CapiVersion) -> LifecycleResponse {
        if hook.is_blocking(capi) {
            LifecycleResponse::Retry(RetryResponse::new(
                hook,
                self.status,
                self.message,
                i32::try_from(self.retry_after_seconds).unwrap_or(i32::MAX),
            ))
        } else {
            LifecycleResponse::Common(CommonResponse::new(hook, self.status, self.message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(n: u32, m: &str) -> Answer {
        Answer::Block {
            retry_after_seconds: n,
            message: m.into(),
        }
    }

    #[test]
    fn failure_beats_block_beats_proceed() {
        let capi = CapiVersion::new(14);
        let c = combine(
            Hook::BeforeClusterUpgrade,
            capi,
            vec![
                ("b".into(), block(30, "held")),
                ("a".into(), Answer::Fail("broken".into())),
                ("c".into(), Answer::Proceed(None)),
            ],
        );
        assert_eq!(c.status, ResponseStatus::Failure);
        assert_eq!(c.message, "a: broken");
        assert_eq!(c.retry_after_seconds, 0);

        let c = combine(
            Hook::BeforeClusterUpgrade,
            capi,
            vec![
                ("z".into(), block(60, "window")),
                ("c".into(), Answer::Proceed(Some("fine".into()))),
                ("m".into(), block(20, "quota")),
            ],
        );
        assert_eq!(c.status, ResponseStatus::Success);
        assert_eq!(c.retry_after_seconds, 20);
        assert_eq!(c.message, "m: quota; z: window");
    }

    #[test]
    fn non_blocking_hooks_never_block() {
        let c = combine(
            Hook::AfterClusterUpgrade,
            CapiVersion::new(11),
            vec![("h".into(), block(10, "x"))],
        );
        assert_eq!(c.retry_after_seconds, 0);
        assert_eq!(c.message, "h: x");
        let c = combine(
            Hook::AfterClusterUpgrade,
            CapiVersion::new(12),
            vec![("h".into(), block(10, "x"))],
        );
        assert_eq!(c.retry_after_seconds, 10);
    }
}
