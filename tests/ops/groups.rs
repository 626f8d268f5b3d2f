//! NIP-29 groups through the `hearth` binary: a group's state is the fold of its stored events,
//! so a `kill -9` and a move by `hearth export | hearth import` (with the relay's key) leave every
//! rule where it was, its pins (39005) and its banner included.

use std::path::Path;

use crate::binary::GENEROUS;
use crate::common::*;
use crate::datadir::{export, import};
use hearth::protocol::{Event, Keys};
use serde_json::json;

/// The relay's key, kept when the relay moves (`relay.secret_key`).
const RELAY_KEY: &str = "7f7ff03d123792d6ac594bfa67bf6d0c0ab55b6b1fdb6249303fe861f1ccba9a";

fn start(data: &Path) -> (Running, String) {
    let mut env = GENEROUS.to_vec();
    env.push(("HEARTH_RELAY__SECRET_KEY", RELAY_KEY));
    env.push(("HEARTH_STORAGE__DATA_DIR", data.to_str().unwrap()));
    start_with(data.parent().unwrap(), &env)
}

fn to_group(who: &Keys, at: u64, kind: u16, tags: &[&[&str]], content: &str) -> Event {
    let mut all: Vec<&[&str]> = vec![&["h", "den"]];
    all.extend_from_slice(tags);
    sign(who, at, kind, &all, content)
}

async fn as_(addr: &str, who: &Keys) -> Client {
    let url = format!("ws://{addr}/");
    let mut c = Client::connect(&url).await;
    assert_eq!(c.auth(who, &url).await[2], true);
    c
}

/// What the group's rules answer now: the same on every start, whatever came before.
async fn rules_hold(addr: &str, (alice, bob, carol): (&Keys, &Keys, &Keys)) {
    let mut c = as_(addr, carol).await;
    let message = to_group(carol, now(), 9, &[], "let me in");
    assert_ok(&c.publish(&message).await, &message.id.to_hex(), false, "restricted: not a member of this group");
    let waits = c.publish(&to_group(carol, now(), 9021, &[], "")).await;
    assert_eq!(waits[3], "restricted: the group is closed: your join request waits for an admin to let you in");
    let mut b = as_(addr, bob).await;
    let refused = b.publish(&to_group(bob, now(), 9002, &[&["name", "Bob's"]], "")).await;
    assert_eq!(refused[3], "restricted: only the group's admins may edit its metadata");
    assert_eq!(b.publish(&to_group(bob, now(), 9, &[], "a moderator talks")).await[2], true);
    let mut a = as_(addr, alice).await;
    let meta = a.req("m", vec![json!({"kinds": [39000], "#d": ["den"]})]).await;
    assert_eq!(meta[0]["tags"], json!([["d", "den"], ["name", "Den"], ["banner", BANNER], ["restricted"], ["closed"]]));
    // On a connection of its own: the subscription above stays open and may hear the state anew.
    let mut reader = Client::connect(&format!("ws://{addr}/")).await;
    let pins = reader.req("p", vec![json!({"kinds": [39005], "#d": ["den"], "authors": [meta[0]["pubkey"]]})]).await;
    assert_eq!(pins[0]["tags"], json!([["d", "den"], ["a", RECIPES], ["e", "ab".repeat(32)]]));
    let pin = to_group(carol, now(), 9010, &[], "");
    assert_ok(&c.publish(&pin).await, &pin.id.to_hex(), false, "restricted: only the group's admins and moderators");
}

const BANNER: &str = "https://example.com/den.png";
const RECIPES: &str = "30023:1b84c5567b126440995d3ed5aaba0565d71e1834604819ff9c17f5e9d5dd078f:recipes";

#[tokio::test]
async fn a_groups_rules_survive_kill_9_and_a_move_by_export_and_import() {
    let scratch = tempfile::tempdir().unwrap();
    let data = scratch.path().join("a").join("data");
    std::fs::create_dir_all(&data).unwrap();
    let (alice, bob, carol) = (keys(1), keys(2), keys(3));
    let (mut relay, addr) = start(&data);
    let mut a = as_(&addr, &alice).await;
    let t = now();
    for event in [
        to_group(&alice, t - 10, 9007, &[], ""),
        // The same second, and one dated before the last: the order a replay gives them.
        to_group(&alice, t, 9002, &[&["name", "Den"], &["restricted"], &["closed"]], ""),
        to_group(&alice, t, 9002, &[&["name", "Den"], &["banner", BANNER], &["restricted"], &["closed"]], "again"),
        to_group(&alice, t - 3, 9002, &[&["name", "Old"]], ""),
        to_group(&alice, t, 9000, &[&["p", &bob.public_key().to_hex(), "moderator"]], ""),
        to_group(&bob, t, 9010, &[&["a", RECIPES], &["e", &"ab".repeat(32)]], ""),
    ] {
        let ok = a.publish(&event).await;
        assert_eq!(ok[2], true, "{ok}");
    }
    rules_hold(&addr, (&alice, &bob, &carol)).await;
    // kill -9, and back.
    relay.0.kill().unwrap();
    relay.0.wait().unwrap();
    let (relay, addr) = start(&data);
    rules_hold(&addr, (&alice, &bob, &carol)).await;
    drop(relay);
    // Moved: exported, imported into an empty directory, started there with the relay's key.
    let dump = export(&data, None);
    assert_eq!(dump.status.code(), Some(0), "{}", String::from_utf8_lossy(&dump.stderr));
    let moved = scratch.path().join("b").join("data");
    std::fs::create_dir_all(&moved).unwrap();
    let out = import(&moved, &dump.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let (_relay, addr) = start(&moved);
    rules_hold(&addr, (&alice, &bob, &carol)).await;
}
