//! Prometheus metrics of the hook server and the in-process controllers
//! (prometheus-client, OpenMetrics text), all in one registry.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

use crate::engine::PatchEngine;

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    success,
    failure,
    decode_error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::success => "success",
            Outcome::failure => "failure",
            Outcome::decode_error => "decode_error",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub hook: String,
    pub handler: String,
    pub outcome: Outcome,
}

/// What ValidateTopology's look into the cloud found.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum CloudCheckResult {
    /// Everything the variables name exists.
    valid,
    /// Something named is missing or ambiguous.
    invalid,
    /// The cloud could not be asked (or not in time): the topology was let through.
    unknown,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudCheckLabels {
    pub result: CloudCheckResult,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandlerLabels {
    pub hook: String,
    pub handler: String,
}

fn duration_histogram() -> Histogram {
    // 100µs .. ~3.3s: patch hooks should answer well under CAPI's 200 ms guideline.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// How one reconcile ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ReconcileOutcome {
    /// The cloud half ran and returned an outcome (converged or progressing).
    success,
    /// Nothing to do: no owner yet, paused, or only the finalizer was added.
    skipped,
    /// Deletion is waiting (Machines, cloud resources going away).
    waiting,
    /// Spec or credentials are wrong; a Condition and an Event say why.
    user_error,
    /// Cloud or apiserver trouble that a retry may fix.
    transient_error,
    /// An OpenStack service did not answer (or answered 502/503/504); retried.
    unavailable,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: String,
    pub outcome: ReconcileOutcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

fn reconcile_histogram() -> Histogram {
    // 1 ms .. ~65 s: cloud calls dominate, Octavia waits come back as requeues.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// The controllers' share of the registry; cheap to clone into each controller.
#[derive(Clone)]
pub struct ControllerMetrics {
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    /// Requests that changed an object's status subresource; a converged
    /// object makes none.
    pub status_writes: Family<ControllerLabels, Counter>,
    /// 1 while this replica holds the lease (or runs without election).
    pub leader: Gauge,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        ControllerMetrics {
            reconciles: Family::default(),
            duration: Family::new_with_constructor(reconcile_histogram),
            status_writes: Family::default(),
            leader: Gauge::default(),
        }
    }
}

impl ControllerMetrics {
    pub fn observe(&self, controller: &str, outcome: ReconcileOutcome, seconds: f64) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                controller: controller.to_string(),
                outcome,
            })
            .inc();
        self.duration
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .observe(seconds);
    }

    /// The status write counter of one controller (created at 0 on first use).
    pub fn status_writes(&self, controller: &str) -> Counter {
        self.status_writes
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .clone()
    }
}

impl std::fmt::Debug for ControllerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerMetrics")
            .field("leader", &self.leader.get())
            .finish_non_exhaustive()
    }
}

/// Why the hook listener turned a connection or request away.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Refusal {
    /// `--max-connections` reached: the connection was closed on accept.
    connection_limit,
    /// `--max-in-flight-bytes` reached: the request was answered with a Failure.
    in_flight_bytes,
    /// The body did not arrive within `--body-read-timeout-seconds`.
    body_read_timeout,
    /// The body was over `--max-body-bytes`.
    body_too_large,
    /// No request for `--idle-timeout-seconds`: the connection was closed.
    idle_timeout,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    pub reason: Refusal,
}

/// The hook listener's own accounting, apart from the per-hook figures.
#[derive(Clone, Debug, Default)]
pub struct ListenerMetrics {
    pub refusals: Family<RefusalLabels, Counter>,
    pub open_connections: Gauge,
    pub in_flight_bytes: Gauge,
}

impl ListenerMetrics {
    pub fn refused(&self, reason: Refusal) {
        self.refusals.get_or_create(&RefusalLabels { reason }).inc();
    }
}

pub struct Metrics {
    pub registry: Registry,
    pub listener: ListenerMetrics,
    pub requests: Family<CallLabels, Counter>,
    pub duration: Family<HandlerLabels, Histogram, fn() -> Histogram>,
    pub certificate_reloads: Counter,
    pub controllers: ControllerMetrics,
    /// ValidateTopology's cloud lookups by result.
    pub cloud_checks: Family<CloudCheckLabels, Counter>,
    /// The CAPI minor whose hook catalogue and shapes are served.
    pub capi_minor: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The patch cache's counters, read from the engine when `/metrics` is scraped: the
/// engine counts them on its hot path without knowing about Prometheus.
struct PatchCacheCollector(Arc<dyn PatchEngine>);

impl std::fmt::Debug for PatchCacheCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PatchCacheCollector")
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

impl Collector for PatchCacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some((hits, misses)) = self.0.patch_cache_stats() else {
            return Ok(());
        };
        let mut family = encoder.encode_descriptor(
            "patch_cache_answers",
            "GeneratePatches answers handed back from the patch cache (hit) and computed after a lookup (miss)",
            None,
            MetricType::Counter,
        )?;
        for (result, n) in [("hit", hits), ("miss", misses)] {
            ConstCounter::new(n).encode(family.encode_family(&ResultLabels { result })?)?;
        }
        Ok(())
    }
}

impl Metrics {
    /// Exports the engine's patch-cache counters (none when it has no cache).
    pub fn with_patch_cache_of(mut self, engine: Arc<dyn PatchEngine>) -> Self {
        self.registry
            .register_collector(Box::new(PatchCacheCollector(engine)));
        self
    }

    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("stackhook");
        let requests = Family::<CallLabels, Counter>::default();
        let duration = Family::<HandlerLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        let certificate_reloads = Counter::default();
        registry.register(
            "hook_requests",
            "Hook calls by hook, handler and outcome",
            requests.clone(),
        );
        registry.register(
            "hook_request_duration_seconds",
            "Time from a decoded request body to an encoded response",
            duration.clone(),
        );
        registry.register(
            "tls_certificate_reloads",
            "Serving certificates loaded after a change of the files",
            certificate_reloads.clone(),
        );
        let listener = ListenerMetrics::default();
        registry.register(
            "hook_listener_refusals",
            "Connections closed or requests answered with a Failure because a listener limit was reached",
            listener.refusals.clone(),
        );
        registry.register(
            "hook_listener_open_connections",
            "Client connections open on the hook listener",
            listener.open_connections.clone(),
        );
        registry.register(
            "hook_listener_in_flight_bytes",
            "Request-body bytes held by requests in flight",
            listener.in_flight_bytes.clone(),
        );
        let controllers = ControllerMetrics::default();
        registry.register(
            "controller_reconciles",
            "Reconciles by controller and outcome",
            controllers.reconciles.clone(),
        );
        registry.register(
            "controller_reconcile_duration_seconds",
            "Time one reconcile took, cloud calls included",
            controllers.duration.clone(),
        );
        registry.register(
            "controller_status_writes",
            "Status subresource writes by controller",
            controllers.status_writes.clone(),
        );
        registry.register(
            "controller_leader",
            "1 while this replica runs the controllers (holds the lease), else 0",
            controllers.leader.clone(),
        );
        let cloud_checks = Family::<CloudCheckLabels, Counter>::default();
        registry.register(
            "validate_topology_cloud_checks",
            "ValidateTopology's lookups of the resources a Cluster's variables name, by result",
            cloud_checks.clone(),
        );
        let capi_minor = Gauge::default();
        registry.register(
            "capi_minor_served",
            "Minor version of the Cluster API the hooks answer as (found in the management cluster or pinned with --capi-version)",
            capi_minor.clone(),
        );
        Metrics {
            registry,
            listener,
            requests,
            duration,
            certificate_reloads,
            controllers,
            cloud_checks,
            capi_minor,
        }
    }

    pub fn observe(&self, hook: &str, handler: &str, outcome: Outcome, seconds: f64) {
        self.requests
            .get_or_create(&CallLabels {
                hook: hook.to_string(),
                handler: handler.to_string(),
                outcome,
            })
            .inc();
        self.duration
            .get_or_create(&HandlerLabels {
                hook: hook.to_string(),
                handler: handler.to_string(),
            })
            .observe(seconds);
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
