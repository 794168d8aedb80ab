//! Where a side of a plan comes from: a directory, a Git revision of one, or the
//! objects of a management cluster.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::{ObjectSet, PlanError};
use crate::render::yaml_documents;

fn is_yaml(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    (lower.ends_with(".yaml") || lower.ends_with(".yml"))
        // Kustomizations name files, they are not objects.
        && !lower.rsplit('/').next().is_some_and(|f| f.starts_with("kustomization."))
}

fn parse_file(
    source: &str,
    file: &str,
    text: &str,
    docs: &mut Vec<(String, Value)>,
) -> Result<(), PlanError> {
    let parsed = yaml_documents(text).map_err(|e| PlanError::Source {
        source_name: source.into(),
        message: format!("{file}: {e}"),
    })?;
    docs.extend(parsed.into_iter().map(|d| (file.to_string(), d)));
    Ok(())
}

/// Every object of every YAML file under `dir` (subdirectories too), or of `dir` when
/// it is a file.
pub fn from_dir(dir: &Path) -> Result<ObjectSet, PlanError> {
    let source = dir.display().to_string();
    let err = |p: &Path, e: std::io::Error| PlanError::Source {
        source_name: source.clone(),
        message: format!("{}: {e}", p.display()),
    };
    let mut files = Vec::new();
    if dir.is_file() {
        files.push(dir.to_path_buf());
    } else {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).map_err(|e| err(&d, e))? {
                let p = entry.map_err(|e| err(&d, e))?.path();
                if p.is_dir() {
                    stack.push(p);
                } else if is_yaml(&p.to_string_lossy()) {
                    files.push(p);
                }
            }
        }
    }
    files.sort();
    let mut docs = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| err(&f, e))?;
        parse_file(&source, &f.display().to_string(), &text, &mut docs)?;
    }
    ObjectSet::from_documents(&source, docs)
}

fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .map_err(|e| format!("running git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The YAML files under `path` (a directory or file in a Git work tree) as they are at
/// revision `rev` of that repository, read with `git ls-tree` and `git cat-file`.
pub fn from_git(rev: &str, path: &Path) -> Result<ObjectSet, PlanError> {
    let source = format!("{rev}:{}", path.display());
    let fail = |message: String| PlanError::Source {
        source_name: source.clone(),
        message,
    };
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    };
    let top = git(&dir, &["rev-parse", "--show-toplevel"]).map_err(fail)?;
    let top = PathBuf::from(top.trim());
    let abs = std::fs::canonicalize(path).map_err(|e| fail(format!("{}: {e}", path.display())))?;
    let top = std::fs::canonicalize(&top).map_err(|e| fail(format!("{}: {e}", top.display())))?;
    let prefix = abs
        .strip_prefix(&top)
        .map_err(|_| fail(format!("{} is not inside {}", abs.display(), top.display())))?
        .to_string_lossy()
        .into_owned();
    // `--` keeps a revision that looks like an option from being read as one.
    git(
        &top,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .map_err(|_| fail(format!("{rev:?} is not a revision of {}", top.display())))?;
    let mut args = vec!["ls-tree", "-r", "-z", "--name-only", rev, "--"];
    if !prefix.is_empty() {
        args.push(&prefix);
    }
    let listing = git(&top, &args).map_err(fail)?;
    let files: Vec<&str> = listing.split('\0').filter(|f| is_yaml(f)).collect();
    let mut docs = Vec::new();
    if files.is_empty() {
        return ObjectSet::from_documents(&source, docs);
    }
    let mut child = Command::new("git")
        .arg("-C")
        .arg(&top)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| fail(format!("running git cat-file: {e}")))?;
    let mut input = String::new();
    for f in &files {
        input.push_str(&format!("{rev}:{f}\n"));
    }
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| fail("git cat-file has no stdin".into()))?;
    // Written from a thread: git answers while it reads, and both pipes can fill.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| fail("git cat-file has no stdout".into()))?;
    let mut reader = BufReader::new(stdout);
    for f in &files {
        let mut header = String::new();
        reader
            .read_line(&mut header)
            .map_err(|e| fail(format!("reading git cat-file: {e}")))?;
        let size: usize = header
            .split_whitespace()
            .nth(2)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| fail(format!("{f}: git cat-file answered {:?}", header.trim())))?;
        let mut body = vec![0u8; size + 1];
        reader
            .read_exact(&mut body)
            .map_err(|e| fail(format!("reading git cat-file: {e}")))?;
        body.pop();
        let text = String::from_utf8(body).map_err(|_| fail(format!("{f}: not UTF-8")))?;
        parse_file(&source, &format!("{rev}:{f}"), &text, &mut docs)?;
    }
    let _ = writer.join();
    let _ = child.wait();
    ObjectSet::from_documents(&source, docs)
}

/// The Clusters and ClusterClasses of a management cluster and the templates their
/// classes reference, as the "from" side (what is running now).
pub async fn from_cluster(kubeconfig: &Path) -> Result<ObjectSet, PlanError> {
    use kube::api::{Api, DynamicObject, ListParams};
    use kube::config::{KubeConfigOptions, Kubeconfig};
    use kube::core::GroupVersionKind;
    use kube::discovery;

    let source = kubeconfig.display().to_string();
    let fail = |message: String| PlanError::Source {
        source_name: source.clone(),
        message,
    };
    let kc = Kubeconfig::read_from(kubeconfig).map_err(|e| fail(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| fail(e.to_string()))?;
    let client = kube::Client::try_from(config).map_err(|e| fail(e.to_string()))?;
    let group = discovery::group(&client, "cluster.x-k8s.io")
        .await
        .map_err(|e| fail(format!("discovering cluster.x-k8s.io: {e}")))?;
    let mut docs = Vec::new();
    let clean = |o: DynamicObject, api_version: &str, kind: &str| -> Result<Value, PlanError> {
        let mut v = serde_json::to_value(o).map_err(|e| fail(e.to_string()))?;
        v["apiVersion"] = Value::from(api_version);
        v["kind"] = Value::from(kind);
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in [
                "managedFields",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "ownerReferences",
            ] {
                m.remove(k);
            }
        }
        if let Some(o) = v.as_object_mut() {
            o.remove("status");
        }
        Ok(v)
    };
    for kind in ["Cluster", "ClusterClass"] {
        let (ar, _) = group
            .recommended_kind(kind)
            .ok_or_else(|| fail(format!("the management cluster serves no {kind}")))?;
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| fail(format!("listing {kind}s: {e}")))?;
        for o in list.items {
            docs.push((format!("{kind}s"), clean(o, &ar.api_version, kind)?));
        }
    }
    // The templates the classes reference, from the classes' namespaces.
    let mut refs = std::collections::BTreeSet::new();
    for (_, d) in &docs {
        if d.get("kind").and_then(Value::as_str) != Some("ClusterClass") {
            continue;
        }
        let ns = d
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        if let Ok(class) = crate::engine::clusterclass::ClusterClass::from_value(d) {
            for r in super::class_refs(&class) {
                refs.insert((
                    ns.clone(),
                    r.api_version.clone(),
                    r.kind.clone(),
                    r.name.clone(),
                ));
            }
        }
    }
    for (ns, api_version, kind, name) in refs {
        let (g, v) = api_version.split_once('/').unwrap_or(("", &api_version));
        let gvk = GroupVersionKind::gvk(g, v, &kind);
        let (ar, _) = discovery::pinned_kind(&client, &gvk)
            .await
            .map_err(|e| fail(format!("discovering {api_version} {kind}: {e}")))?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        let o = api
            .get(&name)
            .await
            .map_err(|e| fail(format!("reading {kind} {ns}/{name}: {e}")))?;
        docs.push((format!("{kind}s"), clean(o, &api_version, &kind)?));
    }
    ObjectSet::from_documents(&source, docs)
}
