//! The HTTPS hook listener: rustls (certificates reloaded from disk, optional client
//! certificates), HTTP/1.1 and h2, the hook routes. It serves an [`app::App`] and knows
//! nothing of the controllers or of the process around it.

pub mod app;
pub mod http;
pub mod limits;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use prometheus_client::metrics::counter::Counter;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::config::ServeArgs;
use crate::metrics::{ListenerMetrics, Refusal};
use app::App;
use limits::{BodyLimits, ConnActivity};
use tls::{CertFiles, ClientCaFile, ReloadingClientVerifier, ReloadingResolver};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A bound hook listener with its certificate loaded, not yet accepting.
pub struct HookServer {
    listener: TcpListener,
    addr: SocketAddr,
    acceptor: TlsAcceptor,
    router: Router,
    /// Files watched for rotation: the serving pair when it came from files, and the
    /// client-CA bundle.
    reload: tls::Watched,
    reload_every: Duration,
    limits: ConnLimits,
    metrics: ListenerMetrics,
}

/// Per-connection limits.
#[derive(Clone, Copy, Debug)]
struct ConnLimits {
    header_read: Duration,
    max_streams: u32,
    keep_alive: Option<Duration>,
    idle: Duration,
    max_connections: usize,
}

impl ConnLimits {
    fn builder(&self) -> Builder<TokioExecutor> {
        let mut b = Builder::new(TokioExecutor::new());
        // Without a timer hyper enforces no header-read timeout at all. Hyper starts
        // it whenever it waits for a request head, so it also ends idle keep-alive
        // HTTP/1.1 connections.
        b.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read);
        b.http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(self.max_streams)
            .keep_alive_interval(self.keep_alive);
        if let Some(every) = self.keep_alive {
            b.http2().keep_alive_timeout(every);
        }
        b
    }
}

impl HookServer {
    /// Loads the certificate (or makes a self-signed one) and binds `--listen`. A bad
    /// certificate or a taken port fails here, before anything else starts.
    pub async fn bind(
        args: &ServeArgs,
        app: Arc<App>,
        metrics: ListenerMetrics,
    ) -> Result<HookServer, ServerError> {
        let (cert_files, key) = match (&args.tls_cert_file, &args.tls_key_file) {
            (Some(c), Some(k)) => {
                let (files, key) = CertFiles::load(c.clone(), k.clone())?;
                (Some(files), key)
            }
            _ => {
                let dir = args
                    .self_signed_dir
                    .clone()
                    .unwrap_or_else(default_self_signed_dir);
                let generated = tls::self_signed(&args.tls_sans)?;
                let (ca, cert, key_path) = tls::write_self_signed(&dir, &generated)?;
                tracing::info!(ca_bundle = %ca.display(), "no certificate given: serving a self-signed one; its CA bundle is at {}", ca.display());
                let (_, key) = CertFiles::load(cert, key_path)?;
                (None, key)
            }
        };
        let resolver = ReloadingResolver::new(key);
        let client_ca = match &args.client_ca_file {
            Some(path) => {
                let (file, verifier) = ClientCaFile::load(path.clone())?;
                Some((file, ReloadingClientVerifier::new(verifier)))
            }
            None => None,
        };
        let tls_config =
            tls::server_config(resolver.clone(), client_ca.as_ref().map(|(_, v)| v.clone()))?;
        let listener =
            TcpListener::bind(args.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: args.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: args.listen,
            source,
        })?;
        let body_limits = BodyLimits::new(
            args.max_body_bytes,
            Duration::from_secs(args.body_read_timeout_seconds.max(1)),
            args.max_in_flight_bytes,
            metrics.clone(),
        );
        Ok(HookServer {
            listener,
            addr,
            acceptor: TlsAcceptor::from(Arc::new(tls_config)),
            router: http::router(app, body_limits),
            reload: tls::Watched {
                cert: cert_files.map(|files| (files, resolver)),
                client_ca,
            },
            reload_every: Duration::from_secs(args.tls_reload_interval_seconds),
            limits: ConnLimits {
                header_read: Duration::from_secs(args.header_read_timeout_seconds.max(1)),
                max_streams: args.http2_max_concurrent_streams.max(1),
                keep_alive: (args.http2_keep_alive_seconds > 0)
                    .then(|| Duration::from_secs(args.http2_keep_alive_seconds)),
                idle: Duration::from_secs(args.idle_timeout_seconds.max(1)),
                max_connections: args.max_connections.clamp(1, Semaphore::MAX_PERMITS),
            },
            metrics,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Accepts until `stop` turns true, then stops accepting, asks every connection to
    /// close after its current requests, and waits for them for at most `drain`.
    pub async fn serve(self, stop: watch::Receiver<bool>, reloads: Counter, drain: Duration) {
        if self.reload.cert.is_some() || self.reload.client_ca.is_some() {
            tokio::spawn(tls::watch(
                self.reload,
                self.reload_every,
                reloads,
                stop.clone(),
            ));
        }
        let slots = Arc::new(Semaphore::new(self.limits.max_connections));
        let mut accept_stop = stop.clone();
        loop {
            tokio::select! {
                accepted = self.listener.accept() => {
                    let (tcp, peer) = match accepted {
                        Ok(x) => x,
                        Err(e) => {
                            // Out of descriptors and the like: back off instead of spinning.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        self.metrics.refused(Refusal::connection_limit);
                        tracing::debug!(%peer, "connection limit reached: closing");
                        drop(tcp);
                        continue;
                    };
                    let conn = Conn {
                        acceptor: self.acceptor.clone(),
                        router: self.router.clone(),
                        limits: self.limits,
                        metrics: self.metrics.clone(),
                        stop: stop.clone(),
                    };
                    tokio::spawn(async move {
                        conn.serve(tcp, peer).await;
                        drop(slot);
                    });
                }
                _ = stopped(&mut accept_stop) => break,
            }
        }
        drop(self.listener);
        // Every connection holds a slot until it ends.
        let all = u32::try_from(self.limits.max_connections).unwrap_or(u32::MAX);
        if tokio::time::timeout(drain, slots.acquire_many(all))
            .await
            .is_err()
        {
            tracing::warn!("in-flight requests did not finish in time");
        }
    }
}

/// One accepted connection and what it needs to serve itself.
struct Conn {
    acceptor: TlsAcceptor,
    router: Router,
    limits: ConnLimits,
    metrics: ListenerMetrics,
    stop: watch::Receiver<bool>,
}

impl Conn {
    async fn serve(mut self, tcp: TcpStream, peer: SocketAddr) {
        // Without it, Nagle holds a response's second small TLS write until the
        // client's delayed ACK (40 ms): h2 streams sharing a connection stalled behind
        // each other.
        let _ = tcp.set_nodelay(true);
        self.metrics.open_connections.inc();
        let _open = scopeguard(&self.metrics);
        let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(tcp)).await {
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
        let activity = ConnActivity::new();
        let inner = TowerToHyperService::new(self.router.clone());
        let service = {
            let activity = activity.clone();
            hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let guard = activity.begin();
                let call = hyper::service::Service::call(&inner, req);
                async move {
                    let response = call.await;
                    drop(guard);
                    response
                }
            })
        };
        let builder = self.limits.builder();
        let conn = builder
            .serve_connection(TokioIo::new(tls), service)
            .into_owned();
        let mut conn = std::pin::pin!(conn);
        let idle = self.limits.idle;
        let mut closing = false;
        loop {
            let wake = activity
                .idle_at(idle)
                .unwrap_or_else(|| tokio::time::Instant::now() + idle);
            tokio::select! {
                ended = conn.as_mut() => {
                    if let Err(e) = ended {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    return;
                }
                _ = stopped(&mut self.stop), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                _ = tokio::time::sleep_until(wake), if !closing => {
                    if activity.idle_at(idle).is_some_and(|at| at <= tokio::time::Instant::now()) {
                        self.metrics.refused(Refusal::idle_timeout);
                        tracing::debug!(%peer, "idle connection closed");
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
            }
        }
    }
}

/// Counts the connection as closed however its task ends.
fn scopeguard(metrics: &ListenerMetrics) -> impl Drop + '_ {
    struct Open<'a>(&'a ListenerMetrics);
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            self.0.open_connections.dec();
        }
    }
    Open(metrics)
}

/// Resolves once `stop` is true (or its sender is gone), holding no borrow of it.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}

/// Where the self-signed CA bundle goes by default.
pub fn default_self_signed_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("stackhook")
}
