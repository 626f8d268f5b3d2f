//! The client's address: the TCP peer, or what a trusted reverse proxy says it is.
//!
//! Owns resolving the client IP (`X-Forwarded-For` / `Forwarded` are believed only when the TCP
//! peer is in `auth.trusted_proxies`) and the IP block every HTTP route and the WebSocket upgrade
//! check. Pure, unit-tested.

use std::net::{IpAddr, SocketAddr};

use warp::http::HeaderMap;

use super::error::ApiError;
use crate::app::AppState;

/// The address billed and checked when the peer is unknown (never for a real TCP connection).
pub const UNKNOWN: IpAddr = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

/// The client address: the TCP peer, or, when the peer is a trusted proxy, the rightmost
/// address in `X-Forwarded-For` (else `Forwarded: for=`) that is not itself a trusted proxy.
pub fn client_ip(
    peer: Option<IpAddr>,
    x_forwarded_for: Option<&str>,
    forwarded: Option<&str>,
    trusted: &[IpAddr],
) -> Option<IpAddr> {
    let peer = peer?;
    if !trusted.contains(&peer) {
        return Some(peer);
    }
    let from_xff = x_forwarded_for.map(|h| h.split(',').filter_map(|p| p.trim().parse::<IpAddr>().ok()).collect());
    let from_fwd = forwarded.map(|h| {
        h.split([',', ';'])
            .filter_map(|part| {
                let (k, v) = part.trim().split_once('=')?;
                if !k.trim().eq_ignore_ascii_case("for") {
                    return None;
                }
                let v = v.trim().trim_matches('"');
                // `for="[2001:db8::1]:4711"` or `for=192.0.2.1:80`
                let v = v.strip_prefix('[').and_then(|r| r.split(']').next()).unwrap_or(v);
                v.parse::<IpAddr>().ok().or_else(|| v.rsplit_once(':').and_then(|(h, _)| h.parse().ok()))
            })
            .collect()
    });
    let chain: Vec<IpAddr> = from_xff.or(from_fwd).unwrap_or_default();
    Some(chain.into_iter().rev().find(|ip| !trusted.contains(ip)).unwrap_or(peer))
}

/// The client IP of a request from `peer` with `headers`, behind the configured trusted proxies.
pub fn of_request(app: &AppState, peer: Option<SocketAddr>, headers: &HeaderMap) -> Option<IpAddr> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    client_ip(peer.map(|p| p.ip()), header("x-forwarded-for"), header("forwarded"), &app.config.auth.trusted_proxies)
}

/// 403 for a blocked address.
pub fn check_blocked(app: &AppState, ip: Option<IpAddr>) -> Result<(), ApiError> {
    match ip {
        Some(ip) if app.moderation.ip_blocked(&ip) => {
            Err(ApiError::Forbidden("blocked: this address is blocked".into()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_peer_headers_are_ignored() {
        let got = client_ip(Some(ip("10.0.0.9")), Some("1.2.3.4"), None, &[ip("10.0.0.1")]);
        assert_eq!(got, Some(ip("10.0.0.9")));
    }

    #[test]
    fn trusted_proxy_forwards_the_rightmost_untrusted_address() {
        let trusted = [ip("10.0.0.1"), ip("10.0.0.2")];
        let got = client_ip(Some(ip("10.0.0.1")), Some("6.6.6.6, 1.2.3.4, 10.0.0.2"), None, &trusted);
        assert_eq!(got, Some(ip("1.2.3.4")));
    }

    #[test]
    fn forwarded_header_is_used_without_xff() {
        let trusted = [ip("127.0.0.1")];
        let got = client_ip(Some(ip("127.0.0.1")), None, Some(r#"for="[2001:db8::1]:4711";proto=https"#), &trusted);
        assert_eq!(got, Some(ip("2001:db8::1")));
        let got = client_ip(Some(ip("127.0.0.1")), None, Some("for=192.0.2.60:80;by=x"), &trusted);
        assert_eq!(got, Some(ip("192.0.2.60")));
    }

    #[test]
    fn trusted_proxy_without_headers_is_the_client() {
        assert_eq!(client_ip(Some(ip("127.0.0.1")), None, None, &[ip("127.0.0.1")]), Some(ip("127.0.0.1")));
    }
}
