//! Several lifecycle handlers on one hook, combined through the real dispatcher.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::{json, Value};

use stackhook::config::HandlerConfig;
use stackhook::engine::EmptyEngine;
use stackhook::hooks::hold::HoldHandler;
use stackhook::hooks::{Answer, LifecycleHandler, Registry};
use stackhook::metrics::Metrics;
use stackhook::sdk::lifecycle::LifecycleEvent;
use stackhook::sdk::{CapiVersion, Hook};
use stackhook::server::app::{App, AppOptions};

/// Answers from the cluster's labels, so each test case picks the answers.
struct Scripted {
    name: &'static str,
}

impl LifecycleHandler for Scripted {
    fn name(&self) -> &str {
        self.name
    }
    fn hooks(&self) -> &[Hook] {
        &[
            Hook::BeforeClusterUpgrade,
            Hook::AfterControlPlaneInitialized,
        ]
    }
    fn handle<'a>(&'a self, e: &'a LifecycleEvent) -> BoxFuture<'a, Answer> {
        let label = e
            .cluster
            .raw()
            .pointer(&format!("/metadata/labels/{}", self.name))
            .and_then(Value::as_str)
            .unwrap_or("ok")
            .to_string();
        async move {
            match label.split_once(':') {
                Some(("block", n)) => Answer::Block {
                    retry_after_seconds: n.parse().unwrap_or(1),
                    message: format!("{} waits", self.name),
                },
                Some(("fail", m)) => Answer::Fail(m.to_string()),
                _ => Answer::Proceed(None),
            }
        }
        .boxed()
    }
}

fn app(capi: u16) -> App {
    let mut r = Registry::new();
    r.register(Arc::new(Scripted { name: "preflight" }));
    r.register(Arc::new(Scripted { name: "quota" }));
    r.register(Arc::new(HoldHandler::new(30)));
    App::new(
        AppOptions {
            capi: CapiVersion::new(capi),
            handler_config: HandlerConfig::default(),
            kubernetes_versions: vec![],
            enable_in_place_hooks: false,
        },
        Arc::new(EmptyEngine),
        r,
        Arc::new(Metrics::new()),
    )
    .unwrap()
}

async fn upgrade(app: &App, labels: Value, annotations: Value) -> Value {
    let body = json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": "BeforeClusterUpgradeRequest",
        "cluster": {"metadata": {"name": "c", "namespace": "n", "labels": labels, "annotations": annotations}},
        "fromKubernetesVersion": "v1.32.0",
        "toKubernetesVersion": "v1.33.0"
    });
    let reply = app
        .call(
            Hook::BeforeClusterUpgrade,
            "before-cluster-upgrade",
            &serde_json::to_vec(&body).unwrap(),
        )
        .await;
    serde_json::from_slice(&reply.body).unwrap()
}

#[tokio::test]
async fn the_most_blocking_answer_wins() {
    let app = app(14);
    let r = upgrade(&app, json!({}), json!({})).await;
    assert_eq!(
        (r["status"].as_str(), r["retryAfterSeconds"].as_i64()),
        (Some("Success"), Some(0))
    );

    // Two blocks and a hold: the shortest wait, all reasons in handler-name order.
    let r = upgrade(
        &app,
        json!({"quota": "block:90", "preflight": "block:20"}),
        json!({"hooks.stackhook.io/hold-upgrade": "change freeze"}),
    )
    .await;
    assert_eq!(r["status"], "Success");
    assert_eq!(r["retryAfterSeconds"], 20);
    assert_eq!(
        r["message"],
        "hold: held by annotation hooks.stackhook.io/hold-upgrade: \"change freeze\"; preflight: preflight waits; quota: quota waits"
    );

    // A failure beats every block.
    let r = upgrade(
        &app,
        json!({"quota": "fail:project quota exceeded", "preflight": "block:20"}),
        json!({}),
    )
    .await;
    assert_eq!(r["status"], "Failure");
    assert_eq!(r["retryAfterSeconds"], 0);
    assert_eq!(r["message"], "quota: project quota exceeded");

    // Deterministic whatever the order handlers finish in.
    let a = upgrade(
        &app,
        json!({"quota": "fail:b", "preflight": "fail:a"}),
        json!({}),
    )
    .await;
    let b = upgrade(
        &app,
        json!({"preflight": "fail:a", "quota": "fail:b"}),
        json!({}),
    )
    .await;
    assert_eq!(a, b);
    assert_eq!(a["message"], "preflight: a; quota: b");
}

#[tokio::test]
async fn non_blocking_hooks_cannot_be_held() {
    let app = app(14);
    let body = json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": "AfterControlPlaneInitializedRequest",
        "cluster": {"metadata": {"name": "c", "namespace": "n", "labels": {"quota": "block:9"}}}
    });
    let reply = app
        .call(
            Hook::AfterControlPlaneInitialized,
            "after-control-plane-initialized",
            &serde_json::to_vec(&body).unwrap(),
        )
        .await;
    let r: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(r["status"], "Success");
    assert!(r.get("retryAfterSeconds").is_none(), "{r}");
    assert_eq!(r["message"], "quota: quota waits");
}
