//! The embedded packs served by the real binary over real TLS: one handler per pack and
//! topology hook, named `<pack>-<hook>`.

use crate::server;

use serde_json::{json, Value};
use server::{client, post_json, Proto, Server, API, PREFIX};

const NET_ID: &str = "0a9b7d2c-5e1f-4c3a-9b8d-6f2e1a3c4d5e";

fn builtin() -> Value {
    json!({"name": "builtin", "value": {"cluster": {"name": "c1", "namespace": "ns1",
        "topology": {"version": "v1.33.1", "class": "cc", "classNamespace": "ns1",
                     "classRef": {"name": "cc", "namespace": "ns1"}}}}})
}

/// An OpenStackClusterTemplate and the control plane's OpenStackMachineTemplate, as
/// CAPI 1.14 sends them (KCP v1beta2 contract).
fn items() -> Value {
    json!([
        {"uid": "8c0e2a5e-1111-4b1b-8d3e-0a1b2c3d4e5f",
         "holderReference": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "namespace": "ns1", "name": "c1", "fieldPath": "spec.infrastructureRef"},
         "object": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackClusterTemplate",
            "metadata": {"name": "cc-cluster", "namespace": "ns1"},
            "spec": {"template": {"spec": {"identityRef": {"type": "Secret", "name": "x", "cloudName": "o"}}}}},
         "variables": []},
        {"uid": "8c0e2a5e-2222-4b1b-8d3e-0a1b2c3d4e5f",
         "holderReference": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "namespace": "ns1", "name": "c1-x7k2p", "fieldPath": "spec.machineTemplate.spec.infrastructureRef"},
         "object": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachineTemplate",
            "metadata": {"name": "cc-cp", "namespace": "ns1"},
            "spec": {"template": {"spec": {"flavor": "placeholder"}}}},
         "variables": [{"name": "builtin", "value": {"controlPlane": {"name": "c1-x7k2p", "version": "v1.33.1", "replicas": 3}}}]}
    ])
}

fn decode_patch(item: &Value) -> Value {
    assert_eq!(item["patchType"], "JSONPatch", "{item}");
    let bytes = data_encoding::BASE64
        .decode(item["patch"].as_str().unwrap().as_bytes())
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_per_pack_handlers_with_their_settings() {
    let resp = server::discovery_with_handler_config(
        "defaults: {timeoutSeconds: 7}\nhandlers:\n  openstack-generate-patches: {timeoutSeconds: 3, failurePolicy: Ignore}\n",
        Proto::H2,
    )
    .await;
    let handlers = resp["handlers"].as_array().unwrap();
    let find = |name: &str| {
        handlers
            .iter()
            .find(|h| h["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in discovery: {resp}"))
            .clone()
    };
    for pack in ["openstack", "cilium"] {
        for (suffix, hook) in [
            ("generate-patches", "GeneratePatches"),
            ("discover-variables", "DiscoverVariables"),
            ("validate-topology", "ValidateTopology"),
        ] {
            let h = find(&format!("{pack}-{suffix}"));
            assert_eq!(h["requestHook"], json!({"apiVersion": API, "hook": hook}));
        }
    }
    // The generic handlers stay.
    assert_eq!(
        find("generate-patches")["requestHook"]["hook"],
        "GeneratePatches"
    );
    let h = find("openstack-generate-patches");
    assert_eq!(
        (h["timeoutSeconds"].clone(), h["failurePolicy"].clone()),
        (json!(3), json!("Ignore"))
    );
    let h = find("cilium-generate-patches");
    assert_eq!(
        (h["timeoutSeconds"].clone(), h["failurePolicy"].clone()),
        (json!(7), json!("Fail"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_patches_runs_only_the_named_pack() {
    let srv = Server::start(&["--capi-version", "1.14"]);
    let c = client(srv.ca_pem.as_ref().unwrap(), Proto::H1);
    let body = json!({"apiVersion": API, "kind": "GeneratePatchesRequest",
        "variables": [builtin(), {"name": "openstack", "value": {
            "externalNetworkID": NET_ID, "image": {"name": "ubuntu-2404"}, "sshKeyName": "ops"}}],
        "items": items()});
    let (st, _, resp) = post_json(
        &c,
        &srv.url(&format!(
            "{PREFIX}/generatepatches/openstack-generate-patches"
        )),
        &body,
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(resp["status"], "Success", "{resp}");
    let items = resp["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{resp}");
    let by_uid = |uid: &str| decode_patch(items.iter().find(|i| i["uid"] == uid).unwrap());
    // Written from extensions/openstack.yaml: every op of the matching patches, in
    // pack order, with the schema defaults CAPI would have applied.
    assert_eq!(
        by_uid("8c0e2a5e-1111-4b1b-8d3e-0a1b2c3d4e5f"),
        json!([
            {"op": "add", "path": "/spec/template/spec/externalNetwork", "value": {}},
            {"op": "add", "path": "/spec/template/spec/externalNetwork/id", "value": NET_ID},
            {"op": "add", "path": "/spec/template/spec/managedSubnets", "value": []},
            {"op": "add", "path": "/spec/template/spec/managedSubnets/0",
             "value": {"cidr": "10.6.0.0/24", "dnsNameservers": []}},
            {"op": "add", "path": "/spec/template/spec/apiServerLoadBalancer", "value": {"enabled": true}},
            {"op": "add", "path": "/spec/template/spec/controlPlaneAvailabilityZones", "value": []}
        ])
    );
    assert_eq!(
        by_uid("8c0e2a5e-2222-4b1b-8d3e-0a1b2c3d4e5f"),
        json!([
            {"op": "add", "path": "/spec/template/spec/flavor", "value": "m1.medium"},
            {"op": "add", "path": "/spec/template/spec/image", "value": {"filter": {}}},
            {"op": "add", "path": "/spec/template/spec/image/filter/name", "value": "ubuntu-2404"},
            {"op": "add", "path": "/spec/template/spec/sshKeyName", "value": "ops"}
        ])
    );

    // The cilium handler on the same request: no kubeadm templates, nothing to do.
    let (_, _, resp) = post_json(
        &c,
        &srv.url(&format!("{PREFIX}/generatepatches/cilium-generate-patches")),
        &body,
    )
    .await;
    assert_eq!(
        resp,
        json!({"apiVersion": API, "kind": "GeneratePatchesResponse", "status": "Success"})
    );

    // A pack name on the wrong hook is not served.
    let (st, _, _) = server::post_raw(
        &c,
        &srv.url(&format!(
            "{PREFIX}/generatepatches/openstack-discover-variables"
        )),
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    assert_eq!(st, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_variables_answers_per_pack() {
    let srv = Server::start(&["--capi-version", "1.12"]);
    let c = client(srv.ca_pem.as_ref().unwrap(), Proto::H2);
    for (pack, var, required) in [
        ("openstack", "openstack", true),
        ("cilium", "cilium", false),
    ] {
        let (_, _, resp) = post_json(
            &c,
            &srv.url(&format!(
                "{PREFIX}/discovervariables/{pack}-discover-variables"
            )),
            &json!({"apiVersion": API, "kind": "DiscoverVariablesRequest"}),
        )
        .await;
        assert_eq!(resp["status"], "Success", "{resp}");
        let vars = resp["variables"].as_array().unwrap();
        assert_eq!(vars.len(), 1, "{resp}");
        assert_eq!(vars[0]["name"], var);
        assert_eq!(vars[0]["required"], required);
        assert_eq!(vars[0]["schema"]["openAPIV3Schema"]["type"], "object");
        // CAPI ≤ 1.12 reads the v1beta1 element: `metadata`, no deprecated key.
        assert!(vars[0].get("deprecatedV1Beta1Metadata").is_none(), "{resp}");
    }
}

/// ValidateTopology's items: GeneratePatches' without uids.
fn validate_items() -> Value {
    let mut items = items();
    for i in items.as_array_mut().unwrap() {
        i.as_object_mut().unwrap().remove("uid");
    }
    items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_topology_names_the_field() {
    let srv = Server::start(&[]);
    let c = client(srv.ca_pem.as_ref().unwrap(), Proto::H1);
    let items = validate_items();
    let url = srv.url(&format!(
        "{PREFIX}/validatetopology/openstack-validate-topology"
    ));
    let (_, _, ok) = post_json(
        &c,
        &url,
        &json!({"apiVersion": API, "kind": "ValidateTopologyRequest",
            "variables": [builtin(), {"name": "openstack", "value": {"externalNetworkID": NET_ID, "image": {"name": "u"}}}],
            "items": items}),
    )
    .await;
    assert_eq!(ok["status"], "Success", "{ok}");
    let (_, _, bad) = post_json(
        &c,
        &url,
        &json!({"apiVersion": API, "kind": "ValidateTopologyRequest",
            "variables": [builtin(), {"name": "openstack", "value": {"externalNetworkID": "not-a-uuid", "image": {"name": "u"}}}],
            "items": items}),
    )
    .await;
    assert_eq!(bad["status"], "Failure");
    let msg = bad["message"].as_str().unwrap();
    assert!(
        msg.contains("variables[openstack].externalNetworkID: ") && msg.contains("uuid"),
        "{msg}"
    );
}

#[test]
fn a_broken_pack_stops_start_up_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("good.yaml"), "name: good\n").unwrap();
    std::fs::write(
        dir.path().join("broken.yaml"),
        "name: broken\npatches:\n- name: p\n  definitions: []\n",
    )
    .unwrap();
    let err = server::serve_fails(&[std::ffi::OsStr::new("--extensions"), dir.path().as_os_str()]);
    assert!(
        err.contains("broken.yaml:4: patches[0].definitions: at least one definition is required"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extensions_dir_replaces_the_embedded_packs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/packs");
    let srv = Server::start(&["--extensions", dir.to_str().unwrap()]);
    let c = client(srv.ca_pem.as_ref().unwrap(), Proto::H1);
    let (_, _, resp) = post_json(
        &c,
        &srv.url(&format!("{PREFIX}/discovery")),
        &json!({"apiVersion": API, "kind": "DiscoveryRequest"}),
    )
    .await;
    let names: Vec<&str> = resp["handlers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"dev-test-generate-patches"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("openstack-")),
        "{names:?}"
    );
}

/// The body `benches/load.sh` fires with
/// `GP_BODY=generate-patches-12 GP_HANDLER=openstack-generate-patches`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_benchmark_body_is_answered() {
    let srv = Server::start(&["--capi-version", "1.14"]);
    let c = client(srv.ca_pem.as_ref().unwrap(), Proto::H1);
    let body = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("benches/bodies/generate-patches-12.json"),
    )
    .unwrap();
    for (handler, want_items) in [
        // cluster, CP machine template, 4 MD infrastructure templates
        ("openstack-generate-patches", 6),
        // control plane, 4 MD bootstrap templates
        ("cilium-generate-patches", 5),
    ] {
        let (st, _, raw) = server::post_raw(
            &c,
            &srv.url(&format!("{PREFIX}/generatepatches/{handler}")),
            body.clone(),
        )
        .await;
        assert_eq!(st, 200);
        let resp: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(resp["status"], "Success", "{resp}");
        assert_eq!(
            resp["items"].as_array().unwrap().len(),
            want_items,
            "{handler}"
        );
    }
}

/// CAPI resends an unchanged Cluster's request with fresh UIDs and MachineDeployments
/// in another order on every reconcile: the server answers those from its patch cache
/// (read off the body, compact as Go writes it, or indented), with this request's UIDs,
/// exactly as a server without the cache computes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_request_is_answered_from_the_cache_with_its_own_uids() {
    // Successful topology calls are logged at debug.
    let cached = Server::start_with_env(
        &["--capi-version", "1.14"],
        &[("RUST_LOG", Some("info,stackhook::server::app=debug"))],
    );
    let plain = Server::start_with_env(
        &["--capi-version", "1.14", "--patch-cache-entries", "0"],
        &[("RUST_LOG", Some("info"))],
    );
    let cc = client(cached.ca_pem.as_ref().unwrap(), Proto::H1);
    let pc = client(plain.ca_pem.as_ref().unwrap(), Proto::H1);
    let base: Value = serde_json::from_slice(
        &std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("benches/bodies/generate-patches-12.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let path = format!("{PREFIX}/generatepatches/openstack-generate-patches");
    for round in 0..4 {
        let mut req = base.clone();
        let items = req["items"].as_array_mut().unwrap();
        for (i, item) in items.iter_mut().enumerate() {
            item["uid"] = json!(format!("00000000-0000-4000-8000-{round:06}{i:06}"));
        }
        items.rotate_left(round * 5 % 12);
        let bytes = if round % 2 == 0 {
            serde_json::to_vec(&req).unwrap()
        } else {
            serde_json::to_vec_pretty(&req).unwrap()
        };
        let (_, _, got) = server::post_raw(&cc, &cached.url(&path), bytes.clone()).await;
        let (_, _, want) = server::post_raw(&pc, &plain.url(&path), bytes).await;
        let got: Value = serde_json::from_slice(&got).unwrap();
        let want: Value = serde_json::from_slice(&want).unwrap();
        assert_eq!(got["status"], "Success", "{got}");
        assert_eq!(got, want, "round {round}");
        for item in got["items"].as_array().unwrap() {
            let uid = item["uid"].as_str().unwrap();
            assert!(
                uid.contains(&format!("-{round:06}")),
                "{uid} in round {round}"
            );
        }
    }
    // Rounds 2 and 3 have the same bytes as 0 and 1 but for UIDs and order.
    let mut logs = Vec::new();
    for _ in 0..50 {
        logs.extend(cached.drain_logs());
        if logs
            .iter()
            .filter(|l| l["hook"] == "GeneratePatches")
            .count()
            >= 4
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let details: Vec<&str> = logs
        .iter()
        .filter(|l| l["hook"] == "GeneratePatches")
        .map(|l| l["detail"].as_str().unwrap_or(""))
        .collect();
    let hit = "answered from the patch cache";
    assert_eq!(details, ["", "", hit, hit], "{logs:?}");
    // The same count in /metrics, for operators; a server without a cache has none.
    let metrics = |srv: &Server| {
        let url = format!("{}/metrics", srv.admin);
        async move { reqwest::get(url).await.unwrap().text().await.unwrap() }
    };
    let text = metrics(&cached).await;
    assert!(
        text.contains("stackhook_patch_cache_answers_total{result=\"hit\"} 2\n")
            && text.contains("stackhook_patch_cache_answers_total{result=\"miss\"} 2\n"),
        "{text}"
    );
    assert!(!metrics(&plain).await.contains("patch_cache_answers"));
    assert!(
        logs.iter()
            .filter(|l| l["hook"] == "GeneratePatches")
            .all(|l| l["cluster_name"] == "prod1" && l["cluster_namespace"] == "team-a"),
        "{logs:?}"
    );

    // At info, the four successful calls leave no line; a refused one does.
    let (_, _, refused) =
        server::post_raw(&pc, &plain.url(&path), br#"{"items": 5}"#.to_vec()).await;
    let refused: Value = serde_json::from_slice(&refused).unwrap();
    assert_eq!(refused["status"], "Failure", "{refused}");
    let mut logs = Vec::new();
    for _ in 0..50 {
        logs.extend(plain.drain_logs());
        if logs.iter().any(|l| l["hook"] == "GeneratePatches") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let outcomes: Vec<&Value> = logs
        .iter()
        .filter(|l| l["hook"] == "GeneratePatches")
        .map(|l| &l["outcome"])
        .collect();
    assert_eq!(outcomes, ["decode_error"], "{logs:?}");
}

/// Without Kubernetes access there is no identity Secret to read: the openstack-v1
/// pack's ValidateTopology checks the variables only, which start-up says once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_kubernetes_access_validate_topology_checks_variables_only() {
    let srv = Server::start(&[]);
    let c = client(srv.ca_pem.as_ref().unwrap(), Proto::H1);
    let items = validate_items();
    let url = srv.url(&format!(
        "{PREFIX}/validatetopology/openstack-v1-validate-topology"
    ));
    let machine = json!({"flavor": "vt-no-such-flavor", "image": {"name": "vt-no-such-image"}});
    let body = json!({"apiVersion": API, "kind": "ValidateTopologyRequest",
        "variables": [builtin(),
            {"name": "openstackCluster", "value": {"externalNetworkID": NET_ID}},
            {"name": "openstackControlPlane", "value": machine},
            {"name": "openstackWorker", "value": machine}],
        "items": items});
    for _ in 0..2 {
        let (_, _, resp) = post_json(&c, &url, &body).await;
        assert_eq!(resp["status"], "Success", "{resp}");
    }
    let said = srv
        .drain_logs()
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("ValidateTopology checks variables only"))
        })
        .count();
    assert_eq!(said, 1);
}
