//! TLS on the daemon's listeners: a certificate chain and key read from PEM
//! files, read again when they change (cert-manager renews a certificate by
//! replacing its Secret, which the kubelet swaps in place), and optionally a
//! CA that every client's certificate must chain to.
//!
//! A reload is parse → validate → swap: the new pair must parse and the key
//! must be the certificate's, or the configuration in use stays. New
//! connections get the new certificate; open ones keep the session they have.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use prometheus::{IntCounter, Registry};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::metrics::ReloadOutcomes;
use crate::stamp::FileStamp;

/// How often the files are looked at for a change.
const RECHECK: Duration = Duration::from_secs(1);

/// Where the daemon's certificate, its key and the clients' CA are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, the daemon's own certificate first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the first certificate.
    pub key: PathBuf,
    /// PEM CA certificates; when set, every client must present a
    /// certificate that chains to one of them.
    pub client_ca: Option<PathBuf>,
}

/// Why a TLS configuration cannot be used; names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no usable PEM block of the kind it should.
    #[error("{}: {problem}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The pair cannot be served: the key is not the certificate's, or is of
    /// a kind rustls cannot sign with.
    #[error("{} with {}: {problem}", cert.display(), key.display())]
    Pair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The client CA file's certificates cannot verify clients.
    #[error("{}: {problem}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

/// The TLS side of both listeners, shared by every serving thread.
pub struct Tls {
    files: TlsFiles,
    config: ArcSwap<ServerConfig>,
    /// When the files were last looked at, and what they were then.
    seen: Mutex<(Instant, Stamps)>,
    reloads: ReloadOutcomes,
    handshake_failures: IntCounter,
}

type Stamps = [Option<FileStamp>; 3];

impl Tls {
    /// Loads the files; an error names what is wrong, for the daemon to
    /// refuse to start with.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let stamps = stamps(&files);
        let config = server_config(&files)?;
        Ok(Self {
            files,
            config: ArcSwap::from_pointee(config),
            seen: Mutex::new((Instant::now(), stamps)),
            reloads: ReloadOutcomes::new("stormguard_tls", "the TLS certificate, key and client CA files"),
            handshake_failures: IntCounter::new(
                "stormguard_tls_handshake_failures_total",
                "TLS handshakes that failed or timed out: clients that do not trust the daemon's certificate, present no or a wrong client certificate, or speak plain HTTP.",
            )
            .expect("valid metric"),
        })
    }

    /// Adds the TLS families to `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        self.reloads.register(registry)?;
        registry.register(Box::new(self.handshake_failures.clone()))
    }

    /// The acceptor for a new connection, with the files' current contents.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.follow_files();
        TlsAcceptor::from(self.config.load_full())
    }

    /// Counts a handshake that did not complete.
    pub fn handshake_failed(&self) {
        self.handshake_failures.inc();
    }

    /// Reloads if a file changed since it was last looked at, at most once
    /// a second, as the kubelet replaces a mounted Secret. One connection
    /// looks while the others go on with the configuration in use.
    fn follow_files(&self) {
        let mut seen = match self.seen.try_lock() {
            Ok(seen) => seen,
            Err(TryLockError::WouldBlock) => return,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        };
        if seen.0.elapsed() < RECHECK {
            return;
        }
        seen.0 = Instant::now();
        self.check_files(&mut seen.1);
    }

    /// Reloads if the files' stamps differ from `seen`. A change seen while
    /// the files are being replaced (their stamps differ before and after
    /// reading) waits for the next look, so a half-swapped pair is not
    /// counted as a failure.
    fn check_files(&self, seen: &mut Stamps) {
        let before = stamps(&self.files);
        if before == *seen {
            return;
        }
        let loaded = server_config(&self.files);
        if stamps(&self.files) != before {
            return;
        }
        *seen = before;
        self.reloads.record(loaded.is_ok());
        match loaded {
            Ok(config) => {
                self.config.store(Arc::new(config));
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
            }
            Err(error) => {
                tracing::error!(%error, "TLS files not reloaded; the certificate in use stays");
            }
        }
    }
}

fn stamps(files: &TlsFiles) -> Stamps {
    let of = |path: &Path| FileStamp::of(path).ok();
    [
        of(&files.cert),
        of(&files.key),
        files.client_ca.as_deref().and_then(of),
    ]
}

/// The server configuration the files describe, validated whole.
fn server_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let chain = certificates(&files.cert)?;
    let key = private_key(&files.key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions");
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => builder.with_client_cert_verifier(client_verifier(path, provider)?),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| TlsError::Pair {
        cert: files.cert.clone(),
        key: files.key.clone(),
        problem: e.to_string(),
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate in the PEM file at `path`; at least one.
pub(crate) fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_error = |problem: String| TlsError::Pem {
        path: path.to_path_buf(),
        problem,
    };
    let chain = CertificateDer::pem_slice_iter(&read(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(format!("not a PEM certificate file: {e}")))?;
    if chain.is_empty() {
        return Err(pem_error("no CERTIFICATE block".into()));
    }
    Ok(chain)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(&read(path)?).map_err(|e| TlsError::Pem {
        path: path.to_path_buf(),
        problem: format!("no private key (PKCS#8, PKCS#1 or SEC1 PEM block): {e}"),
    })
}

fn client_verifier(
    path: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let ca_error = |problem: String| TlsError::ClientCa {
        path: path.to_path_buf(),
        problem,
    };
    let mut roots = RootCertStore::empty();
    for certificate in certificates(path)? {
        roots
            .add(certificate)
            .map_err(|e| ca_error(format!("not a CA certificate: {e}")))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| ca_error(e.to_string()))
}

#[cfg(test)]
mod tests;
