//! `stackhook serve`: the HTTPS hook listener and the plain admin listener.

pub mod admin;
pub mod app;
pub mod http;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::config::{HandlerConfig, ServeArgs};
use crate::controller::{ClusterResults, ControllerConfig};
use crate::engine::PatchEngine;
use crate::hooks::{hold::HoldHandler, Registry};
use crate::metrics::Metrics;
use app::{App, AppOptions};
use tls::{CertFiles, ReloadingResolver};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    App(#[from] app::AppError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("admin listener: {0}")]
    Admin(std::io::Error),
}

/// The lifecycle handlers every server has; later capabilities add theirs.
pub fn default_registry(args: &ServeArgs) -> Registry {
    let mut r = Registry::new();
    r.register(Arc::new(HoldHandler::new(args.hold_retry_after_seconds)));
    r
}

/// Runs until SIGTERM or Ctrl-C, then drains in-flight requests.
pub async fn run(
    args: ServeArgs,
    engine: Arc<dyn PatchEngine>,
    registry: Registry,
) -> Result<(), ServeError> {
    run_with_results(args, engine, registry, ClusterResults::new()).await
}

/// [`run`], sharing `results` between the controllers (with `--controllers`)
/// and the hook handlers.
pub async fn run_with_results(
    args: ServeArgs,
    engine: Arc<dyn PatchEngine>,
    registry: Registry,
    results: ClusterResults,
) -> Result<(), ServeError> {
    let metrics = Arc::new(Metrics::new());
    let handler_config = match &args.handler_config {
        Some(p) => HandlerConfig::load(p)?,
        None => HandlerConfig::default(),
    };
    let app = Arc::new(
        App::new(
            AppOptions {
                capi: args.capi_version,
                handler_config,
                kubernetes_versions: args.kubernetes_versions.clone(),
                enable_in_place_hooks: args.enable_in_place_hooks,
            },
            engine,
            registry,
            metrics.clone(),
        )?
        .with_cluster_results(results.clone()),
    );

    let (cert_files, key) = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(c), Some(k)) => {
            let (files, key) = CertFiles::load(c.clone(), k.clone())?;
            (Some(files), key)
        }
        _ => {
            let dir = args
                .self_signed_dir
                .clone()
                .unwrap_or_else(|| std::env::temp_dir().join("stackhook"));
            let generated = tls::self_signed(&args.tls_sans)?;
            let (ca, cert, key_path) = tls::write_self_signed(&dir, &generated)?;
            tracing::info!(ca_bundle = %ca.display(), "no certificate given: serving a self-signed one; its CA bundle is at {}", ca.display());
            let (_, key) = CertFiles::load(cert, key_path)?;
            (None, key)
        }
    };
    let resolver = ReloadingResolver::new(key);
    let tls_config = tls::server_config(resolver.clone(), args.client_ca_file.as_deref())?;
    let acceptor = TlsAcceptor::from(Arc::new(tls_config));

    let hook_listener =
        TcpListener::bind(args.listen)
            .await
            .map_err(|source| ServeError::Bind {
                addr: args.listen,
                source,
            })?;
    let admin_listener = TcpListener::bind(args.admin_listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: args.admin_listen,
            source,
        })?;
    let hook_addr = hook_listener.local_addr().map_err(ServeError::Admin)?;
    let admin_addr = admin_listener.local_addr().map_err(ServeError::Admin)?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let ready = Arc::new(AtomicBool::new(false));

    if let Some(files) = cert_files {
        tokio::spawn(tls::watch(
            files,
            resolver.clone(),
            Duration::from_secs(args.tls_reload_interval_seconds),
            metrics.certificate_reloads.clone(),
            stop_rx.clone(),
        ));
    }

    let admin_state = admin::AdminState {
        metrics: metrics.clone(),
        ready: ready.clone(),
    };
    let mut admin_stop = stop_rx.clone();
    let admin_task = tokio::spawn(async move {
        axum::serve(admin_listener, admin::router(admin_state))
            .with_graceful_shutdown(async move {
                let _ = admin_stop.changed().await;
            })
            .await
    });

    // Started after the listeners are bound, so a bind failure exits before any
    // lease is taken; a controller failure only logs.
    let controllers = match ControllerConfig::from_args(&args) {
        Some(cfg) => Some(tokio::spawn(crate::controller::run(
            cfg,
            metrics.controllers.clone(),
            results,
            stop_rx.clone(),
        ))),
        None => {
            tracing::info!("controllers are off (enable with --controllers)");
            None
        }
    };

    let router = http::router(app.clone(), args.max_body_bytes);
    let graceful = GracefulShutdown::new();
    tracing::info!(
        https = %format!("https://{hook_addr}"),
        admin = %format!("http://{admin_addr}"),
        capi_version = %args.capi_version,
        "listening"
    );
    ready.store(true, Ordering::SeqCst);

    let mut accept_stop = stop_rx.clone();
    let signal = shutdown_signal();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            accepted = hook_listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let acceptor = acceptor.clone();
                let service = TowerToHyperService::new(router.clone());
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    let builder = Builder::new(TokioExecutor::new());
                    let conn = builder.serve_connection(TokioIo::new(tls), service);
                    if let Err(e) = watcher.watch(conn.into_owned()).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            _ = &mut signal => break,
            _ = accept_stop.changed() => break,
        }
    }

    tracing::info!("shutting down: no new connections, finishing in-flight requests");
    ready.store(false, Ordering::SeqCst);
    drop(hook_listener);
    let _ = stop_tx.send(true);
    let timeout = Duration::from_secs(args.shutdown_timeout_seconds);
    if tokio::time::timeout(timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish in time");
    }
    if let Some(task) = controllers {
        // Lets running reconciles finish and the lease be released.
        if tokio::time::timeout(timeout, task).await.is_err() {
            tracing::warn!("controllers did not stop in time");
        }
    }
    if let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_secs(5), admin_task).await {
        return Err(ServeError::Admin(e));
    }
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Where the self-signed CA bundle goes by default.
pub fn default_self_signed_dir() -> PathBuf {
    std::env::temp_dir().join("stackhook")
}
