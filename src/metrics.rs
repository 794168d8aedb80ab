//! Prometheus metrics of the hook server (prometheus-client, OpenMetrics text).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandlerLabels {
    pub hook: String,
    pub handler: String,
}

fn duration_histogram() -> Histogram {
    // 100µs .. ~3.3s: patch hooks should answer well under CAPI's 200 ms guideline.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

pub struct Metrics {
    pub registry: Registry,
    pub requests: Family<CallLabels, Counter>,
    pub duration: Family<HandlerLabels, Histogram, fn() -> Histogram>,
    pub certificate_reloads: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
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
        Metrics {
            registry,
            requests,
            duration,
            certificate_reloads,
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
