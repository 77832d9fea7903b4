//! Clocks on the connections hyper serves: a write that makes no progress
//! for the write timeout fails, and (for HTTP/2) a connection with no
//! request in flight that sends nothing for its idle timeout reads as ended.
//!
//! hyper times the head of an HTTP/1 request, nothing else: without these, a
//! client that stops reading its answers, or an HTTP/2 client that goes
//! silent, holds a connection for good.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `future`'s output, or `None` if it is still pending after `limit`. The
/// timer is set only if the first poll pends, so an answer written at once
/// (nearly all of them) costs no timer.
pub async fn within<F: Future>(limit: Duration, future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut timer: Option<Pin<Box<Sleep>>> = None;
    poll_fn(|cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// The requests of one connection being answered, counted by
/// [`InFlight::enter`]; a connection is idle while it is zero.
#[derive(Clone, Default)]
pub struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    /// Counts a request until the guard drops.
    pub fn enter(&self) -> Entered {
        self.0.fetch_add(1, Ordering::Relaxed);
        Entered(self.0.clone())
    }

    fn is_idle(&self) -> bool {
        self.0.load(Ordering::Relaxed) == 0
    }
}

/// A request in flight; see [`InFlight::enter`].
pub struct Entered(Arc<AtomicUsize>);

impl Drop for Entered {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A timer armed while something waits, disarmed when it makes progress.
struct Stall {
    limit: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl Stall {
    fn new(limit: Duration) -> Self {
        Self { limit, timer: None }
    }

    /// Whether the wait has lasted the limit, arming the timer on its first call.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let limit = self.limit;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        timer.as_mut().poll(cx).is_ready()
    }

    /// Starts the wait again from now, if the timer is armed.
    fn restart(&mut self) {
        if let Some(timer) = &mut self.timer {
            timer.as_mut().reset(Instant::now() + self.limit);
        }
    }

    fn disarm(&mut self) {
        self.timer = None;
    }
}

/// `stream` with a write timeout and, if `idle` is set, an idle timeout
/// over the requests counted in `in_flight`.
pub struct Clocked<S> {
    stream: S,
    writing: Stall,
    idle: Option<(Stall, InFlight)>,
}

impl<S> Clocked<S> {
    /// `stream`, whose writes fail after `write_timeout` without progress.
    pub fn new(stream: S, write_timeout: Duration) -> Self {
        Self {
            stream,
            writing: Stall::new(write_timeout),
            idle: None,
        }
    }

    /// Also ends reads once nothing has been read for `limit` while
    /// `in_flight` counts no request.
    pub fn idle_after(mut self, limit: Duration, in_flight: InFlight) -> Self {
        self.idle = Some((Stall::new(limit), in_flight));
        self
    }

    fn write_progress<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match poll {
            Poll::Pending if self.writing.expired(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
            ready => {
                self.writing.disarm();
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Clocked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let poll = Pin::new(&mut this.stream).poll_read(cx, buf);
        let Some((stall, in_flight)) = &mut this.idle else {
            return poll;
        };
        if poll.is_ready() || !in_flight.is_idle() {
            stall.restart();
            return poll;
        }
        if stall.expired(cx) {
            // As if the client had closed: hyper ends the connection.
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Clocked<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.write_progress(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.write_progress(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_flush(cx);
        self.write_progress(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_shutdown(cx);
        self.write_progress(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn within_gives_up_at_the_limit_and_not_before() {
        let late = within(Duration::from_secs(2), tokio::time::sleep(Duration::from_secs(3)));
        assert_eq!(late.await, None);
        let early = within(Duration::from_secs(2), async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            7
        });
        assert_eq!(early.await, Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_reads_fails_at_the_write_timeout() {
        let (near, _far) = tokio::io::duplex(64);
        let mut clocked = Clocked::new(near, Duration::from_secs(5));
        let started = Instant::now();
        let error = clocked.write_all(&[0; 1024]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_reading_is_not_cut_off() {
        let (near, mut far) = tokio::io::duplex(64);
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            let mut chunk = [0; 64];
            loop {
                tokio::time::sleep(Duration::from_secs(4)).await;
                match far.read(&mut chunk).await.unwrap() {
                    0 => return all.len(),
                    n => all.extend_from_slice(&chunk[..n]),
                }
            }
        });
        let mut clocked = Clocked::new(near, Duration::from_secs(5));
        clocked.write_all(&[0; 256]).await.unwrap();
        drop(clocked);
        assert_eq!(reader.await.unwrap(), 256);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_reads_as_ended_but_not_while_a_request_is_in_flight() {
        let (near, _far) = tokio::io::duplex(64);
        let in_flight = InFlight::default();
        let mut clocked =
            Clocked::new(near, Duration::from_secs(5)).idle_after(Duration::from_secs(3), in_flight.clone());
        let busy = in_flight.enter();
        let mut byte = [0; 1];
        let read = tokio::time::timeout(Duration::from_secs(10), clocked.read(&mut byte)).await;
        assert!(read.is_err(), "a connection with a request in flight is not idle");
        drop(busy);
        let started = Instant::now();
        assert_eq!(clocked.read(&mut byte).await.unwrap(), 0);
        assert!(started.elapsed() <= Duration::from_secs(3));
    }
}
