//! The `stackhook` command line.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use stackhook::config::ServeArgs;
use stackhook::engine::cache::CacheLimits;
use stackhook::engine::{PackEngine, PatchEngine};
use stackhook::sdk::CapiVersion;

/// glibc's malloc and free were a sixth of the request path in profiles; mimalloc's
/// per-thread heaps cost far less for the many short-lived JSON allocations. Built
/// without transparent huge pages (the `no_thp` feature): mimalloc asks for them on
/// its arenas, and 2 MiB pages barely used cost 10 to 30 MiB of RSS (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay`, its place in `mi_option_e` of the bundled mimalloc.h
/// (a test checks it against mimalloc's own default).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

// The mimalloc linked in above; its Rust crate exposes these only with a feature
// that pulls in another crate.
unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Freed pages go back to the OS 10 ms after they empty, as mimalloc 2 did, instead
/// of mimalloc 3's 1 s: while the controllers' caches fill, pages freed and refilled
/// within that second added about 8 MiB to the peak (BENCHMARKS.md). An operator's
/// `MIMALLOC_PURGE_DELAY` wins.
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one integer option; mimalloc reads options at any time.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 10) }
    }
}

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
    /// Print the objects CAPI's topology controller would create for a Cluster.
    Render(RenderArgs),
    /// Check a Cluster's variables against the ClusterClass, that every patch applies
    /// and that the rendered objects fit their CRDs' schemas.
    Validate(ValidateArgs),
    /// What changing Clusters, ClusterClasses or templates will make CAPI do: template
    /// rotations, machine rollouts, changes in place. Exit status 0 no change, 2
    /// changes with rollouts, 3 changes without rollouts, 1 error or invalid input.
    Plan(PlanArgs),
}

#[derive(clap::Args)]
struct PlanArgs {
    /// The current side: a directory (or file) of Clusters, ClusterClasses and
    /// templates, or a Git revision (`REV:PATH`, or `REV` for the path of `--to`).
    #[arg(long, required_unless_present = "kubeconfig")]
    from: Option<String>,
    /// The proposed side, in the same forms as `--from`.
    #[arg(long)]
    to: String,
    /// Take the current side from the management cluster of this kubeconfig instead.
    #[arg(long, conflicts_with = "from")]
    kubeconfig: Option<PathBuf>,
    /// Only this Cluster (`NAME` or `NAMESPACE/NAME`).
    #[arg(long)]
    cluster: Option<String>,
    /// Packs that answer the external patches, instead of the embedded ones.
    #[arg(long)]
    extensions: Option<PathBuf>,
    /// The CAPI release whose rules apply (1.10 to 1.14).
    #[arg(long, default_value_t = CapiVersion::NEWEST)]
    capi_version: CapiVersion,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: PlanOutput,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PlanOutput {
    Text,
    Markdown,
    Json,
}

#[derive(clap::Args)]
struct RenderInputArgs {
    /// The Cluster (YAML; the first Cluster document of the file).
    #[arg(long)]
    cluster: PathBuf,
    /// The ClusterClass (YAML).
    #[arg(long)]
    clusterclass: PathBuf,
    /// Directory of YAML files holding the templates the ClusterClass references.
    #[arg(long)]
    templates: PathBuf,
    /// Packs that answer the external patches, instead of the embedded ones.
    #[arg(long)]
    extensions: Option<PathBuf>,
    /// The CAPI release to render as (1.10 to 1.14; `v1.13.5` is read as 1.13).
    #[arg(long, default_value_t = CapiVersion::NEWEST)]
    capi_version: CapiVersion,
}

#[derive(clap::Args)]
struct ValidateArgs {
    #[command(flatten)]
    inputs: RenderInputArgs,
    /// Directory of further CRDs (YAML) to check rendered objects against; they take
    /// precedence over the built-in ones for the same kind.
    #[arg(long)]
    crds: Option<PathBuf>,
}

#[derive(clap::Args)]
struct RenderArgs {
    #[command(flatten)]
    inputs: RenderInputArgs,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "yaml")]
    output: Output,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Output {
    Yaml,
    Json,
}

/// Errors are printed as anyhow's report without its backtrace (which `RUST_BACKTRACE`
/// would add to a `Result` returned from `main`): a user gets the message and its
/// causes, nothing else.
fn main() -> ExitCode {
    tune_allocator();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            let mut text = format!("Error: {e}");
            let causes: Vec<String> = e.chain().skip(1).map(ToString::to_string).collect();
            if !causes.is_empty() {
                text.push_str("\n\nCaused by:");
                for (i, c) in causes.iter().enumerate() {
                    text.push_str(&format!("\n    {i}: {c}"));
                }
            }
            eprintln!("{text}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
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
            let engine: Arc<dyn PatchEngine> =
                Arc::new(packs.with_patch_cache_limits(CacheLimits {
                    entries: args.patch_cache_entries,
                    bytes: args.patch_cache_bytes,
                    max_answer_bytes: args.patch_cache_max_answer_bytes,
                }));
            runtime
                .block_on(stackhook::process::run(*args, engine))
                .context("serve")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Crds => {
            // Fails (non-zero exit, nothing on stdout) rather than printing a
            // schema the apiserver would store in a half-right form.
            let yaml = stackhook::infra::api::try_crds_yaml().context("generating the CRDs")?;
            write_stdout(&yaml).context("writing the CRDs")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Render(args) => {
            let (inputs, engine) = render_inputs(&args.inputs)?;
            let objects = stackhook::render::render(&inputs, &engine)?;
            let text = match args.output {
                Output::Yaml => stackhook::render::to_yaml(&objects)?,
                Output::Json => stackhook::render::to_json(&objects)?,
            };
            write_stdout(&text).context("writing the rendered objects")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Plan(args) => run_plan(&args),
        Command::Validate(args) => {
            let (inputs, engine) = render_inputs(&args.inputs)?;
            let mut schemas = stackhook::render::crds::Schemas::built_in()
                .context("reading the built-in CRDs")?;
            if let Some(dir) = &args.crds {
                schemas
                    .add_dir(dir)
                    .with_context(|| format!("reading CRDs from {}", dir.display()))?;
            }
            let report = stackhook::render::validate_with(&inputs, &engine, &schemas);
            for kind in &report.unchecked {
                eprintln!(
                    "note: no CRD known for {kind}: its objects were not checked against a schema"
                );
            }
            if report.problems.is_empty() {
                write_stdout(&format!(
                    "Cluster {}/{}: valid for ClusterClass {}\n",
                    inputs.cluster.namespace, inputs.cluster.name, inputs.class.name
                ))
                .context("writing the result")?;
                return Ok(ExitCode::SUCCESS);
            }
            // The problems and their count, and exit status 1: nothing else.
            let mut text = String::new();
            for p in &report.problems {
                text.push_str(p);
                text.push('\n');
            }
            text.push_str(&format!(
                "Cluster {}/{}: {} problem(s)\n",
                inputs.cluster.namespace,
                inputs.cluster.name,
                report.problems.len()
            ));
            let mut err = std::io::stderr().lock();
            // A closed stderr leaves only the exit status to tell; that still says it.
            let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
            Ok(ExitCode::FAILURE)
        }
    }
}

/// One side of `stackhook plan`: an existing path is read as it is, anything else is
/// a Git revision, `REV:PATH` or `REV` (then of `other`, the other side's path).
fn plan_side(arg: &str, other: Option<&str>) -> anyhow::Result<stackhook::plan::ObjectSet> {
    use stackhook::plan::sources;
    let path = std::path::Path::new(arg);
    if path.exists() {
        return Ok(sources::from_dir(path)?);
    }
    let (rev, at) = match arg.split_once(':') {
        Some((rev, at)) if !at.is_empty() => (rev, PathBuf::from(at)),
        _ => (
            arg.trim_end_matches(':'),
            other
                .filter(|o| std::path::Path::new(o).exists())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(".")),
        ),
    };
    Ok(sources::from_git(rev, &at)?)
}

fn run_plan(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    let engine = load_packs(args.extensions.as_deref())?;
    let to = plan_side(&args.to, args.from.as_deref()).context("reading --to")?;
    let (from, to) = match (&args.kubeconfig, &args.from) {
        (Some(kc), _) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let from = rt
                .block_on(stackhook::plan::sources::from_cluster(kc, Some(&to)))
                .context("reading the management cluster")?;
            let (to, warnings) = rt
                .block_on(stackhook::plan::sources::as_stored(kc, &to))
                .context("asking the management cluster how it stores --to")?;
            for w in warnings {
                eprintln!("warning: {w}");
            }
            (from, to)
        }
        (None, Some(from)) => (
            plan_side(from, Some(&args.to)).context("reading --from")?,
            to,
        ),
        (None, None) => anyhow::bail!("--from or --kubeconfig is needed"),
    };
    let options = stackhook::plan::Options {
        capi: args.capi_version,
        cluster: args.cluster.clone(),
    };
    let plan = stackhook::plan::plan(&from, &to, &engine, &options)?;
    let text = match args.output {
        PlanOutput::Text => stackhook::plan::output::text(&plan),
        PlanOutput::Markdown => stackhook::plan::output::markdown(&plan),
        PlanOutput::Json => stackhook::plan::output::json(&plan).context("writing JSON")?,
    };
    write_stdout(&text).context("writing the plan")?;
    Ok(ExitCode::from(plan.exit_code()))
}

/// Writes `text` to stdout. `print!` panics when stdout fails (a full disk); a reader
/// that stopped early (`| head`) is not an error for a printing command.
fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

fn render_inputs(
    args: &RenderInputArgs,
) -> anyhow::Result<(stackhook::render::Inputs, PackEngine)> {
    let engine = load_packs(args.extensions.as_deref())?;
    let inputs =
        stackhook::render::Inputs::read(&args.cluster, &args.clusterclass, &args.templates)?
            .with_capi(args.capi_version);
    Ok((inputs, engine))
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

#[cfg(test)]
mod allocator_tests {
    use super::*;

    unsafe extern "C" {
        fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    }

    #[test]
    fn the_purge_delay_option_is_where_mimalloc_keeps_it() {
        // SAFETY: reads one integer option.
        let default = unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(default, 1000, "mimalloc 3's default purge delay");
        }
        tune_allocator();
        let tuned = unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(tuned, 10);
        }
    }
}
