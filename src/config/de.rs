//! How configuration text becomes typed values: pubkeys (hex or npub), optional addresses and
//! optional pubkeys (an empty string is "not set", as `relay.toml` writes it).
//!
//! Owns the serde adapters the config structs name with `#[serde(with = …)]`; a bad value fails
//! the load with the key it came from.

use std::net::SocketAddr;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};

use crate::protocol::PubKey;

/// A list of strings, each `parse`d, or an error naming the first that is not `what`.
fn list<'de, D: Deserializer<'de>, T>(d: D, parse: impl Fn(&str) -> Option<T>, what: &str) -> Result<Vec<T>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|text| parse(text.trim()).ok_or_else(|| D::Error::custom(format!("{text:?} is not {what}"))))
        .collect()
}

/// A list of pubkeys, each written as hex or npub; serialized as hex.
pub(crate) mod pubkeys {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(keys: &[PubKey], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(keys.iter().map(PubKey::to_hex))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PubKey>, D::Error> {
        list(d, PubKey::parse, "a hex pubkey or npub")
    }
}

/// `""` (not set) as `None`, else `parse`d, or an error saying it is not `what`.
fn optional<'de, D: Deserializer<'de>, T>(
    d: D,
    parse: impl Fn(&str) -> Option<T>,
    what: &str,
) -> Result<Option<T>, D::Error> {
    match String::deserialize(d)?.trim() {
        "" => Ok(None),
        text => parse(text).map(Some).ok_or_else(|| D::Error::custom(format!("{text:?} is not {what}"))),
    }
}

/// An optional pubkey: `""` is none.
pub(crate) mod optional_pubkey {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(key: &Option<PubKey>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&key.map(|k| k.to_hex()).unwrap_or_default())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PubKey>, D::Error> {
        optional(d, PubKey::from_hex, "64 lowercase hex characters")
    }
}

/// An optional socket address: `""` is none.
pub(crate) mod optional_addr {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(addr: &Option<SocketAddr>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&addr.map(|a| a.to_string()).unwrap_or_default())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
        optional(d, resolve, "an address like 127.0.0.1:7778 or localhost:7778")
    }
}

/// A socket address, with a message that shows the expected form.
pub(crate) mod addr {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(addr: &SocketAddr, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(addr)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        let text = String::deserialize(d)?;
        resolve(&text).ok_or_else(|| {
            D::Error::custom(format!("{text:?} is not an address like 127.0.0.1:7777, [::]:7777 or localhost:7777"))
        })
    }
}

/// An address to listen on: an IP and a port, or a host name this machine resolves (its first
/// address: `localhost:7777` is 127.0.0.1:7777 where localhost is IPv4 first).
fn resolve(text: &str) -> Option<SocketAddr> {
    let text = text.trim();
    text.parse().ok().or_else(|| std::net::ToSocketAddrs::to_socket_addrs(text).ok()?.next())
}

/// A list of IP addresses.
pub(crate) mod ips {
    use std::net::IpAddr;

    use super::*;

    pub(crate) fn serialize<S: Serializer>(ips: &[IpAddr], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(ips.iter().map(IpAddr::to_string))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpAddr>, D::Error> {
        list(d, |t| t.parse().ok(), "an IP address")
    }
}
