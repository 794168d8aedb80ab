//! Arbitrary bytes as the body of every hook (the topology hooks through the shipped
//! openstack pack): the dispatcher must answer with a Success or Failure JSON document
//! and never panic.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use stackhook::config::HandlerConfig;
use stackhook::engine::packs::handler_name;
use stackhook::engine::PackEngine;
use stackhook::hooks::{hold::HoldHandler, Registry};
use stackhook::metrics::Metrics;
use stackhook::sdk::{CapiVersion, Hook};
use stackhook::server::app::{App, AppOptions};

fn app() -> &'static (App, tokio::runtime::Runtime) {
    static APP: OnceLock<(App, tokio::runtime::Runtime)> = OnceLock::new();
    APP.get_or_init(|| {
        let mut registry = Registry::new();
        registry.register(Arc::new(HoldHandler::new(30)));
        let app = App::new(
            AppOptions {
                capi: CapiVersion::new(14),
                handler_config: HandlerConfig::default(),
                kubernetes_versions: vec!["v1.31.0".into()],
                enable_in_place_hooks: true,
            },
            // The shipped packs with the patch cache, so GeneratePatches bodies also go
            // through the fingerprint and the cache lookup.
            Arc::new(PackEngine::embedded().expect("packs").with_patch_cache(64)),
            registry,
            Arc::new(Metrics::new()),
        )
        .expect("app");
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("rt");
        (app, rt)
    })
}

fuzz_target!(|data: &[u8]| {
    let (app, rt) = app();
    let Some((&selector, body)) = data.split_first() else { return };
    let hook = Hook::ALL[selector as usize % Hook::ALL.len()];
    let name = match hook {
        Hook::Discovery => String::new(),
        Hook::GeneratePatches | Hook::DiscoverVariables | Hook::ValidateTopology => {
            handler_name("openstack", hook)
        }
        _ => hook.default_handler_name(),
    };
    let reply = rt.block_on(app.call(hook, &name, body));
    let v: serde_json::Value = serde_json::from_slice(&reply.body).expect("response is JSON");
    assert!(v["status"] == "Success" || v["status"] == "Failure");
});
