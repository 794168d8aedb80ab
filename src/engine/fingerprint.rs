//! What identifies a GeneratePatches request's content, its UIDs and item order aside.
//!
//! CAPI's topology controller sends the same GeneratePatches request on every reconcile
//! of an unchanged Cluster, with fresh item UIDs and MachineDeployments listed in Go map
//! order, which changes from call to call. A [`Fingerprint`] is the same for all those
//! calls, so an engine can recognise an answer it has already computed.
//!
//! The engine reads it straight off the body ([`GeneratePatchesWire`]): a borrowing
//! parse that keeps every object, variable and holder as its raw JSON text, hashed
//! without being built. Two bodies meaning the same thing in different bytes (other
//! whitespace or key order) get different fingerprints; that only costs a recomputation.
//! [`Fingerprint::of_request`] hashes a decoded request's compact JSON, which equals the
//! raw text of a compact body such as Go's `encoding/json` writes.

use std::borrow::Cow;
use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::sdk::common::{Settings, Variable};
use crate::sdk::topology::{
    builtin_cluster, GeneratePatchesRequest, GeneratePatchesRequestItem, Named,
    RawGeneratePatchesItem, RawGeneratePatchesRequest, RawVariable,
};
use crate::sdk::{Hook, API_VERSION};

/// A SHA-256 over the request-wide parts, and one over each item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// Settings and variables.
    pub request: [u8; 32],
    /// Holder, object and variables of each item, in request order.
    pub items: Vec<[u8; 32]>,
}

/// A variable whose value stays raw JSON text.
#[derive(Debug, Deserialize)]
pub struct WireVariable<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(borrow)]
    pub value: &'a RawValue,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireItem<'a> {
    #[serde(borrow)]
    pub uid: Cow<'a, str>,
    #[serde(borrow)]
    pub holder_reference: &'a RawValue,
    #[serde(borrow)]
    pub object: &'a RawValue,
    #[serde(borrow, default)]
    pub variables: Option<&'a RawValue>,
}

/// A GeneratePatches request whose large parts are slices of the body.
///
/// It accepts a superset of what [`GeneratePatchesRequest`] accepts (the parts are not
/// checked beyond being JSON), so it is only ever used to look up an answer computed
/// from a body with the very same parts, which did decode in full.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GeneratePatchesWire<'a> {
    #[serde(borrow, default)]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub settings: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub variables: Vec<WireVariable<'a>>,
    #[serde(borrow)]
    pub items: Vec<WireItem<'a>>,
}

impl<'a> GeneratePatchesWire<'a> {
    /// `None` for anything but a well-formed GeneratePatches request; the full decoder
    /// then runs and names the problem.
    pub fn read(body: &'a [u8]) -> Option<GeneratePatchesWire<'a>> {
        let wire: GeneratePatchesWire = crate::sdk::decode::read_text(body).ok()?;
        (wire.api_version.as_deref() == Some(API_VERSION)
            && wire.kind.as_deref() == Some(Hook::GeneratePatches.request_kind().as_str()))
        .then_some(wire)
    }

    pub fn fingerprint(&self) -> Fingerprint {
        let mut h = Sha256::new();
        part(&mut h, self.settings.map_or(b"" as &[u8], raw));
        for v in &self.variables {
            part(&mut h, v.name.as_bytes());
            part(&mut h, raw(v.value));
        }
        let items = self
            .items
            .iter()
            .map(|i| {
                let mut h = Sha256::new();
                part(&mut h, raw(i.holder_reference));
                part(&mut h, raw(i.object));
                part(&mut h, i.variables.map_or(b"" as &[u8], raw));
                h.finalize().into()
            })
            .collect();
        Fingerprint {
            request: h.finalize().into(),
            items,
        }
    }

    /// The request as the engine reads it (templates and variable values still raw),
    /// from the parts already found; `None` if a part does not decode as the one-pass
    /// reader ([`crate::sdk::decode::decode_generate_patches_raw`]) would decode it,
    /// which should then read the body and name the problem.
    pub fn to_raw(&self) -> Option<RawGeneratePatchesRequest<'a>> {
        let settings: Option<Settings> = match self.settings {
            Some(s) => serde_json::from_str(s.get()).ok()?,
            None => None,
        };
        Some(RawGeneratePatchesRequest {
            settings: settings.unwrap_or_default(),
            variables: self
                .variables
                .iter()
                .map(|v| RawVariable {
                    name: v.name.clone(),
                    value: v.value,
                })
                .collect(),
            items: self
                .items
                .iter()
                .map(|i| {
                    let vars: Option<Vec<RawVariable<'a>>> = match i.variables {
                        Some(v) => serde_json::from_str(v.get()).ok()?,
                        None => None,
                    };
                    Some(RawGeneratePatchesItem {
                        uid: i.uid.clone(),
                        holder_reference: serde_json::from_str(i.holder_reference.get()).ok()?,
                        object: serde_json::from_str(i.object.get()).ok()?,
                        variables: vars.unwrap_or_default(),
                    })
                })
                .collect::<Option<_>>()?,
        })
    }

    /// The full request, built from the parts already found; `None` if a part does not
    /// decode, and the full decoder, which names the problem, should read the body.
    pub fn to_request(&self) -> Option<GeneratePatchesRequest> {
        let vars =
            |raw: &RawValue| -> Option<Vec<Variable>> { serde_json::from_str(raw.get()).ok() };
        Some(GeneratePatchesRequest {
            settings: match self.settings {
                Some(s) => serde_json::from_str(s.get()).ok()?,
                None => Default::default(),
            },
            variables: self
                .variables
                .iter()
                .map(|v| {
                    Some(Variable {
                        name: v.name.to_string(),
                        value: serde_json::from_str(v.value.get()).ok()?,
                    })
                })
                .collect::<Option<_>>()?,
            items: self
                .items
                .iter()
                .map(|i| {
                    Some(GeneratePatchesRequestItem {
                        uid: i.uid.to_string(),
                        holder_reference: serde_json::from_str(i.holder_reference.get()).ok()?,
                        object: serde_json::from_str(i.object.get()).ok()?,
                        variables: match i.variables {
                            Some(v) => vars(v)?,
                            None => Vec::new(),
                        },
                    })
                })
                .collect::<Option<_>>()?,
        })
    }

    /// The Cluster the request is for, from `builtin.cluster` or a Cluster holder.
    pub fn cluster(&self) -> Option<(String, String)> {
        #[derive(Deserialize)]
        struct Holder {
            kind: String,
            #[serde(flatten)]
            named: Named,
        }
        let builtin = self.variables.iter().find(|v| v.name == "builtin");
        if let Some(found) = builtin.and_then(|b| builtin_cluster(b.value)) {
            return Some(found);
        }
        self.items.iter().find_map(|i| {
            let h: Holder = serde_json::from_str(i.holder_reference.get()).ok()?;
            match (h.kind.as_str(), h.named) {
                (
                    "Cluster",
                    Named {
                        name: Some(n),
                        namespace: Some(ns),
                    },
                ) => Some((ns, n)),
                _ => None,
            }
        })
    }
}

impl Fingerprint {
    /// The fingerprint of a decoded request: its parts written as compact JSON.
    pub fn of_request(req: &GeneratePatchesRequest) -> Option<Fingerprint> {
        let mut h = Sha256::new();
        if !req.settings.is_empty() {
            json_part(&mut h, &req.settings)?;
        } else {
            part(&mut h, b"");
        }
        for v in &req.variables {
            part(&mut h, v.name.as_bytes());
            json_part(&mut h, &v.value)?;
        }
        let mut items = Vec::with_capacity(req.items.len());
        for i in &req.items {
            let mut ih = Sha256::new();
            json_part(&mut ih, &i.holder_reference)?;
            json_part(&mut ih, &i.object)?;
            json_part(&mut ih, &i.variables)?;
            items.push(ih.finalize().into());
        }
        Some(Fingerprint {
            request: h.finalize().into(),
            items,
        })
    }
}

fn raw(v: &RawValue) -> &[u8] {
    v.get().as_bytes()
}

/// JSON text never holds a NUL byte, so it ends each part unambiguously.
fn part(h: &mut Sha256, bytes: &[u8]) {
    h.update(bytes);
    h.update([0]);
}

fn json_part(h: &mut Sha256, v: &impl Serialize) -> Option<()> {
    serde_json::to_writer(HashWriter(h), v).ok()?;
    h.update([0]);
    Some(())
}

/// Feeds serde_json's writer straight into the hash: no intermediate buffer.
struct HashWriter<'a>(&'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::decode::decode;

    const BODY: &str = r#"{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"GeneratePatchesRequest","settings":{"a":"b"},"variables":[{"name":"builtin","value":{"cluster":{"name":"c1","namespace":"ns1"}}},{"name":"x","value":1}],"items":[{"uid":"u1","holderReference":{"apiVersion":"cluster.x-k8s.io/v1beta1","kind":"Cluster","namespace":"ns1","name":"c1","fieldPath":"spec.infrastructureRef"},"object":{"kind":"OpenStackClusterTemplate","spec":{"template":{"spec":{}}}},"variables":[]},{"uid":"u2","holderReference":{"apiVersion":"cluster.x-k8s.io/v1beta1","kind":"MachineDeployment","namespace":"ns1","name":"md","fieldPath":"spec.template.spec.infrastructureRef"},"object":{"kind":"OpenStackMachineTemplate"},"variables":[{"name":"y","value":"z"}]}]}"#;

    fn wire(body: &str) -> GeneratePatchesWire<'_> {
        GeneratePatchesWire::read(body.as_bytes()).expect("wire")
    }

    #[test]
    fn compact_body_and_decoded_request_agree() {
        let req: GeneratePatchesRequest =
            decode(Hook::GeneratePatches, BODY.as_bytes()).expect("decode");
        assert_eq!(
            Fingerprint::of_request(&req).expect("fingerprint"),
            wire(BODY).fingerprint()
        );
    }

    #[test]
    fn builds_the_request_the_full_decoder_builds() {
        let full: GeneratePatchesRequest =
            decode(Hook::GeneratePatches, BODY.as_bytes()).expect("decode");
        assert_eq!(wire(BODY).to_request(), Some(full));
        // A part the full decoder rejects is left to it, to name the problem.
        let bad_holder = BODY.replacen(
            "\"fieldPath\":\"spec.infrastructureRef\"",
            "\"fieldPath\":7",
            1,
        );
        assert_ne!(bad_holder, BODY);
        assert_eq!(wire(&bad_holder).to_request(), None);
        let bad_settings = BODY.replace("{\"a\":\"b\"}", "{\"a\":1}");
        assert_eq!(wire(&bad_settings).to_request(), None);
    }

    #[test]
    fn uids_do_not_count_but_every_part_does() {
        let base = wire(BODY).fingerprint();
        assert_eq!(
            wire(&BODY.replace("\"u1\"", "\"other\"")).fingerprint(),
            base
        );
        for (from, to) in [
            (r#""a":"b""#, r#""a":"c""#),
            (r#""value":1"#, r#""value":2"#),
            (r#""name":"md""#, r#""name":"md2""#),
            (
                r#""OpenStackMachineTemplate""#,
                r#""OpenStackMachineTemplateX""#,
            ),
            (r#""value":"z""#, r#""value":"w""#),
        ] {
            let changed = BODY.replacen(from, to, 1);
            assert_ne!(changed, BODY, "{from}");
            assert_ne!(wire(&changed).fingerprint(), base, "{from} → {to}");
        }
    }

    #[test]
    fn only_well_formed_requests_are_read() {
        assert!(
            GeneratePatchesWire::read(BODY.replace("GeneratePatchesRequest", "X").as_bytes())
                .is_none()
        );
        assert!(GeneratePatchesWire::read(BODY.replace("v1alpha1", "v1").as_bytes()).is_none());
        assert!(GeneratePatchesWire::read(&BODY.as_bytes()[..BODY.len() - 1]).is_none());
        assert!(
            GeneratePatchesWire::read(BODY.replace("\"uid\":\"u1\",", "").as_bytes()).is_none()
        );
        // Duplicate keys take the full decoder's path, whose rules name the winner.
        let dup = BODY.replacen(
            "\"settings\"",
            "\"kind\":\"GeneratePatchesRequest\",\"settings\"",
            1,
        );
        assert!(GeneratePatchesWire::read(dup.as_bytes()).is_none());
    }

    #[test]
    fn names_the_cluster_from_builtin_or_a_cluster_holder() {
        assert_eq!(
            wire(BODY).cluster(),
            Some(("ns1".to_string(), "c1".to_string()))
        );
        let no_builtin = BODY.replace("\"builtin\"", "\"notbuiltin\"");
        assert_eq!(
            wire(&no_builtin).cluster(),
            Some(("ns1".to_string(), "c1".to_string()))
        );
        let neither =
            no_builtin.replace("\"kind\":\"Cluster\"", "\"kind\":\"KubeadmControlPlane\"");
        assert_eq!(wire(&neither).cluster(), None);
    }
}
