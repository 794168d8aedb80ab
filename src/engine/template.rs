//! PLACEHOLDER — to be replaced by the full Go `text/template` + sprig + YAML 1.1 module.
//!
//! Only the public API is final. This stand-in understands literal text and
//! `{{ .a.b }}` / `{{ . }}` lookups (with `{{-` / `-}}` trimming), which is all the
//! pack engine's own tests need; anything else is a parse error.

use serde_json::Value;

/// A parsed template. `Send + Sync` so packs can be shared between requests.
#[derive(Debug, Clone)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Lookup(Vec<String>),
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TemplateError {
    #[error("template: {0}")]
    Parse(String),
    #[error("template: {0}")]
    Exec(String),
    #[error("template output is not valid YAML: {0}")]
    Yaml(String),
}

impl Template {
    pub fn parse(src: &str) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = src;
        let mut pending = String::new();
        while let Some(start) = rest.find("{{") {
            pending.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after
                .find("}}")
                .ok_or_else(|| TemplateError::Parse("unclosed action".into()))?;
            let mut action = &after[..end];
            if let Some(a) = action.strip_prefix('-') {
                pending.truncate(pending.trim_end().len());
                action = a;
            }
            let trim_right = action.ends_with('-');
            if trim_right {
                action = &action[..action.len() - 1];
            }
            let action = action.trim();
            if !action.starts_with('.') || action.contains(char::is_whitespace) {
                return Err(TemplateError::Parse(format!(
                    "unsupported action {action:?} in placeholder template engine"
                )));
            }
            if !pending.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut pending)));
            }
            let keys = action[1..]
                .split('.')
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .collect();
            parts.push(Part::Lookup(keys));
            rest = &after[end + 2..];
            if trim_right {
                rest = rest.trim_start();
            }
        }
        pending.push_str(rest);
        if !pending.is_empty() {
            parts.push(Part::Text(pending));
        }
        Ok(Template { parts })
    }

    pub fn render(&self, data: &Value) -> Result<String, TemplateError> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Lookup(keys) => {
                    let mut cur = Some(data);
                    for k in keys {
                        cur = cur.and_then(|v| v.get(k));
                    }
                    match cur {
                        None | Some(Value::Null) => out.push_str("<no value>"),
                        Some(Value::String(s)) => out.push_str(s),
                        Some(other) => out.push_str(&other.to_string()),
                    }
                }
            }
        }
        Ok(out)
    }

    pub fn render_value(&self, data: &Value) -> Result<Value, TemplateError> {
        let text = self.render(data)?;
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_yaml::from_str::<Value>(&text).map_err(|e| TemplateError::Yaml(e.to_string()))
    }

    pub fn render_enabled(&self, data: &Value) -> Result<bool, TemplateError> {
        Ok(self.render_value(data)? == Value::Bool(true))
    }
}
