//! An HTTP/2 load generator for what h2load cannot send: a different body per request.
//! CAPI resends unchanged Clusters (cache hits, each with fresh item UIDs) while new and
//! changed ones miss; this sends that mix over C connections × M concurrent streams.
//!
//! ```sh
//! cargo bench --bench h2mix -- URL BODY_FILE CA_FILE CONNS STREAMS REQUESTS MISS_PERCENT
//! ```
//!
//! Every request gets its own item UIDs; MISS_PERCENT of them also get a settings value
//! never sent before, so no cache can have their answer. Prints one `RESULT` line with
//! req/s, mean, p50, p99 and max in milliseconds, and the error count.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

struct Plan {
    path: String,
    /// The body with fresh item UIDs, in as many variants as wrk-post.lua uses.
    variants: Vec<String>,
    requests: usize,
    miss_percent: usize,
    next: AtomicUsize,
}

impl Plan {
    fn variants(base: &str, count: usize) -> Result<Vec<String>, serde_json::Error> {
        let doc: serde_json::Value = serde_json::from_str(base)?;
        (0..count)
            .map(|v| {
                let mut d = doc.clone();
                if let Some(items) = d.get_mut("items").and_then(|i| i.as_array_mut()) {
                    for (i, item) in items.iter_mut().enumerate() {
                        item["uid"] = format!("{v:08x}-0000-4000-8000-{i:012x}").into();
                    }
                }
                serde_json::to_string(&d)
            })
            .collect()
    }

    /// The body of request `n`: fresh UIDs always, a new settings value for a miss.
    fn body(&self, n: usize) -> Bytes {
        let body = &self.variants[n % self.variants.len()];
        if n % 100 < self.miss_percent {
            return Bytes::from(body.replacen("\"production\"", &format!("\"production-{n}\""), 1));
        }
        Bytes::from(body.clone())
    }
}

#[derive(Default)]
struct Tally {
    micros: Vec<u64>,
    errors: usize,
}

async fn stream_worker(mut send: h2::client::SendRequest<Bytes>, plan: Arc<Plan>) -> Tally {
    let mut tally = Tally::default();
    loop {
        let n = plan.next.fetch_add(1, Ordering::Relaxed);
        if n >= plan.requests {
            return tally;
        }
        let body = plan.body(n);
        let started = Instant::now();
        let ok = async {
            send = send.clone().ready().await.ok()?;
            let req = http::Request::post(plan.path.as_str()).body(()).ok()?;
            let (resp, mut out) = send.send_request(req, false).ok()?;
            out.send_data(body, true).ok()?;
            let resp = resp.await.ok()?;
            let ok = resp.status() == 200;
            let mut data = resp.into_body();
            while let Some(chunk) = data.data().await {
                let chunk = chunk.ok()?;
                let _ = data.flow_control().release_capacity(chunk.len());
            }
            Some(ok)
        }
        .await;
        tally
            .micros
            .push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        if ok != Some(true) {
            tally.errors += 1;
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    // `cargo test --all-targets` runs bench binaries with no arguments.
    if args.len() < 7 {
        println!("h2mix: URL BODY_FILE CA_FILE CONNS STREAMS REQUESTS MISS_PERCENT");
        return Ok(());
    }
    let url: http::Uri = args[0].parse()?;
    let base = std::fs::read_to_string(&args[1])?;
    let ca = std::fs::read(&args[2])?;
    let conns: usize = args[3].parse()?;
    let streams: usize = args[4].parse()?;
    let requests: usize = args[5].parse()?;
    let miss_percent: usize = args[6].parse()?;
    let host = url.host().unwrap_or("localhost").to_string();
    let port = url.port_u16().unwrap_or(443);
    let plan = Arc::new(Plan {
        path: url.to_string(),
        variants: Plan::variants(&base, 1000)?,
        requests,
        miss_percent,
        next: AtomicUsize::new(0),
    });

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert?)?;
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));

    // One thread: the generator shares the machine with the server.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (tally, elapsed) = rt.block_on(async move {
        let mut senders = Vec::new();
        for _ in 0..conns {
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let tls = connector
                .connect(ServerName::try_from(host.clone())?, tcp)
                .await?;
            let (send, conn) = h2::client::handshake(tls).await?;
            tokio::spawn(conn);
            senders.push(send);
        }
        let started = Instant::now();
        let mut tasks = Vec::new();
        for send in &senders {
            for _ in 0..streams {
                tasks.push(tokio::spawn(stream_worker(send.clone(), plan.clone())));
            }
        }
        let mut all = Tally::default();
        for t in tasks {
            let t = t.await?;
            all.micros.extend(t.micros);
            all.errors += t.errors;
        }
        Ok::<_, Box<dyn std::error::Error>>((all, started.elapsed()))
    })?;
    let mut sorted = tally.micros;
    sorted.sort_unstable();
    let mean = sorted.iter().sum::<u64>() as f64 / sorted.len().max(1) as f64 / 1000.0;
    println!(
        "RESULT rps={:.0} mean_ms={:.3} p50_ms={:.3} p99_ms={:.3} max_ms={:.3} errors={}",
        sorted.len() as f64 / elapsed.max(Duration::from_micros(1)).as_secs_f64(),
        mean,
        percentile(&sorted, 0.50),
        percentile(&sorted, 0.99),
        percentile(&sorted, 1.0),
        tally.errors
    );
    Ok(())
}
