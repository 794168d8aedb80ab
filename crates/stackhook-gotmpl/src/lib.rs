//! Go's `text/template` with sprig's hermetic functions, run on JSON data as Go runs
//! it on JSON decoded into `interface{}` (so **every number is a float64**), and the
//! output read as YAML 1.1 into JSON, as `sigs.k8s.io/yaml` (go-yaml v2) reads it.
//!
//! Templates written for a Go program have to mean the same here, down to Go's error
//! texts and `fmt` formatting. No crate fitted: `gtmpl` has its own value model
//! (integers stay integers, no `<no value>` vs `<nil>` distinction, no Go argument
//! type checks) and no sprig, so the lexer, parser, executor, `fmt` and sprig
//! functions are written here.
//!
//! # Language
//!
//! Text and `{{ }}` actions with `{{-` / `-}}` trimming; comments `{{/* */}}`;
//! pipelines with `|`; variables (`$x := …`, `$x = …`, `$`); fields `.a.b`,
//! `$x.a`, `(pipeline).a`; `if`/`else if`/`else`, `with`/`else with`/`else`,
//! `range` over slices, maps (sorted keys) and integers with `$i, $v :=`, `else`,
//! `break`, `continue`; `define`, `template`, `block`; string, raw string, char,
//! number, bool and nil literals. Go's rules apply: truthiness, a missing map key
//! prints `<no value>`, `.a.b` on a missing `.a` is `<no value>` and on a null
//! `.a` is an error, number literals are `int` unless written as floats, and
//! typed function parameters reject other types (`{{ trunc .n "x" }}` with a
//! float64 `.n` is an error, exactly as in Go). Values print with Go's `fmt`
//! (`1e+06`, `map[a:1 b:2]`, `[a b]`).
//!
//! Builtins: `and or not len index print printf println eq ne lt le gt ge html js
//! urlquery call` (`slice` is sprig's, which overrides Go's). `printf` supports
//! the verbs `%v %s %d %q %f %F %e %E %g %G %x %X %o %O %b %c %U %t %T %%` with
//! flags, width and precision, and Go's `%!verb(type=value)` error forms.
//!
//! # Sprig functions
//!
//! Strings: `trim trimAll trimPrefix trimSuffix upper lower title untitle substr
//! repeat nospace trunc abbrev abbrevboth initials swapcase snakecase kebabcase
//! camelcase wrap wrapWith contains hasPrefix hasSuffix quote squote cat indent
//! nindent replace plural sha1sum sha256sum sha512sum adler32sum toString
//! regexMatch regexFind regexFindAll regexReplaceAll regexReplaceAllLiteral
//! regexSplit regexQuoteMeta split splitn splitList join sortAlpha toStrings
//! b64enc b64dec b32enc b32dec` (and the `must…` regex variants).
//! Defaults and flow: `default empty coalesce all any compact ternary fromJson
//! toJson toPrettyJson toRawJson deepCopy fail` (and `must…` variants).
//! Types: `typeOf typeIs typeIsLike kindOf kindIs deepEqual`.
//! Paths: `base dir clean ext isAbs` (and the `os…` variants).
//! Math: `add add1 sub div mod mul max biggest min ceil floor round int int64
//! float64 atoi toDecimal seq until untilStep addf add1f subf mulf divf maxf minf`.
//! Lists: `list tuple first rest last initial append push prepend concat reverse
//! uniq without has slice chunk` (and `must…` variants).
//! Dicts: `dict get set unset hasKey pluck keys values pick omit merge
//! mergeOverwrite dig` (`keys` and `values` are sorted by key; Go's order is random).
//! Semver: `semver` (with `.Major .Minor .Patch .Prerelease .Metadata .Original
//! .Compare …`) and `semverCompare` with Masterminds constraint syntax.
//! URLs: `urlParse urlJoin`.
//!
//! Not provided: the functions `HermeticTxtFuncMap` removes (dates, `now`, random
//! strings, `uuidv4`, `env`, `expandenv`, `getHostByName`), and the random or
//! key-generating ones it still has (`randInt`, `shuffle`, `genPrivateKey`,
//! certificate and `bcrypt`/`htpasswd`/`derivePassword`/AES functions,
//! `toDate`/`duration`/`ago`). Using one is a parse error, as an undefined function
//! is in Go. `snakecase`/`kebabcase` split on case changes and `_ - space` only
//! (xstrings' digit rules are not reproduced).
//!
//! # Limits
//!
//! Go has none; a template here cannot run away:
//! [`MAX_OPS`] evaluation steps (commands, loop iterations), [`MAX_OUTPUT`]
//! bytes of output, [`MAX_STRING`] bytes per function result (`repeat`, `indent`,
//! …), [`MAX_LIST`] elements per generated list (`until`, `seq`, `append`, …),
//! [`MAX_NESTING`] levels of parse nesting and [`MAX_TEMPLATE_DEPTH`] nested
//! `template` calls. Regexes are compiled with a size limit. Exceeding a limit is
//! an execution error.
//!
//! # Output
//!
//! [`Template::render_value`] parses the output as YAML 1.1 (see [`yaml11`]); an
//! empty or whitespace-only output is `null`.

mod builtins;
mod encoding;
mod exec;
mod func;
mod funcs;
mod gofmt;
mod lex;
mod neturl;
mod parse;
mod semver;
mod sprig;
mod value;
pub mod yaml11;

use std::sync::Arc;

use serde_json::Value;

pub use yaml11::YamlError;

/// Evaluation steps (commands, text nodes, loop iterations) per render.
pub const MAX_OPS: u64 = 1_000_000;
/// Bytes of rendered output.
pub const MAX_OUTPUT: usize = 4 << 20;
/// Bytes of a single string produced by a function.
pub const MAX_STRING: usize = 1 << 20;
/// Elements of a list produced by a function.
pub const MAX_LIST: usize = 100_000;
/// Nesting of control structures and parentheses in the source.
pub const MAX_NESTING: usize = 100;
/// Nested `{{template}}` calls.
pub const MAX_TEMPLATE_DEPTH: usize = 100;

/// A parsed template. `Send + Sync` so one parse can serve many renders at once.
#[derive(Debug, Clone)]
pub struct Template {
    name: Arc<str>,
    src: Arc<str>,
    tree: Arc<parse::Tree>,
    /// The source names a function that changes a map in place, so each render needs
    /// its own copy of the data (Go decodes the JSON afresh for every execution).
    mutates: bool,
}

/// Sprig functions that change a dict they are given.
const MUTATING: &[&str] = &[
    "set",
    "unset",
    "merge",
    "mergeOverwrite",
    "mustMerge",
    "mustMergeOverwrite",
];

/// Whether any identifier in `src` is one of [`MUTATING`]. Plain text counts too, which
/// only ever costs a copy.
fn names_a_mutating_function(src: &str) -> bool {
    src.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|word| MUTATING.contains(&word))
}

/// The data of several renders, converted once to the form templates run on: the
/// variables of one patched template are the same for all of its patches. A template
/// that changes maps in place still gets its own conversion.
#[derive(Default)]
pub struct Prepared(std::cell::OnceCell<value::V>);

impl Prepared {
    pub fn new() -> Prepared {
        Prepared::default()
    }
}

/// Why a template did not parse, render or read as YAML; the texts are Go's.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error("template: {0}")]
    Parse(String),
    #[error("template: {0}")]
    Exec(String),
    #[error("template output is not valid YAML: {0}")]
    Yaml(YamlError),
}

/// 1-based line and 0-based byte column of `pos`, as Go's template errors show them.
fn line_col(src: &str, pos: usize) -> (usize, usize) {
    let pos = pos.min(src.len());
    let before = src.get(..pos).unwrap_or(src);
    let line = 1 + before.matches('\n').count();
    let col = match before.rfind('\n') {
        Some(i) => pos - i - 1,
        None => pos,
    };
    (line, col)
}

impl Template {
    /// Parse `src` as Go's `template.New(name).Funcs(sprig).Parse(src)` does; `name`
    /// appears in error messages and is what `{{template name}}` calls.
    pub fn parse(name: &str, src: &str) -> Result<Template, Error> {
        let tree = parse::parse(src, &funcs::exists).map_err(|e| {
            let (line, _) = line_col(src, e.pos);
            Error::Parse(format!("{name}:{line}: {}", e.msg))
        })?;
        Ok(Template {
            name: name.into(),
            src: src.into(),
            tree: Arc::new(tree),
            mutates: names_a_mutating_function(src),
        })
    }

    /// Execute the template on `data` (a JSON value, seen as Go sees decoded JSON).
    pub fn render(&self, data: &Value) -> Result<String, Error> {
        self.run(value::V::from_json(data))
    }

    /// [`Template::render`] on `data`, converted once per `prepared` (which must
    /// always be given the same `data`).
    pub fn render_prepared(&self, data: &Value, prepared: &Prepared) -> Result<String, Error> {
        if self.mutates {
            return self.render(data);
        }
        self.run(prepared.0.get_or_init(|| value::V::from_json(data)).clone())
    }

    /// [`Template::render_value`] through [`Template::render_prepared`].
    pub fn render_value_prepared(&self, data: &Value, prepared: &Prepared) -> Result<Value, Error> {
        yaml_value(self.render_prepared(data, prepared)?)
    }

    fn run(&self, root: value::V) -> Result<String, Error> {
        let mut st = exec::State::new(&self.tree, &self.name, root);
        match st.run() {
            Ok(()) => Ok(st.out),
            Err(e) => {
                let (line, col) = line_col(&self.src, e.pos);
                let name = st.template_name().to_string();
                let at =
                    e.at.and_then(|(a, b)| self.src.get(a..b))
                        .map(|t| format!(" at <{t}>"))
                        .unwrap_or_default();
                Err(Error::Exec(format!(
                    "{}:{line}:{col}: executing {name:?}{at}: {}",
                    self.name, e.msg
                )))
            }
        }
    }

    /// Render, then read the output as YAML 1.1 into JSON as `sigs.k8s.io/yaml` does.
    pub fn render_value(&self, data: &Value) -> Result<Value, Error> {
        yaml_value(self.render(data)?)
    }
}

fn yaml_value(text: String) -> Result<Value, Error> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    yaml11::to_json(&text).map_err(Error::Yaml)
}

#[cfg(test)]
mod tests;
