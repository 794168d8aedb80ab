//! ValidateTopology for one pack: the pack's variable values, as they reach the
//! extension, checked against the pack's schemas (defaults applied first, then the
//! schema, then `x-kubernetes-validations` rules).
//!
//! A variable absent from the request is not reported: CAPI sends ValidateTopology the
//! variables computed for the *last* patch of the ClusterClass, which need not be this
//! pack's, and CAPI itself enforces `required` before any hook runs.

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
