//! The limiter's second backend: the quota buckets in the Redis several nodes share.
//!
//! Owns the GCRA script and the reads of the shared buckets. One admission is one round trip
//! (`EVALSHA`, the script loaded on first use): the script reads the principal's cell and its IP
//! ceiling's, bills both or neither, counts a refusal where the memory backend counts it, and
//! returns the exact wait. Time is Redis's `TIME`, never a node's clock, so nodes whose clocks
//! disagree still bill one bucket. Times in Redis are microseconds (exact in Lua's doubles);
//! every key has a TTL of the idle time (or the longest refill window), so an idle principal
//! costs nothing. Each principal is one hash `<prefix>p:<principal>`: per quota its `tat` and
//! the interval it was computed under (`w.t`/`w.i` ws_events, `q.` ws_reqs, `m.` messages,
//! `a.` api_calls, `u.` upload_bytes, `x.` admin_auth), refusals per limit type (`r.<name>`), first and last seen (`f`, `l`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use redis::Script;

use super::gcra::{NANOS, Quota};
use super::principal::Principal;
use super::state::{Cell, Cells, Refusals};
use crate::cluster::{Link, LinkError};
use crate::protocol::PubKey;
use crate::protocol::refusal::LimitType;

/// The GCRA admission of one request: the principal's bucket (`KEYS[1]`) and, when given, its IP
/// ceiling's (`KEYS[2]`), both or neither. ARGV: the quota's field, the principal's interval (µs)
/// and burst, the ceiling's interval and burst, the TTL (s), the refusal field, the cells taken
/// at once, and `1` for a dry run (nothing billed, touched or counted). Returns
/// `{admitted (0/1), wait (µs; -1 for more cells than a burst), now (µs)}`.
const ADMIT: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local tf, inf = ARGV[1] .. '.t', ARGV[1] .. '.i'
local ttl, refusal, n, dry = tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8]), ARGV[9] == '1'
local function tat_of(key, interval)
  local v = redis.call('HMGET', key, tf, inf)
  local tat, from = tonumber(v[1]) or 0, tonumber(v[2]) or interval
  if tat > now and from > 0 and from ~= interval then
    tat = now + math.floor((tat - now) * interval / from)
  end
  return tat
end
local function wait_of(tat, interval, burst)
  if n > burst then return -1 end
  local allow = tat + interval * (n - 1) - interval * (burst - 1)
  if now < allow then return allow - now end
  return 0
end
local function touch(key)
  redis.call('HSETNX', key, 'f', time[1])
  redis.call('HSET', key, 'l', time[1])
  redis.call('EXPIRE', key, ttl)
end
local function take(key, tat, interval)
  redis.call('HSET', key, tf, string.format('%.0f', math.max(tat, now) + interval * n), inf, string.format('%.0f', interval))
end
local pi, pb = tonumber(ARGV[2]), tonumber(ARGV[3])
local ptat = tat_of(KEYS[1], pi)
local pwait = wait_of(ptat, pi, pb)
local ctat, cwait, ci, cb = 0, 0, 0, 0
if KEYS[2] then
  ci, cb = tonumber(ARGV[4]), tonumber(ARGV[5])
  ctat = tat_of(KEYS[2], ci)
  cwait = wait_of(ctat, ci, cb)
end
if pwait < 0 or cwait < 0 then return {0, -1, now} end
if dry then
  if pwait > 0 or cwait > 0 then return {0, math.max(pwait, cwait), now} end
  return {1, 0, now}
end
touch(KEYS[1])
if pwait > 0 or cwait > 0 then
  redis.call('HINCRBY', KEYS[1], refusal, 1)
  if pwait == 0 then
    touch(KEYS[2])
    redis.call('HINCRBY', KEYS[2], refusal, 1)
  end
  return {0, math.max(pwait, cwait), now}
end
take(KEYS[1], ptat, pi)
if KEYS[2] then
  touch(KEYS[2])
  take(KEYS[2], ctat, ci)
end
return {1, 0, now}
";

/// At most this many principals are read back for the admin API's lists (a `SCAN` of them).
const MAX_LISTED: usize = 10_000;

/// What the limiter holds of one principal: its cells, refusals, first and last seen.
pub(super) type Snapshot = (Cells, Refusals, Option<u64>, Option<u64>);

/// The buckets in Redis.
pub(super) struct Shared {
    pub(super) link: Arc<Link>,
    admit: Script,
}

/// The hash field prefix of a quota's cell.
fn field(limit_type: LimitType) -> &'static str {
    match limit_type {
        LimitType::WsEvents => "w",
        LimitType::WsReqs => "q",
        LimitType::Messages => "m",
        LimitType::ApiCalls => "a",
        LimitType::UploadBytes => "u",
        LimitType::AdminAuth | LimitType::Unavailable => "x",
    }
}

/// A GCRA interval in whole microseconds (at least 1), as the script keeps it.
fn micros(quota: Quota) -> u64 {
    (quota.interval_ns / 1000).max(1)
}

impl Shared {
    pub(super) fn new(link: Arc<Link>) -> Shared {
        Shared { link, admit: Script::new(ADMIT) }
    }

    fn key(&self, principal: &Principal) -> String {
        self.link.key(&["p", &principal.to_string()])
    }

    /// Bills `n` cells of `limit_type` to `principal` (and `ceiling`, both or neither), or with
    /// `dry` only says whether it would: `Ok(())`, or the nanoseconds until it would be admitted
    /// (`u64::MAX` for more cells than a burst holds).
    pub(super) async fn bill(
        &self,
        principal: &Principal,
        (quota, ceiling): (Quota, Option<(Principal, Quota)>),
        limit_type: LimitType,
        (n, dry): (u64, bool),
        ttl_secs: u64,
    ) -> Result<Result<(), u64>, LinkError> {
        let mut call = self.admit.key(self.key(principal));
        let (ci, cb) = match ceiling {
            Some((c, q)) => {
                call.key(self.key(&c));
                (micros(q), q.burst)
            }
            None => (0, 0),
        };
        call.arg(field(limit_type))
            .arg(micros(quota))
            .arg(quota.burst)
            .arg(ci)
            .arg(cb)
            .arg(ttl_secs)
            .arg(format!("r.{}", limit_type.as_str()))
            .arg(n)
            .arg(u8::from(dry));
        let mut conn = self.link.connection();
        let (admitted, wait_us, _now): (u8, i64, u64) =
            self.link.call(async move { call.invoke_async(&mut conn).await }).await?;
        Ok(match (admitted, u64::try_from(wait_us)) {
            (1, _) => Ok(()),
            (_, Ok(wait_us)) => Err(wait_us.saturating_mul(1000)),
            (_, Err(_)) => Err(u64::MAX),
        })
    }

    /// Redis's time (ns) and what it holds of each of `principals`, read together.
    pub(super) async fn snapshots(&self, principals: &[Principal]) -> Result<(u64, Vec<Option<Snapshot>>), LinkError> {
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        for p in principals {
            pipe.cmd("HGETALL").arg(self.key(p));
        }
        let mut conn = self.link.connection();
        let (time, hashes): ((u64, u64), Vec<HashMap<String, String>>) = self
            .link
            .call_report(async move {
                let values: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
                let mut values = values.into_iter();
                let time = redis::from_redis_value(values.next().unwrap_or(redis::Value::Nil))?;
                let hashes = values.map(redis::from_redis_value).collect::<Result<Vec<_>, _>>()?;
                Ok((time, hashes))
            })
            .await?;
        let now = time.0.saturating_mul(NANOS).saturating_add(time.1.saturating_mul(1000));
        Ok((now, hashes.iter().map(snapshot_of).collect()))
    }

    /// The principals with a bucket in Redis (at most [`MAX_LISTED`]).
    pub(super) async fn principals(&self) -> Result<Vec<Principal>, LinkError> {
        let pattern = format!("{}*", self.link.key(&["p", ""]));
        let skip = pattern.len() - 1;
        let mut conn = self.link.connection();
        let keys: Vec<String> = self
            .link
            .call_report(async move {
                let mut keys = Vec::new();
                let mut cursor = 0u64;
                loop {
                    let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut conn)
                        .await?;
                    keys.extend(batch);
                    if next == 0 || keys.len() >= MAX_LISTED {
                        return Ok(keys);
                    }
                    cursor = next;
                }
            })
            .await?;
        Ok(keys.iter().filter_map(|k| parse_principal(k.get(skip..)?)).take(MAX_LISTED).collect())
    }
}

/// A principal from its `Display` form: `addr/len` a ceiling, 64 hex a pubkey, else an address.
fn parse_principal(s: &str) -> Option<Principal> {
    if let Some((addr, len)) = s.rsplit_once('/') {
        return Some(Principal::Ceiling(addr.parse::<IpAddr>().ok()?, len.parse().ok()?));
    }
    if s.len() == 64 {
        return PubKey::parse(s).map(Principal::Pubkey);
    }
    s.parse().ok().map(Principal::Ip)
}

/// A hash as the script keeps it, as the memory backend's state (µs → ns).
fn snapshot_of(hash: &HashMap<String, String>) -> Option<Snapshot> {
    if hash.is_empty() {
        return None;
    }
    let number = |name: &str| hash.get(name).and_then(|v| v.parse::<u64>().ok());
    let mut cells = Cells::default();
    let mut refusals = Refusals::default();
    for limit_type in LimitType::ALL {
        let f = field(limit_type);
        if let (Some(cell), Some(tat)) = (cells.of(limit_type), number(&format!("{f}.t"))) {
            let interval = number(&format!("{f}.i")).unwrap_or(0);
            *cell = Cell { tat: tat.saturating_mul(1000), interval: interval.saturating_mul(1000) };
        }
        let n = number(&format!("r.{}", limit_type.as_str())).unwrap_or(0);
        *refusals.of(limit_type) = u32::try_from(n).unwrap_or(u32::MAX);
    }
    Some((cells, refusals, number("f"), number("l")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_reads_back_from_its_key() {
        let pk = PubKey::parse(&"ab".repeat(32)).unwrap();
        for p in [
            Principal::Pubkey(pk),
            Principal::Ip("10.1.2.3".parse().unwrap()),
            Principal::Ip("2001:db8::1".parse().unwrap()),
            Principal::ceiling_of("2001:db8:1:2::9".parse().unwrap(), 64),
            Principal::ceiling_of("10.1.2.3".parse().unwrap(), 64),
        ] {
            assert_eq!(parse_principal(&p.to_string()), Some(p));
        }
        assert_eq!(parse_principal("nonsense"), None);
    }

    #[test]
    fn a_hash_reads_back_as_cells_in_nanoseconds() {
        let hash: HashMap<String, String> =
            [("w.t", "1500"), ("w.i", "100"), ("r.messages", "3"), ("f", "7"), ("l", "9")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let (cells, refusals, first, last) = snapshot_of(&hash).unwrap();
        assert_eq!((cells.ws_events.tat, cells.ws_events.interval), (1_500_000, 100_000));
        assert_eq!((refusals.messages, first, last), (3, Some(7), Some(9)));
        assert!(snapshot_of(&HashMap::new()).is_none());
    }
}
