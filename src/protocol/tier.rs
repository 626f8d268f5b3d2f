//! The quota tiers, as a relay names them to its clients (NIP-11 `hearth_limits.<tier>`, the REST
//! header [`super::TIER_HEADER`]) and as its configuration names them (`[limits.<tier>]`).

use serde::{Deserialize, Serialize};

/// Quota tiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Everyone by default.
    Human,
    /// Pubkeys listed in `limits.agent_pubkeys` (or set to it by an admin).
    Agent,
    /// The IP ceiling: what one client address (an IPv6 /64) may do under all its keys.
    Ip,
}

impl Tier {
    /// Every tier, in report order.
    pub const ALL: [Tier; 3] = [Tier::Human, Tier::Agent, Tier::Ip];

    /// The name, as in `[limits.<tier>]`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Human => "human",
            Tier::Agent => "agent",
            Tier::Ip => "ip",
        }
    }

    /// The tier named `name`.
    pub fn parse(name: &str) -> Option<Tier> {
        Tier::ALL.into_iter().find(|t| t.as_str() == name)
    }
}
