//! The `stackhook` command line.

use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use stackhook::config::ServeArgs;
use stackhook::engine::{PackEngine, PatchEngine};

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
            let packs = load_packs(args.extensions.as_deref())?;
            tracing::info!(
                packs = packs
                    .packs()
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                "packs loaded"
            );
            let engine: Arc<dyn PatchEngine> = Arc::new(packs);
            let registry = stackhook::server::default_registry(&args);
            runtime
                .block_on(stackhook::server::run(*args, engine, registry))
                .context("serve")?;
            Ok(())
        }
    }
}

/// The packs of `--extensions DIR`, else the embedded ones. All or nothing: one bad
/// file stops start-up with every problem named by file, line and place.
fn load_packs(dir: Option<&std::path::Path>) -> anyhow::Result<PackEngine> {
    match dir {
        Some(dir) => PackEngine::from_dir(dir)
            .with_context(|| format!("loading extension packs from {}", dir.display())),
        None => PackEngine::embedded().context("loading the embedded extension packs"),
    }
}
