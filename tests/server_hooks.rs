//! Every hook of v1alpha1, over real TLS against the real binary, with h2 and http/1.1
//! and no Content-Type, with v1beta1 and v1beta2 Cluster payloads.

use crate::server;

use serde_json::{json, Value};
use server::{client, fixture, post_json, post_raw, Proto, Server, API, PREFIX};

fn cluster(version: &str, annotations: Value) -> Value {
    let mut c = fixture(&format!("clusters/{version}.json"));
    c["metadata"]["annotations"] = annotations;
    c
}

fn req(kind: &str, extra: Value) -> Value {
    let mut v = json!({"apiVersion": API, "kind": kind});
    if let Value::Object(m) = extra {
        for (k, x) in m {
            v[k] = x;
        }
    }
    v
}

/// Every field of a Success retry response, exactly.
fn assert_retry(resp: &Value, kind: &str, retry: i64, message: Option<&str>) {
    assert_eq!(resp["apiVersion"], API, "{resp}");
    assert_eq!(resp["kind"], kind, "{resp}");
    assert_eq!(resp["status"], "Success", "{resp}");
    assert_eq!(resp["retryAfterSeconds"], retry, "{resp}");
    match message {
        Some(m) => assert_eq!(resp["message"], m, "{resp}"),
        None => assert!(resp.get("message").is_none(), "{resp}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hook_answers_correctly_on_both_protocols() {
    let srv = Server::start(&[
        "--capi-version",
        "1.14",
        "--enable-in-place-hooks",
        "--kubernetes-versions",
        "v1.31.2,v1.32.3,v1.32.1",
    ]);
    let ca = srv.ca_pem.clone().expect("self-signed CA written");
    for proto in [Proto::H1, Proto::H2] {
        let c = client(&ca, proto);
        let want_version = match proto {
            Proto::H1 => reqwest::Version::HTTP_11,
            Proto::H2 => reqwest::Version::HTTP_2,
        };
        for cv in ["v1beta1", "v1beta2"] {
            let cl = cluster(cv, json!({}));
            let (ns, name) = (
                cl["metadata"]["namespace"].as_str().unwrap().to_string(),
                cl["metadata"]["name"].as_str().unwrap().to_string(),
            );

            // Lifecycle hooks with only the Cluster.
            for (hook, handler, retry) in [
                ("BeforeClusterCreate", "before-cluster-create", true),
                (
                    "AfterControlPlaneInitialized",
                    "after-control-plane-initialized",
                    false,
                ),
                ("BeforeClusterDelete", "before-cluster-delete", true),
            ] {
                let url = srv.url(&format!(
                    "{PREFIX}/{}/{handler}?timeout=10s",
                    hook.to_lowercase()
                ));
                let (st, v, resp) = post_json(
                    &c,
                    &url,
                    &req(&format!("{hook}Request"), json!({"cluster": cl})),
                )
                .await;
                assert_eq!((st, v), (200, want_version), "{hook}");
                if retry {
                    assert_retry(&resp, &format!("{hook}Response"), 0, None);
                } else {
                    assert_eq!(
                        resp,
                        json!({"apiVersion": API, "kind": format!("{hook}Response"), "status": "Success"})
                    );
                }
            }

            // Before*Upgrade hooks carry from/to and (1.12+) the step lists.
            for (hook, handler) in [
                ("BeforeClusterUpgrade", "before-cluster-upgrade"),
                ("BeforeControlPlaneUpgrade", "before-control-plane-upgrade"),
                ("BeforeWorkersUpgrade", "before-workers-upgrade"),
            ] {
                let url = srv.url(&format!("{PREFIX}/{}/{handler}", hook.to_lowercase()));
                let body = req(
                    &format!("{hook}Request"),
                    json!({
                        "cluster": cl,
                        "fromKubernetesVersion": "v1.30.0",
                        "toKubernetesVersion": "v1.31.2",
                        "controlPlaneUpgrades": [{"version": "v1.31.2"}, {"version": "v1.32.3"}],
                        "workersUpgrades": [{"version": "v1.32.3"}]
                    }),
                );
                let (st, _, resp) = post_json(&c, &url, &body).await;
                assert_eq!(st, 200);
                assert_retry(&resp, &format!("{hook}Response"), 0, None);
            }

            for (hook, handler) in [
                ("AfterControlPlaneUpgrade", "after-control-plane-upgrade"),
                ("AfterWorkersUpgrade", "after-workers-upgrade"),
                ("AfterClusterUpgrade", "after-cluster-upgrade"),
            ] {
                let url = srv.url(&format!("{PREFIX}/{}/{handler}", hook.to_lowercase()));
                let body = req(
                    &format!("{hook}Request"),
                    json!({"cluster": cl, "kubernetesVersion": "v1.31.2", "controlPlaneUpgrades": [{"version": "v1.32.3"}]}),
                );
                let (st, _, resp) = post_json(&c, &url, &body).await;
                assert_eq!(st, 200);
                // AfterClusterUpgrade is a retry hook from CAPI 1.12 on.
                assert_retry(&resp, &format!("{hook}Response"), 0, None);
            }

            // GenerateUpgradePlan: one step per minor, newest known patch, ending at the target.
            let url = srv.url(&format!(
                "{PREFIX}/generateupgradeplan/generate-upgrade-plan"
            ));
            let body = req(
                "GenerateUpgradePlanRequest",
                json!({"cluster": cl, "fromControlPlaneKubernetesVersion": "v1.30.4",
                       "fromWorkersKubernetesVersion": "v1.30.4", "toKubernetesVersion": "v1.33.0"}),
            );
            let (_, _, resp) = post_json(&c, &url, &body).await;
            assert_eq!(
                resp,
                json!({"apiVersion": API, "kind": "GenerateUpgradePlanResponse", "status": "Success",
                       "controlPlaneUpgrades": [{"version": "v1.31.2"}, {"version": "v1.32.3"}, {"version": "v1.33.0"}]})
            );

            // The log line names the cluster.
            let mut logs = Vec::new();
            let found = |logs: &Vec<Value>| {
                logs.iter().any(|l| {
                    l["message"] == "hook call"
                        && l["hook"] == "GenerateUpgradePlan"
                        && l["cluster_namespace"] == ns.as_str()
                        && l["cluster_name"] == name.as_str()
                        && l["outcome"] == "success"
                        && l["duration_us"].is_u64()
                })
            };
            for _ in 0..50 {
                logs.extend(srv.drain_logs());
                if found(&logs) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            assert!(
                found(&logs),
                "no structured log line for the call: {logs:?}"
            );
        }

        // Topology hooks through the engine with no packs: nothing to patch, no
        // variables, valid. That is the protocol's complete answer.
        let builtin = json!({"name": "builtin", "value": {"cluster": {"name": "c1", "namespace": "ns1",
            "topology": {"version": "v1.33.1", "classRef": {"name": "cc", "namespace": "ns1"}}}}});
        let item = json!({"uid": "5e1c0a2e-6b1b-4d64-8b8f-0f5c4a1e2d3c",
            "holderReference": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "namespace": "ns1", "name": "c1", "fieldPath": "spec.infrastructureRef"},
            "object": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackClusterTemplate", "metadata": {"name": "t"}, "spec": {"template": {"spec": {}}}},
            "variables": []});
        let (_, _, resp) = post_json(
            &c,
            &srv.url(&format!("{PREFIX}/generatepatches/generate-patches")),
            &req(
                "GeneratePatchesRequest",
                json!({"settings": {"a": "b"}, "variables": [builtin], "items": [item]}),
            ),
        )
        .await;
        assert_eq!(
            resp,
            json!({"apiVersion": API, "kind": "GeneratePatchesResponse", "status": "Success"})
        );

        let mut vitem = item.clone();
        vitem.as_object_mut().unwrap().remove("uid");
        let (_, _, resp) = post_json(
            &c,
            &srv.url(&format!("{PREFIX}/validatetopology/validate-topology")),
            &req(
                "ValidateTopologyRequest",
                json!({"variables": [], "items": [vitem]}),
            ),
        )
        .await;
        assert_eq!(
            resp,
            json!({"apiVersion": API, "kind": "ValidateTopologyResponse", "status": "Success"})
        );

        let (_, _, resp) = post_json(
            &c,
            &srv.url(&format!("{PREFIX}/discovervariables/discover-variables")),
            &req("DiscoverVariablesRequest", json!({"settings": {"k": "v"}})),
        )
        .await;
        assert_eq!(
            resp,
            json!({"apiVersion": API, "kind": "DiscoverVariablesResponse", "status": "Success", "variables": []})
        );

        // In-place hooks: no patches means "cannot update in place", so CAPI rolls out.
        let side = json!({"machine": {"metadata": {"name": "m"}}, "infrastructureMachine": {"kind": "OpenStackMachine"}, "bootstrapConfig": {"kind": "KubeadmConfig"}});
        let (_, _, resp) = post_json(
            &c,
            &srv.url(&format!("{PREFIX}/canupdatemachine/can-update-machine")),
            &req(
                "CanUpdateMachineRequest",
                json!({"current": side, "desired": side}),
            ),
        )
        .await;
        assert_eq!(
            resp,
            json!({"apiVersion": API, "kind": "CanUpdateMachineResponse", "status": "Success"})
        );
        let ms = json!({"machineSet": {"metadata": {"name": "ms"}}, "infrastructureMachineTemplate": {"kind": "OpenStackMachineTemplate"}});
        let (_, _, resp) = post_json(
            &c,
            &srv.url(&format!(
                "{PREFIX}/canupdatemachineset/can-update-machineset"
            )),
            &req(
                "CanUpdateMachineSetRequest",
                json!({"current": ms, "desired": ms}),
            ),
        )
        .await;
        assert_eq!(
            resp,
            json!({"apiVersion": API, "kind": "CanUpdateMachineSetResponse", "status": "Success"})
        );
        let (_, _, resp) = post_json(
            &c,
            &srv.url(&format!("{PREFIX}/updatemachine/update-machine")),
            &req("UpdateMachineRequest", json!({"desired": side})),
        )
        .await;
        assert_eq!(resp["status"], "Failure");
        assert_eq!(resp["retryAfterSeconds"], 0);
        assert!(resp["message"].as_str().unwrap().contains("not supported"));

        // Discovery itself.
        let (st, v, raw) = post_raw(
            &c,
            &srv.url(&format!("{PREFIX}/discovery?timeout=10s")),
            br#"{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"DiscoveryRequest"}"#.to_vec(),
        )
        .await;
        assert_eq!((st, v), (200, want_version));
        let resp: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(resp["status"], "Success");
        // 16 hooks of CAPI 1.14 plus three handlers for each embedded pack.
        let packs = stackhook::engine::PackEngine::embedded()
            .unwrap()
            .packs()
            .len();
        assert_eq!(
            packs, 7,
            "addons-v1, cilium, magnum-v1, networking-v1, openstack, openstack-v1, vip-v1"
        );
        assert_eq!(resp["handlers"].as_array().unwrap().len(), 16 + packs * 3);
    }
}

/// The hooks each CAPI minor knows, written from CAPI's catalogue (runtime-sdk §2).
fn expected_hooks(minor: u32) -> Vec<&'static str> {
    let mut v = vec![
        "GeneratePatches",
        "ValidateTopology",
        "DiscoverVariables",
        "BeforeClusterCreate",
        "AfterControlPlaneInitialized",
        "BeforeClusterUpgrade",
        "AfterControlPlaneUpgrade",
        "AfterClusterUpgrade",
        "BeforeClusterDelete",
    ];
    if minor >= 12 {
        v.extend([
            "BeforeControlPlaneUpgrade",
            "BeforeWorkersUpgrade",
            "AfterWorkersUpgrade",
            "GenerateUpgradePlan",
            "CanUpdateMachine",
            "CanUpdateMachineSet",
            "UpdateMachine",
        ]);
    }
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_exactly_the_target_versions_hooks() {
    for minor in 10..=14u32 {
        let version = format!("1.{minor}");
        let srv = Server::start(&["--capi-version", &version, "--enable-in-place-hooks"]);
        let c = client(srv.ca_pem.as_ref().unwrap(), Proto::H2);
        let (_, _, resp) = post_json(
            &c,
            &srv.url(&format!("{PREFIX}/discovery")),
            &json!({"apiVersion": API, "kind": "DiscoveryRequest"}),
        )
        .await;
        assert_eq!(resp["status"], "Success");
        let handlers = resp["handlers"].as_array().unwrap();
        // The embedded packs add their own handlers; the generic ones are checked here.
        let pack_names: Vec<String> = stackhook::engine::PackEngine::embedded()
            .unwrap()
            .packs()
            .iter()
            .map(|p| format!("{}-", p.name))
            .collect();
        let mut hooks: Vec<&str> = handlers
            .iter()
            .filter(|h| {
                let n = h["name"].as_str().unwrap();
                !pack_names.iter().any(|p| n.starts_with(p.as_str()))
            })
            .map(|h| h["requestHook"]["hook"].as_str().unwrap())
            .collect();
        hooks.sort();
        assert_eq!(hooks, expected_hooks(minor), "CAPI {version}");
        let mut names = std::collections::BTreeSet::new();
        for h in handlers {
            assert_eq!(h["requestHook"]["apiVersion"], API);
            let name = h["name"].as_str().unwrap();
            assert!(names.insert(name), "duplicate handler {name}");
            assert!(
                !name.is_empty()
                    && name.len() <= 63
                    && name
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name} is not a DNS-1123 label"
            );
            assert_eq!(h["timeoutSeconds"], 10);
            assert_eq!(h["failurePolicy"], "Fail");
        }
        // Each advertised handler is actually served (not 404).
        for h in handlers {
            let hook = h["requestHook"]["hook"].as_str().unwrap();
            let url = srv.url(&format!(
                "{PREFIX}/{}/{}",
                hook.to_lowercase(),
                h["name"].as_str().unwrap()
            ));
            let (st, _, _) = post_raw(&c, &url, b"{}".to_vec()).await;
            assert_eq!(st, 200, "{url}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_settings_come_from_configuration() {
    let resp = server::discovery_with_handler_config(
        "defaults: {timeoutSeconds: 5}\nhandlers:\n  before-cluster-delete: {timeoutSeconds: 30, failurePolicy: Ignore}\n",
        Proto::H1,
    )
    .await;
    for h in resp["handlers"].as_array().unwrap() {
        if h["name"] == "before-cluster-delete" {
            assert_eq!(h["timeoutSeconds"], 30);
            assert_eq!(h["failurePolicy"], "Ignore");
        } else {
            assert_eq!(h["timeoutSeconds"], 5, "{h}");
            assert_eq!(h["failurePolicy"], "Fail");
        }
    }
}

#[test]
fn bad_handler_configuration_stops_start_up_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("handlers.yaml");
    std::fs::write(
        &cfg,
        "handlers:\n  before-cluster-delete: {timeoutSeconds: 31}\n",
    )
    .unwrap();
    let err = server::serve_fails(&[std::ffi::OsStr::new("--handler-config"), cfg.as_os_str()]);
    assert!(
        err.contains("handlers.before-cluster-delete.timeoutSeconds is 31; CAPI accepts 0 to 30"),
        "{err}"
    );
    std::fs::write(&cfg, "handlers:\n  no-such-handler: {timeoutSeconds: 3}\n").unwrap();
    let err = server::serve_fails(&[std::ffi::OsStr::new("--handler-config"), cfg.as_os_str()]);
    assert!(err.contains("\"no-such-handler\""), "{err}");
}
