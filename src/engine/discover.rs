//! DiscoverVariables for one pack: the pack's variables in the element shape the
//! target CAPI reads (`metadata` up to 1.12, `deprecatedV1Beta1Metadata` from 1.13).
//! `required` is always written; `x-metadata` stays inside the schema, which both
//! shapes carry.

use super::pack::Pack;
use crate::sdk::topology::{ClusterClassVariable, VariableMetadata, VariableSchema};
use crate::sdk::CapiVersion;

pub fn discover(pack: &Pack, capi: CapiVersion) -> Vec<ClusterClassVariable> {
    let mut vars: Vec<ClusterClassVariable> = pack
        .variables
        .iter()
        .map(|v| {
            let (metadata, deprecated) = if capi.uses_v1beta2_variables() {
                (VariableMetadata::default(), v.metadata.clone())
            } else {
                (v.metadata.clone(), VariableMetadata::default())
            };
            ClusterClassVariable {
                name: v.name.clone(),
                required: v.required,
                metadata,
                deprecated_v1beta1_metadata: deprecated,
                schema: VariableSchema {
                    open_api_v3_schema: v.schema.clone(),
                },
            }
        })
        .collect();
    // CAPI sorts status.variables by name; answering sorted keeps responses stable.
    vars.sort_by(|a, b| a.name.cmp(&b.name));
    vars
}
