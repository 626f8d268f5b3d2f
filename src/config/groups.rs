//! `[groups]`: NIP-29 relay-based groups, a community's channels.
//!
//! Owns [`GroupsConfig`] and [`GroupCreators`], who may create a group.

use serde::{Deserialize, Serialize};

/// `[groups]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GroupsConfig {
    /// Groups are served (NIP-11 lists 29); off, an `h` tag is an ordinary tag.
    pub enabled: bool,
    /// Who may create a group (kind 9007).
    pub create: GroupCreators,
    /// How far in the past an `h`-tagged event may be dated, in seconds (NIP-29 late
    /// publication; gift wraps keep their randomised dates).
    pub late_secs: u64,
    /// How many `previous` timeline references a group event must carry.
    pub previous_min: usize,
}

impl Default for GroupsConfig {
    fn default() -> Self {
        GroupsConfig { enabled: true, create: GroupCreators::default(), late_secs: 3600, previous_min: 0 }
    }
}

/// `groups.create`: who may create a group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupCreators {
    /// Any key that may write here (authenticated with NIP-42 first where `auth.required` or
    /// `access.mode` asks it of every write); the 9007's signature names its creator.
    #[default]
    Authenticated,
    /// The relay's members only.
    Members,
    /// `admin.pubkeys` only.
    Admins,
}
