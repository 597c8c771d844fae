//! A bound on open connections: each accepted connection holds a permit
//! until it closes; one accepted while none is left is closed at once
//! (its client sees the connection drop, `UNAVAILABLE`), so a flood of
//! connections cannot take the server's memory and file handles.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::Connected;

/// Accepted connections, at most `max` open at once.
pub(crate) struct Bounded<S> {
    inner: S,
    open: Arc<Semaphore>,
    max: usize,
}

impl<S> Bounded<S> {
    pub(crate) fn new(inner: S, max: usize) -> Bounded<S> {
        Bounded {
            inner,
            open: Arc::new(Semaphore::new(max)),
            max,
        }
    }
}

impl<S, IO, E> Stream for Bounded<S>
where
    S: Stream<Item = Result<IO, E>> + Unpin,
{
    type Item = Result<Counted<IO>, E>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            let io = match Pin::new(&mut this.inner).poll_next(cx) {
                Poll::Ready(Some(Ok(io))) => io,
                other => return other.map(|item| item.map(|r| r.map(Counted::unbounded))),
            };
            match Arc::clone(&this.open).try_acquire_owned() {
                Ok(permit) => return Poll::Ready(Some(Ok(Counted::new(io, permit)))),
                Err(_) => {
                    tracing::warn!(
                        limit = this.max,
                        "a connection was closed: the server has as many open as it may"
                    );
                    drop(io);
                }
            }
        }
    }
}

/// A connection and the permit it holds while open.
pub(crate) struct Counted<IO> {
    io: IO,
    _permit: Option<OwnedSemaphorePermit>,
}

impl<IO> Counted<IO> {
    fn new(io: IO, permit: OwnedSemaphorePermit) -> Counted<IO> {
        Counted {
            io,
            _permit: Some(permit),
        }
    }

    /// Never made: an accepted connection always takes a permit. The
    /// accept errors the stream passes on hold no connection.
    fn unbounded(io: IO) -> Counted<IO> {
        Counted { io, _permit: None }
    }
}

impl<IO: Connected> Connected for Counted<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Counted<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Counted<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
