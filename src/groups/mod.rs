//! NIP-29 relay-based groups: a community's channels.
//!
//! Owns the groups' state ([`state`]), derived from the groups' own stored events folded in one
//! canonical order so that every node and every store backend decide alike, and what the relay
//! says of each group in its signed state events ([`render`]).

pub mod render;
pub mod state;
