//! The socket under a TLS stream, buffered both ways. rustls reads at most 4 KiB of
//! ciphertext per call and writes each record as it seals it; straight on the socket
//! that is a syscall per 4 KiB read and one per record written. Reads go through a
//! 64 KiB buffer, and writes gather in one until it is full or the connection flushes
//! (the writer flushes once per response frame), so a fetch response's records leave
//! in a few large sends.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};

use crate::limits::TLS_SOCKET_BUFFER_BYTES;

/// Buffers writes to `S`; reads pass through (wrap in a `BufReader` for those).
pub struct WriteBuffered<S> {
    inner: S,
    out: Vec<u8>,
    /// How much of `out` the socket has taken.
    written: usize,
}

impl<S> WriteBuffered<S> {
    pub fn new(inner: S) -> WriteBuffered<S> {
        WriteBuffered { inner, out: Vec::with_capacity(TLS_SOCKET_BUFFER_BYTES), written: 0 }
    }
}

impl<S: AsyncWrite + Unpin> WriteBuffered<S> {
    /// Sends what is buffered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.out.len() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.out[self.written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.out.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteBuffered<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteBuffered<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.out.len() + buf.len() > TLS_SOCKET_BUFFER_BYTES && !this.out.is_empty() {
            match this.poll_drain(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        let take = buf.len().min(TLS_SOCKET_BUFFER_BYTES.saturating_sub(this.out.len()).max(1));
        this.out.extend_from_slice(&buf[..take]);
        Poll::Ready(Ok(take))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if this.out.len() + total > TLS_SOCKET_BUFFER_BYTES && !this.out.is_empty() {
            match this.poll_drain(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        let mut taken = 0;
        for buf in bufs {
            let room = TLS_SOCKET_BUFFER_BYTES.saturating_sub(this.out.len());
            if room == 0 && taken > 0 {
                break;
            }
            let take = buf.len().min(room.max(1));
            this.out.extend_from_slice(&buf[..take]);
            taken += take;
            if take < buf.len() {
                break;
            }
        }
        Poll::Ready(Ok(taken))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.poll_drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.poll_drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_close(cx),
            other => other,
        }
    }
}

/// A socket buffered both ways.
pub type Buffered<S> = futures_lite::io::BufReader<WriteBuffered<S>>;

pub fn buffered<S: AsyncRead + AsyncWrite + Unpin>(stream: S) -> Buffered<S> {
    futures_lite::io::BufReader::with_capacity(TLS_SOCKET_BUFFER_BYTES, WriteBuffered::new(stream))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::{AsyncReadExt, AsyncWriteExt};

    // Writes gather until a flush (or a full buffer), then all of them arrive, in
    // order; reads pass through.
    #[test]
    fn writes_gather_until_flushed() {
        futures_lite::future::block_on(async {
            let mut sink = WriteBuffered::new(futures_lite::io::Cursor::new(Vec::new()));
            sink.write_all(b"hello ").await.unwrap();
            let big = vec![7u8; TLS_SOCKET_BUFFER_BYTES + 10];
            assert!(sink.inner.get_ref().is_empty());
            sink.write_all(&big).await.unwrap();
            sink.write_all(b"world").await.unwrap();
            sink.flush().await.unwrap();
            let written = sink.inner.get_ref();
            assert_eq!(written.len(), 6 + big.len() + 5);
            assert!(written.starts_with(b"hello ") && written.ends_with(b"world"));
            let mut source = buffered(futures_lite::io::Cursor::new(b"abc".to_vec()));
            let mut read = String::new();
            source.read_to_string(&mut read).await.unwrap();
            assert_eq!(read, "abc");
        });
    }
}
