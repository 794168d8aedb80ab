//! The real `clusterctl` (v1.13.4, from `shared/capi/bin`) over a local repository:
//! stackhook's releases as `deploy/release.sh` writes them, and stand-ins for Cluster
//! API's own providers.
//!
//! No registry ships CAPI's release assets, so the core, kubeadm bootstrap and
//! kubeadm control-plane providers of the repository are stand-ins built from CAPI's
//! real CRDs (v1.13.5, `shared/kube/crds`): their Namespace and CRDs, and a metadata.yaml
//! for the v1beta2 contract. That is what `clusterctl init` needs to install, label and
//! inventory them; the managers themselves run on the host (`shared/capi/up`), because
//! no Pod runs here (no kubelet).
//!
//! cert-manager: `clusterctl init` first checks that cert-manager's API works by
//! creating an Issuer and a Certificate, and installs cert-manager only when that fails.
//! With the Issuer and Certificate CRDs of `tests/fixtures/cert-manager` those creates
//! succeed, so clusterctl skips installing it ("Skipping installing cert-manager as it is
//! already installed"). What is skipped: cert-manager's controllers, so no Certificate
//! is ever issued; the serving certificate of the in-cluster Deployment (which never runs
//! here either) is not tested by clusterctl.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The clusterctl binary, unpacked once per machine beside the managers' cache.
pub fn binary(capi_dir: &Path) -> Result<PathBuf, String> {
    let packed = capi_dir.join("bin/clusterctl.xz");
    if !packed.is_file() {
        return Err(format!("{} does not exist", packed.display()));
    }
    let cache = std::env::temp_dir().join("stackhook-capi-bin/v1.13");
    let bin = cache.join("clusterctl");
    if bin.is_file() {
        return Ok(bin);
    }
    std::fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
    let tmp = cache.join(format!("clusterctl.{}", std::process::id()));
    let out = Command::new("sh")
        .arg("-c")
        .arg("xz -dc \"$1\" > \"$2\" && chmod +x \"$2\"")
        .arg("sh")
        .arg(&packed)
        .arg(&tmp)
        .output()
        .map_err(|e| format!("xz: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "unpacking clusterctl: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // The checksum `up` checks too.
    let sums =
        std::fs::read_to_string(capi_dir.join("bin/SHA256SUMS")).map_err(|e| e.to_string())?;
    let want = sums
        .lines()
        .find(|l| l.ends_with(" clusterctl") || l.ends_with("*clusterctl"))
        .and_then(|l| l.split_whitespace().next())
        .ok_or("no sum for clusterctl")?
        .to_string();
    let got = Command::new("sha256sum")
        .arg(&tmp)
        .output()
        .map_err(|e| e.to_string())?;
    let got = String::from_utf8_lossy(&got.stdout);
    if !got.starts_with(&want) {
        let _ = std::fs::remove_file(&tmp);
        return Err("clusterctl does not match bin/SHA256SUMS".into());
    }
    std::fs::rename(&tmp, &bin).map_err(|e| e.to_string())?;
    Ok(bin)
}

/// A local clusterctl repository with stackhook's releases and CAPI's stand-ins.
pub struct Repo {
    pub dir: tempfile::TempDir,
    pub clusterctl: PathBuf,
    /// `--config` for every clusterctl call.
    pub config: PathBuf,
}

pub const CAPI_VERSION: &str = "v1.13.4";

impl Repo {
    /// Releases each `(version, env of release.sh)` with `deploy/release.sh`.
    pub fn new(
        repo_root: &Path,
        capi_dir: &Path,
        kube_dir: &Path,
        releases: &[(&str, &[(&str, &str)])],
    ) -> Result<Repo, String> {
        let clusterctl = binary(capi_dir)?;
        let crds = kube_dir.join("crds/cluster-api-v1.13.5");
        if !crds.is_dir() {
            return Err(format!("{} does not exist", crds.display()));
        }
        let dir = tempfile::Builder::new()
            .prefix("stackhook-clusterctl-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        for (version, env) in releases {
            let out = Command::new("bash")
                .arg(repo_root.join("deploy/release.sh"))
                .arg(dir.path())
                .arg(version)
                .envs(env.iter().copied())
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(format!(
                    "release.sh {version}: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        // CAPI's three providers, from its CRDs.
        let stand_ins: [(&str, &str, &str, &[&str]); 3] = [
            (
                "cluster-api",
                "core-components.yaml",
                "capi-system",
                &["cluster.x-k8s.io_", "addons.", "runtime.", "ipam."],
            ),
            (
                "bootstrap-kubeadm",
                "bootstrap-components.yaml",
                "capi-kubeadm-bootstrap-system",
                &["bootstrap."],
            ),
            (
                "control-plane-kubeadm",
                "control-plane-components.yaml",
                "capi-kubeadm-control-plane-system",
                &["controlplane."],
            ),
        ];
        let mut files: Vec<PathBuf> = std::fs::read_dir(&crds)
            .map_err(|e| e.to_string())?
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        let mut providers = String::new();
        for (label, file, ns, prefixes) in stand_ins {
            let d = dir.path().join(label).join(CAPI_VERSION);
            std::fs::create_dir_all(&d).map_err(|e| e.to_string())?;
            let mut text = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n");
            for f in &files {
                let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                if prefixes.iter().any(|p| name.starts_with(p)) {
                    text.push_str("---\n");
                    text.push_str(&std::fs::read_to_string(f).map_err(|e| e.to_string())?);
                }
            }
            std::fs::write(d.join(file), text).map_err(|e| e.to_string())?;
            std::fs::write(
                d.join("metadata.yaml"),
                "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\n\
                 releaseSeries:\n- major: 1\n  minor: 13\n  contract: v1beta2\n",
            )
            .map_err(|e| e.to_string())?;
            let (name, type_) = match label {
                "cluster-api" => ("cluster-api", "CoreProvider"),
                "bootstrap-kubeadm" => ("kubeadm", "BootstrapProvider"),
                _ => ("kubeadm", "ControlPlaneProvider"),
            };
            providers.push_str(&format!(
                "  - name: {name}\n    type: {type_}\n    url: file://{}\n",
                d.join(file).display()
            ));
        }
        // stackhook's own entries, as release.sh wrote them for the last version.
        let ours = std::fs::read_to_string(dir.path().join("clusterctl.yaml"))
            .map_err(|e| e.to_string())?;
        let ours = ours
            .split_once("providers:\n")
            .map(|(_, p)| p)
            .unwrap_or_default();
        let config = dir.path().join("clusterctl-test.yaml");
        std::fs::write(&config, format!("providers:\n{providers}{ours}"))
            .map_err(|e| e.to_string())?;
        Ok(Repo {
            dir,
            clusterctl,
            config,
        })
    }

    /// Runs clusterctl with `--config`: its log (stderr) and output, or with
    /// `generate` (whose YAML is the output) the output alone; `Err` carries both.
    pub fn run(
        &self,
        kubeconfig: Option<&Path>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<String, String> {
        let stdout_only = args.first() == Some(&"generate");
        let mut cmd = Command::new(&self.clusterctl);
        cmd.args(args).arg("--config").arg(&self.config);
        if let Some(k) = kubeconfig {
            cmd.arg("--kubeconfig").arg(k);
        }
        // Versions come from the local repository only, never from a Go proxy, and
        // clusterctl does not look for a newer clusterctl on GitHub: nothing leaves
        // the machine.
        cmd.env("GOPROXY", "off")
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            .env("HOME", self.dir.path());
        cmd.envs(env.iter().copied());
        let out = cmd.output().map_err(|e| format!("clusterctl: {e}"))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() && stdout_only {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else if out.status.success() {
            Ok(text)
        } else {
            Err(text)
        }
    }

    /// `clusterctl init` of CAPI's stand-ins and stackhook `version` as the `openstack`
    /// infrastructure provider, after cert-manager's API stand-in.
    pub fn init(
        &self,
        repo_root: &Path,
        kubeconfig: &Path,
        version: &str,
    ) -> Result<String, String> {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["apply", "--server-side", "-f"])
            .arg(repo_root.join("tests/fixtures/cert-manager/crds.yaml"))
            .output()
            .map_err(|e| format!("kubectl: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let wait = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "wait",
                "--for=condition=established",
                "--timeout=60s",
                "crd/certificates.cert-manager.io",
                "crd/issuers.cert-manager.io",
            ])
            .output()
            .map_err(|e| format!("kubectl: {e}"))?;
        if !wait.status.success() {
            return Err(String::from_utf8_lossy(&wait.stderr).into_owned());
        }
        // clusterctl's cert-manager check ends by deleting its Namespace
        // `cert-manager-test`; with no namespace controller here it stays Terminating,
        // and the next check could not create in it. Finish the deletion as that
        // controller would (the Namespace is empty: clusterctl deleted its objects).
        finalize_namespace(kubeconfig, "cert-manager-test")?;
        let core = format!("cluster-api:{CAPI_VERSION}");
        let kubeadm = format!("kubeadm:{CAPI_VERSION}");
        let infra = format!("openstack:{version}");
        self.run(
            Some(kubeconfig),
            &[
                "init",
                "--core",
                &core,
                "--bootstrap",
                &kubeadm,
                "--control-plane",
                &kubeadm,
                "--infrastructure",
                &infra,
            ],
            &[],
        )
    }

    /// Runs `init` with just these provider arguments (a second init on one cluster).
    pub fn init_again(&self, kubeconfig: &Path, args: &[&str]) -> Result<String, String> {
        finalize_namespace(kubeconfig, "cert-manager-test")?;
        let mut a = vec!["init"];
        a.extend_from_slice(args);
        self.run(Some(kubeconfig), &a, &[])
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Completes the deletion of an emptied, Terminating Namespace (the namespace
/// controller's last step); nothing when it does not exist.
fn finalize_namespace(kubeconfig: &Path, ns: &str) -> Result<(), String> {
    let get = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["get", "namespace", ns, "-o", "json", "--ignore-not-found"])
        .output()
        .map_err(|e| format!("kubectl: {e}"))?;
    let text = String::from_utf8_lossy(&get.stdout);
    if text.trim().is_empty() {
        return Ok(());
    }
    let mut obj: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if obj["metadata"]["deletionTimestamp"].is_null() {
        return Ok(());
    }
    obj["spec"]["finalizers"] = serde_json::json!([]);
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "replace",
            "--raw",
            &format!("/api/v1/namespaces/{ns}/finalize"),
            "-f",
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("kubectl: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("stdin")?
        .write_all(obj.to_string().as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(())
}
