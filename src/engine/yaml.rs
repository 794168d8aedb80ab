//! Pack YAML reading with source positions.
//!
//! Pack errors must say where in the file the problem is. A serde data model value
//! forgets positions, so the file is read once into a tree of positioned nodes, from
//! which both the plain JSON value and a place → line index are taken.

use std::collections::HashMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use serde_saphyr::Spanned;

/// A YAML node with the line of every child.
#[derive(Debug)]
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Node>>),
    Map(Vec<(String, Spanned<Node>)>),
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::UInt(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries: Vec<(String, Spanned<Node>)> = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let key = match key {
                Node::Str(s) => s,
                Node::Bool(b) => b.to_string(),
                Node::Int(i) => i.to_string(),
                Node::UInt(u) => u.to_string(),
                Node::Float(f) => f.to_string(),
                Node::Null => "null".to_string(),
                Node::Seq(_) | Node::Map(_) => {
                    return Err(de::Error::custom("mapping keys must be scalars"))
                }
            };
            let value = map.next_value::<Spanned<Node>>()?;
            if entries.iter().any(|(k, _)| *k == key) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

/// A parsed YAML document: its JSON value and the line where each place starts.
#[derive(Debug, Default)]
pub struct Located {
    pub value: Value,
    lines: HashMap<String, u64>,
}

impl Located {
    /// The 1-based line of a place such as `patches[2].definitions[0]`, if known.
    /// Falls back to the nearest enclosing place that has a line.
    pub fn line(&self, place: &str) -> Option<u64> {
        let mut p = place.to_string();
        loop {
            if let Some(l) = self.lines.get(&p) {
                return Some(*l);
            }
            let cut = p.rfind(['.', '['])?;
            p.truncate(cut);
        }
    }
}

/// Reads one YAML document. The error text carries the parser's own position.
pub fn parse(src: &str) -> Result<Located, String> {
    let root: Spanned<Node> = serde_saphyr::from_str(src).map_err(|e| e.to_string())?;
    let mut lines = HashMap::new();
    let value = convert(root, String::new(), &mut lines);
    Ok(Located { value, lines })
}

fn convert(node: Spanned<Node>, place: String, lines: &mut HashMap<String, u64>) -> Value {
    let line = node.referenced.line();
    if line > 0 {
        lines.insert(place.clone(), line);
    }
    match node.value {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(b),
        Node::Int(i) => Value::Number(i.into()),
        Node::UInt(u) => Value::Number(u.into()),
        Node::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
        Node::Str(s) => Value::String(s),
        Node::Seq(items) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, n)| convert(n, format!("{place}[{i}]"), lines))
                .collect(),
        ),
        Node::Map(entries) => {
            let mut m = Map::new();
            for (k, n) in entries {
                let child = if place.is_empty() {
                    k.clone()
                } else {
                    format!("{place}.{k}")
                };
                let v = convert(n, child, lines);
                m.insert(k, v);
            }
            Value::Object(m)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_places() {
        let src = "name: a\npatches:\n- name: p\n  definitions:\n  - selector: {}\n";
        let doc = parse(src).unwrap();
        assert_eq!(doc.value["patches"][0]["name"], "p");
        assert_eq!(doc.line("name"), Some(1));
        assert_eq!(doc.line("patches[0].name"), Some(3));
        assert_eq!(doc.line("patches[0].definitions[0].selector"), Some(5));
        assert_eq!(
            doc.line("patches[0].definitions[0].jsonPatches[3]"),
            Some(5)
        );
    }

    /// Pack files read like kubectl reads a ClusterClass (YAML 1.1 booleans), so an
    /// inline patch means the same in both places.
    #[test]
    fn yaml_1_1_booleans() {
        let doc = parse("a: yes\nb: on\nc: 'yes'\nd: 1.20\n").unwrap();
        assert_eq!(doc.value["a"], true);
        assert_eq!(doc.value["b"], true);
        assert_eq!(doc.value["c"], "yes");
        assert_eq!(doc.value["d"], 1.2);
    }

    #[test]
    fn duplicate_keys_are_errors() {
        assert!(parse("a: 1\na: 2\n").is_err());
    }
}
