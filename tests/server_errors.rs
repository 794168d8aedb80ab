//! Malformed input, unknown paths, holds, metrics and shutdown, against the real binary.

use crate::server;

use serde_json::{json, Value};
use server::{client, fixture, post_json, post_raw, Proto, Server, API, PREFIX};

fn failure(raw: &[u8]) -> (String, Value) {
    let v: Value = serde_json::from_slice(raw).expect("failure responses are JSON");
    assert_eq!(v["status"], "Failure", "{v}");
    (v["message"].as_str().expect("message").to_string(), v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_get_200_failure_naming_the_problem() {
    let srv = Server::start(&["--max-body-bytes", "65536"]);
    let c = client(srv.ca_pem.as_ref().unwrap(), Proto::H2);
    let upgrade = srv.url(&format!(
        "{PREFIX}/beforeclusterupgrade/before-cluster-upgrade"
    ));
    let cluster = fixture("clusters/v1beta1.json");
    let good = json!({"apiVersion": API, "kind": "BeforeClusterUpgradeRequest", "cluster": cluster,
                      "fromKubernetesVersion": "v1.30.4", "toKubernetesVersion": "v1.31.0"});
    let good_bytes = serde_json::to_vec(&good).unwrap();

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "request body is empty: expected a BeforeClusterUpgradeRequest JSON object"),
        ("not JSON", b"hello".to_vec(), "request body is not valid JSON: expected value at line 1 column 1"),
        ("truncated", good_bytes[..good_bytes.len() / 2].to_vec(), "request body is not valid JSON: EOF while parsing"),
        ("array", b"[1,2]".to_vec(), "request body must be a JSON object, got an array"),
        (
            "wrong apiVersion",
            serde_json::to_vec(&json!({"apiVersion": "hooks.runtime.cluster.x-k8s.io/v1beta1", "kind": "BeforeClusterUpgradeRequest"})).unwrap(),
            "apiVersion is \"hooks.runtime.cluster.x-k8s.io/v1beta1\", expected \"hooks.runtime.cluster.x-k8s.io/v1alpha1\"",
        ),
        (
            "missing apiVersion",
            serde_json::to_vec(&json!({"kind": "BeforeClusterUpgradeRequest"})).unwrap(),
            "apiVersion is missing, expected",
        ),
        (
            "wrong kind",
            serde_json::to_vec(&json!({"apiVersion": API, "kind": "BeforeClusterCreateRequest"})).unwrap(),
            "kind is \"BeforeClusterCreateRequest\", expected \"BeforeClusterUpgradeRequest\"",
        ),
        (
            "missing field",
            serde_json::to_vec(&json!({"apiVersion": API, "kind": "BeforeClusterUpgradeRequest", "cluster": cluster, "toKubernetesVersion": "v1.31.0"})).unwrap(),
            "invalid BeforeClusterUpgradeRequest: missing field `fromKubernetesVersion`",
        ),
        (
            "cluster without name",
            serde_json::to_vec(&json!({"apiVersion": API, "kind": "BeforeClusterUpgradeRequest", "cluster": {"metadata": {}},
                "fromKubernetesVersion": "v1.30.4", "toKubernetesVersion": "v1.31.0"})).unwrap(),
            "invalid BeforeClusterUpgradeRequest: cluster.metadata.name is required",
        ),
        (
            "wrong type",
            serde_json::to_vec(&json!({"apiVersion": API, "kind": "BeforeClusterUpgradeRequest", "cluster": cluster,
                "fromKubernetesVersion": 1, "toKubernetesVersion": "v1.31.0"})).unwrap(),
            "invalid BeforeClusterUpgradeRequest: fromKubernetesVersion: invalid type: integer `1`, expected a string",
        ),
        ("over the limit", {
            let mut b = good_bytes.clone();
            b.truncate(b.len() - 1);
            b.extend(format!(",\"pad\":\"{}\"}}", "x".repeat(70_000)).into_bytes());
            b
        }, "request body exceeds the limit of 65536 bytes"),
    ];
    for (name, body, want) in cases {
        let (status, _, raw) = post_raw(&c, &upgrade, body).await;
        assert_eq!(status, 200, "{name}");
        let (msg, v) = failure(&raw);
        assert!(
            msg.starts_with(want),
            "{name}: got {msg:?}, want prefix {want:?}"
        );
        // Retry hooks keep their required field even when failing.
        assert_eq!(v["retryAfterSeconds"], 0, "{name}");
        assert_eq!(v["kind"], "BeforeClusterUpgradeResponse", "{name}");
    }

    // A GeneratePatches item without uid, and a Discovery with the wrong kind.
    let (_, _, raw) = post_raw(
        &c,
        &srv.url(&format!("{PREFIX}/generatepatches/generate-patches")),
        serde_json::to_vec(&json!({"apiVersion": API, "kind": "GeneratePatchesRequest",
            "items": [{"holderReference": {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "namespace": "n", "name": "c", "fieldPath": "spec.infrastructureRef"}, "object": {}}]})).unwrap(),
    )
    .await;
    assert_eq!(
        failure(&raw).0,
        "invalid GeneratePatchesRequest: items[0]: missing field `uid` at line 1 column 219"
    );
    let (_, _, raw) = post_raw(
        &c,
        &srv.url(&format!("{PREFIX}/discovery")),
        serde_json::to_vec(&json!({"apiVersion": API, "kind": "Discovery"})).unwrap(),
    )
    .await;
    assert_eq!(
        failure(&raw).0,
        "kind is \"Discovery\", expected \"DiscoveryRequest\""
    );

    // Unknown paths are 404, methods other than POST are refused, the server still serves.
    for path in [
        format!("{PREFIX}/nosuchhook/x"),
        format!("{PREFIX}/beforeclusterupgrade/not-a-handler"),
        format!("{PREFIX}/beforeclusterupgrade"),
        format!("{PREFIX}/discovery/extra"),
        format!("{PREFIX}/BeforeClusterUpgrade/before-cluster-upgrade"),
        "/".to_string(),
        "/hooks.runtime.cluster.x-k8s.io/v1beta1/discovery".to_string(),
    ] {
        let (status, _, _) = post_raw(&c, &srv.url(&path), b"{}".to_vec()).await;
        assert_eq!(status, 404, "{path}");
    }
    let st = c
        .get(srv.url(&format!("{PREFIX}/discovery")))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(st.as_u16(), 405);
    let (status, _, v) = post_json(&c, &upgrade, &good).await;
    assert_eq!((status, v["status"].as_str()), (200, Some("Success")));

    // Decode errors are counted as such.
    let metrics = reqwest::get(format!("{}/metrics", srv.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("stackhook_hook_requests_total{hook=\"BeforeClusterUpgrade\",handler=\"before-cluster-upgrade\",outcome=\"decode_error\"}"))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(line.ends_with(" 11"), "{line}");
    assert!(metrics.contains("stackhook_hook_requests_total{hook=\"BeforeClusterUpgrade\",handler=\"before-cluster-upgrade\",outcome=\"success\"} 1"));
    assert!(metrics.contains("stackhook_hook_request_duration_seconds_bucket{le="));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bytes_never_stop_the_server() {
    let srv = Server::start(&[]);
    let c = client(srv.ca_pem.as_ref().unwrap(), Proto::H1);
    let url = srv.url(&format!(
        "{PREFIX}/beforeclusterdelete/before-cluster-delete"
    ));
    // A deterministic pseudo-random byte soup, plus JSON-ish fragments.
    let mut x: u64 = 0x9E3779B97F4A7C15;
    for i in 0..200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 512) as usize;
        let mut body: Vec<u8> = (0..len)
            .map(|j| (x.rotate_left(j as u32 % 64) & 0xff) as u8)
            .collect();
        if i % 3 == 0 {
            body = format!(
                "{{\"apiVersion\":\"{API}\",\"kind\":\"BeforeClusterDeleteRequest\",\"cluster\":{}",
                String::from_utf8_lossy(&body)
            )
            .into_bytes();
        }
        let (status, _, raw) = post_raw(&c, &url, body).await;
        assert_eq!(status, 200);
        let v: Value = serde_json::from_slice(&raw).unwrap();
        assert!(v["status"] == "Failure" || v["status"] == "Success");
    }
    let ready = reqwest::get(format!("{}/readyz", srv.admin)).await.unwrap();
    assert_eq!(ready.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_annotations_block_and_release() {
    let srv = Server::start(&["--capi-version", "1.12", "--hold-retry-after-seconds", "45"]);
    let c = client(srv.ca_pem.as_ref().unwrap(), Proto::H2);
    let mut cluster = fixture("clusters/v1beta1.json");

    let cases = [
        (
            "BeforeClusterCreate",
            "before-cluster-create",
            "hold-create",
            json!({}),
        ),
        (
            "BeforeClusterUpgrade",
            "before-cluster-upgrade",
            "hold-upgrade",
            json!({"fromKubernetesVersion": "v1.30.4", "toKubernetesVersion": "v1.31.0"}),
        ),
        (
            "BeforeControlPlaneUpgrade",
            "before-control-plane-upgrade",
            "hold-control-plane-upgrade",
            json!({"fromKubernetesVersion": "v1.30.4", "toKubernetesVersion": "v1.31.0"}),
        ),
        (
            "BeforeWorkersUpgrade",
            "before-workers-upgrade",
            "hold-workers-upgrade",
            json!({"fromKubernetesVersion": "v1.30.4", "toKubernetesVersion": "v1.31.0"}),
        ),
        (
            "AfterControlPlaneUpgrade",
            "after-control-plane-upgrade",
            "hold-after-control-plane-upgrade",
            json!({"kubernetesVersion": "v1.31.0"}),
        ),
        (
            "AfterWorkersUpgrade",
            "after-workers-upgrade",
            "hold-after-workers-upgrade",
            json!({"kubernetesVersion": "v1.31.0"}),
        ),
        (
            "AfterClusterUpgrade",
            "after-cluster-upgrade",
            "hold-after-upgrade",
            json!({"kubernetesVersion": "v1.31.0"}),
        ),
        (
            "BeforeClusterDelete",
            "before-cluster-delete",
            "hold-delete",
            json!({}),
        ),
    ];
    for (hook, handler, annotation, extra) in cases {
        let url = srv.url(&format!("{PREFIX}/{}/{handler}", hook.to_lowercase()));
        let key = format!("hooks.stackhook.io/{annotation}");
        cluster["metadata"]["annotations"] = json!({key.clone(): "waiting for change window"});
        let mut body =
            json!({"apiVersion": API, "kind": format!("{hook}Request"), "cluster": cluster});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (_, _, held) = post_json(&c, &url, &body).await;
        assert_eq!(held["status"], "Success", "{hook}");
        assert_eq!(held["retryAfterSeconds"], 45, "{hook}");
        assert_eq!(
            held["message"],
            format!("hold: held by annotation {key}: \"waiting for change window\""),
            "{hook}"
        );
        // Same input, same message: Cluster conditions do not churn.
        let (_, _, again) = post_json(&c, &url, &body).await;
        assert_eq!(held, again);

        body["cluster"]["metadata"]["annotations"] = json!({});
        let (_, _, released) = post_json(&c, &url, &body).await;
        assert_eq!(released["retryAfterSeconds"], 0, "{hook}");
        assert_eq!(released["status"], "Success");
        assert!(released.get("message").is_none());
    }
}

#[test]
fn sigterm_drains_and_exits_zero() {
    let mut srv = Server::start(&["--shutdown-grace-seconds", "0"]);
    let status = srv.sigterm();
    assert_eq!(status.code(), Some(0));
    // The reader thread may still hold the last lines: read until it sees EOF.
    let logs: Vec<String> = std::iter::from_fn(|| {
        srv.logs
            .recv_timeout(std::time::Duration::from_secs(5))
            .ok()
    })
    .collect();
    assert!(logs.iter().any(|l| l.contains("\"stopped\"")), "{logs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_readiness() {
    let srv = Server::start(&[]);
    for path in ["/healthz", "/readyz"] {
        let r = reqwest::get(format!("{}{path}", srv.admin)).await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
    }
    let r = reqwest::get(format!("{}/nope", srv.admin)).await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
}
