//! A `stackhook serve --controllers` replica against a real API server, and
//! lifecycle hook calls to it over HTTPS, timed.

#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::server::{self, Proto, Server, API, PREFIX};

pub struct Replica {
    pub srv: Server,
    http: reqwest::Client,
    hooks: reqwest::Client,
}

impl Replica {
    /// A replica holding its Lease in `lease_ns` and watching only that namespace
    /// (unless `extra` names another): tests that share an API server run side by
    /// side, and a replica reconciling another test's clusters would write to the
    /// cloud under the wrong test.
    pub fn start(kubeconfig: &Path, lease_ns: &str, lease: &str, extra: &[&str]) -> Replica {
        let kubeconfig = kubeconfig.to_str().expect("UTF-8 path");
        let mut args = vec![
            "--controllers",
            "--kubeconfig",
            kubeconfig,
            "--leader-election-namespace",
            lease_ns,
            "--leader-election-id",
            lease,
            "--leader-election-lease-duration-seconds",
            "8",
            "--leader-election-renew-deadline-seconds",
            "6",
            "--leader-election-retry-period-seconds",
            "1",
            "--capi-version",
            "1.14",
        ];
        if !extra.contains(&"--watch-namespace") {
            args.extend_from_slice(&["--watch-namespace", lease_ns]);
        }
        args.extend_from_slice(extra);
        let srv = Server::start_with_env(&args, &[("RUST_LOG", Some("info"))]);
        let hooks = server::client(srv.ca_pem.as_ref().expect("self-signed CA"), Proto::H2);
        Replica {
            srv,
            http: reqwest::Client::new(),
            hooks,
        }
    }

    /// 1 while this replica runs the controllers.
    pub async fn leading(&self) -> bool {
        let text = self
            .http
            .get(format!("{}/metrics", self.srv.admin))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .expect("/metrics")
            .text()
            .await
            .expect("metrics text");
        text.lines()
            .any(|l| l.trim() == "stackhook_controller_leader 1")
    }

    /// One lifecycle call (`kind` without `Request`), its answer and how long it took.
    pub async fn call(&self, kind: &str, handler: &str, extra: Value) -> (Value, Duration) {
        let mut body = json!({"apiVersion": API, "kind": format!("{kind}Request")});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                body[k] = v;
            }
        }
        let url = self.srv.url(&format!(
            "{PREFIX}/{}/{handler}?timeout=10s",
            kind.to_lowercase()
        ));
        let t = Instant::now();
        let (status, _, resp) = server::post_json(&self.hooks, &url, &body).await;
        let took = t.elapsed();
        assert_eq!(status, 200, "{resp}");
        (resp, took)
    }

    /// Calls until the answer no longer starts with one of `waiting` (a check
    /// still running, the cache still loading); every answer and its latency.
    pub async fn settle(
        &self,
        kind: &str,
        handler: &str,
        extra: &Value,
        waiting: &[&str],
        limit: Duration,
    ) -> Vec<(Value, Duration)> {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let (resp, took) = self.call(kind, handler, extra.clone()).await;
            let msg = resp["message"].as_str().unwrap_or_default().to_string();
            seen.push((resp, took));
            if !waiting.iter().any(|w| msg.contains(w)) {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "still waiting after {limit:?}: {:?}",
                seen.last()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// A CAPI v1beta2 Cluster as CAPI 1.14 sends it in a hook request.
pub fn capi_cluster(
    namespace: &str,
    name: &str,
    osc: &str,
    labels: Value,
    annotations: Value,
) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                     "labels": labels, "annotations": annotations},
        "spec": {
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                  "kind": "OpenStackCluster", "name": osc},
            "topology": {"classRef": {"name": "openstack"}, "version": "v1.33.1",
                "workers": {"machineDeployments": [
                    {"class": "default-worker", "name": "md-0", "replicas": 2}]}}
        }
    })
}

/// Percentile of durations in milliseconds.
pub fn ms(mut d: Vec<Duration>, pct: usize) -> f64 {
    if d.is_empty() {
        return 0.0;
    }
    d.sort();
    let i = ((d.len() - 1) * pct) / 100;
    d[i].as_secs_f64() * 1000.0
}
