//! The relay's information set live: NIP-11's name, description and icon over the configuration.
//!
//! Owns [`InfoField`] and [`Moderation::set_info`], which NIP-86's `changerelay…` methods call;
//! NIP-11 reads the overrides from the state (`nip11.rs`).

use crate::store::Store;

use super::live::{Moderation, ModerationError};

/// A field of the relay's information an operator sets live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InfoField {
    /// NIP-11 `name`.
    Name,
    /// NIP-11 `description`.
    Description,
    /// NIP-11 `icon`.
    Icon,
}

impl Moderation {
    /// Sets `field` to `value`; what it was set to before, if anything.
    pub async fn set_info(
        &self,
        store: &Store,
        field: InfoField,
        value: String,
    ) -> Result<Option<String>, ModerationError> {
        self.update(store, |s| match field {
            InfoField::Name => s.name.replace(value),
            InfoField::Description => s.description.replace(value),
            InfoField::Icon => s.icon.replace(value),
        })
        .await
    }
}
