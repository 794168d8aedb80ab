//! HTTP routing for the hook listener.
//!
//! The body is read as bytes whatever the Content-Type (CAPI sends none) and the
//! `?timeout=` query is ignored. An unknown path is 404; everything else is HTTP 200.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use futures::FutureExt;
use http_body_util::{BodyExt, Limited};

use super::app::{failure_body, App};
use super::limits::{BodyError, BodyLimits};
use crate::sdk::decode::DecodeError;
use crate::sdk::Hook;

pub const PREFIX: &str = "/hooks.runtime.cluster.x-k8s.io/v1alpha1";

#[derive(Clone)]
struct HookState {
    app: Arc<App>,
    limits: BodyLimits,
}

pub fn router(app: Arc<App>, limits: BodyLimits) -> Router {
    let state = HookState { app, limits };
    Router::new()
        .route(&format!("{PREFIX}/{{hook}}"), post(singleton))
        .route(&format!("{PREFIX}/{{hook}}/{{name}}"), post(named))
        .fallback(fallback)
        .with_state(state)
}

async fn fallback(State(s): State<HookState>, body: Body) -> Response {
    not_found(body, &s.limits, "not found\n").await
}

/// A 404 sent while the request body is still arriving ends an HTTP/2 stream with a
/// reset that clients such as curl report as an error instead of the answer. The body
/// is read first, up to the body limit and within the body-read timeout, then dropped.
async fn not_found(body: Body, limits: &BodyLimits, text: &'static str) -> Response {
    let drain = Limited::new(body, limits.max_body).collect();
    let _ = tokio::time::timeout(limits.read_timeout, drain).await;
    (StatusCode::NOT_FOUND, text).into_response()
}

async fn singleton(
    State(s): State<HookState>,
    Path(hook): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(s, &hook, None, &headers, body).await
}

async fn named(
    State(s): State<HookState>,
    Path((hook, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(s, &hook, Some(&name), &headers, body).await
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

async fn handle(
    s: HookState,
    hook: &str,
    name: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let Some((hook, handler)) = s.app.route(hook, name) else {
        return not_found(body, &s.limits, "no such hook handler\n").await;
    };
    let held = match s.limits.read(body, content_length(headers)).await {
        Ok(held) => held,
        Err(e) => {
            if let Some(reason) = e.refusal() {
                s.limits.metrics.refused(reason);
            }
            let err = match e {
                BodyError::TooLarge { limit } => DecodeError::TooLarge { limit },
                other => DecodeError::Unread {
                    detail: other.to_string(),
                },
            };
            return ok_json(s.app.transport_failure(hook, &handler, err).body);
        }
    };
    // Handlers must not panic; if one ever does, the caller still gets a protocol answer.
    let call = std::panic::AssertUnwindSafe(s.app.call(hook, &handler, &held.bytes)).catch_unwind();
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
