//! Arbitrary bytes as a GeneratePatches body, read the two ways the engine reads one:
//! the borrowing parse that the patch cache fingerprints (`GeneratePatchesWire`, then
//! its parts, falling back to the decoder as the engine does) and the typed decoder
//! (`decode_generate_patches`, and the generic `decode`). They must agree on accepting
//! or refusing the body and on the request decoded. A body that only the fingerprint
//! path accepted could be answered from the cache with another body's patches.
//!
//! For an accepted body, the same request written as compact JSON (as Go's
//! `encoding/json` writes it) must decode to itself and fingerprint as
//! `Fingerprint::of_request` does, which is what lets the typed and the raw paths
//! share cache entries.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stackhook::engine::fingerprint::{Fingerprint, GeneratePatchesWire};
use stackhook::sdk::decode::{decode, decode_generate_patches};
use stackhook::sdk::topology::GeneratePatchesRequest;
use stackhook::sdk::{Hook, API_VERSION};

fuzz_target!(|data: &[u8]| {
    let typed = decode_generate_patches(data);
    let generic = decode::<GeneratePatchesRequest>(Hook::GeneratePatches, data);
    assert_eq!(
        typed, generic,
        "the one-pass and the generic decoder disagree"
    );

    // What `PackEngine::answer_generate_patches` decodes when it keeps answers.
    if let Some(wire) = GeneratePatchesWire::read(data) {
        let via_wire = match wire.to_request() {
            Some(req) => Ok(req),
            None => decode::<GeneratePatchesRequest>(Hook::GeneratePatches, data),
        };
        match (&via_wire, &typed) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "the fingerprint path decoded another request"),
            (Err(_), Err(_)) => {}
            (a, b) => panic!(
                "the fingerprint path and the decoder disagree: {:?} vs {:?}",
                a.as_ref().map(|_| "accepted"),
                b.as_ref().map(|_| "accepted")
            ),
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
