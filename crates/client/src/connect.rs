//! How the client reaches the daemon beyond its URL: the CA its certificate
//! must chain to, the certificate this process presents, and the
//! service-account token its reports and pace asks carry. Each is a file
//! that Kubernetes rotates in place (cert-manager's Secrets, the kubelet's
//! projected token), so each is read again rather than once.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::ConfigError;

/// How often the TLS files are read again to see whether they changed.
const TLS_RECHECK: Duration = Duration::from_secs(60);

/// TLS towards an `https://` daemon. Empty, the daemon's certificate is
/// checked against the public web CAs built into the library (Mozilla's
/// list) and no client certificate is sent; a daemon with a certificate from
/// a cluster's own CA needs [`ca_file`](Self::ca_file).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaemonTls {
    /// PEM CA certificates the daemon's certificate must chain to, in place
    /// of the built-in ones (e.g. the `ca.crt` of the daemon's cert-manager Secret).
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain this process presents, for a daemon that
    /// requires client certificates; needs [`key_file`](Self::key_file).
    pub cert_file: Option<PathBuf>,
    /// PEM private key of [`cert_file`](Self::cert_file).
    pub key_file: Option<PathBuf>,
}

impl DaemonTls {
    /// Each file's contents, now.
    fn read(&self) -> Result<Contents, ConfigError> {
        let read = |file: &Option<PathBuf>| {
            file.as_deref()
                .map(|path| std::fs::read(path).map_err(|e| tls_error(path, e)))
                .transpose()
        };
        Ok(Contents {
            ca: read(&self.ca_file)?,
            cert: read(&self.cert_file)?,
            key: read(&self.key_file)?,
        })
    }
}

/// What [`DaemonTls`]'s files held when last read.
#[derive(PartialEq, Eq)]
struct Contents {
    ca: Option<Vec<u8>>,
    cert: Option<Vec<u8>>,
    key: Option<Vec<u8>>,
}

type Configure = Box<dyn Fn(reqwest::ClientBuilder) -> reqwest::ClientBuilder + Send + Sync>;

/// The HTTP client for the daemon, built again when its TLS files change
/// (looked at every minute); a change that cannot be used keeps the client
/// in use, and is logged.
pub(crate) struct Connection {
    tls: DaemonTls,
    configure: Configure,
    current: Mutex<Current>,
}

struct Current {
    http: reqwest::Client,
    contents: Contents,
    /// Contents that could not be used, so that they are logged once.
    refused: Option<Contents>,
    checked: Instant,
}

impl Connection {
    /// A client with `tls` and whatever else `configure` sets (timeouts);
    /// a TLS file that cannot be used is an error naming it.
    pub fn new(
        tls: DaemonTls,
        configure: impl Fn(reqwest::ClientBuilder) -> reqwest::ClientBuilder + Send + Sync + 'static,
    ) -> Result<Self, ConfigError> {
        let configure: Configure = Box::new(configure);
        let contents = tls.read()?;
        let http = build(&tls, &contents, &configure)?;
        Ok(Self {
            tls,
            configure,
            current: Mutex::new(Current {
                http,
                contents,
                refused: None,
                checked: Instant::now(),
            }),
        })
    }

    /// The client to send with now.
    pub fn http(&self) -> reqwest::Client {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.checked.elapsed() >= TLS_RECHECK {
            current.checked = Instant::now();
            self.follow_files(&mut current);
        }
        current.http.clone()
    }

    fn follow_files(&self, current: &mut Current) {
        let contents = match self.tls.read() {
            Ok(contents) if contents == current.contents || Some(&contents) == current.refused.as_ref() => {
                return
            }
            Ok(contents) => contents,
            Err(error) => {
                tracing::error!(%error, "stormguard: a TLS file for the daemon cannot be read; the ones read before stay in use");
                return;
            }
        };
        match build(&self.tls, &contents, &self.configure) {
            Ok(http) => {
                tracing::info!("stormguard: the daemon's TLS files changed; new connections use them");
                (current.http, current.contents, current.refused) = (http, contents, None);
            }
            Err(error) => {
                tracing::error!(%error, "stormguard: the daemon's TLS files changed and cannot be used; the ones read before stay in use");
                current.refused = Some(contents);
            }
        }
    }
}

fn tls_error(path: &Path, problem: impl ToString) -> ConfigError {
    ConfigError::Tls {
        file: path.to_path_buf(),
        problem: problem.to_string(),
    }
}

fn build(
    tls: &DaemonTls,
    contents: &Contents,
    configure: &Configure,
) -> Result<reqwest::Client, ConfigError> {
    let mut builder = configure(reqwest::Client::builder());
    if let (Some(path), Some(pem)) = (&tls.ca_file, &contents.ca) {
        let cas = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| tls_error(path, e))?;
        if cas.is_empty() {
            return Err(tls_error(path, "no CERTIFICATE block"));
        }
        builder = builder.tls_built_in_root_certs(false);
        for ca in cas {
            builder = builder.add_root_certificate(ca);
        }
    }
    match (&tls.cert_file, &contents.cert, &contents.key) {
        (Some(path), Some(cert), Some(key)) => {
            let key_file = tls.key_file.as_deref().unwrap_or(path).display();
            let identity = reqwest::Identity::from_pem(&[cert.as_slice(), b"\n", key].concat())
                .map_err(|e| tls_error(path, format!("with the key in {key_file}: {e}")))?;
            builder = builder.identity(identity);
        }
        (None, None, None) => {}
        _ => {
            let path = tls
                .cert_file
                .as_ref()
                .or(tls.key_file.as_ref())
                .expect("one of them is set");
            return Err(tls_error(
                path,
                "a client certificate needs both cert_file and key_file",
            ));
        }
    }
    builder.build().map_err(|e| ConfigError::Tls {
        file: [&tls.ca_file, &tls.cert_file]
            .into_iter()
            .flatten()
            .next()
            .cloned()
            .unwrap_or_else(|| "(no TLS file)".into()),
        problem: e.to_string(),
    })
}

/// The service-account token file reports and pace asks carry, read at
/// each send: the kubelet replaces it well before it expires, and a send
/// is rare enough that reading a small file costs nothing that matters.
#[derive(Debug)]
pub(crate) struct TokenFile {
    path: Option<PathBuf>,
    /// The last read's error, so that a missing file is logged once, not at every send.
    last_error: Mutex<Option<String>>,
}

impl TokenFile {
    pub fn new(path: Option<PathBuf>) -> Self {
        Self {
            path,
            last_error: Mutex::default(),
        }
    }

    /// Adds `Authorization: Bearer` with the token, when there is a file
    /// and it holds one; without, the request goes as it is (a daemon that
    /// requires tokens answers 401, and the reporter keeps the batch).
    pub fn authorize(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let Some(path) = &self.path else { return request };
        let read = std::fs::read_to_string(path)
            .map_err(Unusable::Unreadable)
            .and_then(|text| usable(text.trim()));
        let mut last_error = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
        match read {
            Ok(token) => {
                *last_error = None;
                request.bearer_auth(token)
            }
            Err(error) => {
                let error = error.to_string();
                if last_error.as_ref() != Some(&error) {
                    tracing::error!(file = %path.display(), %error, "stormguard: cannot use the service-account token; reports and pace asks go without it");
                }
                *last_error = Some(error);
                request
            }
        }
    }
}

/// Why a token file's content cannot be sent.
#[derive(Debug, thiserror::Error)]
enum Unusable {
    #[error("{0}")]
    Unreadable(std::io::Error),
    #[error("empty")]
    Empty,
    #[error("holds characters an HTTP header cannot carry")]
    Characters,
}

/// `token`, if a bearer header can carry it.
fn usable(token: &str) -> Result<String, Unusable> {
    if token.is_empty() {
        return Err(Unusable::Empty);
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Unusable::Characters);
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests;
