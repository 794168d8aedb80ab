//! Executor: walks the parse tree over a [`V`] data value, as Go's `text/template` does.

use super::func::P;
use super::funcs;
use super::parse::{Arg, ArgKind, Branch, Cmd, Node, NumLit, Pipe, Tree};
use super::semver;
use super::value::V;
use super::{MAX_OPS, MAX_OUTPUT, MAX_TEMPLATE_DEPTH};

pub struct ExecError {
    pub pos: usize,
    /// Source text of the node being evaluated, when known.
    pub at: Option<(usize, usize)>,
    pub msg: String,
}

type R<T> = Result<T, ExecError>;

enum Flow {
    Normal,
    Break,
    Continue,
}

pub struct State<'t> {
    tree: &'t Tree,
    /// The name the template was parsed under: `{{template}}` of it runs the root.
    main: &'t str,
    vars: Vec<(String, V)>,
    pub out: String,
    ops: u64,
    depth: usize,
    name: String,
}

fn err(pos: usize, at: Option<(usize, usize)>, msg: impl Into<String>) -> ExecError {
    ExecError {
        pos,
        at,
        msg: msg.into(),
    }
}

impl<'t> State<'t> {
    pub fn new(tree: &'t Tree, main: &'t str, data: V) -> Self {
        State {
            tree,
            main,
            vars: vec![("$".into(), data)],
            out: String::new(),
            ops: 0,
            depth: 0,
            name: main.into(),
        }
    }

    pub fn template_name(&self) -> &str {
        &self.name
    }

    pub fn run(&mut self) -> R<()> {
        let dot = self.vars[0].1.clone();
        let tree = self.tree;
        self.walk_list(&dot, &tree.root).map(|_| ())
    }

    fn tick(&mut self, pos: usize) -> R<()> {
        self.ops += 1;
        if self.ops > MAX_OPS {
            return Err(err(
                pos,
                None,
                format!("template exceeded the limit of {MAX_OPS} evaluation steps"),
            ));
        }
        Ok(())
    }

    fn write(&mut self, pos: usize, s: &str) -> R<()> {
        if self.out.len() + s.len() > MAX_OUTPUT {
            return Err(err(
                pos,
                None,
                format!("template output exceeds the limit of {MAX_OUTPUT} bytes"),
            ));
        }
        self.out.push_str(s);
        Ok(())
    }

    fn walk_list(&mut self, dot: &V, list: &[Node]) -> R<Flow> {
        for n in list {
            match self.walk(dot, n)? {
                Flow::Normal => {}
                f => return Ok(f),
            }
        }
        Ok(Flow::Normal)
    }

    fn walk_scoped(&mut self, dot: &V, list: &[Node]) -> R<Flow> {
        let mark = self.vars.len();
        let r = self.walk_list(dot, list);
        self.vars.truncate(mark);
        r
    }

    fn walk(&mut self, dot: &V, node: &Node) -> R<Flow> {
        match node {
            Node::Text(t) => {
                self.tick(0)?;
                self.write(0, t)?;
            }
            Node::Action(pipe) => {
                let v = self.eval_pipeline(dot, pipe)?;
                if pipe.decl.is_empty() {
                    let s = printable(&v);
                    self.write(pipe.pos, &s)?;
                }
            }
            Node::If(b) | Node::With(b) => {
                let is_with = matches!(node, Node::With(_));
                let mark = self.vars.len();
                let v = self.eval_pipeline(dot, &b.pipe)?;
                let r = if v.truth() {
                    if is_with {
                        self.walk_scoped(&v, &b.list)
                    } else {
                        self.walk_scoped(dot, &b.list)
                    }
                } else if let Some(el) = &b.else_list {
                    self.walk_scoped(dot, el)
                } else {
                    Ok(Flow::Normal)
                };
                self.vars.truncate(mark);
                return r;
            }
            Node::Range(b) => return self.walk_range(dot, b),
            Node::Break => return Ok(Flow::Break),
            Node::Continue => return Ok(Flow::Continue),
            Node::Template { pos, name, pipe } => {
                let tree = self.tree;
                let body = if name == self.main {
                    &tree.root
                } else {
                    match tree.defines.get(name) {
                        Some(b) => b,
                        None => {
                            return Err(err(*pos, None, format!("no such template {name:?}")));
                        }
                    }
                };
                if self.depth >= MAX_TEMPLATE_DEPTH {
                    return Err(err(
                        *pos,
                        None,
                        format!("exceeded maximum template depth ({MAX_TEMPLATE_DEPTH})"),
                    ));
                }
                let new_dot = match pipe {
                    Some(p) => self.eval_pipeline(dot, p)?,
                    None => V::Missing,
                };
                let saved_vars =
                    std::mem::replace(&mut self.vars, vec![("$".into(), new_dot.clone())]);
                let saved_name = std::mem::replace(&mut self.name, name.clone());
                self.depth += 1;
                let r = self.walk_list(&new_dot, body);
                self.depth -= 1;
                self.vars = saved_vars;
                self.name = saved_name;
                r?;
            }
        }
        Ok(Flow::Normal)
    }

    fn walk_range(&mut self, dot: &V, b: &Branch) -> R<Flow> {
        let mark = self.vars.len();
        let val = self.eval_pipeline_no_decl(dot, &b.pipe)?;
        let mut items: Vec<(V, V)> = Vec::new();
        match &val {
            V::List(l, _) => {
                for (i, x) in l.iter().enumerate() {
                    items.push((V::Int(i as i64), x.clone()));
                }
            }
            V::Map(m, _) => {
                let m = m
                    .try_borrow()
                    .map_err(|_| err(b.pos, None, "range over a map in use"))?;
                for (k, x) in m.iter() {
                    items.push((V::str(k.as_str()), x.clone()));
                }
            }
            V::Int(n) | V::Int64(n) => {
                if b.pipe.decl.len() > 1 {
                    return Err(err(
                        b.pos,
                        None,
                        format!("can't use {n} to iterate over more than one variable"),
                    ));
                }
                let n = *n;
                if n > MAX_OPS as i64 {
                    return Err(err(
                        b.pos,
                        None,
                        format!("template exceeded the limit of {MAX_OPS} evaluation steps"),
                    ));
                }
                for i in 0..n.max(0) {
                    items.push((V::Int(i), V::Int(i)));
                }
            }
            V::Missing | V::Nil => {}
            other => {
                return Err(err(
                    b.pos,
                    None,
                    format!("range can't iterate over {}", other.go_string()),
                ))
            }
        }
        if items.is_empty() {
            let r = match &b.else_list {
                Some(el) => self.walk_scoped(dot, el),
                None => Ok(Flow::Normal),
            };
            self.vars.truncate(mark);
            return r.map(|_| Flow::Normal);
        }
        for (k, v) in items {
            self.tick(b.pos)?;
            let inner = self.vars.len();
            match b.pipe.decl.len() {
                1 => self.set_or_push(&b.pipe, 0, v.clone()),
                2 => {
                    self.set_or_push(&b.pipe, 0, k);
                    self.set_or_push(&b.pipe, 1, v.clone());
                }
                _ => {}
            }
            let r = self.walk_list(&v, &b.list);
            if !b.pipe.is_assign {
                self.vars.truncate(inner);
            }
            match r? {
                Flow::Break => break,
                Flow::Continue | Flow::Normal => {}
            }
        }
        self.vars.truncate(mark);
        Ok(Flow::Normal)
    }

    fn set_or_push(&mut self, pipe: &Pipe, i: usize, v: V) {
        let name = &pipe.decl[i];
        if pipe.is_assign {
            self.set_var(name, v);
        } else {
            self.vars.push((name.clone(), v));
        }
    }

    fn set_var(&mut self, name: &str, v: V) {
        if let Some(slot) = self.vars.iter_mut().rev().find(|(n, _)| n == name) {
            slot.1 = v;
        }
    }

    fn var(&self, name: &str) -> V {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or(V::Missing)
    }

    /// Evaluate a range pipeline: the declared variables are bound per element.
    fn eval_pipeline_no_decl(&mut self, dot: &V, pipe: &Pipe) -> R<V> {
        let mut value = V::Missing;
        let mut first = true;
        for cmd in &pipe.cmds {
            value = self.eval_command(dot, cmd, if first { None } else { Some(value) })?;
            first = false;
            if matches!(value, V::Nil) {
                value = V::Missing;
            }
        }
        Ok(value)
    }

    fn eval_pipeline(&mut self, dot: &V, pipe: &Pipe) -> R<V> {
        let value = self.eval_pipeline_no_decl(dot, pipe)?;
        for name in &pipe.decl {
            if pipe.is_assign {
                self.set_var(name, value.clone());
            } else {
                self.vars.push((name.clone(), value.clone()));
            }
        }
        Ok(value)
    }

    fn eval_command(&mut self, dot: &V, cmd: &Cmd, fin: Option<V>) -> R<V> {
        self.tick(cmd.pos)?;
        let Some(first) = cmd.args.first() else {
            return Err(err(cmd.pos, None, "empty command"));
        };
        let rest = &cmd.args[1..];
        match &first.kind {
            ArgKind::Func(name) => self.eval_function(dot, first, name, rest, fin),
            ArgKind::Field(fields) => {
                self.eval_field_chain(dot, dot.clone(), first, fields, rest, fin)
            }
            ArgKind::Var(name, fields) => {
                let v = self.var(name);
                if fields.is_empty() {
                    self.not_a_function(first, rest, &fin)?;
                    return Ok(v);
                }
                self.eval_field_chain(dot, v, first, fields, rest, fin)
            }
            ArgKind::Chain(inner, fields) => {
                let v = self.eval_arg_value(dot, inner)?;
                self.eval_field_chain(dot, v, first, fields, rest, fin)
            }
            ArgKind::Pipe(p) => {
                self.not_a_function(first, rest, &fin)?;
                let mark = self.vars.len();
                let v = self.eval_pipeline(dot, p);
                self.vars.truncate(mark);
                v
            }
            ArgKind::Nil => Err(self.at(first, "nil is not a command")),
            ArgKind::Dot => {
                self.not_a_function(first, rest, &fin)?;
                Ok(dot.clone())
            }
            ArgKind::Bool(b) => {
                self.not_a_function(first, rest, &fin)?;
                Ok(V::Bool(*b))
            }
            ArgKind::Str(s) => {
                self.not_a_function(first, rest, &fin)?;
                Ok(V::str(s.as_str()))
            }
            ArgKind::Num(n) => {
                self.not_a_function(first, rest, &fin)?;
                ideal_constant(n).map_err(|m| self.at(first, m))
            }
        }
    }

    fn not_a_function(&self, a: &Arg, rest: &[Arg], fin: &Option<V>) -> R<()> {
        if !rest.is_empty() || fin.is_some() {
            return Err(self.at(a, format!("can't give argument to non-function {}", "")));
        }
        Ok(())
    }

    fn at(&self, a: &Arg, msg: impl Into<String>) -> ExecError {
        err(a.pos, Some((a.pos, a.end)), msg)
    }

    /// Walk `.a.b.c` from `recv`. The last field may be a method taking the
    /// remaining arguments (only semver values have methods here).
    fn eval_field_chain(
        &mut self,
        dot: &V,
        mut recv: V,
        node: &Arg,
        fields: &[String],
        args: &[Arg],
        fin: Option<V>,
    ) -> R<V> {
        let n = fields.len();
        let mut consumed = false;
        for (i, f) in fields.iter().enumerate() {
            let last = i + 1 == n;
            let has_args = last && (!args.is_empty() || fin.is_some());
            recv = match &recv {
                V::Missing => return Ok(V::Missing),
                V::Nil => {
                    return Err(self.at(node, format!("nil pointer evaluating interface {{}}.{f}")))
                }
                V::Map(m, elem) => {
                    if has_args {
                        return Err(self.at(node, format!("{f} is not a method but has arguments")));
                    }
                    let got = m
                        .try_borrow()
                        .map_err(|_| self.at(node, "map in use"))?
                        .get(f)
                        .cloned();
                    match got {
                        Some(v) => v,
                        None if *elem == super::value::Elem::Str => V::str(""),
                        None => V::Missing,
                    }
                }
                V::Semver(s) => {
                    let mut margs = Vec::new();
                    if last {
                        consumed = true;
                        for a in args {
                            margs.push(self.eval_arg_value(dot, a)?);
                        }
                        if let Some(v) = &fin {
                            margs.push(v.clone());
                        }
                    }
                    semver::semver_method(s, f, margs).map_err(|m| self.at(node, m))?
                }
                other => {
                    return Err(self.at(
                        node,
                        format!("can't evaluate field {f} in type {}", other.type_name()),
                    ))
                }
            };
        }
        if (!args.is_empty() || fin.is_some()) && !consumed && !matches!(recv, V::Missing) {
            // Arguments given to a plain field.
            let last = fields.last().cloned().unwrap_or_default();
            return Err(self.at(node, format!("{last} is not a method but has arguments")));
        }
        Ok(recv)
    }

    /// Evaluate an argument node to its value (untyped context).
    fn eval_arg_value(&mut self, dot: &V, a: &Arg) -> R<V> {
        match &a.kind {
            ArgKind::Dot => Ok(dot.clone()),
            ArgKind::Nil => Ok(V::Nil),
            ArgKind::Bool(b) => Ok(V::Bool(*b)),
            ArgKind::Num(n) => ideal_constant(n).map_err(|m| self.at(a, m)),
            ArgKind::Str(s) => Ok(V::str(s.as_str())),
            ArgKind::Field(f) => self.eval_field_chain(dot, dot.clone(), a, f, &[], None),
            ArgKind::Var(name, f) => {
                let v = self.var(name);
                if f.is_empty() {
                    Ok(v)
                } else {
                    self.eval_field_chain(dot, v, a, f, &[], None)
                }
            }
            ArgKind::Chain(inner, f) => {
                let v = self.eval_arg_value(dot, inner)?;
                self.eval_field_chain(dot, v, a, f, &[], None)
            }
            ArgKind::Pipe(p) => {
                let mark = self.vars.len();
                let v = self.eval_pipeline(dot, p);
                self.vars.truncate(mark);
                v
            }
            ArgKind::Func(name) => self.eval_function(dot, a, name, &[], None),
        }
    }

    /// Evaluate an argument for a parameter of type `p`, with Go's conversions.
    fn eval_arg(&mut self, dot: &V, p: P, a: &Arg) -> R<V> {
        match (&a.kind, p) {
            (ArgKind::Nil, P::Str | P::Int | P::Float | P::Bool) => {
                Err(self.at(a, format!("cannot assign nil to {}", p.go_name())))
            }
            (ArgKind::Nil, P::Map) => Ok(V::map(Default::default())),
            (ArgKind::Num(n), P::Int) => match n.int {
                Some(i) => Ok(V::Int(i)),
                None => Err(self.at(a, format!("expected integer; found {}", n.text))),
            },
            (ArgKind::Num(n), P::Float) => match n.float {
                Some(f) => Ok(V::Float(f)),
                None => Err(self.at(a, format!("expected float; found {}", n.text))),
            },
            (ArgKind::Num(n), P::Str) => {
                Err(self.at(a, format!("expected string; found {}", n.text)))
            }
            (ArgKind::Bool(b), P::Str | P::Int | P::Float) => {
                Err(self.at(a, format!("expected {}; found {b}", p.go_name())))
            }
            (ArgKind::Str(s), P::Int | P::Float | P::Bool) => {
                Err(self.at(a, format!("expected {}; found {s:?}", p.go_name())))
            }
            _ => {
                let v = self.eval_arg_value(dot, a)?;
                validate(v, p).map_err(|m| self.at(a, m))
            }
        }
    }

    fn eval_function(
        &mut self,
        dot: &V,
        node: &Arg,
        name: &str,
        args: &[Arg],
        fin: Option<V>,
    ) -> R<V> {
        // and/or short-circuit and return one of their arguments.
        if name == "and" || name == "or" {
            let total = args.len() + usize::from(fin.is_some());
            if total < 1 {
                return Err(self.at(
                    node,
                    format!("wrong number of args for {name}: want at least 1 got 0"),
                ));
            }
            let mut last = V::Missing;
            for a in args {
                let v = self.eval_arg_value(dot, a)?;
                let t = v.truth();
                last = v;
                if (name == "and" && !t) || (name == "or" && t) {
                    return Ok(last);
                }
            }
            if let Some(v) = fin {
                last = v;
            }
            return Ok(last);
        }
        let Some(func) = funcs::lookup(name) else {
            return Err(self.at(node, format!("{name:?} is not a defined function")));
        };
        let fixed = func.fixed;
        let total = args.len() + usize::from(fin.is_some());
        match func.variadic {
            None if total != fixed.len() => {
                return Err(self.at(
                    node,
                    format!(
                        "wrong number of args for {name}: want {} got {total}",
                        fixed.len()
                    ),
                ))
            }
            Some(_) if total < fixed.len() => {
                return Err(self.at(
                    node,
                    format!(
                        "wrong number of args for {name}: want at least {} got {total}",
                        fixed.len()
                    ),
                ))
            }
            _ => {}
        }
        let param = |i: usize| -> P {
            if i < fixed.len() {
                fixed[i]
            } else {
                func.variadic.unwrap_or(P::Any)
            }
        };
        let mut argv = Vec::with_capacity(total);
        for (i, a) in args.iter().enumerate() {
            argv.push(self.eval_arg(dot, param(i), a)?);
        }
        if let Some(v) = fin {
            let p = param(args.len());
            argv.push(validate(v, p).map_err(|m| self.at(node, m))?);
        }
        (func.f)(argv).map_err(|m| self.at(node, format!("error calling {name}: {m}")))
    }
}

/// Convert a value to a parameter type, as `validateType` does.
pub fn validate(v: V, p: P) -> Result<V, String> {
    match (p, &v) {
        (P::Val, _) => Ok(v),
        (P::Any, V::Missing) => Ok(V::Nil),
        (P::Any, _) => Ok(v),
        (P::Map, V::Missing | V::Nil) => Ok(V::map(Default::default())),
        (_, V::Missing | V::Nil) => Err(format!("invalid value; expected {}", p.go_name())),
        (P::Str, V::Str(_))
        | (P::Int, V::Int(_))
        | (P::Float, V::Float(_))
        | (P::Bool, V::Bool(_))
        | (P::Map, V::Map(_, super::value::Elem::Any)) => Ok(v),
        _ => Err(format!(
            "wrong type for value; expected {}; got {}",
            p.go_name(),
            v.type_name()
        )),
    }
}

/// A number literal in an untyped context.
fn ideal_constant(n: &NumLit) -> Result<V, String> {
    if n.is_float {
        return n
            .float
            .map(V::Float)
            .ok_or_else(|| format!("bad number {}", n.text));
    }
    n.int
        .map(V::Int)
        .ok_or_else(|| format!("{} overflows int", n.text))
}

/// What an action prints for a value.
pub fn printable(v: &V) -> String {
    match v {
        V::Missing => "<no value>".into(),
        other => other.go_string(),
    }
}
