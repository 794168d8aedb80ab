//! The `stackhook` command line.

use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use stackhook::config::ServeArgs;
use stackhook::engine::{EmptyEngine, PatchEngine};

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
    }
}
