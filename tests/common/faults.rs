//! A loopback TCP proxy that makes a network bad on demand: it delays every
//! chunk each way, cuts connections at random, refuses new ones, or holds
//! everything (a partition). In front of several servers it deals
//! connections to them in turn, skipping one that refuses, as a Service's
//! kube-proxy does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the network between the proxy's clients and its servers does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Network {
    /// Passes everything, each chunk `delay` late each way; a new
    /// connection is refused, and a chunk cuts its connection instead of
    /// passing, with probability `loss` each.
    Lossy { delay: Duration, loss: f64 },
    /// Passes nothing, as across a partition: new connections are accepted
    /// and get no answer, and nothing more passes on the old ones. When the
    /// partition heals, the connections it held are cut.
    Partitioned,
}

impl Network {
    /// A network that passes everything at once.
    pub const GOOD: Network = Network::Lossy {
        delay: Duration::ZERO,
        loss: 0.0,
    };
}

/// The proxy; it runs until the test's runtime ends.
pub struct FaultProxy {
    /// Its `host:port`.
    pub address: String,
    network: watch::Sender<Network>,
    servers: Arc<Mutex<Vec<String>>>,
}

impl FaultProxy {
    /// A proxy to `servers` (`host:port` each) over `network`; `seed` makes its losses repeatable.
    pub async fn start(servers: &[&str], network: Network, seed: u64) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (tx, rx) = watch::channel(network);
        let rng = Arc::new(Mutex::new(StdRng::seed_from_u64(seed)));
        let servers = Arc::new(Mutex::new(servers.iter().map(|s| s.to_string()).collect()));
        tokio::spawn(accept(listener, servers.clone(), rx, rng));
        FaultProxy {
            address,
            network: tx,
            servers,
        }
    }

    /// Deals no more connections to `server`, as a Service drops the
    /// endpoint of a pod that is gone: its port may be another server's
    /// by the next connection.
    pub fn forget(&self, server: &str) {
        self.servers.lock().unwrap().retain(|s| s != server);
    }

    /// Changes the network from now on.
    pub fn set(&self, network: Network) {
        self.network.send_replace(network);
    }

    /// A Redis URL through the proxy.
    pub fn redis_url(&self) -> String {
        format!("redis://{}", self.address)
    }
}

type Rng_ = Arc<Mutex<StdRng>>;

fn chance(rng: &Rng_, p: f64) -> bool {
    p > 0.0 && rng.lock().unwrap().random_bool(p.min(1.0))
}

async fn accept(
    listener: TcpListener,
    servers: Arc<Mutex<Vec<String>>>,
    network: watch::Receiver<Network>,
    rng: Rng_,
) {
    let mut next = 0usize;
    loop {
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        let now = *network.borrow();
        match now {
            Network::Partitioned => {
                tokio::spawn(hold(client, network.clone()));
                continue;
            }
            Network::Lossy { loss, .. } if chance(&rng, loss) => continue,
            Network::Lossy { .. } => {}
        }
        let servers = servers.lock().unwrap().clone();
        let mut server = None;
        for i in 0..servers.len() {
            let candidate = &servers[(next + i) % servers.len()];
            if let Ok(stream) = TcpStream::connect(candidate).await {
                server = Some(stream);
                next = (next + i + 1) % servers.len();
                break;
            }
        }
        let Some(server) = server else { continue };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (network, rng) = (network.clone(), rng.clone());
        tokio::spawn(async move {
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::select! {
                () = pipe(client_read, server_write, network.clone(), rng.clone()) => {}
                () = pipe(server_read, client_write, network, rng) => {}
            }
        });
    }
}

/// One direction of a connection: each chunk delivered `delay` after it
/// was read, in order; ends (cutting the connection) on a loss, a
/// partition, or either side closing.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut network: watch::Receiver<Network>,
    rng: Rng_,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    let reader = async {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let read = tokio::select! {
                read = from.read(&mut buffer) => read,
                _ = network.changed() => continue,
            };
            let n = match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let now = *network.borrow();
            match now {
                Network::Partitioned => {
                    healed(&mut network).await;
                    return;
                }
                Network::Lossy { delay, loss } => {
                    if chance(&rng, loss) {
                        return;
                    }
                    let due = tokio::time::Instant::now() + delay;
                    if tx.send((due, buffer[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    };
    tokio::select! {
        () = writer => {}
        () = reader => {}
    }
}

/// Holds `client` unanswered until the partition heals, then cuts it.
async fn hold(client: TcpStream, mut network: watch::Receiver<Network>) {
    healed(&mut network).await;
    drop(client);
}

/// Returns once the network is no longer partitioned.
async fn healed(network: &mut watch::Receiver<Network>) {
    let _ = network.wait_for(|now| *now != Network::Partitioned).await;
}
