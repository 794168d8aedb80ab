//! docs/capo-fields.md against the CRDs: every spec field of OpenStackCluster,
//! OpenStackMachine and their templates has a row saying what happens to it, and
//! every row names a field the CRDs have. Where ../shared/capi holds CAPO's own CRDs,
//! each of CAPO's v1beta1 spec fields is one of stackhook's too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use stackhook::infra::api::try_crds;

const DOC: &str = "docs/capo-fields.md";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One row: the field's path below its table's object, and its handling.
#[derive(Clone, Debug)]
struct Row {
    path: String,
    handling: String,
}

/// The tables of the document, by their `## ` heading.
fn tables(doc: &str) -> BTreeMap<String, Vec<Row>> {
    let mut out: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    let mut section = None;
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            section = Some(h.trim().to_owned());
            continue;
        }
        let Some(section) = &section else { continue };
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // `| `path` | handling | text |` splits into ["", path, handling, text, ""].
        if cells.len() < 4 || !cells[1].starts_with('`') {
            continue;
        }
        out.entry(section.clone()).or_default().push(Row {
            path: cells[1].trim_matches('`').to_owned(),
            handling: cells[2].to_owned(),
        });
    }
    out
}

/// The leaf fields of a structural schema, as `a.b[].c`.
fn leaves(schema: &Value, path: &str, out: &mut BTreeSet<String>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_owned()
        } else {
            format!("{path}.{k}")
        }
    };
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (k, v) in props {
            leaves(v, &join(k), out);
        }
        return;
    }
    if let Some(items) = schema.get("items") {
        if items.get("properties").is_some() {
            leaves(items, &format!("{path}[]"), out);
            return;
        }
    }
    out.insert(path.to_owned());
}

/// The v1beta1 spec fields of `kind` in a CRD list, templates' under
/// `spec.template.spec` taken as their object's.
fn spec_fields(crds: &[Value], kind: &str) -> BTreeSet<String> {
    let crd = crds
        .iter()
        .find(|c| c["spec"]["names"]["kind"] == kind)
        .unwrap_or_else(|| panic!("no CRD of {kind}"));
    let version = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == "v1beta1"))
        .unwrap_or_else(|| panic!("{kind} has no v1beta1"));
    let mut spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
    if kind.ends_with("Template") {
        spec = &spec["properties"]["template"]["properties"]["spec"];
    }
    assert!(spec.is_object(), "{kind}: no spec schema");
    let mut out = BTreeSet::new();
    leaves(spec, "", &mut out);
    out
}

/// Finds the row that says what happens to `path` in `table`, following `→ Name`
/// into other tables; marks every row it passes as used.
fn resolve(
    tables: &BTreeMap<String, Vec<Row>>,
    table: &str,
    path: &str,
    used: &mut BTreeSet<(String, String)>,
) -> Result<String, String> {
    let rows = tables
        .get(table)
        .ok_or_else(|| format!("no table `{table}` in {DOC}"))?;
    for row in rows {
        if row.path == path {
            used.insert((table.to_owned(), row.path.clone()));
            if row.handling.starts_with('→') {
                return Err(format!(
                    "{table}: `{path}` is a field, not an object to look into"
                ));
            }
            return Ok(row.handling.clone());
        }
        // A refused field is refused whole, a list's items too.
        if row.handling == "refused" && path.starts_with(&format!("{}[]", row.path)) {
            used.insert((table.to_owned(), row.path.clone()));
            return Ok("refused".into());
        }
        let Some(rest) = path.strip_prefix(&format!("{}.", row.path)) else {
            continue;
        };
        used.insert((table.to_owned(), row.path.clone()));
        if row.handling == "refused" {
            return Ok("refused".into());
        }
        if let Some(next) = row.handling.strip_prefix('→') {
            return resolve(tables, next.trim(), rest, used);
        }
        return Err(format!(
            "{table}: `{}` is {}, so `{path}` under it needs its own row or a `→` table",
            row.path, row.handling
        ));
    }
    Err(format!("{table}: no row for `{path}`"))
}

const KINDS: [(&str, &str); 4] = [
    ("OpenStackCluster", "OpenStackCluster"),
    ("OpenStackClusterTemplate", "OpenStackCluster"),
    ("OpenStackMachine", "OpenStackMachine"),
    ("OpenStackMachineTemplate", "OpenStackMachine"),
];

#[test]
fn every_spec_field_has_a_row_and_every_row_a_field() {
    let doc = std::fs::read_to_string(root().join(DOC)).expect(DOC);
    let tables = tables(&doc);
    let crds: Vec<Value> = try_crds()
        .expect("CRDs generate")
        .into_iter()
        .map(|c| serde_json::to_value(c).expect("CRD to JSON"))
        .collect();
    let mut used = BTreeSet::new();
    let mut missing = Vec::new();
    let mut seen = BTreeMap::<String, usize>::new();
    for (kind, table) in KINDS {
        for field in spec_fields(&crds, kind) {
            match resolve(&tables, table, &field, &mut used) {
                Ok(handling) => {
                    assert!(
                        ["honoured", "refused", "written", "stackhook"]
                            .contains(&handling.as_str()),
                        "{kind} `{field}`: unknown handling {handling:?}"
                    );
                    *seen.entry(handling).or_default() += 1;
                }
                Err(e) => missing.push(format!("{kind}: {e}")),
            }
        }
    }
    assert!(
        missing.is_empty(),
        "fields without a row:\n{}",
        missing.join("\n")
    );
    let stale: Vec<String> = tables
        .iter()
        .flat_map(|(t, rows)| rows.iter().map(move |r| (t.clone(), r.path.clone())))
        .filter(|k| !used.contains(k))
        .map(|(t, p)| format!("{t}: `{p}`"))
        .collect();
    assert!(
        stale.is_empty(),
        "rows for no field of the CRDs:\n{}",
        stale.join("\n")
    );
    // Both kinds of answer are there: a table of only "honoured" would say nothing.
    assert!(seen.get("refused").is_some_and(|n| *n > 0), "{seen:?}");
    assert!(seen.get("honoured").is_some_and(|n| *n > 100), "{seen:?}");
}

/// The rows come from the document, not from the resolver: a field added to a type
/// that only a `→` row covers still needs a row in the table it points to.
#[test]
fn a_field_without_a_row_is_named() {
    let doc = "## T\n| Field | Handling | What |\n|---|---|---|\n\
               | `a` | honoured | x |\n| `b` | → U |  |\n| `c` | refused | |\n\
               | `l` | refused | |\n\
               ## U\n| `id` | honoured | |\n";
    let tables = tables(doc);
    let mut used = BTreeSet::new();
    assert_eq!(
        resolve(&tables, "T", "a", &mut used).as_deref(),
        Ok("honoured")
    );
    assert_eq!(
        resolve(&tables, "T", "b.id", &mut used).as_deref(),
        Ok("honoured")
    );
    assert_eq!(
        resolve(&tables, "T", "c.x[].y", &mut used).as_deref(),
        Ok("refused")
    );
    assert_eq!(
        resolve(&tables, "T", "l[].y", &mut used).as_deref(),
        Ok("refused")
    );
    let e = resolve(&tables, "T", "b.filter.name", &mut used).unwrap_err();
    assert_eq!(e, "U: no row for `filter.name`");
    let e = resolve(&tables, "T", "a.more", &mut used).unwrap_err();
    assert!(e.contains("`a` is honoured"), "{e}");
    let e = resolve(&tables, "T", "b", &mut used).unwrap_err();
    assert!(e.contains("is a field, not an object"), "{e}");
    assert!(resolve(&tables, "T", "d", &mut used).is_err());
}

fn capi_dir() -> PathBuf {
    match std::env::var_os("STACKHOOK_CAPI_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => root().join("../shared/capi"),
    }
}

/// CAPO's own v1beta1 CRDs: each of their spec fields is one of stackhook's, so the
/// table above covers CAPO's fields too.
#[test]
fn capos_spec_fields_are_all_in_stackhooks_crds() {
    let dir = capi_dir().join("crds/capo");
    if !dir.is_dir() {
        println!("skipped: no CAPO CRDs in {}", dir.display());
        return;
    }
    let mut capo = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("CAPO CRDs") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read");
        let docs: Vec<Value> = serde_saphyr::from_str_multiple(&text).expect("YAML");
        for doc in docs {
            if doc.is_object() {
                capo.push(doc);
            }
        }
    }
    let ours: Vec<Value> = try_crds()
        .expect("CRDs generate")
        .into_iter()
        .map(|c| serde_json::to_value(c).expect("CRD to JSON"))
        .collect();
    for (kind, _) in KINDS {
        let theirs = spec_fields(&capo, kind);
        assert!(
            theirs.len() > 50,
            "{kind}: {} fields in CAPO's CRD",
            theirs.len()
        );
        let ours = spec_fields(&ours, kind);
        let lacking: Vec<&String> = theirs.difference(&ours).collect();
        assert!(
            lacking.is_empty(),
            "{kind}: CAPO fields stackhook lacks: {lacking:?}"
        );
    }
}
