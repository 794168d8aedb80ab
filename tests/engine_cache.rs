//! The GeneratePatches answer cache: a request that differs only in item UIDs (what
//! CAPI sends on every reconcile of an unchanged Cluster) gets the stored patches under
//! its own UIDs; any other change is computed afresh; failures are never stored.

use serde_json::{json, Value};

use stackhook::engine::cache::CacheLimits;
use stackhook::engine::{PackEngine, PatchEngine};
use stackhook::sdk::topology::{GeneratePatchesRequest, GeneratePatchesResponse};
use stackhook::sdk::ResponseStatus;

const HANDLER: &str = "openstack-generate-patches";

fn body() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/bodies/generate-patches-12.json"
    ))
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

fn request(v: &Value) -> GeneratePatchesRequest {
    serde_json::from_value(v.clone()).unwrap()
}

fn with_fresh_uids(v: &Value, round: usize) -> Value {
    let mut v = v.clone();
    for (i, item) in v["items"].as_array_mut().unwrap().iter_mut().enumerate() {
        item["uid"] = json!(format!("00000000-0000-4000-8000-{round:06}{i:06}"));
    }
    v
}

/// The uncached engine's answer, with item UIDs replaced by their request index, so
/// answers to requests with different UIDs can be compared.
fn by_index(req: &GeneratePatchesRequest, resp: &GeneratePatchesResponse) -> Vec<Value> {
    resp.items
        .iter()
        .map(|i| {
            let index = req.items.iter().position(|r| r.uid == i.uid).unwrap();
            json!({"index": index, "patch": String::from_utf8(i.patch.0.clone()).unwrap()})
        })
        .collect()
}

#[test]
fn new_uids_hit_the_cache_and_get_their_own_uids_back() {
    let plain = PackEngine::embedded().unwrap();
    let cached = PackEngine::embedded().unwrap().with_patch_cache(16);
    let first = request(&body());

    let expected = plain.generate_patches(HANDLER, &first);
    assert_eq!(
        expected.status,
        ResponseStatus::Success,
        "{}",
        expected.message
    );
    assert!(expected.items.len() >= 6, "the pack patches most items");

    let a = cached.generate_patches(HANDLER, &first);
    assert_eq!(a, expected);
    assert_eq!(cached.patch_cache().unwrap().stats(), (0, 1));

    let second = request(&with_fresh_uids(&body(), 1));
    let b = cached.generate_patches(HANDLER, &second);
    assert_eq!(cached.patch_cache().unwrap().stats(), (1, 1), "a hit");
    assert_eq!(b.status, ResponseStatus::Success);
    // Every UID in the answer is one of this request's, none of the first one's.
    for item in &b.items {
        assert!(
            second.items.iter().any(|r| r.uid == item.uid),
            "{}",
            item.uid
        );
        assert!(
            !first.items.iter().any(|r| r.uid == item.uid),
            "{}",
            item.uid
        );
    }
    assert_eq!(by_index(&second, &b), by_index(&first, &expected));
    assert_eq!(b, plain.generate_patches(HANDLER, &second));
}

#[test]
fn a_changed_variable_or_object_is_computed_afresh() {
    let plain = PackEngine::embedded().unwrap();
    let cached = PackEngine::embedded().unwrap().with_patch_cache(16);
    let base = body();
    cached.generate_patches(HANDLER, &request(&base));

    let mut changed = with_fresh_uids(&base, 2);
    let openstack = changed["variables"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|v| v["name"] == "openstack")
        .unwrap();
    openstack["value"]["flavors"]["controlPlane"] = json!("m1.xlarge");
    let req = request(&changed);
    let got = cached.generate_patches(HANDLER, &req);
    assert_eq!(cached.patch_cache().unwrap().stats(), (0, 2), "a miss");
    let want = plain.generate_patches(HANDLER, &req);
    assert_eq!(got, want);
    assert_ne!(
        by_index(&req, &got),
        by_index(
            &request(&base),
            &plain.generate_patches(HANDLER, &request(&base))
        ),
        "the flavor change shows in the patches"
    );

    let mut object_changed = with_fresh_uids(&base, 3);
    object_changed["items"][0]["object"]["metadata"]["labels"] = json!({"extra": "label"});
    cached.generate_patches(HANDLER, &request(&object_changed));
    assert_eq!(cached.patch_cache().unwrap().stats(), (0, 3), "a miss");
}

#[test]
fn failures_are_not_stored_and_duplicate_uids_are_not_cached() {
    let cached = PackEngine::embedded().unwrap().with_patch_cache(16);
    let mut broken = body();
    broken["variables"]
        .as_array_mut()
        .unwrap()
        .retain(|v| v["name"] != "openstack");
    for round in 0..2 {
        let r = cached.generate_patches(HANDLER, &request(&with_fresh_uids(&broken, round)));
        assert_eq!(r.status, ResponseStatus::Failure);
        assert!(r.message.contains("openstack"), "{}", r.message);
    }
    assert_eq!(cached.patch_cache().unwrap().stats(), (0, 2));

    let mut dup = body();
    let uid = dup["items"][0]["uid"].clone();
    dup["items"][1]["uid"] = uid;
    for _ in 0..2 {
        cached.generate_patches(HANDLER, &request(&dup));
    }
    assert_eq!(
        cached.patch_cache().unwrap().stats(),
        (0, 2),
        "not even looked up"
    );
}

#[test]
fn items_in_another_order_hit_the_cache() {
    // CAPI lists MachineDeployments in Go map order, which changes between reconciles.
    let plain = PackEngine::embedded().unwrap();
    let cached = PackEngine::embedded().unwrap().with_patch_cache(16);
    let first = request(&body());
    cached.generate_patches(HANDLER, &first);

    let mut shuffled = with_fresh_uids(&body(), 4);
    shuffled["items"].as_array_mut().unwrap().reverse();
    let req = request(&shuffled);
    let got = cached.generate_patches(HANDLER, &req);
    assert_eq!(cached.patch_cache().unwrap().stats(), (1, 1), "a hit");
    assert_eq!(got, plain.generate_patches(HANDLER, &req));
    assert!(!got.items.is_empty());
}

/// Go decodes `null` into an empty slice or map, so a Go client may send `null` for an
/// empty list: every decoding path (the cache's body reading and both full decoders)
/// reads it as the field left out, so the answer never depends on the cache.
#[test]
fn null_lists_and_maps_read_as_empty_whatever_the_cache() {
    let cached = PackEngine::embedded().unwrap().with_patch_cache(64);
    let plain = PackEngine::embedded().unwrap().with_patch_cache(0);
    let mut base = body();
    // The fields as omitted: the reference answer.
    let mut omitted = base.clone();
    omitted.as_object_mut().unwrap().remove("settings");
    for item in omitted["items"].as_array_mut().unwrap() {
        item.as_object_mut().unwrap().remove("variables");
    }
    let reference = serde_json::to_value(
        plain
            .answer_generate_patches(HANDLER, &serde_json::to_vec(&omitted).unwrap())
            .unwrap()
            .response,
    )
    .unwrap();
    assert_eq!(reference["status"], "Success");
    // Same request with `null` in their place, and once with the top-level variables
    // null too (then the builtin variables are gone, so the answer differs but must
    // still agree between the paths).
    base["settings"] = Value::Null;
    for item in base["items"].as_array_mut().unwrap() {
        item["variables"] = Value::Null;
    }
    let mut no_vars = base.clone();
    no_vars["variables"] = Value::Null;
    for (name, v, want) in [
        ("item variables and settings null", &base, Some(&reference)),
        ("all variables null", &no_vars, None),
    ] {
        let bytes = serde_json::to_vec(v).unwrap();
        let a = serde_json::to_value(
            cached
                .answer_generate_patches(HANDLER, &bytes)
                .unwrap()
                .response,
        )
        .unwrap();
        let b = serde_json::to_value(
            plain
                .answer_generate_patches(HANDLER, &bytes)
                .unwrap()
                .response,
        )
        .unwrap();
        // Resent with the same bytes: now from the cache, if it stored the answer.
        let c = serde_json::to_value(
            cached
                .answer_generate_patches(HANDLER, &bytes)
                .unwrap()
                .response,
        )
        .unwrap();
        assert_eq!(a, b, "{name}: cache on and off disagree");
        assert_eq!(a, c, "{name}: the remembered answer differs");
        if let Some(want) = want {
            assert_eq!(&a, want, "{name}: null reads differently from omitted");
        }
        // The typed decoder of the generic path agrees as well.
        let req: GeneratePatchesRequest = serde_json::from_slice(&bytes).unwrap();
        assert!(req.settings.is_empty() && req.items.iter().all(|i| i.variables.is_empty()));
    }
}

/// The same request for another Cluster: a different variable value, so a different
/// answer to store.
fn for_cluster(n: usize) -> GeneratePatchesRequest {
    let mut v = body();
    let vars = v["variables"].as_array_mut().unwrap();
    vars.push(json!({"name": "clusterSuffix", "value": format!("c{n}")}));
    request(&v)
}

#[test]
fn stored_answers_stay_within_the_byte_limit() {
    let plain = PackEngine::embedded().unwrap();
    let one = plain.generate_patches(HANDLER, &for_cluster(0));
    let answer_bytes: usize = one.items.iter().map(|i| i.patch.0.len()).sum();
    assert!(
        answer_bytes > 1000,
        "a sizeable answer: {answer_bytes} bytes"
    );
    // Room for about four such answers.
    let budget = 4 * answer_bytes as u64 + 4096;
    let cached = PackEngine::embedded()
        .unwrap()
        .with_patch_cache_limits(CacheLimits {
            entries: 1024,
            bytes: budget,
            max_answer_bytes: budget,
        });
    for n in 0..40 {
        let got = cached.generate_patches(HANDLER, &for_cluster(n));
        assert_eq!(got.status, ResponseStatus::Success, "{}", got.message);
        let (entries, bytes) = cached.patch_cache().unwrap().usage();
        assert!(bytes <= budget, "{bytes} bytes stored, limit {budget}");
        assert!(
            entries <= 5,
            "{entries} answers of {answer_bytes} bytes in {budget}"
        );
    }
    let (entries, _) = cached.patch_cache().unwrap().usage();
    assert!(entries >= 1, "the cache still keeps recent answers");
    // The most recent Cluster is answered from the cache.
    let before = cached.patch_cache().unwrap().stats();
    cached.generate_patches(HANDLER, &for_cluster(39));
    assert_eq!(cached.patch_cache().unwrap().stats().0, before.0 + 1);
}

#[test]
fn an_answer_over_the_size_cap_is_never_stored() {
    let cached = PackEngine::embedded()
        .unwrap()
        .with_patch_cache_limits(CacheLimits {
            entries: 16,
            bytes: 16 * 1024 * 1024,
            max_answer_bytes: 512,
        });
    let req = for_cluster(1);
    let first = cached.generate_patches(HANDLER, &req);
    let second = cached.generate_patches(HANDLER, &req);
    assert_eq!(first, second);
    assert!(!first.items.is_empty());
    assert_eq!(cached.patch_cache().unwrap().stats(), (0, 2), "two misses");
    assert_eq!(cached.patch_cache().unwrap().usage(), (0, 0));
}

/// The answer to `bytes` with the cache on (computed, then remembered) and off; the
/// three must be one answer.
fn answer_every_way(bytes: &[u8]) -> Value {
    let cached = PackEngine::embedded().unwrap().with_patch_cache(64);
    let plain = PackEngine::embedded().unwrap().with_patch_cache(0);
    let answer = |e: &PackEngine| {
        serde_json::to_value(e.answer_generate_patches(HANDLER, bytes).unwrap().response).unwrap()
    };
    let (a, b, c) = (answer(&cached), answer(&plain), answer(&cached));
    assert_eq!(a, b, "cache on and off disagree");
    assert_eq!(a, c, "the remembered answer differs");
    a
}

#[test]
fn the_raw_reading_gives_the_decoded_requests_answer() {
    // The engine reads templates and variable values as raw text; the typed request
    // (every part built first) must get the very same patches.
    let v = body();
    let plain = PackEngine::embedded().unwrap();
    let typed = serde_json::to_value(plain.generate_patches(HANDLER, &request(&v))).unwrap();
    assert_eq!(typed["status"], "Success", "{typed}");
    for bytes in [
        serde_json::to_vec(&v).unwrap(),
        serde_json::to_vec_pretty(&v).unwrap(),
    ] {
        assert_eq!(answer_every_way(&bytes), typed);
    }
}

/// The request with `text` spliced in as the value of `field` in the template of the
/// first item whose template kind is `kind`.
fn with_raw_field(kind: &str, field: &str, text: &str) -> Vec<u8> {
    let mut v = body();
    let item = v["items"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|i| i["object"]["kind"] == kind)
        .unwrap();
    item["object"][field] = json!(MARKER);
    splice(&v, text)
}

/// Where [`splice`] puts its text.
const MARKER: &str = "@@RAW@@";

/// `v` written as JSON, with the string [`MARKER`] replaced by `text` as written.
fn splice(v: &Value, text: &str) -> Vec<u8> {
    serde_json::to_string(v)
        .unwrap()
        .replace(&format!("\"{MARKER}\""), text)
        .into_bytes()
}

#[test]
fn a_value_no_tree_can_hold_fails_only_a_template_that_is_patched() {
    // A number beyond f64 and a lone surrogate escape: Go keeps templates as raw bytes
    // and so does the engine, until it has ops to check on one.
    for text in ["1e400", r#""\ud800""#] {
        // KubeadmControlPlaneTemplate: the openstack pack never patches it.
        let untouched = answer_every_way(&with_raw_field(
            "KubeadmControlPlaneTemplate",
            "extra",
            text,
        ));
        assert_eq!(untouched["status"], "Success", "{text}: {untouched}");
        assert_eq!(
            untouched["items"],
            answer_every_way(&serde_json::to_vec(&body()).unwrap())["items"],
            "{text}: the other templates' patches changed"
        );
        // OpenStackClusterTemplate: patched, so it must be built, and cannot be.
        let patched = answer_every_way(&with_raw_field("OpenStackClusterTemplate", "extra", text));
        assert_eq!(patched["status"], "Failure", "{text}: {patched}");
        let msg = patched["message"].as_str().unwrap();
        assert!(
            msg.contains("OpenStackClusterTemplate of Cluster")
                && msg.contains("cannot be patched"),
            "{text}: {msg}"
        );
    }
}

#[test]
fn a_template_with_a_duplicate_kind_is_read_as_a_tree_reads_it() {
    // Duplicate keys: the last wins, as when the template is built, so this template
    // is an OpenStackClusterTemplate and gets its patches.
    let bytes = with_raw_field(
        "OpenStackClusterTemplate",
        "kind",
        r#""KubeadmConfigTemplate","kind":"OpenStackClusterTemplate""#,
    );
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.contains(r#""kind":"KubeadmConfigTemplate","kind":"OpenStackClusterTemplate""#));
    let a = answer_every_way(&bytes);
    assert_eq!(a["status"], "Success", "{a}");
    let reference = answer_every_way(&serde_json::to_vec(&body()).unwrap());
    assert_eq!(a["items"], reference["items"]);
}

/// The request with one more request-wide variable, its value `text` as written.
fn with_raw_variable(name: &str, text: &str) -> Vec<u8> {
    let mut v = body();
    v["variables"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": name, "value": MARKER}));
    splice(&v, text)
}

#[test]
fn a_variable_no_tree_can_hold_fails_only_if_a_patch_reads_it() {
    let reference = answer_every_way(&serde_json::to_vec(&body()).unwrap());
    // No patch of the pack reads this one.
    let unread = answer_every_way(&with_raw_variable("someOtherPacksVariable", "[1e400]"));
    assert_eq!(unread, reference);
    // The pack's own variable, read by every patch: a second value of a name replaces
    // the first, so this one is read.
    let read = answer_every_way(&with_raw_variable("openstack", r#"{"x": 1e400}"#));
    assert_eq!(read["status"], "Failure", "{read}");
    let msg = read["message"].as_str().unwrap();
    assert!(
        msg.contains(r#"variable "openstack" of the request"#) && msg.contains("out of range"),
        "{msg}"
    );
}
