//! Who is billed: the authenticated pubkey, else the client IP address.
//!
//! Owns the [`Principal`] type every admission names. Which IP a request comes from is the
//! transport's to say (see `http::client_ip`).

use std::fmt;
use std::net::IpAddr;

use crate::protocol::PubKey;

/// The identity a request is billed to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Principal {
    /// A NIP-42 / NIP-98 authenticated pubkey.
    Pubkey(PubKey),
    /// An unauthenticated client's address.
    Ip(IpAddr),
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Pubkey(pk) => write!(f, "{pk}"),
            Principal::Ip(ip) => write!(f, "{ip}"),
        }
    }
}
