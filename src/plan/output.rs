//! The plan as text for a terminal, Markdown for a pull-request comment, or JSON.

use std::fmt::Write;

use serde_json::Value;

use super::{Action, ClusterPlan, Effect, Plan, Status};

fn value(v: &Option<Value>) -> String {
    match v {
        None => "(unset)".into(),
        Some(Value::String(s)) => format!("{s:?}"),
        Some(v) => {
            let s = v.to_string();
            if s.chars().count() > 100 {
                format!("{}…", s.chars().take(100).collect::<String>())
            } else {
                s
            }
        }
    }
}

fn target(t: &str, name: &str) -> String {
    match t {
        "controlPlane" => "control plane".into(),
        "machineDeployment" => format!("MachineDeployment {name}"),
        "machinePool" => format!("MachinePool {name}"),
        other => format!("{other} {name}"),
    }
}

fn status(c: &ClusterPlan) -> &'static str {
    match (c.status, c.rollout) {
        (Status::Unchanged, _) => "no change",
        (Status::Changed, true) => "machines roll",
        (Status::Changed, false) => "changes without rollout",
        (Status::Created, _) => "created",
        (Status::Deleted, _) => "deleted",
        (Status::Invalid, _) => "INVALID",
    }
}

fn action(a: Action) -> &'static str {
    match a {
        Action::Rotate => "rotated",
        Action::PatchMetadata => "labels/annotations patched in place",
        Action::Patch => "patched in place",
    }
}

fn summary(plan: &Plan) -> String {
    let n = |s: Status| plan.clusters.iter().filter(|c| c.status == s).count();
    let rolling = plan.clusters.iter().filter(|c| c.rollout).count();
    format!(
        "{} Cluster(s): {} unchanged, {} changed ({} with rollouts), {} created, {} deleted, {} invalid (CAPI {})",
        plan.clusters.len(),
        n(Status::Unchanged),
        n(Status::Changed),
        rolling,
        n(Status::Created),
        n(Status::Deleted),
        n(Status::Invalid),
        plan.capi_version
    )
}

/// Indented text; unchanged Clusters take one line.
pub fn text(plan: &Plan) -> String {
    let mut s = String::new();
    for c in &plan.clusters {
        let _ = writeln!(
            s,
            "Cluster {}/{} (class {}): {}",
            c.namespace,
            c.name,
            c.class,
            status(c)
        );
        for p in &c.problems {
            let _ = writeln!(s, "  problem: {p}");
        }
        for r in &c.rollouts {
            let n = r
                .replicas
                .map(|n| format!("{n} machine(s)"))
                .unwrap_or_else(|| "machines".into());
            let verb = if r.effect == Effect::Upgrade {
                "upgrade"
            } else {
                "rollout"
            };
            let _ = writeln!(
                s,
                "  {verb}: {} replaces {n}: {}",
                target(&r.target, &r.name),
                r.reasons.join("; ")
            );
        }
        for t in &c.templates {
            let _ = writeln!(
                s,
                "  {} {} {} ({}): {}",
                t.role,
                t.kind,
                t.name,
                t.changes.len(),
                action(t.action)
            );
            for f in t.changes.iter().take(20) {
                let _ = writeln!(s, "      {}: {} → {}", f.path, value(&f.old), value(&f.new));
            }
            if t.changes.len() > 20 {
                let _ = writeln!(s, "      … {} more", t.changes.len() - 20);
            }
            for a in &t.causes {
                let _ = writeln!(s, "      because {} ({} field(s))", a.cause, a.paths.len());
            }
        }
        for i in &c.in_place {
            let how = if i.effect == Effect::Scale {
                "scale"
            } else {
                "in place"
            };
            let _ = writeln!(
                s,
                "  {how}: {} {}: {} → {}",
                target(&i.target, &i.name),
                i.path,
                value(&i.old),
                value(&i.new)
            );
        }
        for o in &c.created {
            let _ = writeln!(
                s,
                "  create: {} {}{}",
                o.kind,
                o.name,
                o.replicas
                    .map(|n| format!(" ({n} replicas)"))
                    .unwrap_or_default()
            );
        }
        for o in &c.deleted {
            let _ = writeln!(
                s,
                "  delete: {} {}{}",
                o.kind,
                o.name,
                o.replicas
                    .map(|n| format!(" ({n} replicas)"))
                    .unwrap_or_default()
            );
        }
        if c.status != Status::Unchanged && !c.causes.is_empty() {
            let _ = writeln!(s, "  inputs changed: {}", c.causes.join("; "));
        }
    }
    let _ = writeln!(s, "{}", summary(plan));
    s
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A pull-request comment: a summary table, then a section per changed Cluster.
pub fn markdown(plan: &Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "### stackhook plan (CAPI {})\n", plan.capi_version);
    let _ = writeln!(s, "| Cluster | Class | Result | Machines replaced |");
    let _ = writeln!(s, "|---|---|---|---|");
    for c in &plan.clusters {
        let replaced: Vec<String> = c
            .rollouts
            .iter()
            .map(|r| {
                format!(
                    "{} ({})",
                    target(&r.target, &r.name),
                    r.replicas
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| "?".into())
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "| {}/{} | {} | {} | {} |",
            c.namespace,
            c.name,
            c.class,
            status(c),
            if replaced.is_empty() {
                "none".into()
            } else {
                replaced.join(", ")
            }
        );
    }
    for c in plan
        .clusters
        .iter()
        .filter(|c| c.status != Status::Unchanged)
    {
        let _ = writeln!(s, "\n#### {}/{}: {}\n", c.namespace, c.name, status(c));
        for p in &c.problems {
            let _ = writeln!(s, "- :x: `{}`", md_escape(p));
        }
        for r in &c.rollouts {
            let verb = if r.effect == Effect::Upgrade {
                "Upgrade"
            } else {
                "Rollout"
            };
            let _ = writeln!(
                s,
                "- **{verb}** of the {}: {} machine(s) replaced — {}",
                target(&r.target, &r.name),
                r.replicas
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "?".into()),
                md_escape(&r.reasons.join("; "))
            );
        }
        for i in &c.in_place {
            let how = if i.effect == Effect::Scale {
                "Scale"
            } else {
                "In place"
            };
            let _ = writeln!(
                s,
                "- {how}: {} `{}`: `{}` → `{}`",
                target(&i.target, &i.name),
                md_escape(&i.path),
                md_escape(&value(&i.old)),
                md_escape(&value(&i.new))
            );
        }
        for o in &c.created {
            let _ = writeln!(
                s,
                "- Create {} `{}`{}",
                o.kind,
                o.name,
                o.replicas
                    .map(|n| format!(" ({n} replicas)"))
                    .unwrap_or_default()
            );
        }
        for o in &c.deleted {
            let _ = writeln!(
                s,
                "- Delete {} `{}`{}",
                o.kind,
                o.name,
                o.replicas
                    .map(|n| format!(" ({n} replicas)"))
                    .unwrap_or_default()
            );
        }
        if !c.templates.is_empty() {
            let _ = writeln!(
                s,
                "\n| Object | Kind | Action | Field | Old → new | Caused by |"
            );
            let _ = writeln!(s, "|---|---|---|---|---|---|");
            for t in &c.templates {
                for f in &t.changes {
                    let by: Vec<&str> = t
                        .causes
                        .iter()
                        .filter(|a| a.paths.contains(&f.path))
                        .map(|a| a.cause.as_str())
                        .collect();
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | `{}` | `{}` → `{}` | {} |",
                        t.role,
                        t.kind,
                        action(t.action),
                        md_escape(&f.path),
                        md_escape(&value(&f.old)),
                        md_escape(&value(&f.new)),
                        md_escape(&by.join("; "))
                    );
                }
            }
        }
        if !c.causes.is_empty() {
            let _ = writeln!(s, "\nInputs changed: {}", md_escape(&c.causes.join("; ")));
        }
    }
    let _ = writeln!(s, "\n{}", summary(plan));
    s
}

/// The [`Plan`] as pretty JSON.
pub fn json(plan: &Plan) -> Result<String, serde_json::Error> {
    let mut s = serde_json::to_string_pretty(plan)?;
    s.push('\n');
    Ok(s)
}
