//! The patch engine alone, without TLS or HTTP: GeneratePatches of the 12-item,
//! 20-variable request in `benches/bodies/generate-patches-12.json` (the body
//! `benches/load.sh` fires at the server) for the openstack and cilium packs, the same
//! with decoding and encoding, and a render of the dev-test ClusterClass.
//!
//! `cargo bench --bench engine`

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use stackhook::engine::clusterclass::{Cluster, ClusterClass};
use stackhook::engine::fingerprint::GeneratePatchesWire;
use stackhook::engine::{PackEngine, PatchEngine};
use stackhook::render::{self, Inputs, Templates};
use stackhook::sdk::decode::decode;
use stackhook::sdk::topology::GeneratePatchesRequest;
use stackhook::sdk::{Hook, ResponseStatus};

/// The server's allocator, so the figures are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn file(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn dev_test_inputs() -> Inputs {
    let one = |rel: &str| render::yaml_documents(&file(rel)).expect("yaml")[0].clone();
    let templates = render::yaml_documents(&file("templates/dev-test.yaml"))
        .expect("yaml")
        .into_iter()
        .map(|t| ("dev-test.yaml".to_string(), t))
        .collect();
    Inputs {
        cluster: Cluster::from_value(&one("clusterclasses/examples/dev-test-cluster.yaml"))
            .expect("cluster"),
        class: ClusterClass::from_value(&one("clusterclasses/dev-test.yaml")).expect("class"),
        templates: Templates::from_documents("templates", templates).expect("templates"),
        capi: stackhook::sdk::CapiVersion::NEWEST,
    }
}

fn benches(c: &mut Criterion) {
    let engine = PackEngine::embedded().expect("embedded packs");
    let body = file("benches/bodies/generate-patches-12.json").into_bytes();
    let req: GeneratePatchesRequest = decode(Hook::GeneratePatches, &body).expect("request");
    assert_eq!(req.items.len(), 12);
    assert_eq!(req.variables.len(), 20);
    for handler in ["openstack-generate-patches", "cilium-generate-patches"] {
        let resp = engine.generate_patches(handler, &req);
        assert_eq!(resp.status, ResponseStatus::Success, "{}", resp.message);
        assert!(!resp.items.is_empty(), "{handler} patches nothing");
        c.bench_function(&format!("generate-patches-12/{handler}"), |b| {
            b.iter(|| engine.generate_patches(handler, black_box(&req)))
        });
    }
    // What the server does with a request it has not answered before: read the body
    // once (parts as raw text), fingerprint it, run the engine on the raw parts, encode.
    c.bench_function(
        "generate-patches-12/openstack-generate-patches/decode+engine+encode",
        |b| {
            b.iter(|| {
                let wire = GeneratePatchesWire::read(black_box(&body)).expect("wire");
                let fp = wire.fingerprint();
                let req = wire.to_raw().expect("request");
                let resp =
                    engine.generate_patches_raw("openstack-generate-patches", &req, Some(fp));
                serde_json::to_vec(&resp).expect("encode")
            })
        },
    );
    // The same with the cache off, as the server does it: one decoding pass that leaves
    // the parts raw, the engine, encode.
    c.bench_function(
        "generate-patches-12/openstack-generate-patches/decode+engine+encode, no cache",
        |b| {
            b.iter(|| {
                let a = engine
                    .answer_generate_patches("openstack-generate-patches", black_box(&body))
                    .expect("request");
                serde_json::to_vec(&a.response).expect("encode")
            })
        },
    );
    // The two halves of a cache hit on the server: finding the fingerprint in the body,
    // and the lookup that re-addresses the stored answer.
    c.bench_function("generate-patches-12/read+fingerprint", |b| {
        b.iter(|| {
            let wire = GeneratePatchesWire::read(black_box(&body)).expect("wire");
            wire.fingerprint()
        })
    });
    // The floor server's work on the same body, for scale.
    c.bench_function("generate-patches-12/floor: parse to Value + encode", |b| {
        b.iter(|| {
            let v: serde_json::Value = serde_json::from_slice(black_box(&body)).expect("json");
            serde_json::to_vec(&v).expect("encode")
        })
    });

    // A reconcile of an unchanged Cluster, as the server sees it: the same body with
    // fresh item UIDs, read and fingerprinted, answered from the cache, encoded. The
    // bodies cycle through 64 sets of UIDs prepared beforehand.
    let cached = PackEngine::embedded()
        .expect("embedded packs")
        .with_patch_cache(64);
    let bodies: Vec<Vec<u8>> = (0..64)
        .map(|round| {
            let mut v: serde_json::Value = serde_json::from_slice(&body).expect("json");
            for (i, item) in v["items"]
                .as_array_mut()
                .expect("items")
                .iter_mut()
                .enumerate()
            {
                item["uid"] = format!("{round:016x}-{i}").into();
            }
            serde_json::to_vec(&v).expect("encode")
        })
        .collect();
    // The first call computes and stores; every timed call after it is a hit.
    let wire = GeneratePatchesWire::read(&bodies[0]).expect("wire");
    let first = wire.to_request().expect("request");
    cached.generate_patches_with(
        "openstack-generate-patches",
        &first,
        Some(wire.fingerprint()),
    );
    let mut round = 0usize;
    c.bench_function(
        "generate-patches-12/openstack-generate-patches/cached, new UIDs",
        |b| {
            b.iter(|| {
                round = (round + 1) % bodies.len();
                let wire = GeneratePatchesWire::read(black_box(&bodies[round])).expect("wire");
                let fp = wire.fingerprint();
                let uids: Vec<&str> = wire.items.iter().map(|i| i.uid.as_ref()).collect();
                let resp = cached
                    .remembered_patches("openstack-generate-patches", &fp, &uids)
                    .expect("a hit");
                serde_json::to_vec(&resp).expect("encode")
            })
        },
    );
    let (hits, misses) = cached.patch_cache().expect("cache").stats();
    assert!(hits > 0 && misses == 1, "hits {hits}, misses {misses}");

    let inputs = dev_test_inputs();
    let dev =
        PackEngine::from_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/packs"))
            .expect("dev-test pack");
    assert_eq!(render::render(&inputs, &dev).expect("render").len(), 9);
    c.bench_function("render/dev-test", |b| {
        b.iter(|| render::render(black_box(&inputs), &dev).expect("render"))
    });
}

criterion_group!(engine, benches);
criterion_main!(engine);
