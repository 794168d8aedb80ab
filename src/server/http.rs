//! HTTP routing for the hook listener.
//!
//! The body is read as bytes whatever the Content-Type (CAPI sends none) and the
//! `?timeout=` query is ignored. An unknown path is 404; everything else is HTTP 200.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use futures::FutureExt;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::app::{failure_body, App};
use crate::sdk::decode::DecodeError;
use crate::sdk::Hook;

pub const PREFIX: &str = "/hooks.runtime.cluster.x-k8s.io/v1alpha1";

#[derive(Clone)]
struct HookState {
    app: Arc<App>,
    max_body: usize,
}

pub fn router(app: Arc<App>, max_body: usize) -> Router {
    let state = HookState { app, max_body };
    Router::new()
        .route(&format!("{PREFIX}/{{hook}}"), post(singleton))
        .route(&format!("{PREFIX}/{{hook}}/{{name}}"), post(named))
        .fallback(fallback)
        .with_state(state)
}

async fn fallback(State(s): State<HookState>, body: Body) -> Response {
    not_found(body, s.max_body, "not found\n").await
}

/// A 404 sent while the request body is still arriving ends an HTTP/2 stream with a
/// reset that clients such as curl report as an error instead of the answer. The body
/// is read first, up to the body limit and for at most a few seconds, then dropped.
async fn not_found(body: Body, max_body: usize, text: &'static str) -> Response {
    let drain = Limited::new(body, max_body).collect();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), drain).await;
    (StatusCode::NOT_FOUND, text).into_response()
}

async fn singleton(State(s): State<HookState>, Path(hook): Path<String>, body: Body) -> Response {
    handle(s, &hook, None, body).await
}

async fn named(
    State(s): State<HookState>,
    Path((hook, name)): Path<(String, String)>,
    body: Body,
) -> Response {
    handle(s, &hook, Some(&name), body).await
}

async fn handle(s: HookState, hook: &str, name: Option<&str>, body: Body) -> Response {
    let Some((hook, handler)) = s.app.route(hook, name) else {
        return not_found(body, s.max_body, "no such hook handler\n").await;
    };
    let bytes = match Limited::new(body, s.max_body).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            let err = if e.downcast_ref::<LengthLimitError>().is_some() {
                DecodeError::TooLarge { limit: s.max_body }
            } else {
                DecodeError::Syntax {
                    detail: format!("reading the request body failed: {e}"),
                }
            };
            return ok_json(s.app.transport_failure(hook, &handler, err).body);
        }
    };
    // Handlers must not panic; if one ever does, the caller still gets a protocol answer.
    let call = std::panic::AssertUnwindSafe(s.app.call(hook, &handler, &bytes)).catch_unwind();
    match call.await {
        Ok(reply) => ok_json(reply.body),
        Err(_) => {
            tracing::error!(hook = hook.name(), handler, "handler panicked");
            ok_json(failure_body(
                hook,
                s.app.capi(),
                "internal error while handling the request",
            ))
        }
    }
}

fn ok_json(body: Vec<u8>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// For tests and benchmarks: the route of a hook's default handler.
pub fn path_for(hook: Hook, handler: &str) -> String {
    if hook == Hook::Discovery {
        format!("{PREFIX}/discovery")
    } else {
        format!("{PREFIX}/{}/{}", hook.path_segment(), handler)
    }
}
