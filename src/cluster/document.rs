//! A document several nodes share in Redis: its bytes and a version that grows by one with each
//! change, replaced only by the node that saw the version it replaces (compare-and-set in one
//! script), so two nodes changing it at once cannot overwrite each other unseen.

use std::sync::Arc;

use redis::Script;

use super::{Link, LinkError};

/// Sets `KEYS[1]` to `ARGV[2]` and increments the version at `KEYS[2]`, when the version is still
/// `ARGV[1]`. Returns `{1, new version}` or `{0, current version}`.
const REPLACE: &str = r"
local v = tonumber(redis.call('GET', KEYS[2]) or '0')
if v ~= tonumber(ARGV[1]) then return {0, v} end
redis.call('SET', KEYS[1], ARGV[2])
return {1, redis.call('INCR', KEYS[2])}
";

/// One shared document.
pub struct SharedDoc {
    link: Arc<Link>,
    key: String,
    version_key: String,
    replace: Script,
}

impl SharedDoc {
    /// The document `name` on `link` (`<prefix><name>` and `<prefix><name>:version`).
    pub fn new(link: Arc<Link>, name: &str) -> SharedDoc {
        let (key, version_key) = (link.key(&[name]), link.key(&[name, "version"]));
        SharedDoc { link, key, version_key, replace: Script::new(REPLACE) }
    }

    /// Its version now (0: never written).
    pub async fn version(&self) -> Result<u64, LinkError> {
        let mut conn = self.link.connection();
        let key = self.version_key.clone();
        let v: Option<u64> =
            self.link.call(async move { redis::cmd("GET").arg(key).query_async(&mut conn).await }).await?;
        Ok(v.unwrap_or(0))
    }

    /// Its version and bytes, read together.
    pub async fn fetch(&self) -> Result<(u64, Option<Vec<u8>>), LinkError> {
        let mut conn = self.link.connection();
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("GET").arg(&self.version_key).cmd("GET").arg(&self.key);
        let (v, bytes): (Option<u64>, Option<Vec<u8>>) =
            self.link.call(async move { pipe.query_async(&mut conn).await }).await?;
        Ok((v.unwrap_or(0), bytes))
    }

    /// Replaces it with `bytes` if its version is still `seen`: `Ok(Ok(new version))`, or
    /// `Ok(Err(current version))` when another node changed it first.
    pub async fn replace(&self, seen: u64, bytes: Vec<u8>) -> Result<Result<u64, u64>, LinkError> {
        let mut conn = self.link.connection();
        let mut call = self.replace.key(&self.key);
        call.key(&self.version_key).arg(seen).arg(bytes);
        let (done, version): (u8, u64) = self.link.call(async move { call.invoke_async(&mut conn).await }).await?;
        Ok(if done == 1 { Ok(version) } else { Err(version) })
    }
}
