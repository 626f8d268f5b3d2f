//! The operator's state, set live through the admin API, as named parts: bans (`bans.rs`),
//! members and invites (`members.rs`), the relay's information (`info.rs`), limit and tier
//! overrides (`limits.rs`), reviews and holds (`reviews.rs`) and vanished keys (`vanished.rs`),
//! each with the named methods the admin API and the publish path call; the stored document they
//! are parts of (`state.rs`).
//!
//! Owns [`Moderation`]: the one live copy of the state, [`Moderation::judge`] (what the publish
//! path asks of every event), and the state's persistence as one JSON document in the store's
//! settings (so it survives a restart). Every change goes through one private `update`, which
//! only the parts call: nothing outside this folder changes the state by a closure. It does not
//! decide who may change it: that is the admin module's.
//!
//! With the Redis backend the document is also the nodes' shared one (`cluster::document`): a
//! change is written there first, by compare-and-set on its version, and only then applied here;
//! every node [`Moderation::refresh`]es from it (the relay asks four times a second), so a ban, a
//! tier or a limit set on one node holds on all within a second. A Redis that lost the document
//! (a restart without persistence) is given this node's copy back.

mod bans;
mod info;
mod limits;
mod live;
mod members;
mod reviews;
mod state;
mod vanished;

pub use info::InfoField;
pub use live::{Moderation, ModerationError, Verdict};
pub use state::{Invite, Reviewed, State};
