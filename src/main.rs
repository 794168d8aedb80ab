//! The `stackhook` command line.

use std::io::Write;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use stackhook::config::ServeArgs;
use stackhook::engine::{EmptyEngine, PatchEngine};

/// glibc's malloc and free were a sixth of the request path in profiles; mimalloc's
/// per-thread heaps cost far less for the many short-lived JSON allocations.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "stackhook",
    version,
    about = "Cluster API Runtime Extension server for OpenStack"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Runtime Extension over HTTPS (and /metrics, /healthz, /readyz over HTTP).
    Serve(Box<ServeArgs>),
    /// Print the OpenStackCluster, OpenStackClusterTemplate, OpenStackMachine and
    /// OpenStackMachineTemplate CRDs as multi-document YAML, for `kubectl apply -f -`.
    Crds,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            let _log_guard = stackhook::telemetry::init(args.log_format);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let engine: Arc<dyn PatchEngine> = Arc::new(EmptyEngine);
            let registry = stackhook::server::default_registry(&args);
            // Shared by the controllers (with --controllers) and the hook handlers.
            let results = stackhook::controller::ClusterResults::new();
            runtime
                .block_on(stackhook::server::run_with_results(
                    *args, engine, registry, results,
                ))
                .context("serve")?;
            Ok(())
        }
        Command::Crds => {
            // Fails (non-zero exit, nothing on stdout) rather than printing a
            // schema the apiserver would store in a half-right form.
            let yaml = stackhook::infra::api::try_crds_yaml().context("generating the CRDs")?;
            let mut out = std::io::stdout().lock();
            out.write_all(yaml.as_bytes())
                .and_then(|()| out.flush())
                .context("writing the CRDs")?;
            Ok(())
        }
    }
}
