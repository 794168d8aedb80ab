//! GenerateUpgradePlan: one control-plane step per Kubernetes minor.
//!
//! CAPI requires a version for every minor between `from` and `to`, strictly increasing
//! and ending at the target. Which patch releases exist is not something we can know, so
//! the known versions come from configuration (`--kubernetes-versions`) or from the
//! `kubernetesVersions` setting of the ExtensionConfig; the newest patch of each
//! intermediate minor is chosen. Workers are left to CAPI, which computes minimal steps.

use crate::sdk::common::UpgradeStep;
use crate::sdk::upgrade_plan::{GenerateUpgradePlanRequest, GenerateUpgradePlanResponse};
use crate::sdk::{response_kind, Hook, ResponseStatus, API_VERSION};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl KubeVersion {
    pub fn parse(s: &str) -> Option<KubeVersion> {
        let core = s.trim().strip_prefix('v')?;
        // Pre-release or build suffixes are not steps CAPI would accept in a plan.
        let mut it = core.split('.');
        let v = KubeVersion {
            major: it.next()?.parse().ok()?,
            minor: it.next()?.parse().ok()?,
            patch: it.next()?.parse().ok()?,
        };
        it.next().is_none().then_some(v)
    }
}

impl std::fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Computes the control-plane steps, or a deterministic error message.
pub fn plan(from: &str, to: &str, known: &[String]) -> Result<Vec<UpgradeStep>, String> {
    let from_v = KubeVersion::parse(from)
        .ok_or_else(|| format!("fromControlPlaneKubernetesVersion {from:?} is not vX.Y.Z"))?;
    let to_v = KubeVersion::parse(to)
        .ok_or_else(|| format!("toKubernetesVersion {to:?} is not vX.Y.Z"))?;
    if to_v <= from_v {
        return Err(format!("toKubernetesVersion {to} is not newer than {from}"));
    }
    if to_v.major != from_v.major {
        return Err(format!(
            "cannot plan an upgrade across major versions ({from} to {to})"
        ));
    }
    let mut known_versions: Vec<KubeVersion> =
        known.iter().filter_map(|k| KubeVersion::parse(k)).collect();
    known_versions.sort();
    let mut steps = Vec::new();
    // Saturating: a request may carry a minor of u64::MAX.
    for minor in from_v.minor.saturating_add(1)..to_v.minor {
        let best = known_versions
            .iter()
            .rev()
            .find(|v| v.major == to_v.major && v.minor == minor)
            .ok_or_else(|| {
                format!(
                    "no Kubernetes version known for minor {}.{}: list one in kubernetesVersions",
                    to_v.major, minor
                )
            })?;
        steps.push(UpgradeStep {
            version: best.to_string(),
        });
    }
    steps.push(UpgradeStep {
        version: to.trim().to_string(),
    });
    Ok(steps)
}

/// The known versions: the request's `kubernetesVersions` setting, else the configured list.
pub fn answer(
    req: &GenerateUpgradePlanRequest,
    configured: &[String],
) -> GenerateUpgradePlanResponse {
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
    let known = if from_settings.is_empty() {
        configured
    } else {
        &from_settings[..]
    };
    let (status, message, steps) = match plan(
        &req.from_control_plane_kubernetes_version,
        &req.to_kubernetes_version,
        known,
    ) {
        Ok(steps) => (ResponseStatus::Success, String::new(), steps),
        Err(m) => (ResponseStatus::Failure, m, vec![]),
    };
    GenerateUpgradePlanResponse {
        api_version: API_VERSION.to_string(),
        kind: response_kind(Hook::GenerateUpgradePlan),
        status,
        message,
        control_plane_upgrades: steps,
        workers_upgrades: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn one_step_per_minor_ending_at_target() {
        // The book's example: v1.30.0 → v1.33.0 gives [v1.31.x, v1.32.3, v1.33.0].
        let steps = plan(
            "v1.30.0",
            "v1.33.0",
            &v(&["v1.31.0", "v1.31.4", "v1.32.3", "v1.32.1", "v1.34.0"]),
        )
        .unwrap();
        let got: Vec<_> = steps.into_iter().map(|s| s.version).collect();
        assert_eq!(got, ["v1.31.4", "v1.32.3", "v1.33.0"]);
        assert_eq!(
            plan("v1.32.0", "v1.32.5", &[]).unwrap(),
            vec![UpgradeStep {
                version: "v1.32.5".into()
            }]
        );
    }

    #[test]
    fn errors_name_the_gap() {
        assert_eq!(
            plan("v1.30.0", "v1.32.0", &v(&["v1.30.9"])).unwrap_err(),
            "no Kubernetes version known for minor 1.31: list one in kubernetesVersions"
        );
        assert!(plan("v1.31.0", "v1.30.0", &[]).is_err());
        assert!(plan("1.31", "v1.32.0", &[]).is_err());
    }

    #[test]
    fn largest_minor_is_an_answer_not_an_overflow() {
        let max = u64::MAX;
        let steps = plan(&format!("v1.{max}.0"), &format!("v1.{max}.1"), &[]).unwrap();
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].version, format!("v1.{max}.1"));
    }
}
