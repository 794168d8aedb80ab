//! `x-kubernetes-validations` rules of a variable schema.
//!
//! A rule is checked and compiled when its pack loads, as CAPI's webhook does for a
//! ClusterClass: syntax, references to variables and functions the evaluator does not
//! know, `messageExpression`, `reason`, `fieldPath`. Evaluation uses the `kube-cel`
//! crate: the CEL standard library plus Kubernetes' CEL libraries (lists, sets, regex,
//! strings, quantity, IP/CIDR, URL, format, semver, math, encoders, JSON patch), with
//! `self` bound the way the API server binds it (escaped field names, `date-time`,
//! `duration` and `byte` formats).
//!
//! Failures read as Kubernetes prints a rule's `field.Error`:
//! `Invalid value: "x": <message>`, `Forbidden: <message>`, `Required value: <message>`,
//! `Duplicate value: "x"`.

use std::cell::RefCell;
use std::collections::BTreeMap;

use kube_cel::cel;
use kube_cel::cel::common::ast::{EntryExpr, Expr};
use kube_cel::cel::IdedExpr;
use kube_cel::KubeCelExt as _;
use serde_json::{Map, Value};

use crate::sdk::clip::{clip_to, quote};

/// How much of an evaluation error is kept: it may quote the value.
const EVALUATION_ERROR_CHARS: usize = 160;

/// The keys of one `x-kubernetes-validations` entry (Kubernetes' `ValidationRule`).
const RULE_KEYS: &[&str] = &[
    "rule",
    "message",
    "messageExpression",
    "reason",
    "fieldPath",
    "optionalOldSelf",
];

/// The variables a rule may use.
const VARIABLES: &[&str] = &["self", "oldSelf"];

/// Kubernetes' limit on an evaluated `messageExpression`.
const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;

/// `reason`: which Kubernetes field error a failing rule produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `FieldValueInvalid`, the default.
    Invalid,
    /// `FieldValueForbidden`.
    Forbidden,
    /// `FieldValueRequired`.
    Required,
    /// `FieldValueDuplicate`.
    Duplicate,
}

impl Reason {
    const ALL: [(&'static str, Reason); 4] = [
        ("FieldValueInvalid", Reason::Invalid),
        ("FieldValueForbidden", Reason::Forbidden),
        ("FieldValueRequired", Reason::Required),
        ("FieldValueDuplicate", Reason::Duplicate),
    ];

    fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.iter().find(|(n, _)| *n == s).map(|(_, r)| *r)
    }

    /// The words Kubernetes starts the error with (`field.ErrorType`).
    pub fn words(self) -> &'static str {
        match self {
            Reason::Invalid => "Invalid value",
            Reason::Forbidden => "Forbidden",
            Reason::Required => "Required value",
            Reason::Duplicate => "Duplicate value",
        }
    }
}

/// One problem in one `x-kubernetes-validations` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleProblem {
    /// The entry's field at fault (`.rule`, `.reason`...), or `""` for the entry.
    pub field: String,
    /// What is wrong, e.g. `CEL rule does not compile`.
    pub what: String,
    /// Details, possibly empty.
    pub detail: String,
}

impl RuleProblem {
    fn new(field: &str, what: &str, detail: impl Into<String>) -> RuleProblem {
        RuleProblem {
            field: field.to_string(),
            what: what.to_string(),
            detail: detail.into(),
        }
    }

    /// The problem as one line, naming `variable` when given.
    pub fn describe(&self, variable: Option<&str>) -> String {
        let mut s = self.what.clone();
        if let Some(v) = variable {
            s.push_str(&format!(" for variable {v:?}"));
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

/// A checked, compiled rule of one schema node.
pub struct Rule {
    source: String,
    /// `message`, trimmed; empty when unset.
    message: String,
    has_message_expression: bool,
    reason: Reason,
    /// `fieldPath` as a path suffix (`.a.b`); empty when unset.
    field_path: String,
    /// Uses `oldSelf`: a hook request has no old value, so the rule is not evaluated,
    /// as the API server does not evaluate it on create.
    transition: bool,
    /// The node's `type`, which Kubernetes prints in evaluation errors.
    node_type: String,
    /// The node's schema with this rule only, for `kube-cel`.
    compiled: kube_cel::CompiledSchema,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Rule {
    /// Checks and compiles entry `entry` of the `x-kubernetes-validations` of schema
    /// node `node`. Every problem found is returned.
    pub fn compile(entry: &Value, node: &Value) -> Result<Rule, Vec<RuleProblem>> {
        let mut problems = Vec::new();
        let Some(obj) = entry.as_object() else {
            return Err(vec![RuleProblem::new(
                "",
                "a validation rule must be an object with a rule",
                "",
            )]);
        };
        for key in obj.keys() {
            if !RULE_KEYS.contains(&key.as_str()) {
                problems.push(RuleProblem::new(
                    &format!(".{key}"),
                    "field not allowed in a validation rule",
                    format!("one of {}", RULE_KEYS.join(", ")),
                ));
            }
        }
        let string = |key: &str, problems: &mut Vec<RuleProblem>| match obj.get(key) {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                problems.push(RuleProblem::new(&format!(".{key}"), "must be a string", ""));
                None
            }
        };

        let source = string("rule", &mut problems).unwrap_or_default();
        let mut transition = false;
        if source.trim().is_empty() {
            problems.push(RuleProblem::new(".rule", "rule must not be empty", ""));
        } else {
            match check_expression(&source) {
                Ok(refs) => transition = refs.uses_old_self,
                Err(e) => problems.push(RuleProblem::new(".rule", "CEL rule does not compile", e)),
            }
        }

        let message = string("message", &mut problems).unwrap_or_default();
        if message.contains('\n') {
            problems.push(RuleProblem::new(
                ".message",
                "message must not contain line breaks",
                "",
            ));
        }
        if source.contains('\n') && message.trim().is_empty() {
            problems.push(RuleProblem::new(
                ".message",
                "message must be set when the rule contains line breaks",
                "",
            ));
        }

        let message_expression = string("messageExpression", &mut problems);
        if let Some(expr) = &message_expression {
            if expr.trim().is_empty() {
                problems.push(RuleProblem::new(
                    ".messageExpression",
                    "messageExpression must not be empty when set",
                    "",
                ));
            } else if let Err(e) = check_expression(expr) {
                problems.push(RuleProblem::new(
                    ".messageExpression",
                    "CEL messageExpression does not compile",
                    e,
                ));
            }
        }

        let reason = match string("reason", &mut problems) {
            None => Reason::Invalid,
            Some(r) => Reason::parse(&r).unwrap_or_else(|| {
                let supported: Vec<String> =
                    Reason::ALL.iter().map(|(n, _)| format!("{n:?}")).collect();
                problems.push(RuleProblem::new(
                    ".reason",
                    "unsupported reason",
                    format!("{r:?}: supported values: {}", supported.join(", ")),
                ));
                Reason::Invalid
            }),
        };

        let field_path = match string("fieldPath", &mut problems) {
            None => String::new(),
            Some(fp) => resolve_field_path(&fp, node).unwrap_or_else(|e| {
                problems.push(RuleProblem::new(
                    ".fieldPath",
                    "fieldPath does not refer to a field of this schema",
                    format!("{fp:?}: {e}"),
                ));
                String::new()
            }),
        };

        match obj.get("optionalOldSelf") {
            None | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) if transition => {}
            Some(Value::Bool(true)) => problems.push(RuleProblem::new(
                ".optionalOldSelf",
                "optionalOldSelf may only be set when the rule uses oldSelf",
                "",
            )),
            Some(_) => problems.push(RuleProblem::new(
                ".optionalOldSelf",
                "must be a boolean",
                "",
            )),
        }

        if !problems.is_empty() {
            return Err(problems);
        }

        // The node with only this rule, `message` left empty so that an empty answer
        // from kube-cel means "no usable messageExpression result", and without the
        // rules and defaults of the nodes below (values arrive defaulted).
        let mut only = Map::new();
        only.insert("rule".into(), Value::String(source.clone()));
        only.insert("message".into(), Value::String(String::new()));
        if let Some(expr) = &message_expression {
            only.insert("messageExpression".into(), Value::String(expr.clone()));
        }
        let mut node_schema = strip_rules(node);
        if let Value::Object(m) = &mut node_schema {
            m.insert(
                "x-kubernetes-validations".into(),
                Value::Array(vec![Value::Object(only)]),
            );
        }
        let compiled = kube_cel::compile_schema(&node_schema);
        if let Some(e) = first_compilation_error(&compiled) {
            return Err(vec![RuleProblem::new(
                ".rule",
                "CEL rule does not compile",
                e,
            )]);
        }

        Ok(Rule {
            message: message.trim().to_string(),
            has_message_expression: message_expression.is_some(),
            reason,
            field_path,
            transition,
            node_type: node
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            compiled,
            source,
        })
    }

    /// The rule's failure for `value`, the value of its node at `path`, as
    /// `(field path, message)`; `None` when the rule holds or is not evaluated.
    pub fn evaluate(&self, value: &Value, path: &str) -> Option<(String, String)> {
        // Kubernetes evaluates rules on non-null values only.
        if self.transition || value.is_null() {
            return None;
        }
        let errors = kube_cel::validate_compiled(&self.compiled, value, None).err()?;
        let error = errors.into_vec().into_iter().next()?;
        if error.kind == kube_cel::ErrorKind::ValidationFailure {
            let detail = self.failure_detail(&error.message);
            return Some((
                format!("{path}{}", self.field_path),
                self.field_error(value, &detail),
            ));
        }
        // The rule could not be evaluated: reported at the node, with the node's type,
        // as Kubernetes does.
        let cause =
            std::error::Error::source(&error).and_then(|s| s.downcast_ref::<cel::ExecutionError>());
        let rule = self.error_string();
        let detail = match cause {
            Some(cel::ExecutionError::NoSuchOverload) => format!(
                "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {rule}"
            ),
            Some(e) => format!(
                "{} evaluating rule: {rule}",
                clip_to(&e.to_string(), EVALUATION_ERROR_CHARS)
            ),
            None => format!(
                "{} evaluating rule: {rule}",
                clip_to(&error.message, EVALUATION_ERROR_CHARS)
            ),
        };
        Some((
            path.to_string(),
            format!("Invalid value: {}: {detail}", go_quote(&self.node_type)),
        ))
    }

    /// The message of a failed rule: the `messageExpression` result when it is usable
    /// (trimmed, not empty, one line, at most 5 KiB), else `message`, else
    /// `failed rule: <rule>`.
    fn failure_detail(&self, evaluated: &str) -> String {
        let evaluated = evaluated.trim();
        if self.has_message_expression
            && !evaluated.is_empty()
            && !evaluated.contains('\n')
            && evaluated.len() <= MAX_MESSAGE_EXPRESSION_BYTES
        {
            return evaluated.to_string();
        }
        if self.message.is_empty() {
            format!("failed rule: {}", self.source.trim())
        } else {
            self.message.clone()
        }
    }

    /// `message` if set, else the rule (Kubernetes' `ruleErrorString`).
    fn error_string(&self) -> &str {
        if self.message.is_empty() {
            self.source.trim()
        } else {
            &self.message
        }
    }

    /// Kubernetes' `fieldErrorForReason`: simple values are shown, objects and lists
    /// are not; `Duplicate value` carries no message. A long string is shown by its
    /// [`quote`]d prefix.
    fn field_error(&self, value: &Value, detail: &str) -> String {
        let shown = match value {
            Value::String(s) => Some(quote(s)),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Null => Some("null".to_string()),
            Value::Array(_) | Value::Object(_) => None,
        };
        let words = self.reason.words();
        match (self.reason, shown) {
            (Reason::Forbidden | Reason::Required, _) => format!("{words}: {detail}"),
            (Reason::Duplicate, Some(v)) => format!("{words}: {v}"),
            (Reason::Duplicate, None) => words.to_string(),
            (Reason::Invalid, Some(v)) => format!("{words}: {v}: {detail}"),
            (Reason::Invalid, None) => format!("{words}: {detail}"),
        }
    }
}

/// A string quoted as Go's `%q` quotes it, near enough: JSON string syntax.
fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// The node without the rules and defaults of itself and the nodes below it.
fn strip_rules(node: &Value) -> Value {
    let Some(obj) = node.as_object() else {
        return node.clone();
    };
    let mut out = Map::new();
    for (k, v) in obj {
        let v = match k.as_str() {
            "x-kubernetes-validations" | "default" => continue,
            "properties" => Value::Object(
                v.as_object()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), strip_rules(v))).collect())
                    .unwrap_or_default(),
            ),
            "items" | "additionalProperties" | "not" => strip_rules(v),
            "allOf" | "anyOf" | "oneOf" => Value::Array(
                v.as_array()
                    .map(|a| a.iter().map(strip_rules).collect())
                    .unwrap_or_default(),
            ),
            _ => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    Value::Object(out)
}

/// The first problem kube-cel found compiling a schema tree (a rule it cannot parse,
/// a schema nested deeper than it walks).
fn first_compilation_error(c: &kube_cel::CompiledSchema) -> Option<String> {
    if let Some(e) = c.compilation_errors().first() {
        return Some(e.to_string());
    }
    c.properties
        .values()
        .chain(c.items.as_deref())
        .chain(c.additional_properties.as_deref())
        .chain(&c.all_of)
        .chain(&c.one_of)
        .chain(&c.any_of)
        .find_map(first_compilation_error)
}

/// What a checked expression refers to.
struct References {
    uses_old_self: bool,
}

/// Parses `source` and checks that every variable and function it refers to is
/// known to the evaluator, so that a rule cannot fail on every value with
/// "Undeclared reference".
fn check_expression(source: &str) -> Result<References, String> {
    let parsed = std::panic::catch_unwind(|| cel::Program::compile(source));
    let program = match parsed {
        Ok(Ok(p)) => p,
        Ok(Err(errors)) => {
            let lines: Vec<String> = errors
                .errors
                .iter()
                .map(|e| format!("ERROR: <input>:{}:{}: {}", e.pos.0, e.pos.1, e.msg))
                .collect();
            return Err(lines.join("; "));
        }
        Err(_) => return Err("the CEL parser cannot read this expression".into()),
    };
    let mut walk = Walk::default();
    walk.expr(program.expression());
    if let Some(p) = walk.problems.into_iter().next() {
        return Err(p);
    }
    Ok(References {
        uses_old_self: walk.uses_old_self,
    })
}

#[derive(Default)]
struct Walk<'a> {
    /// Comprehension variables in scope.
    bound: Vec<&'a str>,
    uses_old_self: bool,
    problems: Vec<String>,
}

impl<'a> Walk<'a> {
    fn expr(&mut self, e: &'a IdedExpr) {
        match &e.expr {
            Expr::Unspecified => self.problems.push("empty expression".into()),
            Expr::Literal(_) => {}
            Expr::Ident(name) => self.ident(name),
            Expr::Select(s) => self.expr(&s.operand),
            Expr::List(l) => l.elements.iter().for_each(|x| self.expr(x)),
            Expr::Map(m) => {
                for entry in &m.entries {
                    match &entry.expr {
                        EntryExpr::MapEntry(me) => {
                            self.expr(&me.key);
                            self.expr(&me.value);
                        }
                        EntryExpr::StructField(_) => self
                            .problems
                            .push("message construction is not supported".into()),
                    }
                }
            }
            Expr::Struct(s) => self.problems.push(format!(
                "message construction ({}{{...}}) is not supported",
                s.type_name
            )),
            Expr::Comprehension(c) => {
                self.expr(&c.iter_range);
                self.expr(&c.accu_init);
                let before = self.bound.len();
                self.bound.push(&c.iter_var);
                if let Some(v) = &c.iter_var2 {
                    self.bound.push(v);
                }
                self.bound.push(&c.accu_var);
                self.expr(&c.loop_cond);
                self.expr(&c.loop_step);
                self.expr(&c.result);
                self.bound.truncate(before);
            }
            Expr::Call(call) => {
                let name = call.func_name.as_str();
                // Operators, which the interpreter evaluates itself.
                let operator =
                    name.starts_with('_') || name.starts_with('@') || name == "!_" || name == "-_";
                match call.target.as_deref() {
                    None => {
                        if !operator && !declared(name) {
                            self.undeclared(name);
                        }
                    }
                    Some(target) => match &target.expr {
                        // `sets.contains(...)`: a namespaced function, as `ns` is not
                        // a variable.
                        Expr::Ident(ns)
                            if !self.is_bound(ns) && !VARIABLES.contains(&ns.as_str()) =>
                        {
                            let qualified = format!("{ns}.{name}");
                            if !declared(&qualified) {
                                self.undeclared(&qualified);
                            }
                        }
                        // A method on a value.
                        _ => {
                            if !operator && !declared(name) {
                                self.undeclared(name);
                            }
                            self.expr(target);
                        }
                    },
                }
                call.args.iter().for_each(|a| self.expr(a));
            }
        }
    }

    fn is_bound(&self, name: &str) -> bool {
        self.bound.contains(&name)
    }

    fn ident(&mut self, name: &str) {
        if name.starts_with('@') || self.is_bound(name) {
            return;
        }
        if name == "oldSelf" {
            self.uses_old_self = true;
        }
        if !VARIABLES.contains(&name) {
            self.undeclared(name);
        }
    }

    fn undeclared(&mut self, name: &str) {
        self.problems
            .push(format!("undeclared reference to '{name}'"));
    }
}

thread_local! {
    /// The functions rules are evaluated with, and what was found about names.
    static FUNCTIONS: (cel::Context<'static>, RefCell<BTreeMap<String, bool>>) =
        (cel::Context::default().with_all(), RefCell::new(BTreeMap::new()));
}

/// An identifier that no rule can use as a variable.
const PROBE: &str = "stackhook__probe";

/// Whether `name` (`f` or `ns.f`) is a function of the evaluator. The function table
/// is not public, so the name is looked up the way the interpreter looks it up: by
/// calling it with an argument that cannot be resolved. An unknown function fails
/// with "Undeclared reference" to its own name before its arguments are read.
fn declared(name: &str) -> bool {
    FUNCTIONS.with(|(ctx, known)| {
        if let Some(&d) = known.borrow().get(name) {
            return d;
        }
        let (namespace, last) = match name.rsplit_once('.') {
            Some((ns, f)) => (Some(ns), f),
            None => (None, name),
        };
        let d = match cel::Program::compile(&format!("{name}({PROBE})")) {
            Err(_) => false,
            Ok(p) => {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.execute(ctx))) {
                    Ok(Err(cel::ExecutionError::UndeclaredReference(r))) => {
                        r.as_str() != last && Some(r.as_str()) != namespace
                    }
                    _ => true,
                }
            }
        };
        known.borrow_mut().insert(name.to_string(), d);
        d
    })
}

/// Kubernetes' `ValidFieldPath`: `.name` and `['name']` steps through `properties`
/// (the field must exist) or `additionalProperties` (any key), no list indexes.
/// Returns the path suffix in the engine's notation (`.a.b`).
fn resolve_field_path(fp: &str, node: &Value) -> Result<String, String> {
    let mut out = String::new();
    let mut schema = node;
    let mut rest = fp;
    if rest.is_empty() {
        return Err("must not be empty".into());
    }
    while !rest.is_empty() {
        let name;
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[', ']']).unwrap_or(r.len());
            if end == 0 {
                return Err("expected a field name after '.'".into());
            }
            name = r[..end].to_string();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let (quoted, after) = split_quoted(r)?;
            name = quoted;
            rest = after
                .strip_prefix(']')
                .ok_or_else(|| "expected ']' after the quoted field name".to_string())?;
        } else {
            return Err(format!(
                "expected '[' or '.' at {:?}",
                rest.chars().next().unwrap_or_default()
            ));
        }
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            schema = props
                .get(&name)
                .ok_or_else(|| format!("no property {name:?}"))?;
        } else if let Some(ap) = schema.get("additionalProperties") {
            if !ap.is_object() && ap != &Value::Bool(true) {
                return Err(format!("{name:?}: not a field of an object"));
            }
            schema = ap;
        } else {
            return Err(format!("{name:?}: not a field of an object"));
        }
        out.push('.');
        out.push_str(&name);
    }
    Ok(out)
}

/// `'a\'b']...` → (`a'b`, `]...`), with Kubernetes' escapes.
fn split_quoted(r: &str) -> Result<(String, &str), String> {
    let body = r
        .strip_prefix('\'')
        .ok_or_else(|| "expected a single-quoted field name after '['".to_string())?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' => return Ok((out, &body[i + 1..])),
            '\\' => {
                let escaped = match chars.next().map(|(_, c)| c) {
                    Some('a') => '\u{7}',
                    Some('b') => '\u{8}',
                    Some('f') => '\u{c}',
                    Some('n') => '\n',
                    Some('r') => '\r',
                    Some('t') => '\t',
                    Some('v') => '\u{b}',
                    Some('\'') => '\'',
                    Some('\\') => '\\',
                    other => {
                        return Err(format!(
                            "invalid escape \\{}",
                            other.map(String::from).unwrap_or_default()
                        ))
                    }
                };
                out.push(escaped);
            }
            c => out.push(c),
        }
    }
    Err("unterminated quoted field name".into())
}

// ---- estimated cost ----------------------------------------------------------------
//
// CAPI refuses a variable schema whose rules Kubernetes' static cost estimate puts
// over budget (`validateSchema` in `internal/topology/variables/
// clusterclass_variable_validation.go`, which calls apiextensions' `cel.Compile`).
// kube-cel's `estimate_rule_cost` is a heuristic with its own budget and sizes (1000
// items, 1000 characters), so it cannot say what Kubernetes says; this is cel-go's
// `checker.CostEstimator` walk with Kubernetes' `library.CostEstimator` and the
// apiextensions size estimator, over the parsed rule, with the sizes Kubernetes
// derives from the schema (`SchemaDeclType`). Only worst-case (`Max`) figures are
// kept: they are all that is compared with the limits.

/// `StaticEstimatedCostLimit`: the most one rule (times how often it can run) or one
/// `messageExpression` may cost.
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// `StaticEstimatedCRDCostLimit`: the most all rules and message expressions of one
/// variable schema may cost together.
pub const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;
/// `celconfig.MaxRequestSizeBytes` (3 MiB), from which unbounded sizes are derived.
const MAX_REQUEST_SIZE_BYTES: u64 = 3 * 1024 * 1024;
/// cel-go's `common.StringTraversalCostFactor`.
const STRING_TRAVERSAL: f64 = 0.1;
/// cel-go's `common.RegexStringLengthCostFactor`.
const REGEX_LENGTH: f64 = 0.25;

fn schema_type(s: &Value) -> &str {
    s.get("type").and_then(Value::as_str).unwrap_or_default()
}

fn schema_uint(s: &Value, key: &str) -> Option<u64> {
    s.get(key).and_then(Value::as_i64).map(|n| n.max(0) as u64)
}

fn schema_format(s: &Value) -> &str {
    s.get("format").and_then(Value::as_str).unwrap_or_default()
}

/// The property of an object node that a CEL field name selects: names are escaped
/// as the API server escapes them (`__dash__`, `__dot__`, `__slash__`, `_` doubled,
/// reserved words as `__word__`), as kube-cel binds them.
fn property<'a>(s: &'a Value, cel_name: &str) -> Option<&'a Value> {
    const RESERVED: &[&str] = &[
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    let escape = |name: &str| -> String {
        if RESERVED.contains(&name) {
            return format!("__{name}__");
        }
        name.chars()
            .map(|c| match c {
                '_' => "__".to_string(),
                '.' => "__dot__".to_string(),
                '-' => "__dash__".to_string(),
                '/' => "__slash__".to_string(),
                c => c.to_string(),
            })
            .collect()
    };
    let props = s.get("properties")?.as_object()?;
    props
        .get(cel_name)
        .filter(|_| escape(cel_name) == cel_name)
        .or_else(|| {
            props
                .iter()
                .find(|(k, _)| escape(k) == cel_name)
                .map(|(_, v)| v)
        })
}

/// The schema of a map's values, when the node is a map (`additionalProperties`).
fn map_values(s: &Value) -> Option<&Value> {
    s.get("additionalProperties").filter(|a| a.is_object())
}

/// `DeclType.MaxElements` of a node: a string's length in bytes (4 per character of
/// `maxLength`), a list's items, a map's entries; unbounded ones derived from the
/// request size limit, as `SchemaDeclType` does.
pub fn max_elements(s: &Value) -> u64 {
    let per_request = MAX_REQUEST_SIZE_BYTES - 2;
    if s.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return per_request;
    }
    match schema_type(s) {
        "string" => match schema_format(s) {
            "byte" => schema_uint(s, "maxLength").unwrap_or(per_request),
            "duration" | "date-time" => 32,
            "date" => 12,
            _ => {
                if let Some(n) = schema_uint(s, "maxLength") {
                    n.saturating_mul(4)
                } else if let Some(values) = s.get("enum").and_then(Value::as_array) {
                    values
                        .iter()
                        .filter_map(Value::as_str)
                        .map(|v| v.len() as u64)
                        .max()
                        .unwrap_or(0)
                } else {
                    per_request
                }
            }
        },
        "array" => schema_uint(s, "maxItems").unwrap_or_else(|| {
            let item = s.get("items").map(min_serialized_size).unwrap_or(0);
            per_request / (item + 1)
        }),
        "object" => match map_values(s) {
            Some(values) => schema_uint(s, "maxProperties")
                .unwrap_or_else(|| per_request / (min_serialized_size(values) + 6)),
            None => 0,
        },
        _ => 0,
    }
}

/// `DeclType.MinSerializedSize`: the fewest JSON bytes a value of the node takes.
pub fn min_serialized_size(s: &Value) -> u64 {
    match schema_type(s) {
        "string" => match schema_format(s) {
            "duration" => 3,
            "date" => 12,
            "date-time" => 21,
            _ => 2,
        },
        "boolean" => 4,
        "integer" | "number" => 1,
        "array" => 2,
        "object" if map_values(s).is_some() => 2,
        "object" => {
            let required: Vec<&str> = s
                .get("required")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut size = 2u64;
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (name, prop) in props {
                    if required.contains(&name.as_str()) && prop.get("default").is_none() {
                        size = size
                            .saturating_add(name.len() as u64)
                            .saturating_add(min_serialized_size(prop))
                            .saturating_add(4);
                    }
                }
            }
            size
        }
        _ => 2,
    }
}

/// How many times a rule of a node with this minimum size can run in one request
/// (`maxCardinality` of apiextensions' `cel.Compile`), for a node under an
/// unbounded list or map.
pub fn max_cardinality(min_size: u64) -> u64 {
    MAX_REQUEST_SIZE_BYTES / (min_size + 1)
}

/// cel-go's `MultiplyByCostFactor`: rounded up, saturating.
fn by_factor(size: u64, factor: f64) -> u64 {
    if size == 0 {
        return 0;
    }
    let v = (size as f64 * factor).ceil();
    if v >= u64::MAX as f64 {
        u64::MAX
    } else {
        v as u64
    }
}

/// What the estimate knows of a value's type.
#[derive(Clone, Debug)]
enum Ty<'a> {
    /// A node of the rule's schema.
    Schema(&'a Value),
    Str,
    Bytes,
    Scalar,
    List(Box<Ty<'a>>),
    Map,
    Dyn,
}

impl<'a> Ty<'a> {
    fn is_string(&self) -> bool {
        match self {
            Ty::Str => true,
            Ty::Schema(s) => schema_type(s) == "string" && schema_format(s) != "byte",
            _ => false,
        }
    }

    fn is_bytes(&self) -> bool {
        match self {
            Ty::Bytes => true,
            Ty::Schema(s) => schema_type(s) == "string" && schema_format(s) == "byte",
            _ => false,
        }
    }

    fn is_list(&self) -> bool {
        match self {
            Ty::List(_) => true,
            Ty::Schema(s) => schema_type(s) == "array",
            _ => false,
        }
    }

    fn is_map(&self) -> bool {
        match self {
            Ty::Map => true,
            Ty::Schema(s) => schema_type(s) == "object" && map_values(s).is_some(),
            _ => false,
        }
    }

    fn is_scalar(&self) -> bool {
        match self {
            Ty::Scalar => true,
            Ty::Schema(s) => matches!(schema_type(s), "integer" | "number" | "boolean"),
            _ => false,
        }
    }

    /// The type of an element (a list's item, a map's key) a comprehension binds.
    fn element(&self) -> Ty<'a> {
        match self {
            Ty::List(e) => (**e).clone(),
            Ty::Schema(s) if schema_type(s) == "array" => {
                s.get("items").map(Ty::Schema).unwrap_or(Ty::Dyn)
            }
            Ty::Schema(s) if schema_type(s) == "object" => Ty::Str,
            Ty::Map => Ty::Str,
            _ => Ty::Dyn,
        }
    }

    fn field(&self, name: &str) -> Ty<'a> {
        match self {
            Ty::Schema(s) => property(s, name)
                .or_else(|| map_values(s))
                .map(Ty::Schema)
                .unwrap_or(Ty::Dyn),
            _ => Ty::Dyn,
        }
    }
}

/// One expression's estimate: its cost, its size when computed (literals, results
/// of sized functions), and its path from `self` for the schema's sizes.
struct Est<'a> {
    cost: u64,
    size: Option<u64>,
    path: Option<Vec<String>>,
    ty: Ty<'a>,
}

impl<'a> Est<'a> {
    fn new(cost: u64, ty: Ty<'a>) -> Est<'a> {
        Est {
            cost,
            size: None,
            path: None,
            ty,
        }
    }
}

struct Coster<'a> {
    root: &'a Value,
    /// Comprehension variables in scope: name, path, type.
    bound: Vec<(String, Vec<String>, Ty<'a>)>,
}

impl<'a> Coster<'a> {
    /// The apiextensions size estimator: the node at `path` (its first step is the
    /// variable, taken as `self`) and its `MaxElements`.
    fn path_size(&self, path: &[String]) -> Option<u64> {
        let mut node = self.root;
        for step in path.iter().skip(1) {
            node = match step.as_str() {
                "@items" => node.get("items")?,
                "@values" => map_values(node)?,
                // Map keys are plain strings, `MaxElements` 0.
                "@keys" => return Some(0),
                name => property(node, name)?,
            };
        }
        Some(max_elements(node))
    }

    /// cel-go's `sizeEstimate` (`scalar_is_one`) or Kubernetes' (without it).
    fn size(&self, e: &Est<'_>, scalar_is_one: bool) -> u64 {
        if let Some(s) = e.size {
            return s;
        }
        if let Some(s) = e.path.as_deref().and_then(|p| self.path_size(p)) {
            return s;
        }
        if scalar_is_one && e.ty.is_scalar() {
            return 1;
        }
        u64::MAX
    }

    fn expr(&mut self, e: &IdedExpr) -> Est<'a> {
        match &e.expr {
            Expr::Unspecified | Expr::Struct(_) => Est::new(0, Ty::Dyn),
            Expr::Literal(l) => {
                use kube_cel::cel::common::ast::LiteralValue as L;
                let (size, ty) = match l {
                    L::String(s) => (s.inner().chars().count() as u64, Ty::Str),
                    L::Bytes(b) => (b.inner().len() as u64, Ty::Bytes),
                    _ => (1, Ty::Scalar),
                };
                Est {
                    cost: 0,
                    size: Some(size),
                    path: None,
                    ty,
                }
            }
            Expr::Ident(name) => {
                let (path, ty) = match self.bound.iter().rev().find(|b| &b.0 == name) {
                    Some((_, path, ty)) => (path.clone(), ty.clone()),
                    None if name == "self" || name == "oldSelf" => {
                        (vec![name.clone()], Ty::Schema(self.root))
                    }
                    None => (vec![name.clone()], Ty::Dyn),
                };
                Est {
                    cost: 1,
                    size: None,
                    path: Some(path),
                    ty,
                }
            }
            Expr::Select(sel) => {
                let operand = self.expr(&sel.operand);
                if sel.test {
                    // Kubernetes turns off the cost of the presence test itself
                    // (`checker.PresenceTestHasCost(false)`).
                    return Est::new(operand.cost, Ty::Scalar);
                }
                let path = operand.path.clone().map(|mut p| {
                    p.push(sel.field.clone());
                    p
                });
                Est {
                    cost: operand.cost.saturating_add(1),
                    size: None,
                    path,
                    ty: operand.ty.field(&sel.field),
                }
            }
            Expr::List(l) => {
                let elems: Vec<Est<'a>> = l.elements.iter().map(|x| self.expr(x)).collect();
                let cost = elems
                    .iter()
                    .fold(10u64, |acc, x| acc.saturating_add(x.cost));
                let elem = elems.first().map(|x| x.ty.clone()).unwrap_or(Ty::Dyn);
                Est {
                    cost,
                    size: Some(elems.len() as u64),
                    path: None,
                    ty: Ty::List(Box::new(elem)),
                }
            }
            Expr::Map(m) => {
                let mut cost = 30u64;
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        cost = cost
                            .saturating_add(self.expr(&me.key).cost)
                            .saturating_add(self.expr(&me.value).cost);
                    }
                }
                Est {
                    cost,
                    size: Some(m.entries.len() as u64),
                    path: None,
                    ty: Ty::Map,
                }
            }
            Expr::Comprehension(c) => {
                let range = self.expr(&c.iter_range);
                let init = self.expr(&c.accu_init);
                let step_name = if range.ty.is_map() { "@keys" } else { "@items" };
                let mut path = range.path.clone().unwrap_or_default();
                path.push(step_name.to_string());
                self.bound
                    .push((c.iter_var.clone(), path, range.ty.element()));
                let cond = self.expr(&c.loop_cond);
                let step = self.expr(&c.loop_step);
                self.bound.pop();
                let result = self.expr(&c.result);
                let count = self.size(&range, true);
                let ty = match (&init.ty, &result.ty) {
                    (Ty::List(_), _) => Ty::List(Box::new(range.ty.element())),
                    (_, Ty::Dyn) => init.ty.clone(),
                    (_, t) => t.clone(),
                };
                Est {
                    cost: range
                        .cost
                        .saturating_add(init.cost)
                        .saturating_add(result.cost)
                        .saturating_add(count.saturating_mul(cond.cost.saturating_add(step.cost))),
                    size: Some(count),
                    path: None,
                    ty,
                }
            }
            Expr::Call(call) => self.call(call),
        }
    }

    fn call(&mut self, call: &kube_cel::cel::common::ast::CallExpr) -> Est<'a> {
        let target = call.target.as_deref().map(|t| self.expr(t));
        let args: Vec<Est<'a>> = call.args.iter().map(|a| self.expr(a)).collect();
        let arg_sum = args.iter().fold(0u64, |acc, a| acc.saturating_add(a.cost));
        let base = target
            .as_ref()
            .map_or(0, |t| t.cost)
            .saturating_add(arg_sum);
        let name = call.func_name.as_str();
        let out = |own: u64, size: Option<u64>, ty: Ty<'a>| Est {
            cost: base.saturating_add(own),
            size,
            path: None,
            ty,
        };
        let t = target.as_ref();
        let k8s = |e: &Est<'_>| self.size(e, false);
        let cel = |e: &Est<'_>| self.size(e, true);
        // Kubernetes' library.CostEstimator first (cel-go hands it a target even for
        // global functions), then cel-go's own costs, then O(1).
        match name {
            "_&&_" | "_||_" => return out(0, None, Ty::Scalar),
            "_?_:_" if args.len() == 3 => {
                let cost = args[0].cost.saturating_add(args[1].cost.max(args[2].cost));
                let size = cel(&args[1]).max(cel(&args[2]));
                return Est {
                    cost,
                    size: Some(size),
                    path: None,
                    ty: args[1].ty.clone(),
                };
            }
            "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" if t.is_some() => {
                let t = t.expect("checked");
                if t.ty.is_list() {
                    let elem_ty = t.ty.element();
                    let mut each = 1u64;
                    if elem_ty.is_string() || elem_ty.is_bytes() {
                        let elem = Est {
                            cost: 0,
                            size: None,
                            path: t.path.clone().map(|mut p| {
                                p.push("@items".into());
                                p
                            }),
                            ty: elem_ty,
                        };
                        each = each.saturating_add(by_factor(k8s(&elem), STRING_TRAVERSAL));
                    }
                    return out(k8s(t).saturating_mul(each), None, Ty::Dyn);
                }
                return out(by_factor(k8s(t), STRING_TRAVERSAL), None, Ty::Scalar);
            }
            "url" if args.len() == 1 => {
                return out(by_factor(k8s(&args[0]), STRING_TRAVERSAL), None, Ty::Dyn)
            }
            "lowerAscii" | "upperAscii" | "substring" | "trim" if t.is_some() => {
                let sz = k8s(t.expect("checked"));
                return out(by_factor(sz, STRING_TRAVERSAL), Some(sz), Ty::Str);
            }
            "replace" if t.is_some() && args.len() >= 2 => {
                let sz = k8s(t.expect("checked"));
                let to_replace_min = args[0].size.unwrap_or(0);
                let with = k8s(&args[1]);
                let size = if to_replace_min == 0 {
                    sz.saturating_add(1).saturating_mul(with).saturating_add(sz)
                } else if with <= to_replace_min {
                    sz
                } else {
                    sz.div_ceil(to_replace_min).saturating_mul(with)
                };
                return out(by_factor(sz, 2.0 * STRING_TRAVERSAL), Some(size), Ty::Str);
            }
            "split" if t.is_some() => {
                let sz = k8s(t.expect("checked"));
                let limit = match args.get(1).map(|a| &a.ty) {
                    Some(Ty::Scalar) => call.args.get(1).and_then(|a| match &a.expr {
                        Expr::Literal(kube_cel::cel::common::ast::LiteralValue::Int(i)) => {
                            Some((*i.inner()).max(0) as u64)
                        }
                        _ => None,
                    }),
                    _ => None,
                };
                return out(
                    by_factor(sz, 2.0 * STRING_TRAVERSAL),
                    Some(limit.unwrap_or(sz)),
                    Ty::List(Box::new(Ty::Str)),
                );
            }
            "join" if t.is_some() => {
                let t = t.expect("checked");
                let list = k8s(t);
                let elem = Est {
                    cost: 0,
                    size: None,
                    path: t.path.clone().map(|mut p| {
                        p.push("@items".into());
                        p
                    }),
                    ty: t.ty.element(),
                };
                let mut sz = list.saturating_mul(k8s(&elem));
                if let Some(sep) = args.first() {
                    sz = sz.saturating_add(k8s(sep).saturating_mul(list.saturating_sub(1)));
                }
                return out(by_factor(sz, STRING_TRAVERSAL), Some(sz), Ty::Str);
            }
            "find" | "findAll" if t.is_some() && !args.is_empty() => {
                let sz = k8s(t.expect("checked"));
                let cost = by_factor(sz.saturating_add(1), STRING_TRAVERSAL)
                    .saturating_mul(by_factor(k8s(&args[0]), REGEX_LENGTH));
                return out(cost, Some(sz), Ty::Dyn);
            }
            "cidr" | "isIP" | "isCIDR" | "quantity" | "isQuantity" if !args.is_empty() => {
                return out(by_factor(k8s(&args[0]), STRING_TRAVERSAL), None, Ty::Dyn)
            }
            "ip" => {
                let own = match args.first() {
                    Some(a) => by_factor(k8s(a), STRING_TRAVERSAL),
                    None => 1,
                };
                return out(own, None, Ty::Dyn);
            }
            "ip.isCanonical" if !args.is_empty() => {
                return out(
                    by_factor(k8s(&args[0]), 2.0 * STRING_TRAVERSAL),
                    None,
                    Ty::Scalar,
                )
            }
            "containsIP" | "containsCIDR" if t.is_some() && !args.is_empty() => {
                // Two IPs of at most 16 bytes compared, then the CIDR's bits again.
                let mut own = by_factor(32, STRING_TRAVERSAL);
                if name == "containsCIDR" {
                    own = own.saturating_add(by_factor(16, STRING_TRAVERSAL) + 1);
                }
                if args[0].ty.is_string() {
                    own = own.saturating_add(by_factor(k8s(&args[0]), STRING_TRAVERSAL));
                }
                return out(own, None, Ty::Scalar);
            }
            _ => {}
        }
        // cel-go's own estimates.
        let own = match name {
            "startsWith" | "endsWith" if args.len() == 1 => {
                by_factor(cel(&args[0]), STRING_TRAVERSAL)
            }
            "@in" if args.len() == 2 && args[1].ty.is_list() => cel(&args[1]),
            "matches" if t.is_some() && args.len() == 1 => {
                by_factor(cel(t.expect("checked")).saturating_add(1), STRING_TRAVERSAL)
                    .saturating_mul(by_factor(cel(&args[0]), REGEX_LENGTH))
            }
            "contains" if t.is_some_and(|t| t.ty.is_string()) && args.len() == 1 => {
                by_factor(cel(t.expect("checked")), STRING_TRAVERSAL)
                    .saturating_mul(by_factor(cel(&args[0]), STRING_TRAVERSAL))
            }
            "_+_" if args.len() == 2 => {
                let sz = cel(&args[0]).saturating_add(cel(&args[1]));
                if args[0].ty.is_string()
                    || args[1].ty.is_string()
                    || args[0].ty.is_bytes()
                    || args[1].ty.is_bytes()
                {
                    let ty = if args[0].ty.is_bytes() {
                        Ty::Bytes
                    } else {
                        Ty::Str
                    };
                    return out(by_factor(sz, STRING_TRAVERSAL), Some(sz), ty);
                }
                if args[0].ty.is_list() || args[1].ty.is_list() {
                    let ty = if args[1].ty.is_list() {
                        args[1].ty.clone()
                    } else {
                        args[0].ty.clone()
                    };
                    return out(1, Some(sz), ty);
                }
                1
            }
            "_==_" | "_!=_" if args.len() == 2 => {
                by_factor(cel(&args[0]).min(cel(&args[1])), STRING_TRAVERSAL)
            }
            "_<_" | "_<=_" | "_>_" | "_>=_"
                if args.len() == 2 && (args[0].ty.is_string() || args[0].ty.is_bytes()) =>
            {
                by_factor(cel(&args[0]).min(cel(&args[1])), STRING_TRAVERSAL)
            }
            _ => 1,
        };
        let ty = match name {
            "size" | "-_" | "_-_" | "_*_" | "_/_" | "_%_" | "_+_" => Ty::Scalar,
            "_[_]" => match (t, args.first()) {
                (None, Some(a)) => a.ty.element(),
                _ => Ty::Dyn,
            },
            "@in"
            | "!_"
            | "@not_strictly_false"
            | "_==_"
            | "_!=_"
            | "_<_"
            | "_<=_"
            | "_>_"
            | "_>=_"
            | "matches"
            | "contains"
            | "startsWith"
            | "endsWith" => Ty::Scalar,
            _ => Ty::Dyn,
        };
        out(own, None, ty)
    }
}

/// Kubernetes' estimated worst-case cost of one evaluation of `expression` on a value
/// of schema node `node` (`CompilationResult.MaxCost`); 0 when it does not parse.
pub fn estimated_cost(expression: &str, node: &Value) -> u64 {
    let parsed = std::panic::catch_unwind(|| cel::Program::compile(expression));
    let Ok(Ok(program)) = parsed else {
        return 0;
    };
    let mut coster = Coster {
        root: node,
        bound: Vec::new(),
    };
    coster.expr(program.expression()).cost
}

/// Kubernetes' `getCostErrorMessage`.
pub fn cost_error_message(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

// Rules are shared between request threads through `Arc<Pack>`.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Rule>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(entry: Value, node: Value) -> Result<Rule, Vec<RuleProblem>> {
        Rule::compile(&entry, &node)
    }

    #[test]
    fn kubernetes_functions_are_declared() {
        for name in [
            "isCIDR",
            "cidr",
            "find",
            "findAll",
            "matches",
            "quantity",
            "url",
            "sets.contains",
            "format.dns1123Label",
            "math.greatest",
            "lowerAscii",
            "size",
        ] {
            assert!(declared(name), "{name}");
        }
        for name in ["isCIDRx", "sets.nope", "cel.bind", "nope.contains"] {
            assert!(!declared(name), "{name}");
        }
    }

    #[test]
    fn references_are_checked() {
        let node = json!({"type": "string"});
        let err = |r: &str| {
            rule(json!({"rule": r}), node.clone())
                .err()
                .map(|p| p[0].describe(None))
                .unwrap_or_default()
        };
        assert_eq!(
            err("isCIDRx(self)"),
            "CEL rule does not compile: undeclared reference to 'isCIDRx'"
        );
        assert_eq!(
            err("nope.contains('x')"),
            "CEL rule does not compile: undeclared reference to 'nope.contains'"
        );
        assert_eq!(
            err("self.nope()"),
            "CEL rule does not compile: undeclared reference to 'nope'"
        );
        assert_eq!(
            err("other == 'x'"),
            "CEL rule does not compile: undeclared reference to 'other'"
        );
        assert_eq!(
            err("cel.bind(x, self, x == 'a')"),
            "CEL rule does not compile: undeclared reference to 'cel.bind'"
        );
        assert!(err("self.size() >").starts_with("CEL rule does not compile: ERROR: <input>:1:"));
        assert_eq!(
            err("Foo{a: 1} == self"),
            "CEL rule does not compile: message construction (Foo{...}) is not supported"
        );
        // Comprehension variables and namespaced functions are not variables.
        for ok in [
            "self.split(',').all(p, p.size() > 0 && [1].exists(q, q == 1))",
            "sets.contains(['a'], [self])",
            "format.dns1123Label().validate(self).hasValue() || true",
            "self == oldSelf",
        ] {
            assert!(rule(json!({"rule": ok}), node.clone()).is_ok(), "{ok}");
        }
    }

    #[test]
    fn field_paths() {
        let node = json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b.c": {"type": "string"}}},
            "m": {"type": "object", "additionalProperties": {"type": "string"}},
            "l": {"type": "array", "items": {"type": "string"}}
        }});
        assert_eq!(resolve_field_path(".a['b.c']", &node).unwrap(), ".a.b.c");
        assert_eq!(
            resolve_field_path(".m.anything", &node).unwrap(),
            ".m.anything"
        );
        assert_eq!(resolve_field_path(".l", &node).unwrap(), ".l");
        assert!(resolve_field_path(".l[0]", &node).is_err());
        assert!(resolve_field_path(".zz", &node).is_err());
        assert!(resolve_field_path("a", &node).is_err());
        assert!(resolve_field_path(".a['b", &node).is_err());
    }

    #[test]
    fn rule_shape() {
        let node = json!({"type": "string"});
        let problems = rule(
            json!({"rule": "self != ''", "reason": "Nope", "fieldPath": ".x", "mesage": "typo", "optionalOldSelf": true}),
            node,
        )
        .unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [".mesage", ".reason", ".fieldPath", ".optionalOldSelf"]
        );
    }
}
