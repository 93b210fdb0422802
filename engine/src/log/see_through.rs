//! Operations whose outcome the log must learn, even if the task that started them is
//! dropped.
//!
//! An append runs in its request's task, and a request's task is dropped when its
//! connection closes. A write or an fdatasync dropped halfway would leave the log
//! waiting for ever: the appender would count the write in flight, `sync_in_flight`
//! would stay set. So each is started as a boxed future and polled in place, and if
//! the caller is dropped first, a task of the log's own finishes it and records its
//! outcome (`SeeThrough`). The common path costs one allocation, no task switch.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::*;

/// `io`, then `done` with its output, seen through to the end (see the module docs).
pub(super) struct SeeThrough<'a, S: Storage, T: 'static, R, D: FnOnce(&Log<S>, T) -> R + Unpin + 'static> {
    log: &'a Log<S>,
    io: Option<Pin<Box<dyn Future<Output = T>>>>,
    done: Option<D>,
}

impl<'a, S: Storage, T: 'static, R, D: FnOnce(&Log<S>, T) -> R + Unpin + 'static> SeeThrough<'a, S, T, R, D> {
    pub(super) fn new(log: &'a Log<S>, io: impl Future<Output = T> + 'static, done: D) -> Self {
        SeeThrough { log, io: Some(Box::pin(io)), done: Some(done) }
    }
}

impl<S: Storage, T: 'static, R, D: FnOnce(&Log<S>, T) -> R + Unpin + 'static> Future for SeeThrough<'_, S, T, R, D> {
    type Output = R;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        let this = self.get_mut();
        let io = this.io.as_mut().expect("polled after completion");
        match io.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(output) => {
                this.io = None;
                let done = this.done.take().expect("done once");
                Poll::Ready(done(this.log, output))
            }
        }
    }
}

impl<S: Storage, T: 'static, R, D: FnOnce(&Log<S>, T) -> R + Unpin + 'static> Drop for SeeThrough<'_, S, T, R, D> {
    fn drop(&mut self) {
        let (Some(io), Some(done)) = (self.io.take(), self.done.take()) else { return };
        // Every log lives in an `Rc` (`Log::open`); were one not, its operation is
        // abandoned with it.
        let Some(log) = self.log.me.upgrade() else { return };
        self.log.ctx.storage.spawn(async move {
            let output = io.await;
            done(&log, output);
        });
    }
}
