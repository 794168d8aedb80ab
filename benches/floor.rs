//! The floor for load benchmarks: the same TLS and HTTP stack as `stackhook serve`
//! (tokio-rustls with the same rustls configuration, hyper-util auto h1/h2, axum), with
//! every hook path answered by decoding the body as JSON and re-encoding it. Whatever
//! `stackhook serve` costs beyond this is the price of its own work.
//!
//! `cargo bench --bench floor -- 127.0.0.1:9444 /tmp/floor` serves until killed, writing
//! its CA bundle to /tmp/floor/ca.crt.
//!
//! With `FLOOR_ANSWERS=DIR`, a path whose answer file `DIR/<hook>_<handler>.json` (or
//! `DIR/<hook>.json`) exists is answered with that file after the body is parsed, so
//! the floor writes as many bytes as `stackhook serve` does (the load scripts save
//! stackhook's own answers there); other paths get the re-encoded body.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use stackhook::server::tls;

/// The same allocator as the product, so the comparison measures only the work done.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Answers = Arc<HashMap<String, Bytes>>;

async fn echo(answers: Answers, key: String, body: Bytes) -> (StatusCode, Bytes) {
    let v: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => serde_json::json!({"status": "Failure", "message": e.to_string()}),
    };
    if let Some(answer) = answers.get(&key) {
        // Parsed like stackhook parses it; the answer is as long as stackhook's.
        std::hint::black_box(&v);
        return (StatusCode::OK, answer.clone());
    }
    (
        StatusCode::OK,
        Bytes::from(serde_json::to_vec(&v).unwrap_or_default()),
    )
}

fn load_answers() -> HashMap<String, Bytes> {
    let Some(dir) = std::env::var_os("FLOOR_ANSWERS") else {
        return HashMap::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return HashMap::new();
    };
    entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            let key = path.file_stem()?.to_str()?.to_string();
            Some((key, Bytes::from(std::fs::read(&path).ok()?)))
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    // `cargo test --all-targets` runs bench binaries with no arguments: a server that
    // never exits would hang the test run, so serve only when asked to.
    if raw.is_empty() {
        println!("floor: serves only under `cargo bench` or with an address argument");
        return Ok(());
    }
    let mut args = raw.into_iter().filter(|a| a != "--bench");
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:9444".into());
    let dir =
        std::path::PathBuf::from(args.next().unwrap_or_else(|| "/tmp/stackhook-floor".into()));
    let ss = tls::self_signed(&[])?;
    let (_, cert, key) = tls::write_self_signed(&dir, &ss)?;
    let (_, ck) = tls::CertFiles::load(cert, key)?;
    let cfg = tls::server_config(tls::ReloadingResolver::new(ck), None)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let answers: Answers = Arc::new(load_answers());
    println!("floor: {} answer files", answers.len());
    let one = answers.clone();
    let two = answers;
    let app = Router::new()
        .route(
            "/hooks.runtime.cluster.x-k8s.io/v1alpha1/{hook}",
            post(move |Path(hook): Path<String>, body: Bytes| echo(one.clone(), hook, body)),
        )
        .route(
            "/hooks.runtime.cluster.x-k8s.io/v1alpha1/{hook}/{name}",
            post(
                move |Path((hook, name)): Path<(String, String)>, body: Bytes| {
                    echo(two.clone(), format!("{hook}_{name}"), body)
                },
            ),
        );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        println!("floor listening on https://{}", listener.local_addr()?);
        loop {
            let (tcp, _) = listener.accept().await?;
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let svc = TowerToHyperService::new(app.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                }
            });
        }
    })
}
