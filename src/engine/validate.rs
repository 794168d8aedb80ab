//! ValidateTopology for one pack: the pack's variable values, as they reach the
//! extension, checked against the pack's schemas (defaults applied first, then the
//! schema, then `x-kubernetes-validations` rules).
//!
//! Which variables CAPI sends: the patch engine computes `variables` and
//! `items[].variables` afresh for each patch in `spec.patches` (only those whose
//! `status.variables[].definitions[].from` is that patch, plus `builtin`), overwriting
//! the previous patch's, and turns the request left after the *last* patch into the
//! ValidateTopology request; every validating patch gets that same request, with only
//! `settings` its own (`Apply`, `addVariablesForPatch`, `definitionsForPatch` and
//! `convertToValidationRequest` in core/reconcilers/topology/cluster/patches/engine.go
//! at v1.14.0, internal/controllers/topology/cluster/patches/engine.go at v1.10.10; the
//! same loop in both). So a request may carry another pack's variables, or none of this
//! pack's. Hence each pack checks only the variables it defines, by name, ignores the
//! rest, and does not report its own as missing (CAPI enforces `required` on the Cluster
//! before any hook runs). Matching by name is exact: two patches may define one name
//! only with identical definitions, or the ClusterClass's variables are not reconciled
//! (`reconcileVariables` in core/reconcilers/clusterclass/clusterclass_controller.go).

use std::collections::BTreeSet;

use super::generate::stable_order;
use super::pack::Pack;
use crate::sdk::common::Variable;
use crate::sdk::topology::ValidateTopologyRequest;

/// Every failure as `<where>: <field path>: <message>`, sorted and without duplicates
/// (each MachineDeployment sends its overrides twice, once per template).
pub fn validate(pack: &Pack, req: &ValidateTopologyRequest) -> Vec<String> {
    // (where, variable, field path, message): sorted as a tuple so a value's own
    // failures come before those of its fields.
    let mut out = BTreeSet::new();
    check_values(pack, &req.variables, "", &mut out);
    for i in stable_order(&req.items, |it| (&it.holder_reference, &it.object)) {
        let item = &req.items[i];
        let h = &item.holder_reference;
        let prefix = format!("{} {}: ", h.kind, h.name);
        check_values(pack, &item.variables, &prefix, &mut out);
    }
    out.into_iter()
        .map(|(prefix, name, path, msg)| format!("{prefix}variables[{name}]{path}: {msg}"))
        .collect()
}

type Failure = (String, String, String, String);

fn check_values(pack: &Pack, values: &[Variable], prefix: &str, out: &mut BTreeSet<Failure>) {
    for var in &pack.variables {
        for v in values.iter().filter(|v| v.name == var.name) {
            let value = var.compiled.default_value(&v.value);
            for (path, msg) in var.compiled.validate(&value) {
                out.insert((prefix.to_string(), var.name.clone(), path, msg));
            }
        }
    }
}
