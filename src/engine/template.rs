//! Templates as CAPI runs them in inline patches (`valueFrom.template`, `enabledIf`)
//! and naming strategies: Go `text/template` with sprig's hermetic functions, the
//! output read as YAML 1.1 into JSON.
//!
//! CAPI parses each with `template.New("tpl").Funcs(sprig.HermeticTxtFuncMap())`
//! and executes it on the JSON-decoded variables; [`stackhook_gotmpl`] does that.

use serde_json::Value;

pub use stackhook_gotmpl::{Error, Prepared, Template};

/// The name CAPI gives every template; Go's error texts carry it.
pub const NAME: &str = "tpl";

/// Parse a template as CAPI does.
pub fn parse(src: &str) -> Result<Template, Error> {
    Template::parse(NAME, src)
}

/// Characters of a template error a message keeps.
pub const ERROR_CHARS: usize = 300;

/// A template error for a Failure message. Go's texts can quote what the template
/// rendered or iterated (a whole variable value, the YAML output), which must not reach
/// CAPI's conditions whole; the position and the start of the text are what help.
pub fn error_message(e: &Error) -> String {
    crate::sdk::clip::clip_to(&e.to_string(), ERROR_CHARS).into_owned()
}

/// CAPI's `enabledIf`: enabled only if the rendered value is JSON `true`. CAPI compares
/// the JSON bytes to `true`, so `True`, `yes`, `on` and ` true ` enable, while
/// `"true"`, `1` and `false` do not. `prepared` holds `data` converted once for the
/// other templates of the same item.
pub fn enabled(t: &Template, data: &Value, prepared: &Prepared) -> Result<bool, Error> {
    Ok(t.render_value_prepared(data, prepared)? == Value::Bool(true))
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
                .and_then(|t| enabled(&t, &data, &Prepared::new()))
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
    fn a_long_value_in_an_error_is_cut() {
        let big = "x".repeat(10_000);
        let e = parse("{{ range .big }}{{ end }}")
            .and_then(|t| t.render(&json!({ "big": big })))
            .map(|_| ())
            .unwrap_err();
        assert!(e.to_string().len() > 10_000, "Go's text quotes the value");
        let m = error_message(&e);
        assert!(m.starts_with("template: tpl:1:"), "{m}");
        assert!(
            m.ends_with(&format!("…({} bytes)", e.to_string().len())),
            "{m}"
        );
        assert!(m.chars().count() < ERROR_CHARS + 20, "{m}");
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
