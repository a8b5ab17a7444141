//! Notice streams from polled metadata services: one loop for every cloud.

use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::error::Result;
use crate::model::InterruptionNotice;
use crate::provider::NoticeStream;

/// A metadata service polled for interruption notices.
#[async_trait]
pub trait NoticePoller: Send + 'static {
    /// What it polls, for log lines (`spot/instance-action`, …).
    fn what(&self) -> &'static str;

    /// One poll: the notices not delivered before (the poller remembers what
    /// it sent), or why the poll failed.
    async fn poll(&mut self) -> std::result::Result<Vec<Result<InterruptionNotice>>, String>;
}

/// Runs `poller` every `every` on a background task and streams what it
/// finds. A failed poll is logged (the first and then one in twelve, so that a
/// flapping endpoint does not flood the log) and polled again: it never ends
/// the stream. The task stops when the stream is dropped.
pub fn spawn_poller(mut poller: impl NoticePoller, every: Duration) -> NoticeStream {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut failures: u64 = 0;
        loop {
            if tx.is_closed() {
                return;
            }
            match poller.poll().await {
                Ok(notices) => {
                    failures = 0;
                    for n in notices {
                        if let Ok(n) = &n {
                            tracing::warn!(kind = n.kind.as_str(), deadline = ?n.deadline, source = %n.source, "interruption notice");
                        }
                        if tx.send(n).await.is_err() {
                            return;
                        }
                    }
                }
                Err(why) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(12) {
                        tracing::warn!(failures, error = %why, "polling {} failed; polling again", poller.what());
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = tx.closed() => return,
            }
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|n| (n, rx)) }).boxed()
}
