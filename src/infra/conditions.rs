//! CAPI v1beta1 conditions on our objects' status, for both halves of the controllers:
//! the cloud half marks each step, the Kubernetes half marks Ready and user errors.
//! One implementation so both keep `lastTransitionTime` and the CRD's limits alike.

use crate::infra::api::types::Condition;

/// How bad a `False` condition is, as CAPI's `ConditionSeverity` spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "Error",
            Severity::Warning => "Warning",
            Severity::Info => "Info",
        }
    }
}

/// The CRD's `maxLength` for `reason` and `message`, counted in characters as the
/// apiserver counts them.
const REASON_MAX_CHARS: usize = 256;
const MESSAGE_MAX_CHARS: usize = 10_240;

/// Looks a condition up by type.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition exists with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Marks `type_` True; reason, message and severity are cleared, as CAPI does.
pub fn mark_true(conditions: &mut Vec<Condition>, type_: &str) {
    set(conditions, type_, "True", "", "", None);
}

/// Marks `type_` False with a reason and message.
pub fn mark_false(
    conditions: &mut Vec<Condition>,
    type_: &str,
    reason: &str,
    severity: Severity,
    message: &str,
) {
    set(conditions, type_, "False", reason, message, Some(severity));
}

/// Sets a condition, keeping `lastTransitionTime` while its status stays the same, so
/// a pass that changes nothing writes nothing.
fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    severity: Option<Severity>,
) {
    let reason = (!reason.is_empty()).then(|| cut(reason, REASON_MAX_CHARS));
    let message = (!message.is_empty()).then(|| cut(message, MESSAGE_MAX_CHARS));
    let severity = severity.map(|s| s.as_str().to_owned());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now();
                c.status = status.to_owned();
            }
            c.reason = reason;
            c.message = message;
            c.severity = severity;
        }
        None => conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            severity,
            last_transition_time: now(),
            reason,
            message,
        }),
    }
}

/// The first `max` characters of `s` (never splits a character).
fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => s[..end].to_owned(),
        None => s.to_owned(),
    }
}

/// Now in RFC 3339 with whole seconds, as `metav1.Time` serializes.
pub fn now() -> String {
    let now = jiff::Timestamp::now();
    now.round(jiff::Unit::Second).unwrap_or(now).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_the_status_changes() {
        let mut c = Vec::new();
        mark_false(&mut c, "Ready", "Pending", Severity::Info, "");
        c[0].last_transition_time = "2000-01-01T00:00:00Z".into();
        mark_false(&mut c, "Ready", "StillPending", Severity::Error, "m");
        assert_eq!(c[0].last_transition_time, "2000-01-01T00:00:00Z");
        assert_eq!(c[0].reason.as_deref(), Some("StillPending"));
        assert_eq!(c[0].severity.as_deref(), Some("Error"));
        assert_eq!(c[0].message.as_deref(), Some("m"));
        mark_true(&mut c, "Ready");
        assert_ne!(c[0].last_transition_time, "2000-01-01T00:00:00Z");
        assert_eq!(c[0].status, "True");
        assert_eq!(
            (&c[0].severity, &c[0].reason, &c[0].message),
            (&None, &None, &None)
        );
        assert_eq!(c.len(), 1);
        assert!(is_true(&c, "Ready"));
        assert!(!is_true(&c, "NetworkReady"));
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        // Two bytes per character: a byte-index cut at the limit would land inside one.
        let long = "é".repeat(MESSAGE_MAX_CHARS + 7);
        let mut c = Vec::new();
        mark_false(&mut c, "Ready", &"ü".repeat(300), Severity::Warning, &long);
        let msg = c[0].message.as_deref().unwrap_or_default();
        assert_eq!(msg.chars().count(), MESSAGE_MAX_CHARS);
        assert!(msg.chars().all(|ch| ch == 'é'));
        let reason = c[0].reason.as_deref().unwrap_or_default();
        assert_eq!(reason.chars().count(), REASON_MAX_CHARS);
    }

    #[test]
    fn now_has_whole_seconds() {
        let t = now();
        assert!(t.ends_with('Z'), "{t}");
        assert!(!t.contains('.'), "{t}");
        assert!(t.parse::<jiff::Timestamp>().is_ok(), "{t}");
    }
}
