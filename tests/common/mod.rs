//! Starting the real `stormguard` binary for end-to-end tests, and laying out
//! a policy directory the way kubelet mounts a ConfigMap.

#![allow(dead_code)]

pub mod budgeted;
pub mod certs;
pub mod faults;
pub mod issuer;
pub mod proxy;
pub mod raw;
pub mod redis;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TOKEN: &str = "test-admin-token";

/// A running daemon; killed when dropped.
pub struct Daemon {
    child: Child,
    pub base: String,
    /// The admin listener's base URL, with `--admin-listen`: the address it
    /// bound, as the daemon logs it (so tests can ask for port 0).
    pub admin_base: Option<String>,
    pub log: Arc<Mutex<String>>,
}

impl Daemon {
    /// Starts `stormguard serve --policy <policy>` plus `extra` flags, with the
    /// admin token set, and waits until it listens.
    pub fn start(policy: &Path, extra: &[&str]) -> Daemon {
        Self::start_with_env(policy, extra, &[("STORMGUARD_ADMIN_TOKEN", TOKEN)])
    }

    pub fn start_with_env(policy: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        Self::spawn(Command::new(env!("CARGO_BIN_EXE_stormguard")), policy, extra, env)
    }

    /// [`start`](Self::start), listening on `reserved`'s socket, handed
    /// over as systemd's socket activation does (`LISTEN_FDS`).
    pub fn start_on(reserved: &Reserved, policy: &Path, extra: &[&str]) -> Daemon {
        use command_fds::{CommandFdExt, FdMapping};
        let mut command = Command::new(env!("CARGO_BIN_EXE_stormguard"));
        let socket = reserved.socket.try_clone().unwrap();
        command
            .fd_mappings(vec![FdMapping {
                parent_fd: socket.into(),
                child_fd: 3,
            }])
            .unwrap()
            .env("LISTEN_FDS", "1")
            .env_remove("LISTEN_PID");
        let listen = [&["--listen", reserved.address()], extra].concat();
        Self::spawn(command, policy, &listen, &[("STORMGUARD_ADMIN_TOKEN", TOKEN)])
    }

    /// Starts the daemon as the unprivileged user `nobody` (through setpriv),
    /// for tests of what root would simply be allowed to read.
    pub fn start_unprivileged(policy: &Path, extra: &[&str]) -> Daemon {
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_stormguard"));
        Self::spawn(command, policy, extra, &[("STORMGUARD_ADMIN_TOKEN", TOKEN)])
    }

    fn spawn(mut command: Command, policy: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        command.arg("serve");
        if !extra.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        command
            .arg("--policy")
            .arg(policy)
            .args(extra)
            .env_remove("STORMGUARD_ADMIN_TOKEN")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("the stormguard binary starts");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        let admin = Arc::new(Mutex::new(None));
        let admin_seen = admin.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("admin API on http") {
                    let address = line[at + "admin API on ".len()..]
                        .split([' ', ','])
                        .next()
                        .unwrap();
                    *admin_seen.lock().unwrap() = Some(address.to_owned());
                }
                if let Some(at) = line.find("serving on http") {
                    let address = line[at + "serving on ".len()..]
                        .split_whitespace()
                        .next()
                        .unwrap()
                        .to_owned();
                    let _ = tx.send(address);
                }
                sink.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("daemon did not start; log:\n{}", log.lock().unwrap()));
        // The admin listener is logged before the public one.
        let admin_base = admin.lock().unwrap().take();
        Daemon {
            child,
            base,
            admin_base,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process's resident memory, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmRSS in /proc/<pid>/status")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `path` on the admin listener of `--admin-listen`.
    pub fn admin_url(&self, path: &str) -> String {
        let base = self
            .admin_base
            .as_ref()
            .expect("the daemon has an admin listener");
        format!("{base}{path}")
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit; its exit code.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("daemon still running after {within:?}");
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Daemon {
    /// Kills the daemon at once (SIGKILL), as an OOM kill or a lost node would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A policy directory mounted the way kubelet mounts a ConfigMap:
/// `retry-policy.yaml -> ..data/retry-policy.yaml`, `..data -> ..<timestamp>/`.
pub struct ConfigMapDir {
    pub dir: tempfile::TempDir,
    generation: u32,
}

pub const KEY: &str = "retry-policy.yaml";

impl ConfigMapDir {
    pub fn new(text: &str) -> Self {
        Self::with_files(&[(KEY, text)])
    }

    /// A volume of several keys, as a Secret's `tls.crt` and `tls.key`.
    pub fn with_files(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut this = Self { dir, generation: 0 };
        let first = this.write_generation(files);
        symlink(&first, this.root().join("..data")).unwrap();
        for (key, _) in files {
            symlink(Path::new("..data").join(key), this.root().join(key)).unwrap();
        }
        this
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn policy(&self) -> PathBuf {
        self.root().join(KEY)
    }

    fn write_generation(&mut self, files: &[(&str, &str)]) -> PathBuf {
        self.generation += 1;
        let name = PathBuf::from(format!("..2026_11_22_05_00_00.{:04}", self.generation));
        std::fs::create_dir(self.root().join(&name)).unwrap();
        for (key, text) in files {
            std::fs::write(self.root().join(&name).join(key), text).unwrap();
        }
        name
    }

    /// Updates the content exactly as kubelet does: a new timestamped
    /// directory, a `..data_tmp` symlink to it renamed over `..data`, then
    /// the old directory removed.
    pub fn update(&mut self, text: &str) {
        self.update_files(&[(KEY, text)]);
    }

    /// As [`update`](Self::update), for a volume of several keys: all change at once.
    pub fn update_files(&mut self, files: &[(&str, &str)]) {
        let old = std::fs::read_link(self.root().join("..data")).unwrap();
        let new = self.write_generation(files);
        symlink(&new, self.root().join("..data_tmp")).unwrap();
        std::fs::rename(self.root().join("..data_tmp"), self.root().join("..data")).unwrap();
        std::fs::remove_dir_all(self.root().join(old)).unwrap();
    }
}

/// Polls `check` every 10 ms until it returns `Some`, for at most `within`.
pub async fn eventually<T, F, Fut>(within: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(value) = check().await {
            return Some(value);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// A loopback address this test holds: a socket bound to it and not
/// listening, so that a client meets a refusal there (nobody is there)
/// and no other test can take its port while it is held. Never a port
/// probed free and bound later: another test could take it between.
///
/// [`Daemon::start_on`] hands the socket to a daemon, as systemd's socket
/// activation does, and the daemon listens on it. Once handed over it
/// keeps listening when that daemon exits: connections then wait in its
/// queue for the next daemon started on it.
pub struct Reserved {
    socket: socket2::Socket,
    address: String,
}

impl Reserved {
    pub fn new() -> Self {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let any_port: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        socket.bind(&any_port.into()).unwrap();
        let address = socket.local_addr().unwrap().as_socket().unwrap().to_string();
        Self { socket, address }
    }

    /// `127.0.0.1:port`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }
}

/// The ETag `url` answers with now.
pub async fn etag_of(url: &str) -> String {
    reqwest::get(url).await.unwrap().headers()["etag"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// A request to the daemon's admin API, with the test token.
pub fn admin(daemon: &Daemon, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .request(method, daemon.url(path))
        .bearer_auth(TOKEN)
}

/// The daemon's `GET /admin/status`, with the test token.
pub async fn admin_status(daemon: &Daemon) -> serde_json::Value {
    admin(daemon, reqwest::Method::GET, "/admin/status")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The daemon's `/metrics` text.
pub async fn metrics(daemon: &Daemon) -> String {
    reqwest::get(daemon.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of an unlabelled sample in a text exposition.
pub fn sample(exposition: &str, name: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A policy whose `inventory` has its send gate on, so its pace can be asked;
/// `payments` is listed without overrides.
pub const GATED_POLICY: &str = "\
defaults:
  maxRetries: 3
services:
  inventory:
    gate:
      enabled: true
  payments: {}
";

pub const SEED_POLICY: &str = include_str!("../../policies/retry-policy.yaml");
