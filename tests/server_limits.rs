//! Connection limits of the hook listener against the real binary over real TLS: a
//! client that trickles its header is cut off, HTTP/2 connections are told the stream
//! limit, and well-behaved clients are answered meanwhile.

#[path = "support/server.rs"]
mod server;

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
