//! A redis-server of a test's own, on a free loopback port.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server of the test's own, stopped with it.
pub struct Redis {
    pub address: String,
    pub password: Option<String>,
    child: Child,
}

impl Redis {
    /// A fresh server, or `None` where redis-server is missing outside CI.
    pub fn start(password: Option<&str>) -> Option<Redis> {
        if Command::new("redis-server").arg("--version").output().is_err() {
            assert!(
                std::env::var_os("CI").is_none(),
                "redis-server is missing under CI: .ci/run installs Debian's redis-server package"
            );
            eprintln!(
                "SKIPPED: redis-server is not installed (apt-get install -y redis-server); CI runs this test"
            );
            return None;
        }
        let address = super::free_loopback_address();
        let child = spawn(&address, password);
        let redis = Redis {
            address,
            password: password.map(str::to_string),
            child,
        };
        redis.wait_ready();
        Some(redis)
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.address)
    }

    /// Kills the server: its data is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A new, empty server on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.child = spawn(&self.address, self.password.as_deref());
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(&self.address).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {}",
                self.address
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(address: &str, password: Option<&str>) -> Child {
    let (host, port) = address.rsplit_once(':').expect("host:port");
    let mut command = Command::new("redis-server");
    command.args(["--bind", host, "--port", port, "--save", "", "--appendonly", "no"]);
    if let Some(password) = password {
        command.args(["--requirepass", password]);
    }
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts")
}
