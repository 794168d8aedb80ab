//! Arbitrary pack files: loading must return every problem as an error, never panic or
//! hang, and a pack that loads must answer its three hooks on a small fixed request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stackhook::engine::{PackEngine, PatchEngine};
use stackhook::sdk::topology::{
    DiscoverVariablesRequest, GeneratePatchesRequest, ValidateTopologyRequest,
};
use stackhook::sdk::CapiVersion;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let Ok(engine) = PackEngine::from_sources(vec![("fuzz.yaml".into(), src.into())]) else {
        return;
    };
    let item = serde_json::json!({
        "uid": "u1",
        "holderReference": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "namespace": "ns", "name": "c", "fieldPath": "spec.infrastructureRef"},
        "object": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "OpenStackClusterTemplate", "metadata": {"name": "t"},
            "spec": {"template": {"spec": {}}}},
        "variables": []
    });
    let gen: GeneratePatchesRequest = match serde_json::from_value(serde_json::json!({
        "variables": [{"name": "builtin", "value": {"cluster": {"name": "c", "namespace": "ns"}}}],
        "items": [item.clone()]
    })) {
        Ok(r) => r,
        Err(_) => return,
    };
    let val: ValidateTopologyRequest = match serde_json::from_value(serde_json::json!({
        "variables": [], "items": [item]
    })) {
        Ok(r) => r,
        Err(_) => return,
    };
    for p in engine.packs() {
        let _ = engine.generate_patches(&format!("{}-generate-patches", p.name), &gen);
        let _ = engine.discover_variables(
            &format!("{}-discover-variables", p.name),
            &DiscoverVariablesRequest::default(),
            CapiVersion::NEWEST,
        );
        let _ = engine.validate_topology(&format!("{}-validate-topology", p.name), &val);
    }
});
