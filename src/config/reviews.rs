//! `[moderation]`: what the relay does on its own with what members report.
//!
//! Owns [`ModerationConfig`].

use serde::{Deserialize, Serialize};

/// `[moderation]`
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModerationConfig {
    /// Once this many distinct keys (members, on a relay with a member list) have reported an
    /// event, it is held: served only to its author and the admins until an admin decides.
    /// 0: never.
    pub hold_after_reports: u32,
}
