//! Arbitrary bytes as a GeneratePatches body, read every way the engine reads one:
//! the one-pass reader that leaves templates and variable values raw
//! (`decode_generate_patches_raw`), the same parts found by the borrowing parse that
//! the patch cache fingerprints (`GeneratePatchesWire::to_raw`), and the typed decoder
//! (`decode_generate_patches`, and the generic `decode`).
//! - The engine reads a body through the raw reader with the cache off and through the
//!   wire parse with it on: the two must find the very same parts, or an answer could
//!   depend on the cache.
//! - Every body the typed decoder accepts, the raw reader accepts too, and its parts,
//!   built, are the typed request.
//!
//! For an accepted body, the same request written as compact JSON (as Go's
//! `encoding/json` writes it) must decode to itself and fingerprint as
//! `Fingerprint::of_request` does, which is what lets the typed and the raw paths
//! share cache entries.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stackhook::engine::fingerprint::{Fingerprint, GeneratePatchesWire};
use stackhook::sdk::common::Variable;
use stackhook::sdk::decode::{
    decode, decode_generate_patches, decode_generate_patches_raw, GeneratePatchesBody,
};
use stackhook::sdk::topology::{
    GeneratePatchesRequest, GeneratePatchesRequestItem, RawGeneratePatchesRequest, RawVariable,
};

/// The raw request's parts as text, to compare two readings of one body.
fn parts(r: &RawGeneratePatchesRequest) -> String {
    let vars = |v: &[RawVariable]| {
        v.iter()
            .map(|v| format!("{}={}", v.name, v.value.get()))
            .collect::<Vec<_>>()
            .join(";")
    };
    let items: Vec<String> = r
        .items
        .iter()
        .map(|i| {
            format!(
                "{} {:?} {:?} [{}]",
                i.uid,
                i.holder_reference,
                i.object
                    .0
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.get()))
                    .collect::<Vec<_>>(),
                vars(&i.variables)
            )
        })
        .collect();
    format!("{:?} [{}] {:?}", r.settings, vars(&r.variables), items)
}

/// The raw request with every part built; `None` if one cannot be.
fn built(r: &RawGeneratePatchesRequest) -> Option<GeneratePatchesRequest> {
    let vars = |v: &[RawVariable]| -> Option<Vec<Variable>> {
        v.iter()
            .map(|v| {
                Some(Variable {
                    name: v.name.to_string(),
                    value: serde_json::from_str(v.value.get()).ok()?,
                })
            })
            .collect()
    };
    Some(GeneratePatchesRequest {
        settings: r.settings.clone(),
        variables: vars(&r.variables)?,
        items: r
            .items
            .iter()
            .map(|i| {
                Some(GeneratePatchesRequestItem {
                    uid: i.uid.to_string(),
                    holder_reference: i.holder_reference.clone(),
                    object: i.object.build().ok()?,
                    variables: vars(&i.variables)?,
                })
            })
            .collect::<Option<_>>()?,
    })
}
use stackhook::sdk::{Hook, API_VERSION};

fuzz_target!(|data: &[u8]| {
    let typed = decode_generate_patches(data);
    let generic = decode::<GeneratePatchesRequest>(Hook::GeneratePatches, data);
    assert_eq!(
        typed, generic,
        "the one-pass and the generic decoder disagree"
    );

    // What `PackEngine::answer_generate_patches` reads, cache off and cache on.
    let raw = decode_generate_patches_raw(data);
    if let Some(wire) = GeneratePatchesWire::read(data) {
        if let Some(via_wire) = wire.to_raw() {
            match &raw {
                Ok(GeneratePatchesBody::Raw(r)) => assert_eq!(
                    parts(r),
                    parts(&via_wire),
                    "the fingerprint path found other parts"
                ),
                other => panic!(
                    "the fingerprint path read a body the one-pass reader reads as {:?}",
                    other.as_ref().map(|_| "decoded")
                ),
            }
        }
    }
    if let Ok(t) = &typed {
        match &raw {
            Ok(GeneratePatchesBody::Raw(r)) => assert_eq!(
                built(r).as_ref(),
                Some(t),
                "the raw parts build another request"
            ),
            Ok(GeneratePatchesBody::Decoded(d)) => assert_eq!(d, t),
            Err(e) => panic!("the raw reader refuses what the decoder accepts: {e}"),
        }
    }

    let Ok(req) = typed else { return };
    let Ok(compact) = serde_json::to_string(&req) else {
        panic!("an accepted request does not encode");
    };
    let Some(rest) = compact.strip_prefix('{') else {
        panic!("a request encodes as {compact}");
    };
    let body = format!(
        r#"{{"apiVersion":"{API_VERSION}","kind":"{}",{rest}"#,
        Hook::GeneratePatches.request_kind()
    );
    let again = decode_generate_patches(body.as_bytes());
    assert_eq!(
        again.as_ref().ok(),
        Some(&req),
        "the compact body decodes to another request"
    );
    let wire = GeneratePatchesWire::read(body.as_bytes()).expect("the compact body reads");
    assert_eq!(
        Some(wire.fingerprint()),
        Fingerprint::of_request(&req),
        "a compact body's fingerprint is not its request's"
    );
});
