//! A TCP forwarder on 127.0.0.1 that a test can cut: the network between a
//! process and its server (a controller and its PostgreSQL ledger) failing
//! and coming back. Cut, it drops every connection it carries and holds
//! new ones open without carrying a byte (a partition, not a refusal: the
//! client waits until its own timeouts); restored, it carries them again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running forwarder.
#[derive(Debug)]
pub struct Forwarder {
    /// Where clients connect.
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    /// Bumped at each cut: connections from before it end.
    generation: watch::Sender<u64>,
    carried: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Forwarder {
    /// Forwards connections to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the forwarder");
        let addr = listener.local_addr().expect("its address");
        let cut = Arc::new(AtomicBool::new(false));
        let (generation, gen_rx) = watch::channel(0u64);
        let carried = Arc::new(AtomicU64::new(0));
        let (c, n) = (cut.clone(), carried.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let (cut, carried, mut gen) = (c.clone(), n.clone(), gen_rx.clone());
                tokio::spawn(async move {
                    let born = *gen.borrow_and_update();
                    if cut.load(Ordering::SeqCst) {
                        // A partition: held, silent, until the next change.
                        let _ = gen.changed().await;
                        drop(client);
                        return;
                    }
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    carried.fetch_add(1, Ordering::SeqCst);
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    tokio::select! {
                        _ = tokio::io::copy(&mut cr, &mut sw) => {}
                        _ = tokio::io::copy(&mut sr, &mut cw) => {}
                        _ = async {
                            while *gen.borrow() == born {
                                if gen.changed().await.is_err() {
                                    std::future::pending::<()>().await;
                                }
                            }
                        } => {}
                    }
                });
            }
        });
        Forwarder {
            addr,
            cut,
            generation,
            carried,
            task,
        }
    }

    /// Cuts the link: every carried connection dropped, new ones held
    /// silent.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Carries new connections again (those held while cut are dropped,
    /// so their clients reconnect).
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Connections carried so far.
    pub fn carried(&self) -> u64 {
        self.carried.load(Ordering::SeqCst)
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
        self.generation.send_modify(|g| *g += 1);
    }
}
