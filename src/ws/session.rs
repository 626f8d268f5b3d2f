//! Per-connection session state, pure and unit-tested: open subscriptions and who is connected.
//!
//! Owns which subscription ids are open on one connection (with a generation, so a query that
//! finishes after its subscription was closed or replaced is dropped), the NIP-42 challenge and
//! the authenticated pubkey.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::limiter::{Billed, Principal};
use crate::protocol::PubKey;

/// State of one WebSocket connection.
#[derive(Debug)]
pub struct Session {
    subs: HashMap<String, u64>,
    next_generation: u64,
    /// The client's address, billed while unauthenticated.
    pub client_ip: IpAddr,
    /// The NIP-42 challenge sent on connect.
    pub challenge: String,
    /// The pubkey this connection authenticated as (NIP-42), if any.
    pub authed: Option<PubKey>,
}

impl Session {
    /// A new connection's session.
    pub fn new(client_ip: IpAddr, challenge: String) -> Session {
        Session { subs: HashMap::new(), next_generation: 0, client_ip, challenge, authed: None }
    }

    /// Who this connection's frames are billed to: the authenticated pubkey, else the IP.
    pub fn principal(&self) -> Principal {
        match self.authed {
            Some(pk) => Principal::Pubkey(pk),
            None => Principal::Ip(self.client_ip),
        }
    }

    /// What this connection's frames bill: its principal, and its IP's ceiling under it.
    pub fn billed(&self) -> Billed {
        Billed::new(self.principal(), self.client_ip)
    }

    /// Opens (or replaces) `sub_id`; refuses a new id beyond `max_subscriptions`.
    pub fn open(&mut self, sub_id: &str, max_subscriptions: usize) -> Result<u64, String> {
        if !self.subs.contains_key(sub_id) && self.subs.len() >= max_subscriptions {
            return Err(format!("too many subscriptions: at most {max_subscriptions} per connection"));
        }
        self.next_generation += 1;
        self.subs.insert(sub_id.to_string(), self.next_generation);
        Ok(self.next_generation)
    }

    /// Closes `sub_id`; true when it was open.
    pub fn close(&mut self, sub_id: &str) -> bool {
        self.subs.remove(sub_id).is_some()
    }

    /// True when `sub_id` is still the subscription opened as `generation`.
    pub fn is_current(&self, sub_id: &str, generation: u64) -> bool {
        self.subs.get(sub_id) == Some(&generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_a_sub_does_not_count_twice_and_bumps_generation() {
        let mut s = Session::new(IpAddr::from([127, 0, 0, 1]), "c".into());
        let g1 = s.open("a", 1).unwrap();
        let g2 = s.open("a", 1).unwrap();
        assert_ne!(g1, g2);
        assert!(!s.is_current("a", g1));
        assert!(s.is_current("a", g2));
        assert!(s.open("b", 1).is_err());
        assert!(s.close("a"));
        assert!(s.open("b", 1).is_ok());
    }
}
