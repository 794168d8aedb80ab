//! Runs the real `stackhook` binary for integration tests and talks to it over TLS.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const PREFIX: &str = "/hooks.runtime.cluster.x-k8s.io/v1alpha1";
pub const API: &str = "hooks.runtime.cluster.x-k8s.io/v1alpha1";

pub struct Server {
    pub child: Child,
    pub https: String,
    pub admin: String,
    pub ca_pem: Option<Vec<u8>>,
    pub dir: tempfile::TempDir,
    pub logs: mpsc::Receiver<String>,
    /// JSON log lines printed before "listening", handed out by `drain_logs`.
    early: std::sync::Mutex<Vec<serde_json::Value>>,
}

impl Server {
    /// Starts `stackhook serve` on ephemeral loopback ports with extra flags.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_with_env(extra, &[])
    }

    /// Like `start`, with environment changes: `Some(v)` sets, `None` removes.
    pub fn start_with_env(extra: &[&str], env: &[(&str, Option<&str>)]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--admin-listen".into(),
            "127.0.0.1:0".into(),
            "--log-format".into(),
            "json".into(),
        ];
        if !extra.contains(&"--tls-cert-file") {
            args.push("--self-signed-dir".into());
            args.push(dir.path().join("ss").display().to_string());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn(dir, args, env)
    }

    /// `stackhook serve` with exactly `extra` for its hook listener and certificate
    /// (`--listen`, `--tls-cert-file`, ...): a restart on the address and with the
    /// certificate of an earlier process. `ca_pem` is left unset.
    pub fn start_exact(extra: &[&str], env: &[(&str, Option<&str>)]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--admin-listen".into(),
            "127.0.0.1:0".into(),
            "--log-format".into(),
            "json".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn(dir, args, env)
    }

    fn spawn(dir: tempfile::TempDir, args: Vec<String>, env: &[(&str, Option<&str>)]) -> Server {
        // The child is owned by `Server`, whose Drop kills and waits on it.
        #[allow(clippy::zombie_processes)]
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_stackhook"));
        for (k, v) in env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        let mut child = cmd
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn stackhook");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut early = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = rx
                .recv_timeout(left)
                .expect("server did not report its listeners in time");
            let v: serde_json::Value = match serde_json::from_str(&line) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if v["message"] != "listening" {
                early.push(v);
                continue;
            }
            let https = v["https"].as_str().expect("https").to_string();
            let admin = v["admin"].as_str().expect("admin").to_string();
            let ca_path = dir.path().join("ss").join("ca.crt");
            let ca_pem = std::fs::read(&ca_path).ok();
            return Server {
                child,
                https: https.replace("127.0.0.1", "localhost"),
                admin,
                ca_pem,
                dir,
                logs: rx,
                early: std::sync::Mutex::new(early),
            };
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.https, path)
    }

    /// Collects the log lines printed so far.
    pub fn drain_logs(&self) -> Vec<serde_json::Value> {
        let mut out: Vec<serde_json::Value> = std::mem::take(&mut *self.early.lock().unwrap());
        while let Ok(line) = self.logs.try_recv() {
            if let Ok(v) = serde_json::from_str(&line) {
                out.push(v);
            }
        }
        out
    }

    pub fn sigterm(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(status.success());
        self.child.wait().expect("wait")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    H1,
    H2,
}

pub fn client(ca_pem: &[u8], proto: Proto) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem).expect("ca"))
        .tls_info(true)
        .timeout(Duration::from_secs(20));
    b = match proto {
        Proto::H1 => b.http1_only(),
        Proto::H2 => b.http2_prior_knowledge(),
    };
    b.build().expect("client")
}

/// POSTs raw bytes with no Content-Type, as CAPI does; returns (status, version, body).
pub async fn post_raw(
    c: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
) -> (u16, reqwest::Version, Vec<u8>) {
    let resp = c.post(url).body(body).send().await.expect("send");
    let status = resp.status().as_u16();
    let version = resp.version();
    let bytes = resp.bytes().await.expect("body").to_vec();
    (status, version, bytes)
}

pub async fn post_json(
    c: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
) -> (u16, reqwest::Version, serde_json::Value) {
    let (s, v, b) = post_raw(c, url, serde_json::to_vec(body).expect("encode")).await;
    let json = serde_json::from_slice(&b).unwrap_or_else(|e| {
        panic!(
            "response is not JSON ({e}): {}",
            String::from_utf8_lossy(&b)
        )
    });
    (s, v, json)
}

pub fn fixture(path: &str) -> serde_json::Value {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The Discovery answer of a server started with `--handler-config` holding `yaml`.
pub async fn discovery_with_handler_config(yaml: &str, proto: Proto) -> serde_json::Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("handlers.yaml");
    std::fs::write(&cfg, yaml).expect("write handler config");
    let srv = Server::start(&["--handler-config", cfg.to_str().expect("utf-8 path")]);
    let c = client(srv.ca_pem.as_ref().expect("ca"), proto);
    let (_, _, resp) = post_json(
        &c,
        &srv.url(&format!("{PREFIX}/discovery")),
        &serde_json::json!({"apiVersion": API, "kind": "DiscoveryRequest"}),
    )
    .await;
    resp
}

/// Runs `stackhook serve` on ephemeral loopback ports with `extra`, which must make it
/// refuse to start; its stderr.
pub fn serve_fails<S: AsRef<std::ffi::OsStr>>(extra: &[S]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_stackhook"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(extra)
        .output()
        .expect("run stackhook");
    assert!(!out.status.success(), "stackhook serve started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}
