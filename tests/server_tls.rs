//! TLS behaviour of the hook listener: certificate rotation without dropped requests,
//! client-certificate verification, and combined lifecycle handlers in-process.

use crate::server;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use serde_json::json;
use server::{Server, API, PREFIX};

struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = p.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(p, key),
    }
}

/// (certificate PEM, key PEM, certificate DER)
fn leaf(ca: &Ca, cn: &str, client: bool) -> (String, String, Vec<u8>) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = vec![if client {
        ExtendedKeyUsagePurpose::ClientAuth
    } else {
        ExtendedKeyUsagePurpose::ServerAuth
    }];
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem(), cert.der().to_vec())
}

fn discovery_body() -> serde_json::Value {
    json!({"apiVersion": API, "kind": "DiscoveryRequest"})
}

/// Whether the server answers a Discovery call from a new client trusting `server_ca`
/// and presenting `identity` (certificate and key PEM), if any: `false` when the
/// connection is refused. Each try gets its own client and a deadline: a client whose
/// TLS connection is refused after the handshake (TLS 1.3 checks the client's
/// certificate after the client has finished) can, rarely, leave its request waiting
/// on a connection that is gone. Such a hang is the client's, not an answer, so it is
/// tried again, and three in a row fail the test.
async fn answered(url: &str, server_ca: &Ca, identity: Option<(&str, &str)>, h2: bool) -> bool {
    for _ in 0..3 {
        let mut b = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(server_ca.pem.as_bytes()).unwrap())
            .timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(0);
        if let Some((cert, key)) = identity {
            b = b.identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap());
        }
        b = if h2 {
            b.http2_prior_knowledge()
        } else {
            b.http1_only()
        };
        let client = b.build().unwrap();
        match client.post(url).json(&discovery_body()).send().await {
            Ok(resp) => {
                assert_eq!(resp.status().as_u16(), 200);
                let v: serde_json::Value = resp.json().await.unwrap();
                assert_eq!(v["status"], "Success", "{v}");
                return true;
            }
            Err(e) if e.is_timeout() => continue,
            Err(_) => return false,
        }
    }
    panic!("three requests in a row to {url} neither got an answer nor a refusal");
}

fn peer_der(resp: &reqwest::Response) -> Vec<u8> {
    resp.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .expect("peer certificate")
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificate_is_served_without_failed_requests() {
    let ca_a = ca("ca-a");
    let ca_b = ca("ca-b");
    let (cert_a, key_a, der_a) = leaf(&ca_a, "first", false);
    let (cert_b, key_b, der_b) = leaf(&ca_b, "second", false);
    let dir = tempfile::tempdir().unwrap();
    let cert_path = dir.path().join("tls.crt");
    let key_path = dir.path().join("tls.key");
    std::fs::write(&cert_path, &cert_a).unwrap();
    std::fs::write(&key_path, &key_a).unwrap();
    let srv = Server::start(&[
        "--tls-cert-file",
        cert_path.to_str().unwrap(),
        "--tls-key-file",
        key_path.to_str().unwrap(),
        "--tls-reload-interval-seconds",
        "1",
    ]);

    // Trusts both CAs; no pooling, so every request is a new handshake.
    let fresh = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_a.pem.as_bytes()).unwrap())
        .add_root_certificate(reqwest::Certificate::from_pem(ca_b.pem.as_bytes()).unwrap())
        .tls_info(true)
        .http1_only()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    // One long-lived h2 connection opened before the rotation.
    let long_lived = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_a.pem.as_bytes()).unwrap())
        .tls_info(true)
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let url = srv.url(&format!("{PREFIX}/discovery"));
    let first = long_lived
        .post(&url)
        .json(&discovery_body())
        .send()
        .await
        .unwrap();
    assert_eq!(peer_der(&first), der_a);

    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let seen_b = Arc::new(AtomicBool::new(false));
    let looper = {
        let (stop, failures, sent, seen_b, url, fresh) = (
            stop.clone(),
            failures.clone(),
            sent.clone(),
            seen_b.clone(),
            url.clone(),
            fresh.clone(),
        );
        let der_b = der_b.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                match fresh
                    .post(&url)
                    .body(serde_json::to_vec(&discovery_body()).unwrap())
                    .send()
                    .await
                {
                    Ok(r) if r.status().as_u16() == 200 => {
                        if peer_der(&r) == der_b {
                            seen_b.store(true, Ordering::SeqCst);
                        }
                        let v: serde_json::Value = r.json().await.unwrap();
                        if v["status"] != "Success" {
                            failures.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    _ => {
                        failures.fetch_add(1, Ordering::SeqCst);
                    }
                }
                sent.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Replace the files the way a careless writer would: key first, then certificate,
    // so for a moment the pair does not match.
    std::fs::write(&key_path, &key_b).unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    std::fs::write(&cert_path, &cert_b).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen_b.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    looper.await.unwrap();

    assert!(
        seen_b.load(Ordering::SeqCst),
        "new handshakes never presented the new certificate"
    );
    assert_eq!(
        failures.load(Ordering::SeqCst),
        0,
        "requests failed during rotation"
    );
    assert!(sent.load(Ordering::SeqCst) > 10);

    // The connection opened before the rotation still works (not dropped).
    let again = long_lived
        .post(&url)
        .json(&discovery_body())
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 200);
    assert_eq!(
        peer_der(&again),
        der_a,
        "the old connection keeps its session"
    );

    let metrics = reqwest::get(format!("{}/metrics", srv.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("stackhook_tls_certificate_reloads_total 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_required_with_a_client_ca() {
    let server_ca = ca("server-ca");
    let client_ca = ca("client-ca");
    let other_ca = ca("other-ca");
    let (cert, key, _) = leaf(&server_ca, "server", false);
    let (ccert, ckey, _) = leaf(&client_ca, "capi-controller-manager", true);
    let (bad_cert, bad_key, _) = leaf(&other_ca, "intruder", true);
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in [
        ("tls.crt", &cert),
        ("tls.key", &key),
        ("client-ca.crt", &client_ca.pem),
    ] {
        std::fs::write(dir.path().join(name), content).unwrap();
    }
    let p = |n: &str| dir.path().join(n).display().to_string();
    let srv = Server::start(&[
        "--tls-cert-file",
        &p("tls.crt"),
        "--tls-key-file",
        &p("tls.key"),
        "--client-ca-file",
        &p("client-ca.crt"),
    ]);
    let url = srv.url(&format!("{PREFIX}/discovery"));
    for h2 in [false, true] {
        assert!(
            !answered(&url, &server_ca, None, h2).await,
            "a client without a certificate must be refused (h2: {h2})"
        );
        assert!(
            !answered(&url, &server_ca, Some((&bad_cert, &bad_key)), h2).await,
            "a certificate from another CA must be refused (h2: {h2})"
        );
        assert!(
            answered(&url, &server_ca, Some((&ccert, &ckey)), h2).await,
            "the client CA's certificate is accepted (h2: {h2})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_ca_is_trusted_without_a_restart() {
    let server_ca = ca("server-ca");
    let old_ca = ca("client-ca-old");
    let new_ca = ca("client-ca-new");
    let (cert, key, _) = leaf(&server_ca, "server", false);
    let (old_cert, old_key, _) = leaf(&old_ca, "capi-old", true);
    let (new_cert, new_key, _) = leaf(&new_ca, "capi-new", true);
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in [
        ("tls.crt", &cert),
        ("tls.key", &key),
        ("client-ca.crt", &old_ca.pem),
    ] {
        std::fs::write(dir.path().join(name), content).unwrap();
    }
    let p = |n: &str| dir.path().join(n).display().to_string();
    let srv = Server::start(&[
        "--tls-cert-file",
        &p("tls.crt"),
        "--tls-key-file",
        &p("tls.key"),
        "--client-ca-file",
        &p("client-ca.crt"),
        "--tls-reload-interval-seconds",
        "1",
    ]);
    let url = srv.url(&format!("{PREFIX}/discovery"));
    // Over HTTP/2, as CAPI's client speaks.
    let old = Some((old_cert.as_str(), old_key.as_str()));
    let new = Some((new_cert.as_str(), new_key.as_str()));
    let accepted = |who| answered(&url, &server_ca, who, true);
    assert!(accepted(old).await, "the configured CA's client");
    assert!(!accepted(new).await, "not trusted yet");

    // As a Secret volume update does: the new bundle lands whole.
    std::fs::write(dir.path().join("client-ca.tmp"), &new_ca.pem).unwrap();
    std::fs::rename(
        dir.path().join("client-ca.tmp"),
        dir.path().join("client-ca.crt"),
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !accepted(new).await {
        assert!(
            std::time::Instant::now() < deadline,
            "the new client CA was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!accepted(old).await, "the replaced CA's client is refused");

    // A bundle that does not parse keeps the current one.
    std::fs::write(dir.path().join("client-ca.crt"), "garbage").unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(accepted(new).await, "kept after a broken write");
}

#[test]
fn bad_certificate_files_stop_start_up_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("tls.crt");
    let k = dir.path().join("tls.key");
    std::fs::write(&c, "not a certificate").unwrap();
    std::fs::write(&k, "not a key").unwrap();
    let err = server::serve_fails(&[
        std::ffi::OsStr::new("--tls-cert-file"),
        c.as_os_str(),
        std::ffi::OsStr::new("--tls-key-file"),
        k.as_os_str(),
    ]);
    assert!(err.contains("tls.crt: no CERTIFICATE block"), "{err}");
}
