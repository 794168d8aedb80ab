//! Parser for Go `text/template`: builds the node tree the executor walks.

use std::collections::HashMap;

use super::lex::{lex, Item, Tok};
use super::MAX_NESTING;

#[derive(Debug, Clone)]
pub struct NumLit {
    pub text: String,
    pub int: Option<i64>,
    pub float: Option<f64>,
    /// Whether an untyped use (an `interface{}` argument) yields a float64.
    pub is_float: bool,
}

#[derive(Debug, Clone)]
pub enum ArgKind {
    Dot,
    Nil,
    Bool(bool),
    Num(NumLit),
    Str(String),
    /// `.a.b`
    Field(Vec<String>),
    /// `$x.a.b`
    Var(String, Vec<String>),
    Func(String),
    Pipe(Box<Pipe>),
    /// `(pipe).a.b`
    Chain(Box<Arg>, Vec<String>),
}

#[derive(Debug, Clone)]
pub struct Arg {
    pub pos: usize,
    pub end: usize,
    pub kind: ArgKind,
}

#[derive(Debug, Clone)]
pub struct Cmd {
    pub pos: usize,
    pub args: Vec<Arg>,
}

#[derive(Debug, Clone)]
pub struct Pipe {
    pub pos: usize,
    pub decl: Vec<String>,
    pub is_assign: bool,
    pub cmds: Vec<Cmd>,
}

#[derive(Debug, Clone)]
pub enum Node {
    Text(String),
    Action(Pipe),
    If(Branch),
    Range(Branch),
    With(Branch),
    Template {
        pos: usize,
        name: String,
        pipe: Option<Pipe>,
    },
    Break,
    Continue,
}

#[derive(Debug, Clone)]
pub struct Branch {
    pub pos: usize,
    pub pipe: Pipe,
    pub list: Vec<Node>,
    pub else_list: Option<Vec<Node>>,
}

#[derive(Debug, Clone, Default)]
pub struct Tree {
    pub root: Vec<Node>,
    pub defines: HashMap<String, Vec<Node>>,
}

pub struct ParseError {
    pub pos: usize,
    pub msg: String,
}

type PResult<T> = Result<T, ParseError>;

/// How a list ended.
enum ListEnd {
    Eof,
    End,
    Else(usize),
}

struct Parser<'a> {
    items: Vec<Item>,
    i: usize,
    is_func: &'a dyn Fn(&str) -> bool,
    vars: Vec<String>,
    range_depth: usize,
    depth: usize,
    tree: Tree,
}

pub fn parse(src: &str, is_func: &dyn Fn(&str) -> bool) -> PResult<Tree> {
    let items = lex(src).map_err(|e| ParseError {
        pos: e.pos,
        msg: e.msg,
    })?;
    let mut p = Parser {
        items,
        i: 0,
        is_func,
        vars: vec!["$".into()],
        range_depth: 0,
        depth: 0,
        tree: Tree::default(),
    };
    let (root, end) = p.list(true)?;
    match end {
        ListEnd::Eof => {}
        ListEnd::End => return Err(p.err_prev("unexpected {{end}}")),
        ListEnd::Else(pos) => {
            return Err(ParseError {
                pos,
                msg: "unexpected {{else}}".into(),
            })
        }
    }
    p.tree.root = root;
    Ok(p.tree)
}

fn is_empty_tree(nodes: &[Node]) -> bool {
    nodes.iter().all(|n| match n {
        Node::Text(t) => t.trim().is_empty(),
        _ => false,
    })
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.items.get(self.i).map(|it| &it.tok)
    }

    fn pos(&self) -> usize {
        self.items
            .get(self.i)
            .or_else(|| self.items.last())
            .map(|it| it.pos)
            .unwrap_or(0)
    }

    fn err(&self, msg: impl Into<String>) -> ParseError {
        ParseError {
            pos: self.pos(),
            msg: msg.into(),
        }
    }

    fn err_prev(&self, msg: impl Into<String>) -> ParseError {
        let pos = self
            .items
            .get(self.i.saturating_sub(1))
            .map(|i| i.pos)
            .unwrap_or(0);
        ParseError {
            pos,
            msg: msg.into(),
        }
    }

    fn next(&mut self) -> Option<Item> {
        let it = self.items.get(self.i).cloned();
        if it.is_some() {
            self.i += 1;
        }
        it
    }

    fn skip_space(&mut self) {
        while self.peek() == Some(&Tok::Space) {
            self.i += 1;
        }
    }

    /// Next non-space item.
    fn next_ns(&mut self) -> Option<Item> {
        self.skip_space();
        self.next()
    }

    fn expect_right(&mut self, ctx: &str) -> PResult<()> {
        match self.next_ns() {
            Some(Item {
                tok: Tok::Right, ..
            }) => Ok(()),
            Some(it) => Err(ParseError {
                pos: it.pos,
                msg: format!("unexpected {} in {ctx}", describe(&it.tok)),
            }),
            None => Err(self.err(format!("unexpected EOF in {ctx}"))),
        }
    }

    fn list(&mut self, top: bool) -> PResult<(Vec<Node>, ListEnd)> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.err("template nested too deeply"));
        }
        let mut nodes = Vec::new();
        let end = loop {
            let Some(item) = self.next() else {
                if top {
                    break ListEnd::Eof;
                }
                return Err(self.err("unexpected EOF"));
            };
            match item.tok {
                Tok::Text(t) => nodes.push(Node::Text(t)),
                Tok::Left => {
                    self.skip_space();
                    let kw = match self.peek() {
                        Some(Tok::Ident(k)) => Some(k.clone()),
                        _ => None,
                    };
                    let pos = self.pos();
                    match kw.as_deref() {
                        Some("end") => {
                            self.i += 1;
                            self.expect_right("end")?;
                            if top {
                                return Err(ParseError {
                                    pos,
                                    msg: "unexpected {{end}}".into(),
                                });
                            }
                            break ListEnd::End;
                        }
                        Some("else") => {
                            self.i += 1;
                            if top {
                                return Err(ParseError {
                                    pos,
                                    msg: "unexpected {{else}}".into(),
                                });
                            }
                            break ListEnd::Else(pos);
                        }
                        Some("if") | Some("range") | Some("with") => {
                            self.i += 1;
                            let k = kw.unwrap_or_default();
                            nodes.push(self.control(&k, pos)?);
                        }
                        Some("define") => {
                            self.i += 1;
                            if !top || self.depth > 1 {
                                return Err(ParseError {
                                    pos,
                                    msg: "unexpected <define> in command".into(),
                                });
                            }
                            self.define(pos)?;
                        }
                        Some("block") => {
                            self.i += 1;
                            nodes.push(self.block(pos)?);
                        }
                        Some("template") => {
                            self.i += 1;
                            let name = self.template_name("template")?;
                            self.skip_space();
                            let pipe = if self.peek() == Some(&Tok::Right) {
                                self.i += 1;
                                None
                            } else {
                                Some(self.pipeline("template", false)?)
                            };
                            nodes.push(Node::Template { pos, name, pipe });
                        }
                        Some("break") | Some("continue") => {
                            self.i += 1;
                            let k = kw.unwrap_or_default();
                            if self.range_depth == 0 {
                                return Err(ParseError {
                                    pos,
                                    msg: format!("{{{{{k}}}}} outside {{{{range}}}}"),
                                });
                            }
                            self.expect_right(&k)?;
                            nodes.push(if k == "break" {
                                Node::Break
                            } else {
                                Node::Continue
                            });
                        }
                        _ => {
                            let pipe = self.pipeline("command", false)?;
                            nodes.push(Node::Action(pipe));
                        }
                    }
                }
                other => {
                    return Err(ParseError {
                        pos: item.pos,
                        msg: format!("unexpected {}", describe(&other)),
                    })
                }
            }
        };
        self.depth -= 1;
        Ok((nodes, end))
    }

    fn template_name(&mut self, ctx: &str) -> PResult<String> {
        match self.next_ns() {
            Some(Item {
                tok: Tok::Str(s), ..
            }) => Ok(s),
            Some(it) => Err(ParseError {
                pos: it.pos,
                msg: format!("unexpected {} in {ctx} clause", describe(&it.tok)),
            }),
            None => Err(self.err(format!("unexpected EOF in {ctx} clause"))),
        }
    }

    fn add_define(&mut self, pos: usize, name: String, list: Vec<Node>) -> PResult<()> {
        match self.tree.defines.get(&name) {
            Some(existing) if !is_empty_tree(existing) && !is_empty_tree(&list) => {
                Err(ParseError {
                    pos,
                    msg: format!("template: multiple definition of template {name:?}"),
                })
            }
            Some(existing) if !is_empty_tree(existing) => Ok(()),
            _ => {
                self.tree.defines.insert(name, list);
                Ok(())
            }
        }
    }

    fn define(&mut self, pos: usize) -> PResult<()> {
        let name = self.template_name("define")?;
        self.expect_right("define clause")?;
        let saved = std::mem::replace(&mut self.vars, vec!["$".into()]);
        let (list, end) = self.list(false)?;
        self.vars = saved;
        if !matches!(end, ListEnd::End) {
            return Err(self.err("unexpected {{else}} in define"));
        }
        self.add_define(pos, name, list)
    }

    fn block(&mut self, pos: usize) -> PResult<Node> {
        let name = self.template_name("block")?;
        let pipe = self.pipeline("block clause", false)?;
        let saved = std::mem::replace(&mut self.vars, vec!["$".into()]);
        let (list, end) = self.list(false)?;
        self.vars = saved;
        if !matches!(end, ListEnd::End) {
            return Err(self.err("unexpected {{else}} in block"));
        }
        self.add_define(pos, name.clone(), list)?;
        Ok(Node::Template {
            pos,
            name,
            pipe: Some(pipe),
        })
    }

    fn control(&mut self, kw: &str, pos: usize) -> PResult<Node> {
        let nvars = self.vars.len();
        let pipe = self.pipeline(kw, kw == "range")?;
        if kw == "range" {
            self.range_depth += 1;
        }
        let (list, end) = self.list(false)?;
        if kw == "range" {
            self.range_depth -= 1;
        }
        let else_list = match end {
            ListEnd::End => None,
            ListEnd::Else(epos) => {
                self.skip_space();
                // `else if` / `else with`: treat as a nested control inside the else list.
                let chained = match self.peek() {
                    Some(Tok::Ident(k))
                        if (k == "if" && kw == "if") || (k == "with" && kw == "with") =>
                    {
                        Some(k.clone())
                    }
                    _ => None,
                };
                if let Some(k) = chained {
                    self.i += 1;
                    let nested = self.control(&k, epos)?;
                    Some(vec![nested])
                } else {
                    self.expect_right("else")?;
                    let (el, end2) = self.list(false)?;
                    if !matches!(end2, ListEnd::End) {
                        return Err(self.err("expected end; found {{else}}"));
                    }
                    Some(el)
                }
            }
            ListEnd::Eof => return Err(self.err("unexpected EOF")),
        };
        self.vars.truncate(nvars);
        let b = Branch {
            pos,
            pipe,
            list,
            else_list,
        };
        Ok(match kw {
            "if" => Node::If(b),
            "range" => Node::Range(b),
            _ => Node::With(b),
        })
    }

    /// Parse a pipeline up to (and including) the closing delimiter, or up to a `)`
    /// when `ctx` is "parenthesized pipeline" (which the caller consumes).
    fn pipeline(&mut self, ctx: &str, allow_two: bool) -> PResult<Pipe> {
        self.skip_space();
        let pos = self.pos();
        let mut decl = Vec::new();
        let mut is_assign = false;
        // Declarations: `$x :=`, `$x =`, `$i, $v :=`.
        let save = self.i;
        if let Some(Tok::Var(v)) = self.peek().cloned() {
            self.i += 1;
            self.skip_space();
            match self.peek().cloned() {
                Some(Tok::Declare) | Some(Tok::Assign) => {
                    let assign = self.peek() == Some(&Tok::Assign);
                    self.i += 1;
                    if assign {
                        if !self.vars.contains(&v) {
                            return Err(self.err(format!("undefined variable {v:?}")));
                        }
                        is_assign = true;
                    }
                    decl.push(v);
                }
                Some(Tok::Comma) if allow_two => {
                    self.i += 1;
                    self.skip_space();
                    match self.next() {
                        Some(Item {
                            tok: Tok::Var(v2), ..
                        }) => {
                            self.skip_space();
                            match self.next().map(|i| i.tok) {
                                Some(Tok::Declare) => {}
                                Some(Tok::Assign) => {
                                    is_assign = true;
                                    for x in [&v, &v2] {
                                        if !self.vars.contains(x) {
                                            return Err(
                                                self.err(format!("undefined variable {x:?}"))
                                            );
                                        }
                                    }
                                }
                                _ => return Err(self.err("expected := or = after variables")),
                            }
                            decl.push(v);
                            decl.push(v2);
                        }
                        _ => return Err(self.err("range can only initialize variables")),
                    }
                }
                Some(Tok::Comma) => {
                    return Err(self.err(format!("too many declarations in {ctx}")));
                }
                _ => self.i = save,
            }
        }
        if !is_assign {
            for d in &decl {
                self.vars.push(d.clone());
            }
        }
        let mut cmds = Vec::new();
        let paren = ctx == "parenthesized pipeline";
        loop {
            self.skip_space();
            match self.peek() {
                Some(Tok::Right) if !paren => {
                    self.i += 1;
                    break;
                }
                Some(Tok::RParen) if paren => break,
                None => return Err(self.err(format!("unclosed action in {ctx}"))),
                _ => {}
            }
            let cmd = self.command(paren)?;
            cmds.push(cmd);
        }
        if cmds.is_empty() {
            return Err(self.err(format!("missing value for {ctx}")));
        }
        for (n, c) in cmds.iter().enumerate().skip(1) {
            if let Some(first) = c.args.first() {
                if matches!(
                    first.kind,
                    ArgKind::Bool(_)
                        | ArgKind::Dot
                        | ArgKind::Nil
                        | ArgKind::Num(_)
                        | ArgKind::Pipe(_)
                        | ArgKind::Str(_)
                ) {
                    return Err(ParseError {
                        pos: c.pos,
                        msg: format!("non executable command in pipeline stage {}", n + 1),
                    });
                }
            }
        }
        Ok(Pipe {
            pos,
            decl,
            is_assign,
            cmds,
        })
    }

    fn command(&mut self, paren: bool) -> PResult<Cmd> {
        let pos = self.pos();
        let mut args = Vec::new();
        loop {
            self.skip_space();
            match self.peek() {
                Some(Tok::Pipe) => {
                    self.i += 1;
                    if args.is_empty() {
                        return Err(self.err("missing command"));
                    }
                    break;
                }
                Some(Tok::Right) if !paren => break,
                Some(Tok::RParen) if paren => break,
                Some(Tok::Right) | Some(Tok::RParen) | None => {
                    return Err(self.err("unexpected end of command"))
                }
                _ => {}
            }
            let a = self.operand()?;
            args.push(a);
            // Operands must be separated by spaces.
            match self.peek() {
                Some(Tok::Space) | Some(Tok::Pipe) | Some(Tok::Right) | Some(Tok::RParen) => {}
                Some(t) => {
                    let d = describe(t);
                    return Err(self.err(format!("unexpected {d} in operand")));
                }
                None => {}
            }
        }
        if args.is_empty() {
            return Err(self.err("empty command"));
        }
        Ok(Cmd { pos, args })
    }

    fn operand(&mut self) -> PResult<Arg> {
        let t = self.term()?;
        let mut fields = Vec::new();
        let mut end = t.end;
        while let Some(Item {
            tok: Tok::Field(f),
            end: e,
            ..
        }) = self.items.get(self.i).cloned()
        {
            self.i += 1;
            fields.push(f);
            end = e;
        }
        if fields.is_empty() {
            return Ok(t);
        }
        let pos = t.pos;
        let kind = match t.kind {
            ArgKind::Field(mut f) => {
                f.extend(fields);
                ArgKind::Field(f)
            }
            ArgKind::Var(v, mut f) => {
                f.extend(fields);
                ArgKind::Var(v, f)
            }
            ArgKind::Bool(_)
            | ArgKind::Str(_)
            | ArgKind::Num(_)
            | ArgKind::Nil
            | ArgKind::Dot
            | ArgKind::Func(_) => {
                return Err(ParseError {
                    pos,
                    msg: "unexpected . after term".into(),
                })
            }
            other => ArgKind::Chain(
                Box::new(Arg {
                    pos,
                    end: t.end,
                    kind: other,
                }),
                fields,
            ),
        };
        Ok(Arg { pos, end, kind })
    }

    fn term(&mut self) -> PResult<Arg> {
        let Some(item) = self.next() else {
            return Err(self.err("unexpected EOF"));
        };
        let (pos, end) = (item.pos, item.end);
        let kind = match item.tok {
            Tok::Ident(name) => match name.as_str() {
                "true" => ArgKind::Bool(true),
                "false" => ArgKind::Bool(false),
                "nil" => ArgKind::Nil,
                _ => {
                    if !(self.is_func)(&name) {
                        return Err(ParseError {
                            pos,
                            msg: format!("function {name:?} not defined"),
                        });
                    }
                    ArgKind::Func(name)
                }
            },
            Tok::Dot => ArgKind::Dot,
            Tok::Field(f) => ArgKind::Field(vec![f]),
            Tok::Var(v) => {
                if !self.vars.contains(&v) {
                    return Err(ParseError {
                        pos,
                        msg: format!("undefined variable {v:?}"),
                    });
                }
                ArgKind::Var(v, Vec::new())
            }
            Tok::Str(s) => ArgKind::Str(s),
            Tok::Char(c) => ArgKind::Num(NumLit {
                text: format!("{c:?}"),
                int: Some(c as i64),
                float: Some(c as u32 as f64),
                is_float: false,
            }),
            Tok::Number(text) => {
                ArgKind::Num(parse_number(&text).map_err(|m| ParseError { pos, msg: m })?)
            }
            Tok::LParen => {
                self.depth += 1;
                if self.depth > MAX_NESTING {
                    return Err(self.err("template nested too deeply"));
                }
                let p = self.pipeline("parenthesized pipeline", false)?;
                self.depth -= 1;
                let close = self.next();
                let end = close.map(|c| c.end).unwrap_or(end);
                return Ok(Arg {
                    pos,
                    end,
                    kind: ArgKind::Pipe(Box::new(p)),
                });
            }
            other => {
                return Err(ParseError {
                    pos,
                    msg: format!("unexpected {} in operand", describe(&other)),
                })
            }
        };
        Ok(Arg { pos, end, kind })
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Text(_) => "text".into(),
        Tok::Left => "\"{{\"".into(),
        Tok::Right => "\"}}\"".into(),
        Tok::Space => "space".into(),
        Tok::Ident(s) => format!("<{s}>"),
        Tok::Field(s) => format!("<.{s}>"),
        Tok::Dot => "<.>".into(),
        Tok::Var(s) => format!("<{s}>"),
        Tok::Str(s) => format!("{s:?}"),
        Tok::Char(c) => format!("{c:?}"),
        Tok::Number(s) => s.clone(),
        Tok::LParen => "\"(\"".into(),
        Tok::RParen => "\")\"".into(),
        Tok::Pipe => "\"|\"".into(),
        Tok::Comma => "\",\"".into(),
        Tok::Declare => "\":=\"".into(),
        Tok::Assign => "\"=\"".into(),
    }
}

/// Parse a Go integer literal with base prefixes and underscores (`strconv.ParseInt(s, 0, 64)`).
pub fn parse_go_int(text: &str) -> Option<i64> {
    let (neg, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(r) = lower.strip_prefix("0x") {
        (16, r.to_string(), true)
    } else if let Some(r) = lower.strip_prefix("0o") {
        (8, r.to_string(), true)
    } else if let Some(r) = lower.strip_prefix("0b") {
        (2, r.to_string(), true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_string(), true)
    } else {
        (10, lower.clone(), false)
    };
    if digits.contains('_') {
        // Underscores only between digits (or after a prefix).
        if digits.ends_with('_') || digits.contains("__") || (!prefixed && digits.starts_with('_'))
        {
            return None;
        }
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    if clean.is_empty() {
        return None;
    }
    let mag = u64::from_str_radix(&clean, radix).ok()?;
    if neg {
        if mag <= i64::MAX as u64 + 1 {
            Some((mag as i128).wrapping_neg() as i64)
        } else {
            None
        }
    } else {
        i64::try_from(mag).ok()
    }
}

fn parse_number(text: &str) -> Result<NumLit, String> {
    let lower = text.to_ascii_lowercase();
    let is_hex = lower.trim_start_matches(['+', '-']).starts_with("0x");
    let int = parse_go_int(text);
    let floaty = if is_hex {
        lower.contains('p')
    } else {
        lower.contains(['.', 'e'])
    };
    let mut float = None;
    if floaty {
        if is_hex {
            return Err(format!("hexadecimal floats are not supported: {text}"));
        }
        let clean: String = text.chars().filter(|c| *c != '_').collect();
        float = clean.parse::<f64>().ok();
        if float.is_none() {
            return Err(format!("illegal number syntax: {text:?}"));
        }
    } else if int.is_none() {
        return Err(format!("integer overflow: {text:?}"));
    }
    let int = int.or_else(|| {
        float.and_then(|f| {
            if f.fract() == 0.0 && f.abs() < 9.2e18 {
                Some(f as i64)
            } else {
                None
            }
        })
    });
    let float = float.or_else(|| int.map(|i| i as f64));
    Ok(NumLit {
        text: text.to_string(),
        int,
        float,
        is_float: floaty,
    })
}
