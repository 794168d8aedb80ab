//! Which request items a patch definition's selector picks, following CAPI's inline
//! JSON patch generator: the template's GVK first, then where the template is held.

use std::borrow::Cow;

use serde_json::Value;

use super::pack::Selector;
use crate::sdk::topology::HolderReference;

const INFRA_CLUSTER_REF: &str = "spec.infrastructureRef";
const CONTROL_PLANE_REF: &str = "spec.controlPlaneRef";
/// The CP's machine template reference, contract v1beta1 (all of CAPI 1.10).
const CP_MACHINE_INFRA_V1BETA1: &str = "spec.machineTemplate.infrastructureRef";
/// The same, contract v1beta2 (KCP from 1.11).
const CP_MACHINE_INFRA_V1BETA2: &str = "spec.machineTemplate.spec.infrastructureRef";
const WORKER_BOOTSTRAP_REF: &str = "spec.template.spec.bootstrap.configRef";
const WORKER_INFRA_REF: &str = "spec.template.spec.infrastructureRef";

/// `api_version` and `kind` are the template's. `builtin_class("machineDeployment")`
/// is `builtin.machineDeployment.class` of the item's own variables; it is asked for
/// only when a selector names a class.
pub fn matches<'b>(
    sel: &Selector,
    holder: &HolderReference,
    api_version: Option<&str>,
    kind: Option<&str>,
    builtin_class: impl Fn(&str) -> Option<Cow<'b, str>>,
) -> bool {
    if api_version != Some(sel.api_version.as_str()) || kind != Some(sel.kind.as_str()) {
        return false;
    }
    let m = &sel.match_resources;
    let fp = holder.field_path.as_str();
    if m.infrastructure_cluster && holder.kind == "Cluster" && fp == INFRA_CLUSTER_REF {
        return true;
    }
    if m.control_plane {
        if holder.kind == "Cluster" && fp == CONTROL_PLANE_REF {
            return true;
        }
        if fp == CP_MACHINE_INFRA_V1BETA1 || fp == CP_MACHINE_INFRA_V1BETA2 {
            return true;
        }
    }
    let worker_ref = fp == WORKER_BOOTSTRAP_REF || fp == WORKER_INFRA_REF;
    if let Some(class) = &m.machine_deployment_class {
        if holder.kind == "MachineDeployment" && worker_ref {
            if let Some(c) = builtin_class("machineDeployment") {
                if class.names.iter().any(|n| glob_match(n, &c)) {
                    return true;
                }
            }
        }
    }
    if let Some(class) = &m.machine_pool_class {
        if holder.kind == "MachinePool" && worker_ref {
            if let Some(c) = builtin_class("machinePool") {
                if class.names.iter().any(|n| glob_match(n, &c)) {
                    return true;
                }
            }
        }
    }
    false
}

/// `builtin.<which>.class` in a built `builtin` value.
pub fn class_in(builtin: &Value, which: &str) -> Option<String> {
    Some(builtin.get(which)?.get("class")?.as_str()?.to_string())
}

/// `*` matches all, `prefix*` and `*suffix` test the ends, anything else is exact.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    if let Some(prefix) = pattern.strip_suffix('*') {
        return name.starts_with(prefix);
    }
    if let Some(suffix) = pattern.strip_prefix('*') {
        return name.ends_with(suffix);
    }
    pattern == name
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("*", "anything"));
        assert!(glob_match("gpu-*", "gpu-a100"));
        assert!(!glob_match("gpu-*", "cpu-gpu-x"));
        assert!(glob_match("*-large", "worker-large"));
        assert!(!glob_match("*-large", "worker-large-2"));
        assert!(glob_match("default-worker", "default-worker"));
        assert!(!glob_match("default-worker", "default-worker2"));
    }
}
