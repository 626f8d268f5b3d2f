//! NIP-11 relay information document.
//!
//! Owns the JSON served at `GET /` with `Accept: application/nostr+json`: the `[info]` fields,
//! the NIPs hearth actually implements, and `limitation` built from the live configuration.

use serde::Serialize;

use crate::config::{AccessMode, Config, LimitsConfig, TierLimits};
use crate::moderation::Moderation;
use crate::protocol::PubKey;

/// NIPs implemented end to end, whatever the configuration.
pub const SUPPORTED_NIPS: &[u16] = &[1, 9, 11, 17, 40, 42, 45, 56, 59, 62, 70, 77];
/// NIP-43 membership (join, leave, invites): listed when `access.mode` is a members mode.
const MEMBERSHIP: u16 = 43;
/// NIP-50 search: listed when `storage.search` is on.
const SEARCH: u16 = 50;

/// The NIP-11 document.
#[derive(Debug, Serialize)]
pub struct RelayInfo {
    pub(crate) name: String,
    pub(crate) description: String,
    /// The operator's pubkey, else the relay's own (see [`RelayInfo::new`]).
    pubkey: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    contact: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) icon: String,
    /// The relay's own pubkey, which signs its NIP-43 events.
    #[serde(rename = "self")]
    self_pubkey: String,
    supported_nips: Vec<u16>,
    software: &'static str,
    version: &'static str,
    limitation: Limitation,
    /// hearth's own per-tier quotas (no NIP describes rate limits; clients ignore unknown fields);
    /// absent when the limiter is off, so that clients do not pace for quotas nobody enforces.
    #[serde(skip_serializing_if = "Option::is_none")]
    hearth_limits: Option<HearthLimits>,
    /// NIP-29's own object: subgroups (`parent`) are kept; absent with groups off.
    #[serde(skip_serializing_if = "Option::is_none")]
    nip29: Option<Nip29>,
    /// Who may publish, in hearth's words, and what a non-member may still send: absent on a
    /// relay anyone writes to.
    #[serde(skip_serializing_if = "Option::is_none")]
    hearth_access: Option<HearthAccess>,
    /// Where media goes (no NIP says where a relay's Blossom server is): the relay's own HTTP
    /// address serves Blossom when `media.enabled`; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    hearth_media: Option<HearthMedia>,
}

/// NIP-11's `nip29` object.
#[derive(Debug, Serialize)]
struct Nip29 {
    subgroups: bool,
}

/// A relay only members write to, and the members' mail it takes from anyone.
#[derive(Debug, Serialize)]
struct HearthAccess {
    /// `access.mode`.
    mode: &'static str,
    /// Kinds a non-member may publish when their one `p` tag names a member: zap receipts and
    /// gift wraps (a gift wrap from an authenticated connection).
    members_mail_kinds: [u16; 2],
}

/// The media server, as NIP-11 describes it.
#[derive(Debug, Serialize)]
struct HearthMedia {
    /// `server.public_url` as an HTTP URL when set; `null`: this document's own address.
    server: Option<String>,
    /// Blossom BUDs served.
    buds: [u8; 6],
    max_blob_bytes: u64,
    /// Empty: any type.
    allowed_types: Vec<String>,
    /// `members` or `anyone`.
    upload: crate::config::Uploaders,
    /// Reads need a member's `get` authorization (`members-only`).
    auth_required_to_read: bool,
}

#[derive(Debug, Serialize)]
struct HearthLimits {
    human: TierLimits,
    agent: TierLimits,
    /// The IP ceiling under every key of one address.
    ip: TierLimits,
}

#[derive(Debug, Serialize)]
struct Limitation {
    max_message_length: usize,
    max_subscriptions: usize,
    max_filters: usize,
    max_limit: u64,
    default_limit: u64,
    max_subid_length: usize,
    max_event_tags: usize,
    max_content_length: usize,
    min_pow_difficulty: u32,
    auth_required: bool,
    payment_required: bool,
    restricted_writes: bool,
    created_at_lower_limit: u64,
    created_at_upper_limit: u64,
}

impl RelayInfo {
    /// The document for `config`, with the live `limits` and the operator's overrides.
    pub fn new(config: &Config, limits: LimitsConfig, moderation: &Moderation, self_pubkey: &PubKey) -> RelayInfo {
        let lim = &config.limitation;
        let state = moderation.snapshot();
        RelayInfo {
            name: state.name.unwrap_or_else(|| config.info.name.clone()),
            description: state.description.unwrap_or_else(|| config.info.description.clone()),
            // NIP-29 clients look the key that signs a group's state up here (nostr-tools'
            // `fetchGroupMetadataEvent` asks for `authors: [pubkey]`): without an operator's
            // key configured, the relay's own is the one to name.
            pubkey: config.info.pubkey.unwrap_or(*self_pubkey).to_hex(),
            contact: config.info.contact.clone(),
            icon: state.icon.unwrap_or_else(|| config.info.icon.clone()),
            self_pubkey: self_pubkey.to_hex(),
            supported_nips: {
                let mut nips = SUPPORTED_NIPS.to_vec();
                if moderation.mode() != AccessMode::Public {
                    nips.push(MEMBERSHIP);
                }
                if config.storage.search {
                    nips.push(SEARCH);
                }
                if config.groups.enabled {
                    nips.push(29);
                }
                nips.sort_unstable();
                nips
            },
            software: "hearth",
            version: env!("CARGO_PKG_VERSION"),
            limitation: Limitation {
                max_message_length: lim.max_message_length,
                max_subscriptions: lim.max_subscriptions,
                max_filters: lim.max_filters,
                max_limit: lim.max_limit,
                default_limit: lim.default_limit,
                max_subid_length: lim.max_subid_length,
                max_event_tags: lim.max_event_tags,
                max_content_length: lim.max_content_length,
                min_pow_difficulty: 0,
                // A members-only relay answers nothing before AUTH.
                auth_required: config.auth.required || moderation.mode() == AccessMode::MembersOnly,
                payment_required: false,
                restricted_writes: moderation.restricted_writes(),
                created_at_lower_limit: lim.created_at_lower_limit,
                created_at_upper_limit: lim.created_at_upper_limit,
            },
            nip29: config.groups.enabled.then_some(Nip29 { subgroups: true }),
            hearth_access: moderation.restricted_writes().then(|| HearthAccess {
                mode: moderation.mode().name(),
                members_mail_kinds: [crate::protocol::private::ZAP_RECEIPT.0, crate::protocol::Kind::GIFT_WRAP.0],
            }),
            hearth_limits: limits.enabled.then_some(HearthLimits {
                human: limits.human,
                agent: limits.agent,
                ip: limits.ip,
            }),
            hearth_media: config.media.enabled.then(|| HearthMedia {
                server: Some(config.server.public_url.trim_end_matches('/'))
                    .filter(|u| !u.is_empty())
                    .map(|u| u.replacen("wss://", "https://", 1).replacen("ws://", "http://", 1)),
                buds: [1, 2, 4, 6, 11, 12],
                max_blob_bytes: config.media.max_blob_bytes,
                allowed_types: config.media.allowed_types.clone(),
                upload: config.media.uploaders(moderation.mode() != AccessMode::Public),
                auth_required_to_read: moderation.mode() == AccessMode::MembersOnly,
            }),
        }
    }
}
