//! A redis-server of a test's own, on a free loopback port.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server of the test's own, stopped with it.
pub struct Redis {
    pub address: String,
    pub password: Option<String>,
    /// With TLS only: the directory of its certificate and key (`server.pem`,
    /// `server.key`) and its CA's (`ca.pem`).
    pub tls: Option<tempfile::TempDir>,
    child: Child,
}

impl Redis {
    /// A fresh server, or `None` where redis-server is missing outside CI.
    pub fn start(password: Option<&str>) -> Option<Redis> {
        installed().then(|| Self::spawned(password, None))
    }

    /// A fresh server that speaks TLS only, with a certificate for
    /// `localhost` from a CA of its own; `None` as [`Redis::start`].
    pub fn start_tls() -> Option<Redis> {
        if !installed() {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let ca = super::certs::Ca::new("redis test CA");
        let server = ca.server();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("server.pem"), server.cert).unwrap();
        std::fs::write(dir.path().join("server.key"), server.key).unwrap();
        Some(Self::spawned(None, Some(dir)))
    }

    /// A server on a port the kernel says is free. redis-server binds the
    /// port itself, so another test may take it first: then it exits, and
    /// it is started again on another.
    fn spawned(password: Option<&str>, mut tls: Option<tempfile::TempDir>) -> Redis {
        for _ in 0..5 {
            let address = free_port_now();
            let child = spawn(&address, password, tls.as_ref().map(|d| d.path()));
            let mut redis = Redis {
                address,
                password: password.map(str::to_string),
                tls,
                child,
            };
            if redis.ready() {
                return redis;
            }
            tls = redis.tls.take();
        }
        panic!("redis-server did not start on any of 5 ports");
    }

    /// Its URL: `rediss://localhost:PORT` with TLS, else `redis://HOST:PORT`.
    pub fn url(&self) -> String {
        match self.tls {
            Some(_) => format!("rediss://localhost:{}", self.address.rsplit_once(':').unwrap().1),
            None => format!("redis://{}", self.address),
        }
    }

    /// Clients connected to it other than the one asking (plain servers only).
    pub fn other_clients(&self) -> u64 {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&self.address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        if let Some(password) = &self.password {
            write!(stream, "AUTH {password}\r\n").unwrap();
            let mut ok = [0u8; 5];
            stream.read_exact(&mut ok).unwrap();
        }
        stream.write_all(b"INFO clients\r\n").unwrap();
        let mut reply = String::new();
        let mut buffer = [0u8; 4096];
        while !reply.contains("connected_clients:") || !reply.ends_with("\r\n") {
            let n = stream.read(&mut buffer).unwrap();
            assert!(n > 0, "redis closed the connection: {reply}");
            reply.push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
        let count = reply
            .lines()
            .find_map(|line| line.strip_prefix("connected_clients:"))
            .expect("INFO clients names connected_clients");
        count.trim().parse::<u64>().unwrap() - 1
    }

    /// Kills the server: its data is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A new, empty server on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.child = spawn(
            &self.address,
            self.password.as_deref(),
            self.tls.as_ref().map(|d| d.path()),
        );
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        assert!(self.ready(), "redis-server did not listen on {}", self.address);
    }

    /// Whether this server listens within 10 s: false once it has exited
    /// (its port was taken), and then whoever listens there is not it. A
    /// connection may reach another test's server before this one fails
    /// to bind: it counts only if this one still runs a moment later.
    fn ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            if std::net::TcpStream::connect(&self.address).is_ok() {
                std::thread::sleep(Duration::from_millis(300));
                return self.child.try_wait().unwrap().is_none();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether redis-server is here; outside CI, a test without it is skipped, loudly.
fn installed() -> bool {
    if Command::new("redis-server").arg("--version").output().is_ok() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "redis-server is missing under CI: .ci/run installs Debian's redis-server package"
    );
    eprintln!("SKIPPED: redis-server is not installed (apt-get install -y redis-server); CI runs this test");
    false
}

/// `127.0.0.1:port`, the port free when asked: for a server that binds it itself.
fn free_port_now() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().to_string()
}

fn spawn(address: &str, password: Option<&str>, tls: Option<&std::path::Path>) -> Child {
    let (host, port) = address.rsplit_once(':').expect("host:port");
    let mut command = Command::new("redis-server");
    command.args(["--bind", host, "--save", "", "--appendonly", "no"]);
    match tls {
        None => command.args(["--port", port]),
        Some(dir) => command
            .args(["--port", "0", "--tls-port", port, "--tls-auth-clients", "no"])
            .arg("--tls-cert-file")
            .arg(dir.join("server.pem"))
            .arg("--tls-key-file")
            .arg(dir.join("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(dir.join("ca.pem")),
    };
    if let Some(password) = password {
        command.args(["--requirepass", password]);
    }
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts")
}
