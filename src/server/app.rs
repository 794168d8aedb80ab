//! The hook dispatcher: handler table, decode → handler → encode. Knows nothing of HTTP.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use crate::config::{ConfigError, HandlerConfig, HandlerSettings};
use crate::engine::cloud_checks::{CloudVerdict, TopologyCloudCheck};
use crate::engine::PatchEngine;
use crate::hooks::{upgrade_plan, LifecycleResponse, Registry};
use crate::metrics::{Metrics, Outcome};
use crate::mgmt::capi_version::ServedCapi;
use crate::sdk::decode::{decode, DecodeError};
use crate::sdk::discovery::{
    DiscoveryRequest, DiscoveryResponse, ExtensionHandler, GroupVersionHook,
};
use crate::sdk::inplace::{
    CanUpdateMachineRequest, CanUpdateMachineResponse, CanUpdateMachineSetRequest,
    CanUpdateMachineSetResponse, UpdateMachineRequest,
};
use crate::sdk::lifecycle::{
    AfterUpgradeRequest, BeforeUpgradeRequest, ClusterRequest, LifecycleEvent,
};
use crate::sdk::topology::{DiscoverVariablesRequest, ValidateTopologyRequest};
use crate::sdk::upgrade_plan::GenerateUpgradePlanRequest;
use crate::sdk::{
    catalog::is_dns1123_label, response_kind, CapiVersion, CommonResponse, Hook, ResponseStatus,
    RetryResponse, API_VERSION,
};

#[derive(Debug, Clone)]
struct Served {
    settings: HandlerSettings,
}

/// What the app needs besides the engine and the lifecycle registry.
#[derive(Debug, Clone)]
pub struct AppOptions {
    pub capi: CapiVersion,
    pub handler_config: HandlerConfig,
    pub kubernetes_versions: Vec<String>,
    pub enable_in_place_hooks: bool,
}

pub struct App {
    /// The CAPI minor answered as; [`crate::mgmt::capi_version::follow`] may change it
    /// while the server runs.
    capi: Arc<ServedCapi>,
    /// The handlers and Discovery answer of every supported CAPI minor, oldest first.
    catalogues: [Catalogue; SUPPORTED],
    engine: Arc<dyn PatchEngine>,
    /// Looks up the resources a valid topology names; `None` without Kubernetes
    /// access, when ValidateTopology checks variables only.
    cloud_check: Option<Arc<dyn TopologyCloudCheck>>,
    registry: Registry,
    kubernetes_versions: Vec<String>,
    pub metrics: Arc<Metrics>,
}

const SUPPORTED: usize = (CapiVersion::NEWEST.minor - CapiVersion::OLDEST.minor + 1) as usize;

struct Catalogue {
    table: BTreeMap<(Hook, String), Served>,
    /// The Discovery answer, encoded once: writing it was most of a Discovery call.
    discovery: Reply,
}

/// The encoded answer of one call plus what the log line and metrics need.
#[derive(Debug, Clone)]
pub struct Reply {
    pub body: Vec<u8>,
    pub outcome: Outcome,
    pub message: String,
    pub cluster: Option<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("handler name {0:?} is not a DNS-1123 label")]
    BadName(String),
    #[error("handler config names {0:?}, which this server does not serve")]
    UnknownHandler(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl App {
    pub fn new(
        opts: AppOptions,
        engine: Arc<dyn PatchEngine>,
        registry: Registry,
        metrics: Arc<Metrics>,
    ) -> Result<App, AppError> {
        let mut names: Vec<(Hook, String)> = Vec::new();
        let eh = engine.handlers();
        for n in eh.generate_patches {
            names.push((Hook::GeneratePatches, n));
        }
        for n in eh.discover_variables {
            names.push((Hook::DiscoverVariables, n));
        }
        for n in eh.validate_topology {
            names.push((Hook::ValidateTopology, n));
        }
        for hook in Hook::ALL.into_iter().filter(|h| h.is_lifecycle()) {
            names.push((hook, hook.default_handler_name()));
        }
        names.push((
            Hook::GenerateUpgradePlan,
            Hook::GenerateUpgradePlan.default_handler_name(),
        ));
        if opts.enable_in_place_hooks {
            for hook in [
                Hook::CanUpdateMachine,
                Hook::CanUpdateMachineSet,
                Hook::UpdateMachine,
            ] {
                names.push((hook, hook.default_handler_name()));
            }
        }
        for (_, name) in &names {
            if !is_dns1123_label(name) {
                return Err(AppError::BadName(name.clone()));
            }
        }
        for name in opts.handler_config.handlers.keys() {
            if !names.iter().any(|(_, n)| n == name) {
                return Err(AppError::UnknownHandler(name.clone()));
            }
        }
        let catalogues = std::array::from_fn(|i| {
            let capi = CapiVersion::new(CapiVersion::OLDEST.minor + i as u16);
            let table: BTreeMap<(Hook, String), Served> = names
                .iter()
                .filter(|(hook, _)| hook.known_to(capi))
                .map(|(hook, name)| {
                    let settings = opts.handler_config.settings_for(name);
                    ((*hook, name.clone()), Served { settings })
                })
                .collect();
            let discovery = encode(
                &discovery_response(&table),
                ResponseStatus::Success,
                String::new(),
                None,
            );
            Catalogue { table, discovery }
        });
        Ok(App {
            capi: ServedCapi::new(opts.capi, metrics.capi_minor.clone()),
            catalogues,
            engine,
            cloud_check: None,
            registry,
            kubernetes_versions: opts.kubernetes_versions,
            metrics,
        })
    }

    /// The handle [`crate::mgmt::capi_version::follow`] keeps current.
    pub fn served_capi(&self) -> Arc<ServedCapi> {
        self.capi.clone()
    }

    fn catalogue(&self) -> &Catalogue {
        let minor = self
            .capi
            .get()
            .minor
            .clamp(CapiVersion::OLDEST.minor, CapiVersion::NEWEST.minor);
        &self.catalogues[usize::from(minor - CapiVersion::OLDEST.minor)]
    }

    pub fn capi(&self) -> CapiVersion {
        self.capi.get()
    }

    /// ValidateTopology also asks the cloud, through `check`, about the resources a
    /// topology names once its variables are valid.
    pub fn with_cloud_check(mut self, check: Arc<dyn TopologyCloudCheck>) -> App {
        self.cloud_check = Some(check);
        self
    }

    /// Resolves a URL path segment pair to a served handler.
    pub fn route(&self, hook_segment: &str, name: Option<&str>) -> Option<(Hook, String)> {
        let hook = Hook::from_path_segment(hook_segment)?;
        if hook.path_segment() != hook_segment {
            return None;
        }
        match (hook, name) {
            (Hook::Discovery, None) => Some((Hook::Discovery, String::new())),
            (Hook::Discovery, Some(_)) | (_, None) => None,
            (hook, Some(name)) => {
                let key = (hook, name.to_string());
                self.catalogue().table.contains_key(&key).then_some(key)
            }
        }
    }

    pub fn discovery(&self) -> DiscoveryResponse {
        discovery_response(&self.catalogue().table)
    }

    /// Handles one call. Never fails: every problem becomes a `Failure` response.
    pub async fn call(&self, hook: Hook, handler: &str, body: &[u8]) -> Reply {
        let started = Instant::now();
        let reply = match self.dispatch(hook, handler, body).await {
            Ok(reply) => reply,
            Err(e) => Reply {
                body: failure_body(hook, self.capi(), &e.to_string()),
                outcome: Outcome::decode_error,
                message: e.to_string(),
                cluster: None,
            },
        };
        self.finish(hook, handler, started, reply)
    }

    /// A body the transport could not deliver (too large, broken stream).
    pub fn transport_failure(&self, hook: Hook, handler: &str, e: DecodeError) -> Reply {
        let msg = e.to_string();
        let reply = Reply {
            body: failure_body(hook, self.capi(), &msg),
            outcome: Outcome::decode_error,
            message: msg,
            cluster: None,
        };
        self.finish(hook, handler, Instant::now(), reply)
    }

    fn finish(&self, hook: Hook, handler: &str, started: Instant, reply: Reply) -> Reply {
        let elapsed = started.elapsed();
        self.metrics
            .observe(hook.name(), handler, reply.outcome, elapsed.as_secs_f64());
        let (ns, name) = reply
            .cluster
            .as_ref()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .unwrap_or(("", ""));
        // CAPI calls the topology hooks on every reconcile of every Cluster (and
        // Discovery on every ExtensionConfig sync): their successful calls are counted
        // in /metrics and logged at debug only. The other hooks (decisions about one
        // Cluster) and every failure are logged at info.
        macro_rules! call {
            ($level:expr) => {
                tracing::event!(
                    $level,
                    hook = hook.name(),
                    handler,
                    cluster_namespace = ns,
                    cluster_name = name,
                    outcome = reply.outcome.as_str(),
                    duration_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
                    detail = reply.message.as_str(),
                    "hook call"
                )
            };
        }
        let routine = matches!(
            hook,
            Hook::Discovery
                | Hook::GeneratePatches
                | Hook::ValidateTopology
                | Hook::DiscoverVariables
        );
        if reply.outcome == Outcome::success && routine {
            call!(tracing::Level::DEBUG);
        } else {
            call!(tracing::Level::INFO);
        }
        reply
    }

    async fn dispatch(&self, hook: Hook, handler: &str, body: &[u8]) -> Result<Reply, DecodeError> {
        match hook {
            Hook::Discovery => {
                decode::<DiscoveryRequest>(hook, body)?;
                Ok(self.catalogue().discovery.clone())
            }
            Hook::GeneratePatches => {
                let a = self.engine.answer_generate_patches(handler, body)?;
                Ok(encode(&a.response, a.response.status, a.detail, a.cluster))
            }
            Hook::ValidateTopology => {
                let req: ValidateTopologyRequest = decode(hook, body)?;
                let cluster = req.cluster();
                let mut resp = self.engine.validate_topology(handler, &req);
                // The variables first: the cloud is asked only about valid values.
                if resp.status == ResponseStatus::Success {
                    let plan = self
                        .cloud_check
                        .as_ref()
                        .and_then(|c| Some((c, self.engine.cloud_plan(handler, &req)?)));
                    if let Some((check, plan)) = plan {
                        let pack = plan.pack.clone();
                        if let CloudVerdict::Invalid(problems) = check.check(plan).await {
                            resp = CommonResponse::new(
                                hook,
                                ResponseStatus::Failure,
                                format!(
                                    "pack {pack:?}: {} problem(s) with the OpenStack resources the variables name: {}",
                                    problems.len(),
                                    problems.join("; ")
                                ),
                            );
                        }
                    }
                }
                Ok(encode(&resp, resp.status, resp.message.clone(), cluster))
            }
            Hook::DiscoverVariables => {
                let req: DiscoverVariablesRequest = decode(hook, body)?;
                let resp = self.engine.discover_variables(handler, &req, self.capi());
                Ok(encode(&resp, resp.status, resp.message.clone(), None))
            }
            Hook::BeforeClusterCreate
            | Hook::AfterControlPlaneInitialized
            | Hook::BeforeClusterDelete => {
                let req: ClusterRequest = decode(hook, body)?;
                Ok(self
                    .lifecycle(LifecycleEvent::from_cluster_request(hook, req))
                    .await)
            }
            Hook::BeforeClusterUpgrade
            | Hook::BeforeControlPlaneUpgrade
            | Hook::BeforeWorkersUpgrade => {
                let req: BeforeUpgradeRequest = decode(hook, body)?;
                Ok(self
                    .lifecycle(LifecycleEvent::from_before_upgrade(hook, req))
                    .await)
            }
            Hook::AfterControlPlaneUpgrade
            | Hook::AfterWorkersUpgrade
            | Hook::AfterClusterUpgrade => {
                let req: AfterUpgradeRequest = decode(hook, body)?;
                Ok(self
                    .lifecycle(LifecycleEvent::from_after_upgrade(hook, req))
                    .await)
            }
            Hook::GenerateUpgradePlan => {
                let req: GenerateUpgradePlanRequest = decode(hook, body)?;
                let cluster = Some((
                    req.cluster.namespace().to_string(),
                    req.cluster.name().to_string(),
                ));
                let resp = upgrade_plan::answer(&req, &self.kubernetes_versions);
                Ok(encode(&resp, resp.status, resp.message.clone(), cluster))
            }
            Hook::CanUpdateMachine => {
                decode::<CanUpdateMachineRequest>(hook, body)?;
                // No patches means "cannot be updated in place": CAPI rolls the Machine.
                let resp = CanUpdateMachineResponse {
                    api_version: API_VERSION.to_string(),
                    kind: response_kind(hook),
                    status: ResponseStatus::Success,
                    message: String::new(),
                    machine_patch: None,
                    infrastructure_machine_patch: None,
                    bootstrap_config_patch: None,
                };
                Ok(encode(&resp, resp.status, String::new(), None))
            }
            Hook::CanUpdateMachineSet => {
                decode::<CanUpdateMachineSetRequest>(hook, body)?;
                let resp = CanUpdateMachineSetResponse {
                    api_version: API_VERSION.to_string(),
                    kind: response_kind(hook),
                    status: ResponseStatus::Success,
                    message: String::new(),
                    machine_set_patch: None,
                    infrastructure_machine_template_patch: None,
                    bootstrap_config_template_patch: None,
                };
                Ok(encode(&resp, resp.status, String::new(), None))
            }
            Hook::UpdateMachine => {
                decode::<UpdateMachineRequest>(hook, body)?;
                // CanUpdate* never offers an in-place update, so reaching here means
                // another component asked for one we do not perform.
                let msg = "in-place updates of OpenStack machines are not supported; the machine must be replaced".to_string();
                let resp = RetryResponse::new(hook, ResponseStatus::Failure, msg.clone(), 0);
                Ok(encode(&resp, resp.status, msg, None))
            }
        }
    }

    async fn lifecycle(&self, event: LifecycleEvent) -> Reply {
        let cluster = Some((
            event.cluster.namespace().to_string(),
            event.cluster.name().to_string(),
        ));
        let combined = self.registry.dispatch(&event, self.capi()).await;
        let status = combined.status;
        let message = combined.message.clone();
        match combined.into_response(event.hook, self.capi()) {
            LifecycleResponse::Common(r) => encode(&r, status, message, cluster),
            LifecycleResponse::Retry(r) => encode(&r, status, message, cluster),
        }
    }
}

/// What Discovery answers: every served handler with its timeout and failure policy.
fn discovery_response(table: &BTreeMap<(Hook, String), Served>) -> DiscoveryResponse {
    let handlers = table
        .iter()
        .map(|((hook, name), served)| ExtensionHandler {
            name: name.clone(),
            request_hook: GroupVersionHook {
                api_version: API_VERSION.to_string(),
                hook: hook.name().to_string(),
            },
            timeout_seconds: served.settings.timeout_seconds,
            failure_policy: served.settings.failure_policy,
        })
        .collect();
    DiscoveryResponse {
        api_version: API_VERSION.to_string(),
        kind: response_kind(Hook::Discovery),
        status: ResponseStatus::Success,
        message: String::new(),
        handlers,
    }
}

fn encode<T: Serialize>(
    resp: &T,
    status: ResponseStatus,
    message: String,
    cluster: Option<(String, String)>,
) -> Reply {
    let outcome = match status {
        ResponseStatus::Success => Outcome::success,
        ResponseStatus::Failure => Outcome::failure,
    };
    match serde_json::to_vec(resp) {
        Ok(body) => Reply {
            body,
            outcome,
            message,
            cluster,
        },
        // Our own types always serialize; keep the protocol intact if that ever changes.
        Err(e) => Reply {
            body: br#"{"status":"Failure","message":"encoding the response failed"}"#.to_vec(),
            outcome: Outcome::failure,
            message: e.to_string(),
            cluster,
        },
    }
}

/// A `Failure` in the response shape of `hook`; retry hooks always carry the required
/// `retryAfterSeconds`.
pub fn failure_body(hook: Hook, capi: CapiVersion, message: &str) -> Vec<u8> {
    let mut v = json!({
        "apiVersion": API_VERSION,
        "kind": response_kind(hook),
        "status": "Failure",
        "message": message,
    });
    if hook.is_blocking(capi) {
        v["retryAfterSeconds"] = json!(0);
    }
    serde_json::to_vec(&v).unwrap_or_else(|_| b"{\"status\":\"Failure\"}".to_vec())
}
