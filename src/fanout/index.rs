//! Which connections an event can concern: the subscriptions indexed by the groups they name.
//!
//! Owns [`Index`]: for each connection, how many of its subscriptions name `#h` groups in every
//! filter (indexed under each group), and how many can match any event (`general`). A chat client
//! holds a subscription per channel, so on a relay of many groups most subscriptions can only
//! match their own group's events; an event is offered to the connections its `h` values index
//! and to those with a general subscription, not to every connection. What is offered is still
//! matched filter by filter: the index only leaves out what cannot match.

use std::collections::HashMap;

use crate::protocol::Filter;

/// A connection, as the registry numbers it.
pub(super) type Conn = u64;

/// The groups a subscription's filters confine it to; `None` when one filter names none (it may
/// match any event).
pub(super) fn groups_of(filters: &[Filter]) -> Option<Vec<String>> {
    let mut groups = Vec::new();
    for filter in filters {
        let hs = filter.tags.get(&'h').filter(|hs| !hs.is_empty())?;
        groups.extend(hs.iter().cloned());
    }
    groups.sort_unstable();
    groups.dedup();
    Some(groups)
}

/// Subscriptions counted per connection: general ones, and those confined to groups.
#[derive(Default)]
pub(super) struct Index {
    general: HashMap<Conn, usize>,
    by_group: HashMap<String, HashMap<Conn, usize>>,
}

fn bump(counts: &mut HashMap<Conn, usize>, conn: Conn, add: bool) {
    if add {
        *counts.entry(conn).or_default() += 1;
    } else if let Some(n) = counts.get_mut(&conn) {
        *n -= 1;
        if *n == 0 {
            counts.remove(&conn);
        }
    }
}

impl Index {
    /// Counts (`add`) or forgets a subscription of `conn` with `filters`.
    pub(super) fn note(&mut self, conn: Conn, filters: &[Filter], add: bool) {
        match groups_of(filters) {
            None => bump(&mut self.general, conn, add),
            Some(groups) => {
                for g in groups {
                    let counts = self.by_group.entry(g.clone()).or_default();
                    bump(counts, conn, add);
                    if counts.is_empty() {
                        self.by_group.remove(&g);
                    }
                }
            }
        }
    }

    /// The connections an event naming groups `hs` may concern, each once; `None` when they are
    /// not many fewer than all `total` connections (walking them all is then as quick).
    pub(super) fn candidates<'a>(&self, hs: impl Iterator<Item = &'a str>, total: usize) -> Option<Vec<Conn>> {
        let mut out: Vec<Conn> = self.general.keys().copied().collect();
        for h in hs {
            out.extend(self.by_group.get(h).into_iter().flat_map(|c| c.keys().copied()));
            if out.len() * 2 > total {
                return None;
            }
        }
        out.sort_unstable();
        out.dedup();
        (out.len() * 2 <= total).then_some(out)
    }
}
