//! `crash`: the relay killed with SIGKILL at seeded random moments while clients publish, started
//! again on the same data directory each time, and checked against what it acknowledged.
//!
//! One round in [`STOP_EVERY`] is a stop cut short instead: SIGTERM, then SIGKILL a random few
//! milliseconds later, so that kills land in the stop's own work (the last group commit, sled's
//! flush, the checkpoint that reopens sled and writes its snapshot) as an impatient supervisor's
//! would; half of those aim at the moment sled writes its snapshot file, a window of well under a
//! millisecond that random delays hardly ever meet (a kill there once left a store that would not
//! open).
//!
//! Three connections publish notes (some with a NIP-40 expiration a day ahead), versions of their
//! author's profile (kind 0) and NIP-09 deletions of their own earlier notes, one at a time each,
//! until the kill. After every start: each acknowledged note that no deletion (sent, acknowledged
//! or not) targets is served by id and by author; no target of an acknowledged deletion is served;
//! each author's profile is the newest acknowledged version or a newer one; nothing is served
//! twice; and the relay was listening within the start deadline.
//!
//! With `power_cut`, each kill is a power cut: the relay runs with
//! [`hearth::store::format::power_cut::POWER_CUT_MARK`], which makes it record, at every sync of its
//! event log, the length that is durable; after each SIGKILL the log is cut back to that length
//! before the next start, so that what was written but not synced is lost as a power cut loses
//! it (the page cache a SIGKILL keeps is thrown away). sled's own files are left as the kernel
//! had them: what the relay acknowledged is the log's, which sled is rebuilt from.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::SinkExt;
use hearth::protocol::{Keys, Kind, Timestamp};
use serde_json::json;

use super::*;
use crate::stats::Rng;

/// Publishing connections.
const WRITERS: u8 = 3;
/// One round in this many is a stop that a SIGKILL cuts short.
const STOP_EVERY: u64 = 3;
/// The longest wait between the SIGTERM and the SIGKILL of such a round, in ms: longer than the
/// whole stop of the loop's small store, so that some stops finish.
const STOP_KILL_MS: u64 = 60;

/// What the relay acknowledged (and what was sent that may or may not have been stored).
#[derive(Default)]
struct Model {
    /// Acknowledged notes, by id, with their author.
    notes: BTreeMap<String, String>,
    /// Every id a deletion was sent for, acknowledged or not.
    targeted: HashSet<String>,
    /// Ids an acknowledged deletion removed.
    deleted: HashSet<String>,
    /// The newest acknowledged profile version of each author (created_at).
    profiles: HashMap<String, u64>,
    /// Events acknowledged in all.
    acked: u64,
    /// The created_at of the last event: strictly increasing, so profile versions are ordered;
    /// it starts 23 days back, so a long run never reaches `created_at_upper_limit`.
    clock: u64,
}

/// How one run kills and starts the relay.
pub(crate) struct Kills {
    /// Kill-and-restart rounds.
    pub(crate) kills: usize,
    /// The RNG's seed.
    pub(crate) seed: u64,
    /// Each kill loses what the event log had not synced.
    pub(crate) power_cut: bool,
    /// How long a start may take before the run fails as hung.
    pub(crate) start_deadline: Duration,
}

/// Cuts the event log named in the mark file back to the length it says is durable; returns
/// how many bytes that threw away.
fn cut_power(data: &std::path::Path) -> Res<u64> {
    let mark = std::fs::read_to_string(data.join("power-cut.mark")).unwrap_or_default();
    let mut fields = mark.split_whitespace();
    let (Some(name), Some(durable)) = (fields.next(), fields.next().and_then(|n| n.parse::<u64>().ok())) else {
        return Err(format!("the relay wrote no power-cut mark ({mark:?})"));
    };
    let log = data.join("data").join(name);
    // A log the mark names that is gone was replaced by a compaction, which synced its successor.
    let Ok(file) = std::fs::OpenOptions::new().write(true).open(&log) else { return Ok(0) };
    let len = file.metadata().map_err(err)?.len();
    if len <= durable {
        return Ok(0);
    }
    file.set_len(durable).map_err(err)?;
    file.sync_all().map_err(err)?;
    Ok(len - durable)
}

/// Runs the kill-and-restart rounds `run` asks for.
pub(crate) async fn crash(run: Kills) -> Res<Vec<Report>> {
    let Kills { kills, seed, power_cut, start_deadline } = run;
    let data = scratch_dir("crash")?;
    let mark = data.join("power-cut.mark");
    let mark = mark.to_str().ok_or("the scratch directory's path is not UTF-8")?.to_string();
    let model = Arc::new(Mutex::new(Model { clock: Timestamp::now().0 - 2_000_000, ..Model::default() }));
    let mut rng = Rng::new(seed);
    // The index is written out every 256 events, so that kills land while index segments are
    // written and merged as well, and the checks read through many segments.
    let env = [
        ("HEARTH_LIMITATION__MAX_LIMIT", "1000000"),
        ("HEARTH_LIMITATION__DEFAULT_LIMIT", "1000000"),
        ("HEARTH_STORAGE__INDEX_MEMORY_EVENTS", "256"),
    ];
    let mut env = env.to_vec();
    if power_cut {
        env.push((hearth::store::format::power_cut::POWER_CUT_MARK, mark.as_str()));
    }
    let (mut cut_bytes, mut cuts) = (0u64, 0u64);
    let (mut slowest, mut stops_cut) = (Duration::ZERO, 0);
    let started = Instant::now();
    for kill in 0..=kills {
        let begun = Instant::now();
        let on = Spawned::start_within(data.clone(), &env, Some(start_deadline))
            .map_err(|e| format!("start {kill} (seed {seed}): {e}"))?;
        slowest = slowest.max(begun.elapsed());
        let checked = check(&on.relay, &model).await;
        if let Err(e) = checked {
            let lines = on.last_lines();
            on.kill_keeping();
            return Err(format!("after kill {kill} (seed {seed}): {e}\nthe relay's last lines:\n{lines}"));
        }
        if kill == kills {
            on.stop();
            break;
        }
        let window = Duration::from_millis(20 + rng.below(280));
        let writers: Vec<_> =
            (0..WRITERS).map(|w| tokio::spawn(publish(on.relay.clone(), w, model.clone(), rng.next()))).collect();
        tokio::time::sleep(window).await;
        if rng.below(STOP_EVERY) == 0 {
            // SIGTERM, and SIGKILL a moment into the stop.
            stops_cut += 1;
            let at_snapshot = rng.below(2) == 0;
            on.terminate_then_kill(Duration::from_millis(rng.below(STOP_KILL_MS)), at_snapshot);
        } else {
            // SIGKILL with frames in flight; the writers end when their sockets do.
            on.kill_keeping();
        }
        for w in writers {
            w.await.map_err(err)?;
        }
        if power_cut {
            let lost = cut_power(&data)?;
            cut_bytes += lost;
            cuts += u64::from(lost > 0);
        }
    }
    let m = model.lock().map_err(err)?;
    Ok(vec![Report {
        json: json!({"cmd": "crash", "kills": kills, "seed": seed, "acked": m.acked,
            "notes_served": m.notes.len() - m.notes.keys().filter(|id| m.targeted.contains(*id)).count(),
            "deletions": m.deleted.len(), "stops_cut": stops_cut, "power_cut": power_cut, "power_cuts_that_lost_bytes": cuts,
            "unsynced_bytes_lost": cut_bytes, "slowest_start_ms": slowest.as_secs_f64() * 1e3,
            "secs": started.elapsed().as_secs_f64()}),
        summary: format!(
            "crash: {kills} kills (seed {seed}; {stops_cut} of them into a stop), {} events acknowledged, every one as acknowledged after each restart; slowest start {:.0} ms",
            m.acked,
            slowest.as_secs_f64() * 1e3
        ),
    }])
}

fn keys_of(writer: u8) -> Res<Keys> {
    Keys::from_bytes([200 + writer; 32]).map_err(err)
}

/// One writer: a mix of notes, profile versions and deletions, each awaited, until its socket ends.
async fn publish(relay: String, writer: u8, model: Arc<Mutex<Model>>, seed: u64) {
    let Ok(keys) = keys_of(writer) else { return };
    let Ok(ws) = connect(&relay).await else { return };
    let (mut tx, mut rx) = ws.split();
    let mut rng = Rng::new(seed);
    let author = keys.public_key().to_hex();
    loop {
        let (event, what) = {
            let Ok(mut m) = model.lock() else { return };
            m.clock += 1;
            let at = Timestamp(m.clock);
            let mine: Vec<&String> = m.notes.iter().filter(|(_, a)| **a == author).map(|(id, _)| id).collect();
            match rng.below(20) {
                0..=2 if !mine.is_empty() => {
                    let target = mine[rng.below(mine.len() as u64) as usize].clone();
                    m.targeted.insert(target.clone());
                    let tags = vec![vec!["e".to_string(), target.clone()]];
                    (keys.sign(at, Kind(5), tags, ""), Sent::Deletion(target))
                }
                3..=7 => (keys.sign(at, Kind(0), vec![], &format!("{{\"name\":\"v{}\"}}", at.0)), Sent::Profile(at.0)),
                8..=10 => {
                    let expires = vec![vec!["expiration".to_string(), (Timestamp::now().0 + 86_400).to_string()]];
                    (keys.sign(at, Kind(1), expires, "expires tomorrow"), Sent::Note)
                }
                _ => (keys.sign(at, Kind(1), vec![], &format!("note {}", at.0)), Sent::Note),
            }
        };
        let id = event.id.to_hex();
        let Ok(text) = serde_json::to_string(&json!(["EVENT", event])) else { return };
        if tx.send(Message::text(text)).await.is_err() {
            return;
        }
        let ok = loop {
            match next_frame(&mut rx).await {
                Some(frame) if frame[0] == "OK" && frame[1] == id.as_str() => break frame[2] == true,
                Some(_) => {}
                None => return,
            }
        };
        if !ok {
            continue;
        }
        let Ok(mut m) = model.lock() else { return };
        m.acked += 1;
        match what {
            Sent::Note => {
                m.notes.insert(id, author.clone());
            }
            Sent::Deletion(target) => {
                m.deleted.insert(target);
            }
            Sent::Profile(at) => {
                let newest = m.profiles.entry(author.clone()).or_default();
                *newest = (*newest).max(at);
            }
        }
    }
}

enum Sent {
    Note,
    Deletion(String),
    Profile(u64),
}

/// Checks the relay at `relay` against the model.
async fn check(relay: &str, model: &Mutex<Model>) -> Res<()> {
    let authors: Vec<String> = (0..WRITERS).map(|w| keys_of(w).map(|k| k.public_key().to_hex())).collect::<Res<_>>()?;
    let served = req(relay, json!({"authors": authors})).await?;
    // What must hold, taken from the model before the next request (no lock across an await).
    let (must, deleted, newest) = {
        let m = model.lock().map_err(err)?;
        let must: Vec<String> = m.notes.keys().filter(|id| !m.targeted.contains(*id)).cloned().collect();
        (must, m.deleted.clone(), m.profiles.clone())
    };
    let mut seen = HashSet::new();
    let mut profiles: HashMap<String, Vec<u64>> = HashMap::new();
    for e in &served {
        let id = e.id.to_hex();
        if !seen.insert(id.clone()) {
            return Err(format!("{id} is served twice"));
        }
        if deleted.contains(&id) {
            return Err(format!("{id} is served after its deletion was acknowledged"));
        }
        if e.kind == Kind(0) {
            profiles.entry(e.pubkey.to_hex()).or_default().push(e.created_at.0);
        }
    }
    if let Some(lost) = must.iter().find(|id| !seen.contains(*id)) {
        return Err(format!("{lost} was acknowledged and is not served by author"));
    }
    for chunk in must.chunks(500) {
        let got = req(relay, json!({"ids": chunk})).await?;
        if got.len() != chunk.len() {
            return Err(format!("{} of {} acknowledged notes served by id", got.len(), chunk.len()));
        }
    }
    for (author, newest) in &newest {
        match profiles.get(author).map(Vec::as_slice) {
            Some([at]) if at >= newest => {}
            other => return Err(format!("{author}'s profile: served {other:?}, newest acknowledged {newest}")),
        }
    }
    Ok(())
}
