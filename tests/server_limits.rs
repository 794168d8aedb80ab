//! Limits of the hook listener against the real binary over real TLS, each shown
//! alongside a well-behaved client that keeps being answered: a trickled header, a
//! body that never finishes, a thousand idle connections, the connection cap, idle
//! connections, request bytes in flight, too many HTTP/2 streams, and the shutdown
//! grace period.

use crate::server;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use server::{Proto, Server};

fn connector(ca_pem: &[u8], alpn: &[u8]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert.expect("CA PEM")).expect("CA certificate");
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![alpn.to_vec()];
    TlsConnector::from(Arc::new(cfg))
}

async fn tls_connect(
    srv: &Server,
    ca: &[u8],
    alpn: &[u8],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr(srv)).await?;
    connector(ca, alpn)
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
}

/// A value of the admin listener's /metrics, 0 when the series is not there yet.
async fn metric(srv: &Server, series: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", srv.admin))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

fn refusals(reason: &str) -> String {
    format!("stackhook_hook_listener_refusals_total{{reason=\"{reason}\"}}")
}

/// Reads one HTTP/1.1 answer with a Content-Length body: (status line, body).
async fn read_answer<R: tokio::io::AsyncRead + Unpin>(r: &mut R) -> (String, String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = r.read(&mut chunk).await.expect("read answer");
        assert!(n > 0, "connection closed before a whole answer: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = &text[..end];
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).to_string();
                return (head.lines().next().unwrap_or_default().to_string(), body);
            }
        }
    }
}

fn discovery_json() -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1", "kind": "DiscoveryRequest"})).expect("body")
}

fn addr(srv: &Server) -> String {
    srv.https
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string()
}

async fn discovery_ok(srv: &Server, ca: &[u8]) {
    let client = server::client(ca, Proto::H1);
    let started = Instant::now();
    let resp = client
        .post(srv.url("/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery"))
        .json(&json!({"apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1", "kind": "DiscoveryRequest"}))
        .send()
        .await
        .expect("discovery answered");
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.expect("JSON");
    assert_eq!(body["status"], "Success");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_header_trickled_byte_by_byte_is_cut_off_while_others_are_served() {
    let srv = Server::start(&["--header-read-timeout-seconds", "1"]);
    let ca = srv.ca_pem.clone().expect("self-signed CA");
    let tcp = TcpStream::connect(addr(&srv)).await.expect("connect");
    let mut tls = connector(&ca, b"http/1.1")
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("TLS handshake");
    let header = b"POST /hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";
    let started = Instant::now();
    let mut cut_off = None;
    // Well past the timeout: one byte every 100 ms for up to 6 s.
    for (i, byte) in header.iter().chain(b"a".repeat(60).iter()).enumerate() {
        if i == 5 {
            // The server answers others while this connection trickles.
            discovery_ok(&srv, &ca).await;
        }
        if tls.write_all(&[*byte]).await.is_err() || tls.flush().await.is_err() {
            cut_off = Some(started.elapsed());
            break;
        }
        // A closed connection shows as EOF (or a 408 answer) on read.
        let mut buf = [0u8; 256];
        if let Ok(r) = tokio::time::timeout(Duration::from_millis(100), tls.read(&mut buf)).await {
            match r {
                Ok(0) | Err(_) => {
                    cut_off = Some(started.elapsed());
                    break;
                }
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    assert!(
                        text.starts_with("HTTP/1.1 408"),
                        "unexpected answer: {text}"
                    );
                    cut_off = Some(started.elapsed());
                    break;
                }
            }
        }
    }
    let after = cut_off.expect("the trickling connection was never closed");
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_secs(4),
        "closed after {after:?}; the header timeout is 1 s"
    );
    discovery_ok(&srv, &ca).await;
}

#[tokio::test]
async fn http2_connections_are_told_the_stream_limit_and_extra_streams_wait() {
    let srv = Server::start(&["--http2-max-concurrent-streams", "3"]);
    let ca = srv.ca_pem.clone().expect("self-signed CA");
    let tcp = TcpStream::connect(addr(&srv)).await.expect("connect");
    let tls = connector(&ca, b"h2")
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("TLS handshake");
    let (send, conn) = h2::client::handshake(tls).await.expect("h2 handshake");
    let mut conn = conn;
    // The server's SETTINGS arrive with the first exchange; drive the connection until
    // the limit is known.
    let limit = {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            std::future::poll_fn(|cx| {
                let _ = std::pin::Pin::new(&mut conn).poll(cx);
                std::task::Poll::Ready(())
            })
            .await;
            let n = conn.max_concurrent_send_streams();
            if n == 3 || Instant::now() > deadline {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert_eq!(limit, 3, "SETTINGS_MAX_CONCURRENT_STREAMS");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    // Ten requests over the one connection: all answered, at most three at a time.
    let body = serde_json::to_vec(&json!({"apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1", "kind": "DiscoveryRequest"})).expect("body");
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let mut send = send.clone().ready().await.expect("stream capacity");
        let req = http::Request::post(
            "https://localhost/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery",
        )
        .body(())
        .expect("request");
        let (resp, mut stream) = send.send_request(req, false).expect("stream");
        stream.send_data(bytes_of(&body), true).expect("body sent");
        tasks.push(tokio::spawn(async move {
            let resp = resp.await.expect("response");
            let status = resp.status();
            let mut data = resp.into_body();
            let mut out = Vec::new();
            while let Some(chunk) = data.data().await {
                let chunk = chunk.expect("chunk");
                let _ = data.flow_control().release_capacity(chunk.len());
                out.extend_from_slice(&chunk);
            }
            (status, out)
        }));
    }
    for t in tasks {
        let (status, out) = t.await.expect("task");
        assert_eq!(status, 200);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(v["status"], "Success");
    }
    discovery_ok(&srv, &ca).await;
}

fn bytes_of(b: &[u8]) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(b)
}

/// An unknown path with a body still arriving: curl over HTTP/2 used to report a stream
/// error instead of the 404 about half the time. curl is a real client CAPI users run
/// against the server; the test says so and passes when it is not installed.
#[test]
fn unknown_paths_answer_404_over_http2_even_with_a_body() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("skipping: curl is not installed");
        return;
    }
    let srv = Server::start(&[]);
    let ca = srv.dir.path().join("ca.pem");
    std::fs::write(&ca, srv.ca_pem.clone().expect("self-signed CA")).expect("CA file");
    let body = srv.dir.path().join("body");
    std::fs::write(&body, "x".repeat(256 * 1024)).expect("body file");
    let url = |p: &str| {
        format!(
            "https://localhost:{}{p}",
            addr(&srv).rsplit(':').next().unwrap_or_default()
        )
    };
    let mut codes = Vec::new();
    for _ in 0..15 {
        for path in [
            "/nope/x",
            "/hooks.runtime.cluster.x-k8s.io/v1alpha1/generatepatches/nosuch",
        ] {
            let out = std::process::Command::new("curl")
                .args([
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--http2",
                    "-X",
                    "POST",
                ])
                .arg("--cacert")
                .arg(&ca)
                .arg("--data-binary")
                .arg(format!("@{}", body.display()))
                .arg(url(path))
                .output()
                .expect("curl runs");
            codes.push(format!(
                "{}:{}",
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout)
            ));
        }
    }
    assert!(
        codes.iter().all(|c| c == "0:404"),
        "curl exit:status per call: {codes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_finishes_is_answered_with_a_failure_after_the_read_timeout() {
    let srv = Server::start(&["--body-read-timeout-seconds", "1"]);
    let ca = srv.ca_pem.clone().expect("self-signed CA");
    let mut tls = tls_connect(&srv, &ca, b"http/1.1").await.expect("TLS");
    let started = Instant::now();
    tls.write_all(
        b"POST /hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\"",
    )
    .await
    .expect("head and part of the body");
    tls.flush().await.expect("flush");
    discovery_ok(&srv, &ca).await;
    let (status, body) = read_answer(&mut tls).await;
    let after = started.elapsed();
    assert_eq!(status, "HTTP/1.1 200 OK");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON answer");
    assert_eq!(v["status"], "Failure");
    let message = v["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not arrive within 1s"), "{message}");
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_secs(5),
        "answered after {after:?}; the body timeout is 1 s"
    );
    assert_eq!(metric(&srv, &refusals("body_read_timeout")).await, 1.0);
    assert_eq!(
        metric(&srv, "stackhook_hook_listener_in_flight_bytes").await,
        0.0
    );
    discovery_ok(&srv, &ca).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_do_not_starve_a_client() {
    let srv = Server::start(&[]);
    let ca = srv.ca_pem.clone().expect("self-signed CA");
    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.push(TcpStream::connect(addr(&srv)).await.expect("connect"));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let open = metric(&srv, "stackhook_hook_listener_open_connections").await;
        if open >= 1000.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {open} connections accepted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..5 {
        discovery_ok(&srv, &ca).await;
    }
    assert_eq!(metric(&srv, &refusals("connection_limit")).await, 0.0);
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_closed_and_counted() {
    let srv = Server::start(&["--max-connections", "3"]);
    let ca = srv.ca_pem.clone().expect("self-signed CA");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            tls_connect(&srv, &ca, b"http/1.1")
                .await
                .expect("under the cap"),
        );
    }
    let refused = tls_connect(&srv, &ca, b"http/1.1").await;
    assert!(refused.is_err(), "the fourth connection must be closed");
    assert_eq!(metric(&srv, &refusals("connection_limit")).await, 1.0);
    // A held connection still serves.
    let mut first = held.remove(0);
    let body = discovery_json();
    first
        .write_all(
            format!(
                "POST /hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .expect("head");
    first.write_all(&body).await.expect("body");
    let (status, answer) = read_answer(&mut first).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(answer.contains("\"Success\""), "{answer}");
    // Once one closes, a new client gets in.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if metric(&srv, "stackhook_hook_listener_open_connections").await <= 2.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed connection was not released"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    discovery_ok(&srv, &ca).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_requests_are_closed_after_the_idle_timeout() {
    let srv = Server::start(&["--idle-timeout-seconds", "1"]);
    let ca = srv.ca_pem.clone().expect("self-signed CA");
    // One that never sends a byte after the handshake, one HTTP/2 connection that
    // made a request and then only answers pings.
    let mut silent = tls_connect(&srv, &ca, b"http/1.1").await.expect("TLS");
    let tls = tls_connect(&srv, &ca, b"h2").await.expect("TLS");
    let (send, conn) = h2::client::handshake(tls).await.expect("h2 handshake");
    let h2_conn = tokio::spawn(conn);
    let mut send = send.ready().await.expect("ready");
    let req =
        http::Request::post("https://localhost/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery")
            .body(())
            .expect("request");
    let (resp, mut stream) = send.send_request(req, false).expect("stream");
    stream
        .send_data(bytes_of(&discovery_json()), true)
        .expect("body");
    assert_eq!(resp.await.expect("answer").status(), 200);
    let started = Instant::now();
    discovery_ok(&srv, &ca).await;

    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
        .await
        .expect("the silent connection was not closed");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    let ended = tokio::time::timeout(Duration::from_secs(5), h2_conn)
        .await
        .expect("the idle HTTP/2 connection was not closed");
    assert!(ended.is_ok());
    let after = started.elapsed();
    assert!(after < Duration::from_secs(4), "{after:?}");
    assert!(metric(&srv, &refusals("idle_timeout")).await >= 2.0);
    discovery_ok(&srv, &ca).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bytes_in_flight_are_capped() {
    let srv = Server::start(&[
        "--max-in-flight-bytes",
        "100000",
        "--body-read-timeout-seconds",
        "30",
    ]);
    let ca = srv.ca_pem.clone().expect("self-signed CA");
    // A slow request announcing 80,000 bytes holds them from its header on.
    let mut slow = tls_connect(&srv, &ca, b"http/1.1").await.expect("TLS");
    let mut padded = discovery_json();
    padded.resize(80_000, b' ');
    slow.write_all(
        b"POST /hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery HTTP/1.1\r\nHost: localhost\r\nContent-Length: 80000\r\n\r\n",
    )
    .await
    .expect("head");
    slow.write_all(&padded[..100]).await.expect("first bytes");
    slow.flush().await.expect("flush");
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&srv, "stackhook_hook_listener_in_flight_bytes").await < 80_000.0 {
        assert!(
            Instant::now() < deadline,
            "the slow body was never reserved"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let client = server::client(&ca, Proto::H2);
    let url = srv.url("/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery");
    let mut big = discovery_json();
    big.resize(30_000, b' ');
    let busy: serde_json::Value = client
        .post(&url)
        .body(big.clone())
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    assert_eq!(busy["status"], "Failure");
    let message = busy["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("busy") && message.contains("100000"),
        "{message}"
    );
    assert_eq!(metric(&srv, &refusals("in_flight_bytes")).await, 1.0);
    // Small requests still fit beside the slow one.
    discovery_ok(&srv, &ca).await;

    // The slow body completes and is answered; its bytes are given back.
    slow.write_all(&padded[100..])
        .await
        .expect("rest of the body");
    let (status, answer) = read_answer(&mut slow).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(answer.contains("\"Success\""), "{answer}");
    assert_eq!(
        metric(&srv, "stackhook_hook_listener_in_flight_bytes").await,
        0.0
    );
    let ok: serde_json::Value = client
        .post(&url)
        .body(big)
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    assert_eq!(ok["status"], "Success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_keeps_serving_through_the_grace_period_then_drains() {
    let mut srv = Server::start(&["--shutdown-grace-seconds", "2"]);
    let ca = srv.ca_pem.clone().expect("self-signed CA");
    // In flight across the whole shutdown: its body arrives over about 3.5 s.
    let mut slow = tls_connect(&srv, &ca, b"http/1.1").await.expect("TLS");
    let body = discovery_json();
    slow.write_all(
        format!(
            "POST /hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .expect("head");
    slow.write_all(&body[..10]).await.expect("first bytes");
    slow.flush().await.expect("flush");

    let pid = srv.child.id().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(kill.success());
    let signalled = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ready = reqwest::get(format!("{}/readyz", srv.admin))
        .await
        .expect("readyz");
    assert_eq!(ready.status(), 503, "not ready during the grace period");
    // A new client arriving during the grace period is still served.
    discovery_ok(&srv, &ca).await;
    assert!(signalled.elapsed() < Duration::from_secs(2));

    tokio::time::sleep(Duration::from_millis(2500).saturating_sub(signalled.elapsed())).await;
    let late = tls_connect(&srv, &ca, b"http/1.1").await;
    assert!(late.is_err(), "no new connections after the grace period");

    for byte in &body[10..] {
        slow.write_all(&[*byte]).await.expect("body byte");
        slow.flush().await.expect("flush");
        tokio::time::sleep(Duration::from_millis(1000 / body.len() as u64)).await;
    }
    let (status, answer) = read_answer(&mut slow).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(answer.contains("\"Success\""), "{answer}");
    let exit = srv.child.wait().expect("wait");
    assert_eq!(exit.code(), Some(0));
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "{:?}",
        signalled.elapsed()
    );
}
