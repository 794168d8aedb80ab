//! The HTTPS hook listener: rustls (certificates reloaded from disk, optional client
//! certificates), HTTP/1.1 and h2, the hook routes. It serves an [`app::App`] and knows
//! nothing of the controllers or of the process around it.

pub mod app;
pub mod http;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::config::ServeArgs;
use app::App;
use tls::{CertFiles, ReloadingResolver};

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

/// A bound hook listener with its certificate loaded, not yet accepting.
pub struct HookServer {
    listener: TcpListener,
    addr: SocketAddr,
    acceptor: TlsAcceptor,
    router: Router,
    /// Watched for rotation when the certificate came from files.
    reload: Option<(CertFiles, Arc<ReloadingResolver>, Duration)>,
    limits: ConnLimits,
}

/// Per-connection limits set on hyper's builder.
#[derive(Clone, Copy, Debug)]
struct ConnLimits {
    header_read: Duration,
    max_streams: u32,
    keep_alive: Option<Duration>,
}

impl ConnLimits {
    fn builder(&self) -> Builder<TokioExecutor> {
        let mut b = Builder::new(TokioExecutor::new());
        // Without a timer hyper enforces no header-read timeout at all.
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
    pub async fn bind(args: &ServeArgs, app: Arc<App>) -> Result<HookServer, ServerError> {
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
        let tls_config = tls::server_config(resolver.clone(), args.client_ca_file.as_deref())?;
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
        Ok(HookServer {
            listener,
            addr,
            acceptor: TlsAcceptor::from(Arc::new(tls_config)),
            router: http::router(app, args.max_body_bytes),
            reload: cert_files.map(|files| {
                (
                    files,
                    resolver,
                    Duration::from_secs(args.tls_reload_interval_seconds),
                )
            }),
            limits: ConnLimits {
                header_read: Duration::from_secs(args.header_read_timeout_seconds.max(1)),
                max_streams: args.http2_max_concurrent_streams.max(1),
                keep_alive: (args.http2_keep_alive_seconds > 0)
                    .then(|| Duration::from_secs(args.http2_keep_alive_seconds)),
            },
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Accepts until `stop` turns true, then stops accepting and lets in-flight
    /// requests finish for at most `drain`.
    pub async fn serve(self, stop: watch::Receiver<bool>, reloads: Counter, drain: Duration) {
        if let Some((files, resolver, every)) = self.reload {
            tokio::spawn(tls::watch(files, resolver, every, reloads, stop.clone()));
        }
        let graceful = GracefulShutdown::new();
        let mut accept_stop = stop;
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
                    // Without it, Nagle holds a response's second small TLS write until
                    // the client's delayed ACK (40 ms): h2 streams sharing a connection
                    // stalled behind each other.
                    let _ = tcp.set_nodelay(true);
                    let acceptor = self.acceptor.clone();
                    let service = TowerToHyperService::new(self.router.clone());
                    let watcher = graceful.watcher();
                    let builder = self.limits.builder();
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
                        let conn = builder.serve_connection(TokioIo::new(tls), service);
                        if let Err(e) = watcher.watch(conn.into_owned()).await {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                    });
                }
                _ = stopped(&mut accept_stop) => break,
            }
        }
        drop(self.listener);
        if tokio::time::timeout(drain, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("in-flight requests did not finish in time");
        }
    }
}

/// Resolves once `stop` is true (or its sender is gone), holding no borrow of it.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}

/// Where the self-signed CA bundle goes by default.
pub fn default_self_signed_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("stackhook")
}
