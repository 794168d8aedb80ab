//! A scripted apiserver behind a `kube::Client` (tower-test): each expected
//! request is checked for method, path and query, and answered in order.

#![allow(dead_code)]

use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use serde_json::Value;
use tower_test::mock::{self, Handle};

pub struct ApiServer {
    handle: Handle<Request<Body>, Response<Body>>,
}

/// One request as the test sees it.
#[derive(Debug)]
pub struct Seen {
    pub method: String,
    /// Path and query, e.g. `/api/v1/namespaces/ns/secrets/creds`.
    pub uri: String,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    pub body: Value,
}

impl Seen {
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or_default()
    }
    pub fn query(&self) -> &str {
        self.uri.split_once('?').map(|(_, q)| q).unwrap_or_default()
    }
}

pub fn pair() -> (kube::Client, ApiServer) {
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (kube::Client::new(svc, "default"), ApiServer { handle })
}

pub fn status_error(code: u16, reason: &str) -> Value {
    serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{reason} (test)"), "reason": reason, "code": code
    })
}

impl ApiServer {
    /// Waits for the next request and answers it with `status` and `reply`.
    pub async fn answer(&mut self, status: u16, reply: Value) -> Seen {
        let (req, send) = tokio::time::timeout(Duration::from_secs(10), self.handle.next_request())
            .await
            .expect("timed out waiting for a request")
            .expect("client dropped before the expected request");
        let (parts, body) = req.into_parts();
        let bytes = body.collect_bytes().await.expect("request body");
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let seen = Seen {
            method: parts.method.to_string(),
            uri: parts
                .uri
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default(),
            content_type: header("content-type"),
            accept: header("accept"),
            body: if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).expect("request body is JSON")
            },
        };
        let resp = Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&reply).unwrap()))
            .unwrap();
        send.send_response(resp);
        seen
    }

    /// Like [`answer`], first asserting method and path.
    pub async fn expect(&mut self, method: &str, path: &str, status: u16, reply: Value) -> Seen {
        let seen = self.answer(status, reply).await;
        assert_eq!(
            (seen.method.as_str(), seen.path()),
            (method, path),
            "unexpected request {seen:?}"
        );
        seen
    }

    /// Asserts that the client made no further request before it was dropped.
    pub async fn expect_no_more(mut self) {
        let next = tokio::time::timeout(Duration::from_secs(10), self.handle.next_request())
            .await
            .expect("client was not dropped");
        if let Some((req, _)) = next {
            panic!("unexpected request {} {}", req.method(), req.uri());
        }
    }
}
