//! `[access]`: who may publish and who may read (NIP-43 membership), and the three access modes
//! by name.

use serde::{Deserialize, Serialize};

/// `[access]`
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessConfig {
    /// Who may publish and who may read.
    pub mode: AccessMode,
    /// The relay publishes its members: a kind 13534 list, and kind 8000 / 8001 on each add /
    /// remove, signed by its own key (NIP-43). Off by default: it makes every member public.
    pub publish_members: bool,
}

/// `access.mode`: who may publish and who may read. Members are `auth.members` and the list the
/// admin API and NIP-86 keep (`/admin/v1/members`, `allowpubkey`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessMode {
    /// Anyone reads; anyone publishes, unless the member list is not empty (then only members
    /// do, as before there were modes).
    #[default]
    Public,
    /// Only members publish; anyone reads the public kinds.
    MembersWrite,
    /// Reading and publishing both need NIP-42 AUTH (NIP-98 over REST) as a member.
    MembersOnly,
}

impl AccessMode {
    /// Every mode, as written in the configuration.
    pub const ALL: [AccessMode; 3] = [AccessMode::Public, AccessMode::MembersWrite, AccessMode::MembersOnly];

    /// The mode as written in the configuration (`members-only`).
    pub fn name(self) -> &'static str {
        match self {
            AccessMode::Public => "public",
            AccessMode::MembersWrite => "members-write",
            AccessMode::MembersOnly => "members-only",
        }
    }
}

impl<'de> Deserialize<'de> for AccessMode {
    /// One of the three names; anything else is refused with the three listed.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AccessMode, D::Error> {
        let text = String::deserialize(d)?;
        AccessMode::ALL.into_iter().find(|m| m.name() == text.trim()).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "`{text}` is not an access mode: use \"public\", \"members-write\" or \"members-only\""
            ))
        })
    }
}
