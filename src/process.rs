//! `stackhook serve`: the one place that owns the process. It builds the shared parts
//! (metrics, the controllers' results store, the hook registry), binds the hook and
//! admin listeners, starts the controllers under leader election, and shuts it all
//! down in order on SIGTERM.
//!
//! Hooks are served on every replica, each answering from its own read-only watch
//! of the OpenStack objects; the controllers run only on the replica that holds the
//! Lease. A failure to start the controllers never stops the hook server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use stackhook_openstack::ClientCache;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::{self, AdminState};
use crate::config::{HandlerConfig, ServeArgs};
use crate::controller::cluster::{self, ClusterContext, Timing};
use crate::controller::machine::{self, MachineContext};
use crate::controller::template::{self, TemplateContext};
use crate::controller::{cache, cloud, ControllerConfig, StartError};
use crate::engine::cloud_checks::TopologyCloudCheck;
use crate::engine::PatchEngine;
use crate::hooks::openstack::creation::CreateCheck;
use crate::hooks::openstack::topology::{LookupCache, Mode, TopologyChecks, TopologySettings};
use crate::hooks::openstack::{self, CloudHooks};
use crate::hooks::{hold::HoldHandler, ClusterResults, Registry};
use crate::kubernetes::capi::CapiResources;
use crate::kubernetes::leader::{self, LeaderElector, LeaseSettings};
use crate::metrics::{ControllerMetrics, Metrics};
use crate::mgmt::capi_version;
use crate::sdk::CapiVersion;
use crate::server::app::{App, AppOptions};
use crate::server::HookServer;

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error(transparent)]
    Server(#[from] crate::server::ServerError),
    #[error(transparent)]
    App(#[from] crate::server::app::AppError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("binding the admin listener {addr}: {source}")]
    AdminBind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("admin listener: {0}")]
    Admin(std::io::Error),
}

/// The lifecycle handlers every server has, reading `results`; with Kubernetes
/// access also those that act on the cloud.
pub fn registry(
    args: &ServeArgs,
    results: ClusterResults,
    cloud_hooks: Option<&Arc<CloudHooks>>,
    create_check: Option<CreateCheck>,
) -> Registry {
    let mut r = Registry::with_results(results);
    r.register(Arc::new(HoldHandler::new(args.hold_retry_after_seconds)));
    if let Some(h) = cloud_hooks {
        h.register(&mut r);
    }
    if let Some(c) = create_check {
        r.register(Arc::new(c));
    }
    r
}

/// ValidateTopology's cloud lookups, when they are on and there is Kubernetes
/// access to read identity Secrets with; says once at start-up when they are not.
fn topology_checks(
    args: &ServeArgs,
    kube: Option<&Client>,
    clouds: &Arc<ClientCache>,
    metrics: &Metrics,
    lookups: &Arc<LookupCache>,
) -> Option<Arc<dyn TopologyCloudCheck>> {
    match (args.validate_cloud, kube) {
        (Mode::Off, _) => {
            tracing::info!("ValidateTopology does not look into the cloud (--validate-cloud off)");
            None
        }
        (_, None) => {
            tracing::info!("ValidateTopology checks variables only: without Kubernetes access (--controllers) it cannot read identity Secrets to look into the cloud");
            None
        }
        (mode, Some(client)) => Some(Arc::new(TopologyChecks::new(
            client.clone(),
            clouds.clone(),
            TopologySettings {
                mode,
                ttl: Duration::from_secs(args.validate_cloud_ttl_seconds),
                wait: Duration::from_millis(args.validate_cloud_wait_milliseconds),
            },
            metrics.cloud_checks.clone(),
            lookups.clone(),
        ))),
    }
}

/// The CAPI minor to answer as, and the client to follow the management cluster's
/// CAPI with when it is not pinned by `--capi-version`. Kubernetes access is the
/// controllers' client, else `--kubeconfig` or the pod's own service account.
async fn served_capi(args: &ServeArgs, kube: Option<&Client>) -> (CapiVersion, Option<Client>) {
    if let Some(pinned) = args.capi_version.0 {
        return (pinned, None);
    }
    let client = match kube {
        Some(c) => Some(c.clone()),
        None if args.kubeconfig.is_some()
            || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() =>
        {
            match crate::controller::client_from(args.kubeconfig.as_ref()).await {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot reach the management cluster to learn its CAPI version");
                    None
                }
            }
        }
        None => None,
    };
    let Some(client) = client else {
        tracing::info!(capi_version = %CapiVersion::NEWEST, "no Kubernetes access: serving the newest supported CAPI (pin another with --capi-version)");
        return (CapiVersion::NEWEST, None);
    };
    let found = capi_version::detect(&client).await;
    (found.unwrap_or(CapiVersion::NEWEST), Some(client))
}

/// Runs until SIGTERM or Ctrl-C, then drains in-flight requests and stops the
/// controllers (releasing the Lease).
pub async fn run(args: ServeArgs, engine: Arc<dyn PatchEngine>) -> Result<(), ProcessError> {
    if let Some(ua) = &args.openstack_user_agent {
        stackhook_openstack::session::set_user_agent(ua.clone());
    }
    stackhook_openstack::session::set_request_timeout(Duration::from_secs(
        args.openstack_request_timeout_seconds,
    ));
    let shutdown = shutdown_signal();
    let metrics = Arc::new(Metrics::new().with_patch_cache_of(engine.clone()));
    // This replica's watch (and, while it leads, its controllers) write it; the
    // lifecycle handlers read it.
    let results = ClusterResults::new();
    let handler_config = match &args.handler_config {
        Some(p) => HandlerConfig::load(p)?,
        None => HandlerConfig::default(),
    };
    let cloud_settings = openstack::Settings::from_args(&args)?;
    // One session and token per identity, for the controllers and the hooks.
    let clouds = Arc::new(ClientCache::new());
    let cfg = ControllerConfig::from_args(&args);
    // The client comes first: the cloud hooks need it as much as the controllers.
    let kube = match &cfg {
        Some(cfg) => match crate::controller::client(cfg).await {
            Ok(c) => Some(c),
            Err(e @ StartError::NoConfig(_)) => {
                tracing::warn!(error = %e, "controllers are off: no kubeconfig or in-cluster config found; serving hooks only");
                None
            }
            Err(e) => {
                tracing::error!(error = %e, "controllers are off; serving hooks only");
                None
            }
        },
        None => None,
    };
    let cloud_hooks = kube.as_ref().map(|client| {
        Arc::new(CloudHooks::new(
            client.clone(),
            results.clone(),
            clouds.clone(),
            cloud_settings,
        ))
    });
    // ValidateTopology and BeforeClusterCreate ask the cloud the same questions.
    let lookups = Arc::new(LookupCache::new(Duration::from_secs(
        args.validate_cloud_ttl_seconds,
    )));
    let create_check = match (&kube, args.validate_cloud) {
        (Some(client), mode) if mode != Mode::Off => Some(CreateCheck::new(
            client.clone(),
            engine.clone(),
            clouds.clone(),
            lookups.clone(),
            openstack::Settings::from_args(&args)?,
            mode,
        )),
        _ => None,
    };
    let (capi, capi_source) = served_capi(&args, kube.as_ref()).await;
    let mut app = App::new(
        AppOptions {
            capi,
            handler_config,
            kubernetes_versions: args.kubernetes_versions.clone(),
            enable_in_place_hooks: args.enable_in_place_hooks,
        },
        engine,
        registry(&args, results.clone(), cloud_hooks.as_ref(), create_check),
        metrics.clone(),
    )?;
    if let Some(check) = topology_checks(&args, kube.as_ref(), &clouds, &metrics, &lookups) {
        app = app.with_cloud_check(check);
    }
    let app = Arc::new(app);
    let served = app.served_capi();

    let hooks = HookServer::bind(&args, app, metrics.listener.clone()).await?;
    let admin_listener = TcpListener::bind(args.admin_listen)
        .await
        .map_err(|source| ProcessError::AdminBind {
            addr: args.admin_listen,
            source,
        })?;
    let hook_addr = hooks.local_addr();
    let admin_addr = admin_listener.local_addr().map_err(ProcessError::Admin)?;

    // Listeners stop after the grace period; the controllers at once, so the Lease is
    // released for another replica without waiting for Endpoints.
    let (stop_tx, stop_rx) = watch::channel(false);
    let (controllers_stop_tx, controllers_stop_rx) = watch::channel(false);
    let ready = Arc::new(AtomicBool::new(false));
    let admin_task = tokio::spawn(admin::serve(
        admin_listener,
        AdminState {
            metrics: metrics.clone(),
            ready: ready.clone(),
        },
        stop_rx.clone(),
    ));

    // Started after both listeners are bound, so a bind failure exits before any
    // Lease is taken.
    if let Some(cfg) = &cfg {
        crate::kubernetes::watch::set_page_size(cfg.watch_page_size);
    }
    let watch = match (&cfg, &kube) {
        (Some(cfg), Some(client)) => Some(tokio::spawn(cache::run(
            client.clone(),
            cfg.watch_namespace.clone(),
            results.clone(),
            leader::stopped(controllers_stop_rx.clone()),
        ))),
        _ => None,
    };
    let controllers = match (cfg, kube) {
        (Some(cfg), Some(client)) => Some(tokio::spawn(run_controllers(
            cfg,
            client,
            metrics.controllers.clone(),
            results,
            clouds,
            controllers_stop_rx,
        ))),
        (None, _) => {
            tracing::info!("controllers are off (enable with --controllers)");
            None
        }
        (Some(_), None) => None,
    };

    let capi_follow = capi_source.map(|client| {
        tokio::spawn(capi_version::follow(
            client,
            served.clone(),
            stop_rx.clone(),
        ))
    });
    let drain = Duration::from_secs(args.shutdown_timeout_seconds);
    let server =
        tokio::spawn(hooks.serve(stop_rx.clone(), metrics.certificate_reloads.clone(), drain));
    tracing::info!(
        https = %format!("https://{hook_addr}"),
        admin = %format!("http://{admin_addr}"),
        capi_version = %capi,
        capi_version_followed = capi_follow.is_some(),
        "listening"
    );
    ready.store(true, Ordering::SeqCst);

    shutdown.await;
    ready.store(false, Ordering::SeqCst);
    let _ = controllers_stop_tx.send(true);
    let grace = Duration::from_secs(args.shutdown_grace_seconds);
    if !grace.is_zero() {
        tracing::info!(
            grace_seconds = args.shutdown_grace_seconds,
            "shutting down: not ready; still serving while Endpoints catch up"
        );
        tokio::time::sleep(grace).await;
    }
    tracing::info!("shutting down: no new connections, finishing in-flight requests");
    let _ = stop_tx.send(true);
    if let Err(e) = server.await {
        tracing::error!(error = %e, "the hook listener ended abnormally");
    }
    if let Some(task) = controllers {
        // Lets running reconciles finish and the Lease be released.
        if tokio::time::timeout(drain, task).await.is_err() {
            tracing::warn!("controllers did not stop in time");
        }
    }
    if let Some(task) = watch {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    if let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_secs(5), admin_task).await {
        return Err(ProcessError::Admin(e));
    }
    tracing::info!("stopped");
    Ok(())
}

/// Runs the controllers until `shutdown` is raised. Logs and returns when they cannot
/// start; never panics.
async fn run_controllers(
    cfg: ControllerConfig,
    client: Client,
    metrics: ControllerMetrics,
    results: ClusterResults,
    clouds: Arc<ClientCache>,
    shutdown: watch::Receiver<bool>,
) {
    if let Err(e) = start_controllers(cfg, client, metrics, results, clouds, shutdown).await {
        tracing::error!(error = %e, "controllers are off; serving hooks only");
    }
}

async fn start_controllers(
    cfg: ControllerConfig,
    client: Client,
    metrics: ControllerMetrics,
    results: ClusterResults,
    clouds: Arc<ClientCache>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), StartError> {
    let lease = if cfg.leader_election {
        let settings = LeaseSettings {
            namespace: cfg
                .leader_election_namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string()),
            name: leader::lease_name(&cfg.leader_election_id, cfg.watch_filter.as_deref()),
            identity: leader::default_identity(),
            lease_duration: cfg.lease_duration,
            renew_deadline: cfg.renew_deadline,
            retry_period: cfg.retry_period,
        };
        settings.validate()?;
        Some(settings)
    } else {
        None
    };
    let template_clouds = clouds.clone();
    let (infra, machine_infra) = cloud::infra(&cfg, clouds);
    let capi = match CapiResources::discover(&client).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "could not ask for the preferred cluster.x-k8s.io version; using v1beta1");
            CapiResources::at("v1beta1")
        }
    };
    tracing::info!(capi_version = %capi.cluster.version, "controllers enabled");
    let ctx = Arc::new(
        ClusterContext::new(
            client.clone(),
            infra,
            capi.clone(),
            results.clone(),
            metrics.clone(),
            Timing::default(),
        )
        .with_watch_filter(cfg.watch_filter.clone()),
    );
    let machine_ctx = Arc::new(
        MachineContext::new(
            client.clone(),
            machine_infra,
            capi.clone(),
            metrics.clone(),
            Timing::default(),
        )
        .with_watch_filter(cfg.watch_filter.clone()),
    );
    let template_ctx = Arc::new(
        TemplateContext::new(
            client.clone(),
            template_clouds,
            capi.clone(),
            metrics.clone(),
            &Timing::default(),
        )
        .with_watch_filter(cfg.watch_filter.clone()),
    );
    let namespace = cfg.watch_namespace.clone();
    let concurrency = cfg.concurrency;
    match lease {
        Some(settings) => {
            let elector = LeaderElector::new(client, settings);
            leader::run_elected(elector, metrics.leader.clone(), shutdown, move |stop| {
                let ctx = ctx.clone();
                let machine_ctx = machine_ctx.clone();
                let template_ctx = template_ctx.clone();
                let namespace = namespace.clone();
                async move {
                    tokio::join!(
                        cluster::run(
                            ctx,
                            namespace.as_deref(),
                            concurrency,
                            leader::stopped(stop.clone()),
                        ),
                        machine::run(
                            machine_ctx,
                            namespace.as_deref(),
                            concurrency,
                            leader::stopped(stop.clone()),
                        ),
                        template::run(
                            template_ctx,
                            namespace.as_deref(),
                            concurrency,
                            leader::stopped(stop),
                        ),
                    );
                }
            })
            .await;
        }
        None => {
            metrics.leader.set(1);
            tokio::join!(
                cluster::run(
                    ctx,
                    namespace.as_deref(),
                    concurrency,
                    leader::stopped(shutdown.clone()),
                ),
                machine::run(
                    machine_ctx,
                    namespace.as_deref(),
                    concurrency,
                    leader::stopped(shutdown.clone()),
                ),
                template::run(
                    template_ctx,
                    namespace.as_deref(),
                    concurrency,
                    leader::stopped(shutdown),
                ),
            );
            metrics.leader.set(0);
        }
    }
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C. Registered when called, not when first polled:
/// a signal that comes while the process is still starting (a pod deleted at once,
/// a supervisor's quick restart) then drains like any other instead of killing.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let ctrl_c = tokio::spawn(async {
        let _ = tokio::signal::ctrl_c().await;
    });
    async move {
        #[cfg(unix)]
        if let Some(mut term) = term {
            tokio::select! {
                _ = term.recv() => {}
                _ = ctrl_c => {}
            }
            return;
        }
        let _ = ctrl_c.await;
    }
}
