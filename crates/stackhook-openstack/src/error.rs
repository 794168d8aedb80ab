//! Errors from OpenStack calls, keeping the HTTP status and the service's own
//! message so the reconcile can tell "try again" from "the spec is wrong".

use std::time::Duration;

/// A failed OpenStack call or a client that could not be built.
#[derive(Debug, thiserror::Error)]
pub enum OsError {
    /// The service answered with a non-success status.
    #[error("{service} {method} {path}: HTTP {status}: {message}")]
    Http {
        service: String,
        method: String,
        path: String,
        status: u16,
        /// The service's `message`/`faultstring`/`title`, or the raw body.
        message: String,
        /// `Retry-After` on 429/503, when the service sent one in seconds.
        retry_after: Option<Duration>,
    },
    /// No answer: connection refused, reset or timed out.
    #[error("{service} {method} {path}: {message}")]
    Transport {
        service: String,
        method: String,
        path: String,
        message: String,
        timeout: bool,
    },
    /// The service answered 2xx with a body we cannot read.
    #[error("{service} {path}: unexpected response: {message}")]
    Decode {
        service: String,
        path: String,
        message: String,
    },
    /// clouds.yaml or the CA bundle is unusable.
    #[error("cloud configuration: {0}")]
    Config(String),
    /// Refused before sending: the cloud's API version cannot do what was
    /// asked (a soft server-group policy below Nova 2.15, a cap below the
    /// cloud's minimum), or the request breaks a documented limit (user data
    /// over Nova's 65535 bytes). Sending it would only earn a 400, so the
    /// reconcile reports it as a spec error instead of retrying.
    #[error("{service}: {message}")]
    Invalid { service: String, message: String },
    /// The catalog has no endpoint for a service in the region and interface.
    #[error(
        "no {service} endpoint for region {region:?} and interface {interface} in the catalog"
    )]
    NoEndpoint {
        service: String,
        region: Option<String>,
        interface: String,
    },
}

impl OsError {
    /// The HTTP status, when the service answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// 404: what was looked for is gone (deletes treat that as done).
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// 409: in use, a duplicate, or an Octavia load balancer still `PENDING_*`.
    pub fn is_conflict(&self) -> bool {
        self.status() == Some(409)
    }

    /// 501: e.g. health monitors on providers without them.
    pub fn is_not_implemented(&self) -> bool {
        self.status() == Some(501)
    }

    /// Worth retrying unchanged: conflicts (Octavia's PENDING_* immutability),
    /// rate limits, server errors except 501, and no answer at all.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Http { status, .. } => {
                matches!(*status, 408 | 409 | 429) || (*status >= 500 && *status != 501)
            }
            Self::Transport { .. } => true,
            Self::Decode { .. }
            | Self::Config(_)
            | Self::Invalid { .. }
            | Self::NoEndpoint { .. } => false,
        }
    }

    /// A request that got no answer in time.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Transport { timeout: true, .. })
    }

    /// When the service did not answer (no connection, no answer in time) or said
    /// it cannot (502, 503, 504): which service, and what happened, for conditions.
    pub fn unavailable(&self) -> Option<String> {
        let (service, what) = match self {
            Self::Transport {
                service,
                method,
                path,
                message,
                ..
            } => (service, format!("{method} {path}: {message}")),
            Self::Http {
                service,
                method,
                path,
                status: status @ 502..=504,
                ..
            } => (service, format!("{method} {path}: HTTP {status}")),
            _ => return None,
        };
        Some(format!(
            "OpenStack {} is not answering ({what})",
            service_label(service)
        ))
    }

    /// 401/403: the credentials or their roles are wrong.
    pub fn is_auth(&self) -> bool {
        matches!(self.status(), Some(401 | 403))
    }

    /// How long the service asked to be left alone, for the requeue.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The service's message alone (for conditions).
    pub fn message(&self) -> String {
        match self {
            Self::Http { message, .. }
            | Self::Transport { message, .. }
            | Self::Decode { message, .. }
            | Self::Invalid { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }
}

/// A catalog service type with the project's name: `network service (Neutron)`.
pub fn service_label(service: &str) -> String {
    let project = match service {
        "identity" => "Keystone",
        "compute" => "Nova",
        "network" => "Neutron",
        "load-balancer" => "Octavia",
        "image" => "Glance",
        "volumev3" | "block-storage" | "volume" => "Cinder",
        "placement" => "Placement",
        _ => return format!("{service} service"),
    };
    format!("{service} service ({project})")
}

/// Pulls the human message out of an OpenStack error body. Services disagree
/// on the shape: Neutron `{"NeutronError": {"message"}}`, Nova
/// `{"badRequest": {"message"}}`, Octavia `{"faultstring"}`, Keystone
/// `{"error": {"message"}}`, WSGI middleware `{"title", "description"}`.
pub fn service_message(body: &str) -> String {
    let text = body.trim();
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return truncate(text);
    };
    fn pick(v: &serde_json::Value) -> Option<String> {
        for key in ["message", "faultstring", "description", "detail", "title"] {
            if let Some(s) = v.get(key).and_then(|m| m.as_str()) {
                if !s.is_empty() {
                    return Some(s.to_owned());
                }
            }
        }
        None
    }
    if let Some(m) = pick(&value) {
        return truncate(&m);
    }
    if let Some(obj) = value.as_object() {
        for inner in obj.values() {
            if let Some(m) = pick(inner) {
                return truncate(&m);
            }
        }
    }
    truncate(text)
}

fn truncate(s: &str) -> String {
    const MAX: usize = 512;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16) -> OsError {
        OsError::Http {
            service: "network".into(),
            method: "POST".into(),
            path: "/v2.0/networks".into(),
            status,
            message: "m".into(),
            retry_after: None,
        }
    }

    #[test]
    fn unavailable_names_the_service_and_the_request() {
        let hung = OsError::Transport {
            service: "network".into(),
            method: "GET".into(),
            path: "/v2.0/networks".into(),
            message: "no answer within 30 s".into(),
            timeout: true,
        };
        assert!(hung.is_timeout());
        assert_eq!(
            hung.unavailable().unwrap(),
            "OpenStack network service (Neutron) is not answering (GET /v2.0/networks: no answer within 30 s)"
        );
        assert_eq!(
            http(503).unavailable().unwrap(),
            "OpenStack network service (Neutron) is not answering (POST /v2.0/networks: HTTP 503)"
        );
        // An answer, even an error, is not an outage.
        for status in [400, 404, 409, 429, 500, 501] {
            assert_eq!(http(status).unavailable(), None, "{status}");
        }
        assert_eq!(
            service_label("load-balancer"),
            "load-balancer service (Octavia)"
        );
        assert_eq!(service_label("dns"), "dns service");
    }

    #[test]
    fn classifies_statuses() {
        assert!(http(404).is_not_found());
        assert!(!http(404).is_retryable());
        assert!(http(409).is_conflict());
        for s in [409, 429, 500, 502, 503, 504] {
            assert!(http(s).is_retryable(), "{s}");
        }
        for s in [400, 401, 403, 404, 413, 501] {
            assert!(!http(s).is_retryable(), "{s}");
        }
        assert!(http(401).is_auth() && http(403).is_auth());
        let t = OsError::Transport {
            service: "s".into(),
            method: "GET".into(),
            path: "/".into(),
            message: "timed out".into(),
            timeout: true,
        };
        assert!(t.is_retryable());
        assert!(!OsError::Config("x".into()).is_retryable());
        let invalid = OsError::Invalid {
            service: "compute".into(),
            message: "needs 2.15".into(),
        };
        assert!(!invalid.is_retryable() && invalid.status().is_none());
        assert_eq!(invalid.message(), "needs 2.15");
    }

    #[test]
    fn reads_each_services_error_shape() {
        assert_eq!(
            service_message(
                r#"{"NeutronError": {"type": "NetworkNotFound", "message": "Network abc could not be found.", "detail": ""}}"#
            ),
            "Network abc could not be found."
        );
        assert_eq!(
            service_message(r#"{"badRequest": {"code": 400, "message": "Invalid input"}}"#),
            "Invalid input"
        );
        assert_eq!(
            service_message(
                r#"{"faultcode": "Client", "faultstring": "Load Balancer x is immutable and cannot be updated.", "debuginfo": null}"#
            ),
            "Load Balancer x is immutable and cannot be updated."
        );
        assert_eq!(
            service_message(
                r#"{"error": {"code": 401, "message": "The request you have made requires authentication.", "title": "Unauthorized"}}"#
            ),
            "The request you have made requires authentication."
        );
        assert_eq!(service_message("Bad Gateway"), "Bad Gateway");
    }
}
