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
//! With `power_cut`, each kill is a power cut: the relay's data directory is on the lossy
//! filesystem ([`crate::lossy`]), which is cut with the relay (after it is killed) and mounted
//! again before the next start, so that everything the relay's files had not synced — the event
//! log's tail, sled's pages, the search index — is lost as a power cut loses it (a SIGKILL alone
//! keeps the page cache). The report says how many bytes the cuts threw away (files' lengths
//! past what was synced: a lower bound, as overwritten pages are not counted).
//!
//! With `postgres`, the relay's store is a PostgreSQL the run starts (fsync on) and takes down
//! after every kill of the relay (an immediate shutdown, which writes nothing more); with power
//! cuts as well, the server's data directory is on a lossy filesystem of its own, so what
//! PostgreSQL had written and not synced (WAL, heap) is lost before it starts again and runs its
//! crash recovery.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::SinkExt;
use hearth::protocol::{Keys, Kind, Timestamp};
use hearth::testing::postgres::Postgres;
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
    /// Each kill is a power cut: the data is on the lossy filesystem.
    pub(crate) power_cut: bool,
    /// The relay's store is a PostgreSQL of the run's own, killed with the relay each time.
    pub(crate) postgres: bool,
    /// How long a start may take before the run fails as hung.
    pub(crate) start_deadline: Duration,
}

/// Bytes the files on `mount` hold past their backing files' lengths: what a power cut now
/// would lose of them at least.
fn unsynced_bytes(mount: &Path, backing: &Path) -> Res<u64> {
    super::harness::sum_files(mount, &mut |path, meta| {
        let on_disk = path.strip_prefix(mount).ok().and_then(|rel| std::fs::metadata(backing.join(rel)).ok());
        Ok(meta.len().saturating_sub(on_disk.map_or(0, |m| m.len())))
    })
}

/// What goes down with the relay at each kill: the PostgreSQL of a `postgres` run (an
/// immediate shutdown) and, with power cuts, the lossy disks under the relay's data directory
/// and the server's.
struct Outage {
    /// Declared first: stopped before its disk is unmounted.
    pg: Option<Postgres>,
    disks: Vec<Disk>,
    /// Bytes the cuts threw away (at least), and how many cuts threw any.
    lost: u64,
    cuts_that_lost: u64,
}

/// One lossy filesystem: `mount` over `backing`.
struct Disk {
    mounted: Option<crate::lossy::Mounted>,
    backing: PathBuf,
    mount: PathBuf,
}

impl Outage {
    /// Mounts the disks under `data` and starts the server; the relay's `HEARTH_…` variables
    /// for the server's database.
    async fn prepare(data: &Path, power_cut: bool, postgres: bool) -> Res<(Outage, Vec<(&'static str, String)>)> {
        let mut outage = Outage { pg: None, disks: Vec::new(), lost: 0, cuts_that_lost: 0 };
        let mut names = vec![("disk", "data")];
        if postgres {
            names.push(("pgdisk", "pg"));
        }
        for (backing, mount) in names.into_iter().filter(|_| power_cut) {
            let (backing, mount) = (data.join(backing), data.join(mount));
            let mounted = Some(crate::lossy::Mounted::mount(&backing, &mount)?);
            outage.disks.push(Disk { mounted, backing, mount });
        }
        let mut env = Vec::new();
        if postgres {
            let pg = match power_cut {
                true => Postgres::start_on(&data.join("pg")).await?,
                false => Postgres::start(true).await?,
            };
            env.push(("HEARTH_STORAGE__BACKEND", "postgres".to_string()));
            env.push(("HEARTH_STORAGE__POSTGRES_URL", pg.database("crash").await?));
            outage.pg = Some(pg);
        }
        Ok((outage, env))
    }

    /// After the relay's kill: the server killed, each disk cut and mounted again as the cut
    /// left it, the server started on what is left.
    async fn strike(&mut self) -> Res<()> {
        if let Some(pg) = self.pg.as_mut() {
            pg.kill();
        }
        for disk in &mut self.disks {
            let lost = unsynced_bytes(&disk.mount, &disk.backing)?;
            self.lost += lost;
            self.cuts_that_lost += u64::from(lost > 0);
            if let Some(mounted) = disk.mounted.take() {
                disk.mounted = Some(mounted.cut_and_remount(&disk.backing)?);
            }
        }
        match self.pg.as_mut() {
            Some(pg) => pg.restart().await,
            None => Ok(()),
        }
    }
}

/// Runs the kill-and-restart rounds `run` asks for.
pub(crate) async fn crash(run: Kills) -> Res<Vec<Report>> {
    let Kills { kills, seed, power_cut, postgres, start_deadline } = run;
    let data = scratch_dir("crash")?;
    // With power cuts the relay's data directory (`data/data`) is a lossy filesystem over
    // `data/disk`, and the server's (`data/pg`) one over `data/pgdisk`.
    let (mut outage, server) = Outage::prepare(&data, power_cut, postgres).await?;
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
    env.extend(server.iter().map(|(k, v)| (*k, v.as_str())));
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
            on.stop_keeping();
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
        outage.strike().await?;
    }
    let (cut_bytes, cuts) = (outage.lost, outage.cuts_that_lost);
    drop(outage);
    let _ = std::fs::remove_dir_all(&data);
    let m = model.lock().map_err(err)?;
    Ok(vec![Report {
        json: json!({"cmd": "crash", "kills": kills, "seed": seed, "acked": m.acked,
            "notes_served": m.notes.len() - m.notes.keys().filter(|id| m.targeted.contains(*id)).count(),
            "deletions": m.deleted.len(), "stops_cut": stops_cut, "power_cut": power_cut, "postgres": postgres, "power_cuts_that_lost_bytes": cuts,
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
