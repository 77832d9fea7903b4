//! The daemon's listening sockets: those whoever started it handed over
//! (systemd's socket activation: `LISTEN_FDS`, the first for `--listen`,
//! the second for `--admin-listen`), else bound to the addresses given.
//!
//! A socket handed over keeps its port across restarts: connections that
//! arrive while the daemon is down wait in the socket's queue for the next
//! one instead of being refused. One handed over bound but not yet
//! listening listens from here on.

use std::io;
use std::net::TcpListener;

use listenfd::ListenFd;

/// The sockets handed over at start, taken one by one.
pub struct Sockets(ListenFd);

/// The connections a socket queues before the daemon accepts them.
const BACKLOG: i32 = 1024;

impl Sockets {
    /// The sockets the environment hands over, if any.
    pub fn from_env() -> Self {
        Self(ListenFd::from_env())
    }

    /// The socket handed over at `index`, listening, else `address` bound;
    /// non-blocking either way.
    pub fn listener(&mut self, index: usize, address: &str) -> io::Result<TcpListener> {
        let listener = match self.0.take_tcp_listener(index)? {
            Some(handed) => {
                let socket = socket2::Socket::from(handed);
                socket.listen(BACKLOG)?;
                socket.into()
            }
            None => TcpListener::bind(address)?,
        };
        listener.set_nonblocking(true)?;
        Ok(listener)
    }
}
