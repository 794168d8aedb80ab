//! GenerateUpgradePlan: one control-plane step per Kubernetes minor.
//!
//! CAPI asks whenever the control plane *or* the workers are behind the Cluster's
//! version, and validates the answer (`DefaultAndValidateUpgradePlans`): the
//! control-plane steps strictly increase, skip no minor and end at the target, and are
//! empty once the control plane has arrived. Workers are left to CAPI, which computes
//! the fewest steps the version-skew rules allow.
//!
//! Which patch releases exist is not something we can know, so the intermediate
//! versions come from configuration (`--kubernetes-versions`) or from the
//! `kubernetesVersions` setting of the ExtensionConfig; the newest one of each minor
//! is chosen.

use std::cmp::Ordering;

use crate::sdk::common::UpgradeStep;
use crate::sdk::upgrade_plan::{GenerateUpgradePlanRequest, GenerateUpgradePlanResponse};
use crate::sdk::{response_kind, Hook, ResponseStatus, API_VERSION};

/// Reads a version the way CAPI does (blang/semver's `ParseTolerant`): surrounding
/// space and a leading `v` are dropped, leading zeros trimmed, a missing minor or patch
/// is 0; pre-release and build metadata are kept.
pub fn parse_tolerant(s: &str) -> Option<semver::Version> {
    let s = s.trim();
    let s = s.strip_prefix('v').unwrap_or(s);
    let mut parts: Vec<String> = s
        .splitn(3, '.')
        .map(|p| {
            let t = p.trim_start_matches('0');
            if p.len() > 1 && !t.starts_with(|c: char| c.is_ascii_digit()) {
                format!("0{t}")
            } else if p.len() > 1 {
                t.to_string()
            } else {
                p.to_string()
            }
        })
        .collect();
    if parts.len() < 3 {
        if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
            return None;
        }
        parts.resize(3, "0".to_string());
    }
    semver::Version::parse(&parts.join(".")).ok()
}

/// How two versions compare when build metadata counts (CAPI's
/// `version.Compare(a, b, WithBuildTags())`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Less,
    Equal,
    Greater,
    /// Same release, different non-numeric builds: neither comes first.
    Unordered,
}

pub fn compare(a: &semver::Version, b: &semver::Version) -> Order {
    let core = (a.major, a.minor, a.patch, &a.pre).cmp(&(b.major, b.minor, b.patch, &b.pre));
    match core {
        Ordering::Less => return Order::Less,
        Ordering::Greater => return Order::Greater,
        Ordering::Equal => {}
    }
    let ids = |v: &semver::Version| -> Vec<String> {
        if v.build.is_empty() {
            Vec::new()
        } else {
            v.build.as_str().split('.').map(str::to_string).collect()
        }
    };
    let (x, y) = (ids(a), ids(b));
    for (p, q) in x.iter().zip(y.iter()) {
        let num = |s: &str| -> Option<u64> {
            s.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| s.parse().ok())
                .flatten()
        };
        match (num(p), num(q)) {
            (Some(m), Some(n)) => match m.cmp(&n) {
                Ordering::Less => return Order::Less,
                Ordering::Greater => return Order::Greater,
                Ordering::Equal => {}
            },
            // A number sorts before a word.
            (Some(_), None) => return Order::Less,
            (None, Some(_)) => return Order::Greater,
            (None, None) if p == q => {}
            (None, None) => return Order::Unordered,
        }
    }
    match x.len().cmp(&y.len()) {
        Ordering::Less => Order::Less,
        Ordering::Equal => Order::Equal,
        Ordering::Greater => Order::Greater,
    }
}

/// The answer's two step lists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub control_plane: Vec<String>,
    pub workers: Vec<String>,
}

/// Computes the plan for where the Cluster is, or a deterministic error message.
///
/// `from_workers` is the oldest MachineDeployment/MachinePool version, empty without
/// workers; it only has to be readable: the control plane's position decides the steps.
pub fn plan(
    from_control_plane: &str,
    from_workers: &str,
    to: &str,
    known: &[String],
) -> Result<Plan, String> {
    let cp = parse_tolerant(from_control_plane).ok_or_else(|| {
        format!("fromControlPlaneKubernetesVersion {from_control_plane:?} is not a version")
    })?;
    if !from_workers.trim().is_empty() && parse_tolerant(from_workers).is_none() {
        return Err(format!(
            "fromWorkersKubernetesVersion {from_workers:?} is not a version"
        ));
    }
    let target =
        parse_tolerant(to).ok_or_else(|| format!("toKubernetesVersion {to:?} is not a version"))?;
    match compare(&target, &cp) {
        // The control plane has arrived; only workers may be behind, and CAPI plans
        // their steps from the control plane's version.
        Order::Equal => return Ok(Plan::default()),
        Order::Less => {
            return Err(format!(
                "toKubernetesVersion {to} is older than the control plane's {from_control_plane}: downgrades are not supported"
            ))
        }
        Order::Greater | Order::Unordered => {}
    }
    if target.major != cp.major {
        return Err(format!(
            "cannot plan an upgrade across major versions ({from_control_plane} to {to})"
        ));
    }
    let mut candidates: Vec<(semver::Version, &str)> = known
        .iter()
        .filter_map(|k| Some((parse_tolerant(k)?, k.trim())))
        .filter(|(v, _)| v.major == target.major)
        .collect();
    candidates.sort_by(|a, b| a.0.cmp_precedence(&b.0).then_with(|| a.0.cmp(&b.0)));
    let mut steps = Vec::new();
    // Saturating: a request may carry a minor of u64::MAX.
    for minor in cp.minor.saturating_add(1)..target.minor {
        let (_, given) = candidates
            .iter()
            .rev()
            .find(|(v, _)| v.minor == minor)
            .ok_or_else(|| {
                format!(
                    "no Kubernetes version known for minor {}.{minor}: list one in kubernetesVersions",
                    target.major
                )
            })?;
        steps.push(given.to_string());
    }
    // CAPI compares the last step with its own string.
    steps.push(to.to_string());
    Ok(Plan {
        control_plane: steps,
        workers: Vec::new(),
    })
}

/// The request's `kubernetesVersions` setting, else the configured list.
pub fn known_versions(req: &GenerateUpgradePlanRequest, configured: &[String]) -> Vec<String> {
    let from_settings: Vec<String> = req
        .settings
        .get("kubernetesVersions")
        .map(|s| {
            s.split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if from_settings.is_empty() {
        configured.to_vec()
    } else {
        from_settings
    }
}

pub fn answer(
    req: &GenerateUpgradePlanRequest,
    configured: &[String],
) -> GenerateUpgradePlanResponse {
    let steps = |v: Vec<String>| {
        v.into_iter()
            .map(|version| UpgradeStep { version })
            .collect()
    };
    let (status, message, plan) = match plan(
        &req.from_control_plane_kubernetes_version,
        req.from_workers_kubernetes_version
            .as_deref()
            .unwrap_or_default(),
        &req.to_kubernetes_version,
        &known_versions(req, configured),
    ) {
        Ok(p) => (ResponseStatus::Success, String::new(), p),
        Err(m) => (ResponseStatus::Failure, m, Plan::default()),
    };
    GenerateUpgradePlanResponse {
        api_version: API_VERSION.to_string(),
        kind: response_kind(Hook::GenerateUpgradePlan),
        status,
        message,
        control_plane_upgrades: steps(plan.control_plane),
        workers_upgrades: steps(plan.workers),
    }
}

#[cfg(test)]
mod capi_rules;

#[cfg(test)]
mod tests {
    use super::*;

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn cp(p: Result<Plan, String>) -> Vec<String> {
        p.unwrap().control_plane
    }

    #[test]
    fn tolerant_parsing_matches_blang_semver() {
        let p = |s: &str| parse_tolerant(s).map(|v| v.to_string());
        assert_eq!(p("v1.31.2").as_deref(), Some("1.31.2"));
        assert_eq!(p(" 1.31.2 ").as_deref(), Some("1.31.2"));
        assert_eq!(p("v1.31").as_deref(), Some("1.31.0"));
        assert_eq!(p("v1").as_deref(), Some("1.0.0"));
        assert_eq!(p("v01.031.02").as_deref(), Some("1.31.2"));
        assert_eq!(p("v1.31.2+build.1").as_deref(), Some("1.31.2+build.1"));
        assert_eq!(p("v1.31.2-rc.1").as_deref(), Some("1.31.2-rc.1"));
        assert_eq!(p("v1.31-rc.1"), None);
        assert_eq!(p("one.two"), None);
        assert_eq!(p(""), None);
    }

    #[test]
    fn build_tags_compare_as_capi_compares_them() {
        let c =
            |a: &str, b: &str| compare(&parse_tolerant(a).unwrap(), &parse_tolerant(b).unwrap());
        assert_eq!(c("v1.31.1", "v1.31.2"), Order::Less);
        assert_eq!(c("v1.31.1+1", "v1.31.1+2"), Order::Less);
        assert_eq!(c("v1.31.1+a", "v1.31.1+1"), Order::Greater);
        assert_eq!(c("v1.31.1+a", "v1.31.1+b"), Order::Unordered);
        assert_eq!(c("v1.31.1+a.1", "v1.31.1+a"), Order::Greater);
        assert_eq!(c("v1.31.1", "1.31.1"), Order::Equal);
        assert_eq!(c("v1.31.1-rc.1", "v1.31.1"), Order::Less);
    }

    #[test]
    fn one_step_per_minor_ending_at_target() {
        // The book's example: v1.30.0 → v1.33.0 gives [v1.31.x, v1.32.3, v1.33.0].
        let known = v(&["v1.31.0", "v1.31.4", "v1.32.3", "v1.32.1", "v1.34.0"]);
        assert_eq!(
            cp(plan("v1.30.0", "v1.30.0", "v1.33.0", &known)),
            ["v1.31.4", "v1.32.3", "v1.33.0"]
        );
        assert_eq!(cp(plan("v1.32.0", "", "v1.32.5", &[])), ["v1.32.5"]);
    }

    #[test]
    fn an_arrived_control_plane_gets_no_steps_and_leaves_workers_to_capi() {
        // What CAPI v1.12–v1.14 ask while the workers follow.
        let p = plan("v1.34.1", "v1.33.1", "v1.34.1", &[]).unwrap();
        assert_eq!(p, Plan::default());
        let p = plan("1.34.1", "v1.32.4", "v1.34.1", &[]).unwrap();
        assert_eq!(p, Plan::default());
    }

    #[test]
    fn errors_name_the_gap() {
        assert_eq!(
            plan("v1.30.0", "", "v1.32.0", &v(&["v1.30.9"])).unwrap_err(),
            "no Kubernetes version known for minor 1.31: list one in kubernetesVersions"
        );
        assert_eq!(
            plan("v1.31.0", "", "v1.30.0", &[]).unwrap_err(),
            "toKubernetesVersion v1.30.0 is older than the control plane's v1.31.0: downgrades are not supported"
        );
        assert_eq!(
            plan("one", "", "v1.32.0", &[]).unwrap_err(),
            "fromControlPlaneKubernetesVersion \"one\" is not a version"
        );
        assert_eq!(
            plan("v1.31.0", "x.y", "v1.32.0", &[]).unwrap_err(),
            "fromWorkersKubernetesVersion \"x.y\" is not a version"
        );
    }

    #[test]
    fn largest_minor_is_an_answer_not_an_overflow() {
        let max = u64::MAX;
        let to = format!("v1.{max}.1");
        let steps = cp(plan(&format!("v1.{max}.0"), "", &to, &[]));
        assert_eq!(steps, [to]);
    }
}
