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
///
/// Each object is read in the apiVersion `written_as` (the other side, the files of
/// the change) writes it in, when that side has it: the API server converts, so a
/// repository still holding v1beta1 kubeadm templates is compared with the same
/// shape, not with the version a class reference names.
pub async fn from_cluster(
    kubeconfig: &Path,
    written_as: Option<&ObjectSet>,
) -> Result<ObjectSet, PlanError> {
    use kube::api::{Api, DynamicObject, ListParams};
    use kube::core::GroupVersionKind;
    use kube::discovery;

    let source = kubeconfig.display().to_string();
    let fail = |message: String| PlanError::Source {
        source_name: source.clone(),
        message,
    };
    let client = connect(kubeconfig).await?;
    let group = discovery::group(&client, "cluster.x-k8s.io")
        .await
        .map_err(|e| fail(format!("discovering cluster.x-k8s.io: {e}")))?;
    let mut docs = Vec::new();
    let clean = |o: DynamicObject, api_version: &str, kind: &str| {
        serde_json::to_value(o)
            .map(|v| cleaned(v, api_version, kind))
            .map_err(|e| fail(e.to_string()))
    };
    // The version the other side writes an object in, if it is of the same group.
    let written = |api_version: &str, kind: &str, name: &str| -> String {
        let group = |a: &str| a.rsplit_once('/').map(|(g, _)| g.to_string());
        written_as
            .and_then(|o| o.api_version_of(kind, name))
            .filter(|w| group(w) == group(api_version))
            .unwrap_or(api_version)
            .to_string()
    };
    let read = async |api_version: &str, kind: &str, ns: &str, name: &str| {
        let (g, v) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(g, v, kind);
        let (ar, _) = discovery::pinned_kind(&client, &gvk)
            .await
            .map_err(|e| fail(format!("discovering {api_version} {kind}: {e}")))?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        let o = api
            .get(name)
            .await
            .map_err(|e| fail(format!("reading {kind} {ns}/{name}: {e}")))?;
        clean(o, api_version, kind)
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
            let name = o.metadata.name.clone().unwrap_or_default();
            let ns = o.metadata.namespace.clone().unwrap_or_default();
            let want = written(&ar.api_version, kind, &name);
            let doc = if want == ar.api_version {
                clean(o, &ar.api_version, kind)?
            } else {
                read(&want, kind, &ns, &name).await?
            };
            docs.push((format!("{kind}s"), doc));
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
                    written(&r.api_version, &r.kind, &r.name),
                    r.kind.clone(),
                    r.name.clone(),
                ));
            }
        }
    }
    for (ns, api_version, kind, name) in refs {
        docs.push((
            format!("{kind}s"),
            read(&api_version, &kind, &ns, &name).await?,
        ));
    }
    ObjectSet::from_documents(&source, docs)
}

/// What the API server adds that no file holds.
fn cleaned(mut v: Value, api_version: &str, kind: &str) -> Value {
    v["apiVersion"] = Value::from(api_version);
    v["kind"] = Value::from(kind);
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "managedFields",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "ownerReferences",
            "uid",
            "generateName",
        ] {
            m.remove(k);
        }
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    v
}

async fn connect(kubeconfig: &Path) -> Result<kube::Client, PlanError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let fail = |message: String| PlanError::Source {
        source_name: kubeconfig.display().to_string(),
        message,
    };
    let kc = Kubeconfig::read_from(kubeconfig).map_err(|e| fail(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| fail(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| fail(e.to_string()))
}

/// `set` with each template its classes reference as the API server of `kubeconfig`
/// stores it: defaulted by the providers' webhooks and carried through their
/// conversions (empty objects, `conversion-data`), as the live side is read. Each is
/// sent as a server-side dry-run create under a scratch name, the way `kubectl diff`
/// asks the server: nothing is stored, and an update's immutability rules do not
/// apply. A template the server refuses stays as written, with a warning.
pub async fn as_stored(
    kubeconfig: &Path,
    set: &ObjectSet,
) -> Result<(ObjectSet, Vec<String>), PlanError> {
    use kube::api::{Api, DynamicObject, PostParams};
    use kube::core::GroupVersionKind;
    use kube::discovery;

    let client = connect(kubeconfig).await?;
    let mut referenced = std::collections::BTreeSet::new();
    for class in set.classes.values().flatten() {
        for r in super::class_refs(class) {
            referenced.insert((r.kind.clone(), r.name.clone()));
        }
    }
    let params = PostParams {
        dry_run: true,
        field_manager: Some("stackhook-plan".into()),
    };
    let mut warnings = Vec::new();
    let mut docs = Vec::with_capacity(set.documents.len());
    for (file, d) in &set.documents {
        let kind = d.get("kind").and_then(Value::as_str).unwrap_or_default();
        let name = d
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let api_version = d
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !referenced.contains(&(kind.to_string(), name.to_string())) {
            docs.push((file.clone(), d.clone()));
            continue;
        }
        let namespace = d
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        let (g, v) = api_version.split_once('/').unwrap_or(("", api_version));
        let stored = async {
            let (ar, _) = discovery::pinned_kind(&client, &GroupVersionKind::gvk(g, v, kind))
                .await
                .map_err(|e| e.to_string())?;
            let mut scratch = d.clone();
            if let Some(m) = scratch["metadata"].as_object_mut() {
                m.remove("name");
                m.remove("resourceVersion");
                m.insert("generateName".into(), Value::from("stackhook-plan-"));
                m.insert("namespace".into(), Value::from(namespace));
            }
            let obj: DynamicObject = serde_json::from_value(scratch).map_err(|e| e.to_string())?;
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
            let created = api.create(&params, &obj).await.map_err(|e| e.to_string())?;
            let mut v = cleaned(
                serde_json::to_value(created).map_err(|e| e.to_string())?,
                api_version,
                kind,
            );
            v["metadata"]["name"] = Value::from(name);
            match d.pointer("/metadata/namespace") {
                Some(ns) => v["metadata"]["namespace"] = ns.clone(),
                None => {
                    if let Some(m) = v["metadata"].as_object_mut() {
                        m.remove("namespace");
                    }
                }
            }
            Ok::<Value, String>(v)
        };
        match stored.await {
            Ok(v) => docs.push((file.clone(), v)),
            Err(e) => {
                warnings.push(format!(
                    "{kind} {name}: the API server did not say how it would store it ({e}); compared as written"
                ));
                docs.push((file.clone(), d.clone()));
            }
        }
    }
    Ok((ObjectSet::from_documents(&set.source, docs)?, warnings))
}
