//! The accept loop: TCP_NODELAY on every accepted socket, the peer address for the routes, and
//! graceful shutdown.
//!
//! Owns turning a bound listener and a warp filter into a running HTTP/WebSocket server. warp's
//! own `serve` cannot set socket options; without TCP_NODELAY every small reply (an OK, an EOSE)
//! can wait ~40 ms for a delayed ACK (Nagle).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use warp::Filter;
use warp::reply::Reply;

/// The TCP peer of a request, as a request extension (read with [`peer`]).
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

/// A filter extracting the TCP peer of the request.
pub fn peer() -> impl Filter<Extract = (Option<SocketAddr>,), Error = Infallible> + Clone {
    warp::ext::optional::<PeerAddr>().map(|p: Option<PeerAddr>| p.map(|p| p.0))
}

/// Serves `routes` on `listener` until `shutdown` resolves, then waits for open HTTP exchanges
/// (upgraded WebSockets are tracked by their own tasks).
pub async fn serve<F>(listener: tokio::net::TcpListener, routes: F, shutdown: impl Future<Output = ()>)
where
    F: Filter<Error = Infallible> + Clone + Send + Sync + 'static,
    F::Extract: Reply,
{
    let graceful = GracefulShutdown::new();
    let builder = Builder::new(TokioExecutor::new());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let svc = warp::service(routes.clone());
        let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(PeerAddr(peer));
            if req.headers().contains_key(hyper::header::UPGRADE) {
                let on = hyper::upgrade::on(&mut req);
                req.extensions_mut().insert(crate::ws::upgrade::UpgradeSlot::new(on));
            }
            let mut svc = svc.clone();
            tower_service::Service::call(&mut svc, req)
        });
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
