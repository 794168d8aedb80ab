//! Logging set-up: tracing with an env filter (`RUST_LOG`), text or JSON lines.
//!
//! Lines are written by a background thread (tracing-appender), so a slow stdout
//! (a pipe to a log shipper) never stalls request handling. The writer blocks
//! rather than dropping lines when its buffer is full: losing audit lines under
//! load is worse than slowing down. The thread writes through a buffer and flushes
//! each time its queue runs dry, so under load many lines share one `write(2)`
//! while a quiet server still shows every line at once.

use std::io::IsTerminal;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::{fmt, EnvFilter};

use crate::config::LogFormat;

/// Sets up logging. Keep the guard alive until exit: dropping it flushes the lines
/// still queued.
pub fn init(format: LogFormat) -> WorkerGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, guard) =
        NonBlockingBuilder::default()
            .lossy(false)
            .finish(std::io::BufWriter::with_capacity(
                64 * 1024,
                std::io::stdout(),
            ));
    // Colours only on a terminal: in `kubectl logs` or a file they are escape codes.
    let builder = fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::stdout().is_terminal())
        .with_writer(writer);
    // A second init (tests) is harmless: keep the first subscriber.
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    guard
}
