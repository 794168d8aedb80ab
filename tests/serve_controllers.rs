//! `stackhook serve --controllers` without any Kubernetes config: hooks are
//! still served, the log says why the controllers are off, SIGTERM exits 0.

use crate::server;

use std::time::{Duration, Instant};

use serde_json::json;
use server::{client, post_json, Proto, Server, API, PREFIX};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_are_served_when_controllers_cannot_start() {
    let home = tempfile::tempdir().unwrap();
    let missing = home.path().join("no-such-kubeconfig");
    let missing = missing.to_str().unwrap();
    let home_dir = home.path().to_str().unwrap();
    let mut srv = Server::start_with_env(
        &["--controllers"],
        &[
            ("KUBECONFIG", Some(missing)),
            ("HOME", Some(home_dir)),
            ("KUBERNETES_SERVICE_HOST", None),
            ("KUBERNETES_SERVICE_PORT", None),
        ],
    );

    let ca = srv.ca_pem.clone().expect("self-signed CA written");
    let c = client(&ca, Proto::H1);
    let (status, _, resp) = post_json(
        &c,
        &srv.url(&format!("{PREFIX}/discovery")),
        &json!({"apiVersion": API, "kind": "DiscoveryRequest"}),
    )
    .await;
    assert_eq!(status, 200, "{resp}");
    assert_eq!(resp["status"], "Success", "{resp}");
    assert!(!resp["handlers"].as_array().unwrap().is_empty(), "{resp}");

    let deadline = Instant::now() + Duration::from_secs(15);
    let mut logs = Vec::new();
    let off = loop {
        logs.extend(srv.drain_logs());
        if let Some(line) = logs.iter().find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("controllers are off"))
        }) {
            break line.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no 'controllers are off' line in {logs:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        off["message"]
            .as_str()
            .unwrap()
            .contains("no kubeconfig or in-cluster config found"),
        "{off}"
    );

    // Still serving after the controllers gave up.
    let (status, _, _) = post_json(
        &c,
        &srv.url(&format!("{PREFIX}/discovery")),
        &json!({"apiVersion": API, "kind": "DiscoveryRequest"}),
    )
    .await;
    assert_eq!(status, 200);

    let exit = srv.sigterm();
    assert!(exit.success(), "exit status {exit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_the_log_says_how_to_enable_them() {
    let mut srv = Server::start(&[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut logs = Vec::new();
    loop {
        logs.extend(srv.drain_logs());
        if logs.iter().any(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("enable with --controllers"))
        }) {
            break;
        }
        assert!(Instant::now() < deadline, "{logs:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(srv.sigterm().success());
}
