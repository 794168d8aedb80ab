//! Templates as CAPI runs them in inline patches (`valueFrom.template`, `enabledIf`)
//! and naming strategies: Go `text/template` with sprig's hermetic functions, the
//! output read as YAML 1.1 into JSON.
//!
//! CAPI parses each with `template.New("tpl").Funcs(sprig.HermeticTxtFuncMap())`
//! and executes it on the JSON-decoded variables; [`stackhook_gotmpl`] does that.

use serde_json::Value;

pub use stackhook_gotmpl::{Error, Template};

/// The name CAPI gives every template; Go's error texts carry it.
pub const NAME: &str = "tpl";

/// Parse a template as CAPI does.
pub fn parse(src: &str) -> Result<Template, Error> {
    Template::parse(NAME, src)
}

/// CAPI's `enabledIf`: enabled only if the rendered value is JSON `true`. CAPI compares
/// the JSON bytes to `true`, so `True`, `yes`, `on` and ` true ` enable, while
/// `"true"`, `1` and `false` do not.
pub fn enabled(t: &Template, data: &Value) -> Result<bool, Error> {
    Ok(t.render_value(data)? == Value::Bool(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn enabled_matches_capi() {
        let data = json!({"t": true, "s": "x"});
        let e = |src: &str| {
            parse(src)
                .and_then(|t| enabled(&t, &data))
                .unwrap_or_else(|err| panic!("{src}: {err}"))
        };
        assert!(e("true"));
        assert!(e("True"));
        assert!(e(" true "));
        assert!(e("{{ .t }}"));
        assert!(e("yes"));
        assert!(!e("false"));
        assert!(!e("1"));
        assert!(!e("\"true\""));
        assert!(!e("{{ .missing }}"));
        assert!(!e(""));
    }

    #[test]
    fn errors_name_the_template_tpl() {
        let e = parse("{{ fail \"boom\" }}")
            .and_then(|t| t.render(&json!({})))
            .map(|_| ())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "template: tpl:1:3: executing \"tpl\" at <fail>: error calling fail: boom"
        );
    }
}
