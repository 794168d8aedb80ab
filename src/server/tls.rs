//! TLS for the hook listener: rustls, TLS 1.2+, ALPN h2 + http/1.1, optional client
//! certificates, and a serving certificate swapped in place when its files change.
//!
//! Reloading works by polling the files' contents rather than watching inotify events:
//! Kubernetes updates Secret volumes through a symlink swap, which file watchers miss or
//! report as a delete, while a content hash sees every change. A half-written pair that
//! does not parse keeps the previous certificate until the next tick.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::ring as provider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {problem}")]
    Pem { path: PathBuf, problem: String },
    #[error("building the TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client CA bundle: {0}")]
    ClientCa(String),
    #[error("generating the self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses a PEM chain and key into a signing identity.
pub fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &Path,
    key_path: &Path,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem {
            path: cert_path.to_path_buf(),
            problem: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Pem {
            path: cert_path.to_path_buf(),
            problem: "no CERTIFICATE block".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Pem {
        path: key_path.to_path_buf(),
        problem: e.to_string(),
    })?;
    let signing = provider::sign::any_supported_type(&key)?;
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match().map_err(|e| TlsError::Pem {
        path: key_path.to_path_buf(),
        problem: format!("key does not match the certificate: {e}"),
    })?;
    Ok(ck)
}

/// Serves whatever certificate is current; the reload task swaps it.
#[derive(Debug)]
pub struct ReloadingResolver {
    current: ArcSwap<CertifiedKey>,
}

impl ResolvesServerCert for ReloadingResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

impl ReloadingResolver {
    pub fn new(key: CertifiedKey) -> Arc<Self> {
        Arc::new(ReloadingResolver {
            current: ArcSwap::from_pointee(key),
        })
    }

    pub fn set(&self, key: CertifiedKey) {
        self.current.store(Arc::new(key));
    }
}

/// A certificate and key pair on disk, with the digest of what was last loaded.
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    digest: [u8; 32],
}

impl CertFiles {
    pub fn load(cert: PathBuf, key: PathBuf) -> Result<(CertFiles, CertifiedKey), TlsError> {
        let c = read(&cert)?;
        let k = read(&key)?;
        let ck = certified_key(&c, &k, &cert, &key)?;
        let digest = digest(&c, &k);
        Ok((CertFiles { cert, key, digest }, ck))
    }

    /// `Ok(Some)` when the files changed and parse, `Ok(None)` when unchanged.
    pub fn reload_if_changed(&mut self) -> Result<Option<CertifiedKey>, TlsError> {
        let c = read(&self.cert)?;
        let k = read(&self.key)?;
        let d = digest(&c, &k);
        if d == self.digest {
            return Ok(None);
        }
        let ck = certified_key(&c, &k, &self.cert, &self.key)?;
        self.digest = d;
        Ok(Some(ck))
    }
}

fn digest(cert: &[u8], key: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(cert);
    h.update([0u8]);
    h.update(key);
    h.finalize().into()
}

/// What the reload task watches: the serving pair and/or the client-CA bundle.
pub struct Watched {
    pub cert: Option<(CertFiles, Arc<ReloadingResolver>)>,
    pub client_ca: Option<(ClientCaFile, Arc<ReloadingClientVerifier>)>,
}

/// Polls the files until `stop` fires, swapping what changed and parses.
pub async fn watch(
    mut watched: Watched,
    interval: Duration,
    reloads: prometheus_client::metrics::counter::Counter,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(100)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => return,
        }
        if let Some((files, resolver)) = &mut watched.cert {
            match files.reload_if_changed() {
                Ok(Some(ck)) => {
                    resolver.set(ck);
                    reloads.inc();
                    tracing::info!(cert = %files.cert.display(), "serving certificate reloaded");
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "certificate files changed but do not load yet; keeping the current certificate")
                }
            }
        }
        if let Some((file, verifier)) = &mut watched.client_ca {
            match file.reload_if_changed() {
                Ok(Some(v)) => {
                    verifier.set(v);
                    reloads.inc();
                    tracing::info!(client_ca = %file.path.display(), "client CA bundle reloaded");
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "client CA bundle changed but does not load yet; keeping the current one")
                }
            }
        }
    }
}

/// The client-CA bundle given with `--client-ca-file`, with the digest of what was
/// last loaded, so it can be re-read like the serving certificate.
pub struct ClientCaFile {
    pub path: PathBuf,
    digest: [u8; 32],
}

impl ClientCaFile {
    /// Loads the bundle; the file must hold at least one certificate.
    pub fn load(path: PathBuf) -> Result<(ClientCaFile, Arc<dyn ClientCertVerifier>), TlsError> {
        let pem = read(&path)?;
        let verifier = client_verifier(&pem, &path)?;
        let digest = digest(&pem, &[]);
        Ok((ClientCaFile { path, digest }, verifier))
    }

    /// `Ok(Some)` when the bundle changed and parses, `Ok(None)` when unchanged.
    pub fn reload_if_changed(&mut self) -> Result<Option<Arc<dyn ClientCertVerifier>>, TlsError> {
        let pem = read(&self.path)?;
        let d = digest(&pem, &[]);
        if d == self.digest {
            return Ok(None);
        }
        let verifier = client_verifier(&pem, &self.path)?;
        self.digest = d;
        Ok(Some(verifier))
    }
}

fn client_verifier(pem: &[u8], path: &Path) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            problem: e.to_string(),
        })?;
        roots
            .add(cert)
            .map_err(|e| TlsError::ClientCa(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TlsError::ClientCa(format!(
            "{} holds no certificate",
            path.display()
        )));
    }
    WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(provider::default_provider()),
    )
    .build()
    .map_err(|e| TlsError::ClientCa(e.to_string()))
}

/// Verifies client certificates against whichever CA bundle is current; the reload
/// task swaps it, so a rotated CA takes effect without a restart and without dropping
/// open connections.
#[derive(Debug)]
pub struct ReloadingClientVerifier {
    current: ArcSwap<Arc<dyn ClientCertVerifier>>,
}

impl ReloadingClientVerifier {
    pub fn new(verifier: Arc<dyn ClientCertVerifier>) -> Arc<Self> {
        Arc::new(ReloadingClientVerifier {
            current: ArcSwap::from_pointee(verifier),
        })
    }

    pub fn set(&self, verifier: Arc<dyn ClientCertVerifier>) {
        self.current.store(Arc::new(verifier));
    }

    fn inner(&self) -> Arc<dyn ClientCertVerifier> {
        Arc::clone(&self.current.load())
    }
}

impl ClientCertVerifier for ReloadingClientVerifier {
    /// No hints: they would have to borrow from a bundle that may be swapped. Go's TLS
    /// client (CAPI's) offers its certificate whenever the hint list is empty.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner().supported_verify_schemes()
    }
}

/// The server's rustls configuration.
pub fn server_config(
    resolver: Arc<ReloadingResolver>,
    client_verifier: Option<Arc<ReloadingClientVerifier>>,
) -> Result<ServerConfig, TlsError> {
    let crypto = Arc::new(provider::default_provider());
    let builder = ServerConfig::builder_with_provider(crypto)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match client_verifier {
        None => builder.with_no_client_auth(),
        Some(verifier) => builder.with_client_cert_verifier(verifier),
    };
    let mut cfg = builder.with_cert_resolver(resolver);
    // No session resumption: a resumed session skips the certificate, so after a
    // rotation clients would go on trusting the old one. CAPI's Go client does not
    // resume sessions anyway, so this costs it nothing.
    cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    cfg.send_tls13_tickets = 0;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// A generated CA and a serving certificate it signed, for zero-configuration start-up.
pub struct SelfSigned {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// Generates a CA and a leaf for `localhost`, loopback addresses and `extra_sans`.
pub fn self_signed(extra_sans: &[String]) -> Result<SelfSigned, TlsError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "stackhook self-signed CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);

    let mut sans = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    sans.extend(extra_sans.iter().cloned());
    let leaf_key = KeyPair::generate()?;
    let mut leaf_params = CertificateParams::new(sans)?;
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "stackhook");
    let leaf = leaf_params.signed_by(&leaf_key, &issuer)?;
    Ok(SelfSigned {
        ca_pem: ca_cert.pem(),
        cert_pem: leaf.pem(),
        key_pem: leaf_key.serialize_pem(),
    })
}

/// Writes the self-signed material to `dir` (`ca.crt`, `tls.crt`, `tls.key`).
pub fn write_self_signed(
    dir: &Path,
    s: &SelfSigned,
) -> Result<(PathBuf, PathBuf, PathBuf), TlsError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TlsError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(err(dir))?;
    let ca = write_file(dir, "ca.crt", s.ca_pem.as_bytes(), 0o644).map_err(err(dir))?;
    let cert = write_file(dir, "tls.crt", s.cert_pem.as_bytes(), 0o644).map_err(err(dir))?;
    // The key is created 0600 in a temporary file and renamed into place, so it is
    // never readable by others, not even between the write and a chmod.
    let key = write_file(dir, "tls.key", s.key_pem.as_bytes(), 0o600).map_err(err(dir))?;
    Ok((ca, cert, key))
}

/// Writes `dir/name` whole: a new file with `mode` beside it, then a rename.
fn write_file(dir: &Path, name: &str, content: &[u8], mode: u32) -> std::io::Result<PathBuf> {
    use std::io::Write;
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        open.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let _ = std::fs::remove_file(&tmp);
    let result = open.open(&tmp).and_then(|mut f| {
        f.write_all(content)?;
        f.sync_all()
    });
    match result.and_then(|()| std::fs::rename(&tmp, &path)) {
        Ok(()) => Ok(path),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0)
    }

    #[test]
    fn the_key_is_written_owner_only_and_replaces_an_open_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        // A key left world-readable by someone else: rewriting must not keep its mode.
        let stale = dir.path().join("tls.key");
        std::fs::write(&stale, "old").expect("write");
        std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let ss = self_signed(&[]).expect("self-signed");
        let (ca, cert, key) = write_self_signed(dir.path(), &ss).expect("written");
        assert_eq!(mode(&key), 0o600);
        assert_eq!(std::fs::read_to_string(&key).expect("key"), ss.key_pem);
        assert_eq!(std::fs::read_to_string(&ca).expect("ca"), ss.ca_pem);
        assert_eq!(std::fs::read_to_string(&cert).expect("cert"), ss.cert_pem);
        // Nothing but the three files is left behind.
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        names.sort();
        assert_eq!(names, ["ca.crt", "tls.crt", "tls.key"]);
    }
}
