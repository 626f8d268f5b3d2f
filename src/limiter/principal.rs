//! Who is billed: the authenticated pubkey, else the client IP address; and, under every key,
//! the client's network (its IP ceiling).
//!
//! Owns the [`Principal`] keys the limiter keeps state under and [`Billed`], the pair every
//! admission names. Which IP a request comes from is the transport's to say (see
//! `http::client_ip`).

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use crate::protocol::PubKey;

/// The identity quota state is kept under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Principal {
    /// A NIP-42 / NIP-98 authenticated pubkey.
    Pubkey(PubKey),
    /// An unauthenticated client's address.
    Ip(IpAddr),
    /// The IP ceiling of a network: an IPv4 address, or an IPv6 address masked to
    /// `limits.ipv6_prefix_len` bits, with that length.
    Ceiling(IpAddr, u8),
}

impl Principal {
    /// The ceiling of `ip`: the address itself for IPv4 (and IPv4-mapped IPv6), its first
    /// `ipv6_prefix_len` bits for IPv6.
    pub fn ceiling_of(ip: IpAddr, ipv6_prefix_len: u8) -> Principal {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Principal::Ceiling(IpAddr::V4(v4), 32),
            IpAddr::V6(v6) => {
                let len = ipv6_prefix_len.min(128);
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                Principal::Ceiling(IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask)), len)
            }
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Pubkey(pk) => write!(f, "{pk}"),
            Principal::Ip(ip) => write!(f, "{ip}"),
            Principal::Ceiling(net, len) => write!(f, "{net}/{len}"),
        }
    }
}

/// What one admission bills: the frame's principal (the pubkey it acts for, else the IP) and
/// the client IP, whose ceiling is billed too unless it is exempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Billed {
    /// Who the frame acts for.
    pub principal: Principal,
    /// Where it came from.
    pub ip: IpAddr,
}

impl Billed {
    /// A frame of `principal` from `ip`.
    pub fn new(principal: Principal, ip: IpAddr) -> Billed {
        Billed { principal, ip }
    }

    /// An unauthenticated frame from `ip`.
    pub fn ip(ip: IpAddr) -> Billed {
        Billed { principal: Principal::Ip(ip), ip }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_ceiling_is_its_network_and_ipv4_its_address() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        assert_eq!(Principal::ceiling_of(a, 64), Principal::ceiling_of(b, 64));
        assert_eq!(Principal::ceiling_of(a, 64).to_string(), "2001:db8:1:2::/64");
        assert_ne!(Principal::ceiling_of(a, 128), Principal::ceiling_of(b, 128));
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(Principal::ceiling_of(v4, 64).to_string(), "10.1.2.3/32");
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(Principal::ceiling_of(mapped, 64), Principal::ceiling_of(v4, 64));
        assert_eq!(Principal::ceiling_of(a, 0).to_string(), "::/0");
    }
}
