//! ValidateTopology for one pack: the pack's variable values, as they reach the
//! extension, checked against the pack's schemas (defaults applied first, then the
//! schema, then `x-kubernetes-validations` rules), then against the pack's
//! `validations`, the rules over several variables.
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
//! For the same reason the pack's `validations` run only on requests that carry all of
//! its required variables.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::generate::{object_key, stable_order};
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
    let mut globals = pack_values(pack, &req.variables);
    // CAPI sends an unset variable's top-level default as the Cluster's value.
    for var in &pack.variables {
        if !globals.contains_key(&var.name) {
            if let Some(d) = var.compiled.top_level_default() {
                globals.insert(var.name.clone(), var.compiled.default_value(&d));
            }
        }
    }
    let global_failures = check_validations(pack, &globals);
    for (name, path, msg) in &global_failures {
        out.insert((String::new(), name.clone(), path.clone(), msg.clone()));
    }
    for i in stable_order(&req.items, |it| {
        (&it.holder_reference, object_key(&it.object))
    }) {
        let item = &req.items[i];
        let h = &item.holder_reference;
        let prefix = format!("{} {}: ", h.kind, h.name);
        check_values(pack, &item.variables, &prefix, &mut out);
        let own = pack_values(pack, &item.variables);
        if own.is_empty() || pack.validations.is_empty() {
            continue;
        }
        let mut merged = globals.clone();
        merged.extend(own);
        // A failure the Cluster's own values already have is reported once, there.
        for f in check_validations(pack, &merged) {
            if !global_failures.contains(&f) {
                out.insert((prefix.clone(), f.0, f.1, f.2));
            }
        }
    }
    out.into_iter()
        .map(|(prefix, name, path, msg)| {
            if name.is_empty() {
                format!("{prefix}variables{path}: {msg}")
            } else {
                format!("{prefix}variables[{name}]{path}: {msg}")
            }
        })
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

/// The pack's variables among `values`, defaulted, by name (a later entry wins).
fn pack_values(pack: &Pack, values: &[Variable]) -> Map<String, Value> {
    let mut out = Map::new();
    for v in values {
        if let Some(var) = pack.variables.iter().find(|p| p.name == v.name) {
            out.insert(v.name.clone(), var.compiled.default_value(&v.value));
        }
    }
    out
}

/// Failures of the pack's `validations` as `(variable, path below it, message)`; the
/// variable is empty for a rule without a `fieldPath`.
fn check_validations(pack: &Pack, values: &Map<String, Value>) -> Vec<(String, String, String)> {
    let complete = pack
        .variables
        .iter()
        .all(|v| !v.required || values.contains_key(&v.name));
    if pack.validations.is_empty() || !complete {
        return Vec::new();
    }
    let object = Value::Object(values.clone());
    pack.validations
        .iter()
        .filter_map(|rule| rule.evaluate(&object, ""))
        .map(|(path, msg)| {
            // `.name.rest`: variable names contain no dots.
            let (name, rest) = match path.strip_prefix('.') {
                Some(p) => match p.find(['.', '[']) {
                    Some(i) => (p[..i].to_string(), p[i..].to_string()),
                    None => (p.to_string(), String::new()),
                },
                None => (String::new(), path),
            };
            (name, rest, msg)
        })
        .collect()
}
