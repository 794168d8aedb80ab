//! Arbitrary text as the YAML stackhook reads: a pack file with source lines
//! (`engine::yaml::parse`), and a multi-document stream as `stackhook render` reads it
//! (YAML 1.1, as kubectl does). A stream holding a Cluster and a ClusterClass is
//! rendered with the shipped packs, the other documents as the class's templates.
//! Everything must return problems as errors, never panic or hang.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use stackhook::engine::clusterclass::{Cluster, ClusterClass};
use stackhook::engine::{yaml, PackEngine};
use stackhook::render::{self, Inputs, Templates};

fn engine() -> &'static PackEngine {
    static ENGINE: OnceLock<PackEngine> = OnceLock::new();
    ENGINE.get_or_init(|| PackEngine::embedded().expect("packs"))
}

fn kind(d: &Value) -> &str {
    d.get("kind").and_then(Value::as_str).unwrap_or_default()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(doc) = yaml::parse(text) {
        for place in [
            "name",
            "variables[0].schema",
            "patches[0].definitions[0].jsonPatches[1]",
        ] {
            let _ = doc.line(place);
        }
    }
    let Ok(docs) = render::yaml_documents(text) else {
        return;
    };
    let cluster = docs.iter().find(|d| kind(d) == "Cluster");
    let class = docs.iter().find(|d| kind(d) == "ClusterClass");
    let templates: Vec<(String, Value)> = docs
        .iter()
        .filter(|d| !matches!(kind(d), "Cluster" | "ClusterClass"))
        .map(|d| ("fuzz.yaml".to_string(), d.clone()))
        .collect();
    let cluster = cluster.map(Cluster::from_value);
    let class = class.map(ClusterClass::from_value);
    let templates = Templates::from_documents("fuzz", templates);
    if let (Some(Ok(cluster)), Some(Ok(class)), Ok(templates)) = (cluster, class, templates) {
        let inputs = Inputs {
            cluster,
            class,
            templates,
            capi: stackhook::sdk::CapiVersion::NEWEST,
        };
        if let Ok(objects) = render::render(&inputs, engine()) {
            let _ = render::to_yaml(&objects);
        }
    }
});
