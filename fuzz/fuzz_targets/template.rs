//! Arbitrary template source, parsed and rendered with a small fixed data value:
//! parsing, execution and YAML reading must return errors, never panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stackhook_gotmpl::Template;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let vars = serde_json::json!({
        "n": 3, "f": 1.5, "s": "text", "b": true, "nil": null,
        "list": [1, "a", null], "map": {"k": "v", "n": {"x": 1}},
        "builtin": {"cluster": {"name": "c"}},
    });
    if let Ok(t) = Template::parse("tpl", src) {
        let _ = t.render(&vars);
        let _ = t.render_value(&vars);
    }
});
