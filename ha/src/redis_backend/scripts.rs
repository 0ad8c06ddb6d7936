//! The Lua scripts of the Redis backend. Redis runs a script atomically (no other command runs
//! in between), which is what makes each of these a compare-and-set (docs/ha.md, "Redis").
//!
//! Keys: `KEYS[1]` the leader record, `KEYS[2]` the replication marker, `KEYS[3]` the term
//! counter. Records are the same versioned JSON as in etcd; the scripts build them with Redis's
//! built-in `cjson` (numbers up to 10^14 encode exactly, far beyond any term).

use redis::Script;

/// Campaign: if the leader slot is free and the marker is still `ARGV[1]` (empty: absent),
/// the new term is one above the highest of the counter, the candidate's floor `ARGV[2]` and
/// the marker's term; the script stores it in the counter, sets the leader record with a PX
/// TTL of `ARGV[3]` ms and writes the claim marker (`standby: null`) under it.
/// `ARGV[4..7]`: node, address, leader record version, marker version. Without a counter (see
/// the answer) the record is written with `term: null` and the term in `pending_term` (which
/// readers ignore): the winner takes office one TTL later ([`TAKE_OFFICE`]).
/// Answers `{term, leader record, counter_was_missing}` (1: the counter did not exist, so this
/// is the first election of this Redis's data: a fresh cluster, or a Redis that lost its
/// data), or `{0, reason, 0}` when the slot was taken or the marker changed.
const CAMPAIGN: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, 'leader', 0} end
local marker = redis.call('GET', KEYS[2])
if marker == false then marker = '' end
if marker ~= ARGV[1] then return {0, 'marker', 0} end
local missing = 1 - redis.call('EXISTS', KEYS[3])
local term = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
local floor = tonumber(ARGV[2]) or 0
if floor > term then term = floor end
if marker ~= '' then
  local ok, m = pcall(cjson.decode, marker)
  if ok and type(m) == 'table' and type(m.term) == 'number' and m.term > term then
    term = m.term
  end
end
term = term + 1
redis.call('SET', KEYS[3], string.format('%d', term))
local record
if missing == 1 then
  record = cjson.encode({format_version = tonumber(ARGV[6]), node = ARGV[4],
    address = ARGV[5], term = cjson.null, pending_term = term})
else
  record = cjson.encode({format_version = tonumber(ARGV[6]), node = ARGV[4],
    address = ARGV[5], term = term})
end
redis.call('SET', KEYS[1], record, 'PX', ARGV[3])
redis.call('SET', KEYS[2], cjson.encode({format_version = tonumber(ARGV[7]),
  leader = ARGV[4], term = term, standby = cjson.null}))
return {term, record, missing}
"#;

/// Renew: extends the leader record's TTL to `ARGV[2]` ms only if its value is still ours
/// (`ARGV[1]`). Answers 1 renewed, 0 gone (expired), -1 another record.
const RENEW: &str = r#"
local v = redis.call('GET', KEYS[1])
if v == false then return 0 end
if v ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"#;

/// Take office: replaces the leader record `ARGV[1]` (ours, not yet serving) with the stamped
/// record `ARGV[2]`, keeping its TTL. Answers 1 done, 0 not ours any more.
const TAKE_OFFICE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  return 1
end
return 0
"#;

/// Release: deletes the leader record only if its value is still ours (`ARGV[1]`).
const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"#;

/// Marker write as the leader of term `ARGV[1]`: writes `ARGV[2]` only if the leader record
/// exists and carries that term, and raises the counter to at least it. Answers 1 written,
/// 0 fenced.
const WRITE_MARKER: &str = r#"
local v = redis.call('GET', KEYS[1])
if v == false then return 0 end
local ok, r = pcall(cjson.decode, v)
if not ok or type(r) ~= 'table' or r.term ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
local counter = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
if counter < r.term then redis.call('SET', KEYS[3], ARGV[1]) end
return 1
"#;

/// The scripts, hashed once (Redis caches them by SHA1; after a restart the client loads
/// them again on NOSCRIPT).
pub(super) struct Scripts {
    pub(super) campaign: Script,
    pub(super) renew: Script,
    pub(super) take_office: Script,
    pub(super) release: Script,
    pub(super) write_marker: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Scripts {
            campaign: Script::new(CAMPAIGN),
            renew: Script::new(RENEW),
            take_office: Script::new(TAKE_OFFICE),
            release: Script::new(RELEASE),
            write_marker: Script::new(WRITE_MARKER),
        }
    }
}
