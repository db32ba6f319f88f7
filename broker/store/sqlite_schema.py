"""The SQLite schema of the store, its migrations, and every statement it runs.

Plain text only (see :mod:`broker.store.sqlite` for the code that runs it). The schema is
versioned in ``meta``: a new file gets :data:`SCHEMA_VERSION`; an older file is
migrated in place, one :data:`MIGRATIONS` step per version, in one transaction.
Parameters are named after the fields of the records they write.
"""

SCHEMA_VERSION = 10
SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
# How long a statement waits for another process's transaction on the file. Another
# broker on the same file commits in milliseconds; anything longer is a lock held by
# someone else, and a sender waiting on it is better told so at once.
BUSY_TIMEOUT_MS = 1000

# respond/invoke (version 3). response_recovery holds agents' exact undelivered output:
# sensitive, never read back through a session (see the README).
AGENT_TABLES = """
CREATE TABLE IF NOT EXISTS conversations (
    agent TEXT NOT NULL,
    channel TEXT NOT NULL,
    remote INTEGER NOT NULL,
    last_active_at REAL,
    session_id TEXT,
    PRIMARY KEY (agent, channel)
);
CREATE TABLE IF NOT EXISTS invocations (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    channel TEXT NOT NULL,
    from_channel TEXT NOT NULL,
    reason TEXT NOT NULL,
    created_at REAL NOT NULL,
    request TEXT NOT NULL,
    state TEXT NOT NULL,               -- queued, started, done, failed
    updated_at REAL NOT NULL,
    error TEXT
);
CREATE INDEX IF NOT EXISTS invocations_destination ON invocations (agent, channel, state);
CREATE TABLE IF NOT EXISTS response_recovery (
    agent TEXT NOT NULL,
    channel TEXT NOT NULL,
    turn TEXT NOT NULL,
    drafts BLOB NOT NULL,              -- msgpack [{id, text, completion, outcome}]
    outcome TEXT NOT NULL,             -- pending, recovered, failed
    updated_at REAL NOT NULL,
    PRIMARY KEY (agent, channel)
);
"""

CLAIMS_TABLE = """
CREATE TABLE IF NOT EXISTS session_claims (
    session_id TEXT PRIMARY KEY,       -- held by one live broker at most (SessionClaimed)
    broker_id TEXT NOT NULL,
    at REAL NOT NULL
);
"""
# The hello attempt that took each claim (version 10): the newest attempt wins.
CLAIM_ATTEMPT = """
ALTER TABLE session_claims ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE session_claims ADD COLUMN instance TEXT NOT NULL DEFAULT '';
"""

# Which broker started a job (version 8): a broker starting fails only the started jobs
# of brokers not live, never one another live broker is running.
STARTED_BY = "ALTER TABLE invocations ADD COLUMN started_by TEXT NOT NULL DEFAULT '';"

SCHEMA = AGENT_TABLES + CLAIMS_TABLE + CLAIM_ATTEMPT + STARTED_BY + """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS brokers (
    broker_id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    endpoint TEXT NOT NULL,
    started_at REAL NOT NULL,
    lease_until REAL NOT NULL,
    curve_public TEXT NOT NULL DEFAULT ''   -- z85; '' for a broker without CURVE
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    record BLOB NOT NULL,              -- msgpack of the run tree (broker.core.runs.run_tree)
    owner TEXT NOT NULL DEFAULT '',    -- the broker that owns it; '' for none yet
    epoch INTEGER NOT NULL DEFAULT 0   -- bumped by every change of owner (records.RunSaved)
);
CREATE TABLE IF NOT EXISTS sticky (
    seq INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    target TEXT NOT NULL,
    sender_id TEXT NOT NULL,
    sender_name TEXT NOT NULL,
    message_id TEXT NOT NULL,
    message TEXT NOT NULL,
    attachments BLOB NOT NULL,         -- msgpack list
    sent_at REAL NOT NULL,
    ack INTEGER NOT NULL,
    position INTEGER,                  -- FIFO position when queued (1-based)
    not_in_known_set INTEGER NOT NULL DEFAULT 0,
    delivered_to BLOB                  -- msgpack list of stage names; NULL: none recorded
);
CREATE INDEX IF NOT EXISTS sticky_run ON sticky (run_id);
CREATE UNIQUE INDEX IF NOT EXISTS sticky_request ON sticky (sender_id, message_id);
CREATE TABLE IF NOT EXISTS sticky_delivery (
    seq INTEGER NOT NULL,
    stage TEXT NOT NULL,
    transcript TEXT NOT NULL,
    state TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (seq, stage, transcript)
);
CREATE TABLE IF NOT EXISTS session_identity (
    session_id TEXT PRIMARY KEY,
    atomic_session_id TEXT,
    token_hash TEXT NOT NULL,
    name TEXT NOT NULL,
    updated_at REAL NOT NULL
);
"""

# Step from the keyed version to the next one. Version 1 kept no position, known-set
# flag or answer; an old entry's position is its rank among the entries still queued
# for the same (run, target), which is what the version-1 broker reported.
MIGRATIONS: dict[int, str] = {
    1: """
ALTER TABLE sticky ADD COLUMN position INTEGER;
ALTER TABLE sticky ADD COLUMN not_in_known_set INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sticky ADD COLUMN delivered_to BLOB;
UPDATE sticky SET position = ranked.rank FROM (
    SELECT seq, row_number() OVER (PARTITION BY run_id, target ORDER BY seq) AS rank
    FROM sticky) AS ranked
WHERE sticky.seq = ranked.seq;
""",
    # Both v3s (agents' tables; session claims) existed on branches: each step makes
    # both, idempotently, so either upgrades to v4.
    2: AGENT_TABLES + CLAIMS_TABLE,
    3: AGENT_TABLES + CLAIMS_TABLE,
    # Runs belong to a broker (broker.core.cluster.ownership); an old run has no owner yet.
    4: "ALTER TABLE runs ADD COLUMN owner TEXT NOT NULL DEFAULT '';",
    # One entry per request store-wide (a resend to another broker is answered from the
    # entry kept). Copies an older broker queued for one request are the bug this
    # fixes: the first one stays, the later ones (and their delivery rows) go.
    5: """
DELETE FROM sticky_delivery WHERE seq IN (
    SELECT later.seq FROM sticky AS later JOIN sticky AS first
    ON first.sender_id = later.sender_id AND first.message_id = later.message_id
       AND first.seq < later.seq);
DELETE FROM sticky WHERE seq IN (
    SELECT later.seq FROM sticky AS later JOIN sticky AS first
    ON first.sender_id = later.sender_id AND first.message_id = later.message_id
       AND first.seq < later.seq);
CREATE UNIQUE INDEX IF NOT EXISTS sticky_request ON sticky (sender_id, message_id);
""",
    # CURVE on the links: each broker's row says the key its ROUTER serves with.
    6: "ALTER TABLE brokers ADD COLUMN curve_public TEXT NOT NULL DEFAULT '';",
    7: STARTED_BY,
    # Every run write is fenced by the owner's epoch (broker.core.cluster.ownership).
    8: "ALTER TABLE runs ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;",
    9: CLAIM_ATTEMPT,
}
assert set(MIGRATIONS) == set(range(1, SCHEMA_VERSION)), "one migration step per old version"

# -- writes, one per record type; parameters named after the record's fields -----------

UPSERT_IDENTITY = """
INSERT INTO session_identity (session_id, atomic_session_id, token_hash, name, updated_at)
VALUES (:session_id, :atomic_session_id, :token_hash, :name, :at)
ON CONFLICT (session_id) DO UPDATE SET atomic_session_id = excluded.atomic_session_id,
    token_hash = excluded.token_hash, name = excluded.name, updated_at = excluded.updated_at
"""
UPSERT_LEASE = """
DELETE FROM brokers WHERE endpoint = :endpoint AND broker_id != :broker_id;
INSERT INTO brokers (broker_id, pid, endpoint, started_at, lease_until, curve_public)
VALUES (:broker_id, :pid, :endpoint, :started_at, :until, :curve_public)
ON CONFLICT (broker_id) DO UPDATE SET lease_until = excluded.lease_until
"""
DELETE_LEASE = "DELETE FROM brokers WHERE broker_id = :broker_id"
FORGET_CLAIMS = """
DELETE FROM session_claims WHERE broker_id NOT IN (SELECT broker_id FROM brokers)
"""
# One statement, so the check and the write are one step under the write lock.
CLAIM = """
INSERT INTO session_claims (session_id, broker_id, at, attempt, instance)
VALUES (:session_id, :broker_id, :at, :attempt, :instance)
ON CONFLICT (session_id) DO UPDATE SET broker_id = excluded.broker_id, at = excluded.at,
    attempt = CASE WHEN excluded.instance = session_claims.instance
                   THEN max(excluded.attempt, session_claims.attempt)
                   ELSE excluded.attempt END,
    instance = excluded.instance
WHERE NOT (excluded.instance != '' AND excluded.instance = session_claims.instance
           AND excluded.attempt > 0 AND excluded.attempt < session_claims.attempt) AND (
      session_claims.broker_id = excluded.broker_id
   OR session_claims.broker_id NOT IN (SELECT broker_id FROM brokers WHERE lease_until > :at)
   OR session_claims.broker_id IN (SELECT value FROM json_each(:gone))
   OR (excluded.instance != '' AND excluded.instance = session_claims.instance
       AND session_claims.attempt > 0 AND excluded.attempt > session_claims.attempt))
"""
IDENTITY_HAS = """
SELECT 1 FROM session_identity WHERE session_id = :session_id AND token_hash = :token_hash
"""
CLAIM_HOLDER = """
SELECT broker_id, instance, attempt FROM session_claims WHERE session_id = :session_id
"""
UNCLAIM = "DELETE FROM session_claims WHERE session_id = :session_id AND broker_id = :broker_id"
# The fence of every write for a run (records with an ``epoch``): it applies only
# while the run is still the writer's, at the writer's epoch. Epoch 0: not fenced.
FENCE = """(:epoch = 0 OR EXISTS (SELECT 1 FROM runs AS fence WHERE fence.run_id = :run_id
            AND fence.owner = :owner AND fence.epoch = :epoch))"""
# A deposed broker (the run was adopted: owner or epoch changed) writes nothing to the
# run: the adopter's copy is the run (no change: the save is refused).
UPSERT_RUN = """
INSERT INTO runs (run_id, record, owner, epoch) VALUES (:run_id, :record, :owner, :epoch)
ON CONFLICT (run_id) DO UPDATE SET record = excluded.record, owner = excluded.owner,
    epoch = excluded.epoch
WHERE runs.owner = '' OR (excluded.epoch = 0 AND runs.owner = excluded.owner)
   OR (runs.owner = excluded.owner AND runs.epoch = excluded.epoch)
"""
# At start: a broker takes the runs nobody live owns (its own, a dead broker's, none's),
# each under a new epoch. ``gone``: brokers whose lease row is live but which stopped.
TAKE_RUNS = """
UPDATE runs SET owner = :owner, epoch = epoch + 1
WHERE owner = :owner OR owner NOT IN (
    SELECT broker_id FROM brokers WHERE lease_until > :now
    AND broker_id NOT IN (SELECT value FROM json_each(:gone)))
RETURNING run_id
"""
# One store step, so two brokers adopting one dead broker's runs get each run once; only
# once the dead broker's lease has ended by the store's clock (or from itself: a broker
# taking back its own runs after it could not renew its lease), under a new epoch.
ADOPT_RUNS = """
UPDATE runs SET owner = :owner, epoch = epoch + 1
WHERE owner = :dead AND (:dead = :owner OR :dead NOT IN (
    SELECT broker_id FROM brokers WHERE lease_until > :now))
RETURNING run_id
"""
RUN_OWNERS = "SELECT run_id, owner FROM runs WHERE owner != :owner"
DELETE_RUN = """
DELETE FROM sticky_delivery WHERE seq IN (SELECT seq FROM sticky WHERE run_id = :run_id)
    AND """ + FENCE + """;
DELETE FROM sticky WHERE run_id = :run_id AND """ + FENCE + """;
DELETE FROM runs WHERE run_id = :run_id AND """ + FENCE + """;
"""
INSERT_STICKY = """
INSERT INTO sticky (seq, run_id, target, sender_id, sender_name, message_id, message,
                    attachments, sent_at, ack, position, not_in_known_set)
SELECT :seq, :run_id, :target, :sender_id, :sender_name, :message_id, :message,
        :attachments, :sent_at, :ack, :position, :not_in_known_set
WHERE """ + FENCE + """
ON CONFLICT (sender_id, message_id) DO NOTHING
"""
FENCE_HOLDS = "SELECT " + FENCE + " AS holds"
ANSWER_STICKY = "UPDATE sticky SET delivered_to = :delivered_to WHERE seq = :seq AND " + FENCE
UPSERT_DELIVERY = """
INSERT INTO sticky_delivery (seq, stage, transcript, state, at)
SELECT :seq, :stage, :transcript, :state, :at WHERE """ + FENCE + """
ON CONFLICT (seq, stage, transcript) DO UPDATE SET state = excluded.state, at = excluded.at
"""
DELETE_STICKY = """
DELETE FROM sticky_delivery WHERE seq = :seq AND """ + FENCE + """;
DELETE FROM sticky WHERE seq = :seq AND """ + FENCE + """;
"""

UPSERT_CONVERSATION = """
INSERT INTO conversations (agent, channel, remote, last_active_at, session_id)
VALUES (:agent, :channel, :remote, :last_active_at, :session_id)
ON CONFLICT (agent, channel) DO UPDATE SET remote = excluded.remote,
    last_active_at = excluded.last_active_at, session_id = excluded.session_id
"""
DELETE_CONVERSATION = """
DELETE FROM invocations WHERE agent = :agent AND channel = :channel AND state = 'queued';
DELETE FROM response_recovery WHERE agent = :agent AND channel = :channel;
DELETE FROM conversations WHERE agent = :agent AND channel = :channel;
"""
INSERT_INVOCATION = """
INSERT INTO invocations (id, agent, channel, from_channel, reason, created_at, request, state,
                         updated_at)
VALUES (:id, :agent, :channel, :from_channel, :reason, :created_at, :request, :state, :created_at)
"""
INVOCATION_STATE = """
UPDATE invocations SET state = :state, updated_at = :at, error = :error WHERE id = :id
"""
# The hand-over's compare-and-set: one statement under the write lock (InvocationState).
START_INVOCATION = """
UPDATE invocations SET state = :state, updated_at = :at, error = :error, started_by = :broker_id
WHERE id = :id AND state = 'queued'
"""
UPSERT_RECOVERY = """
INSERT INTO response_recovery (agent, channel, turn, drafts, outcome, updated_at)
VALUES (:agent, :channel, :turn, :drafts, :outcome, :at)
ON CONFLICT (agent, channel) DO UPDATE SET turn = excluded.turn, drafts = excluded.drafts,
    outcome = excluded.outcome, updated_at = excluded.updated_at
"""
DELETE_RECOVERY = "DELETE FROM response_recovery WHERE agent = :agent AND channel = :channel"

# -- reads, columns named as the record fields they fill --------------------------------

META_TABLE = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
PRUNE_IDENTITIES = "DELETE FROM session_identity WHERE updated_at < :cutoff"
# The newest :limit, and those of the ids in :named (a JSON list), oldest first.
SELECT_IDENTITIES = """
SELECT * FROM (SELECT session_id, atomic_session_id, token_hash, name, updated_at AS at
               FROM session_identity ORDER BY updated_at DESC, session_id DESC LIMIT :limit)
UNION
SELECT session_id, atomic_session_id, token_hash, name, updated_at AS at
FROM session_identity WHERE session_id IN (SELECT value FROM json_each(:named))
ORDER BY at, session_id
"""
# The runs named in :runs (a JSON list) with their sticky entries and delivery states.
SELECT_RUNS = """
SELECT run_id, record, owner, epoch FROM runs WHERE run_id IN (SELECT value FROM json_each(:runs))
ORDER BY rowid
"""
SELECT_STICKY = """
SELECT seq, run_id, target, sender_id, sender_name, message_id, message, attachments,
       sent_at, ack, position, not_in_known_set, delivered_to
FROM sticky WHERE run_id IN (SELECT value FROM json_each(:runs)) ORDER BY seq
"""
SELECT_ALL_DELIVERIES = "SELECT seq, stage, transcript, state, at FROM sticky_delivery ORDER BY rowid"
SELECT_DELIVERIES = """
SELECT seq, stage, transcript, state, at FROM sticky_delivery
WHERE seq IN (SELECT seq FROM sticky WHERE run_id IN (SELECT value FROM json_each(:runs)))
ORDER BY rowid
"""
SELECT_STICKY_REQUEST = """
SELECT seq, run_id, target, sender_id, sender_name, message_id, message, attachments,
       sent_at, ack, position, not_in_known_set, delivered_to
FROM sticky WHERE sender_id = :sender_id AND message_id = :message_id
"""
STICKY_SEQ_TAKEN = "SELECT 1 AS taken FROM sticky WHERE seq = :seq"
SELECT_CONVERSATIONS = """
SELECT agent, channel, remote, last_active_at, session_id FROM conversations ORDER BY rowid
"""
PRUNE_INVOCATIONS = """
DELETE FROM invocations WHERE state NOT IN ('queued', 'started') AND updated_at < :cutoff
"""
# Unfinished jobs, less those started by another live broker (:owner; all if NULL).
SELECT_INVOCATIONS = """
SELECT id, agent, channel, from_channel, reason, created_at, request, state FROM invocations
WHERE state = 'queued' OR (state = 'started' AND (:owner IS NULL OR started_by NOT IN (
    SELECT broker_id FROM brokers WHERE lease_until > :now AND broker_id != :owner
    AND broker_id NOT IN (SELECT value FROM json_each(:gone)))))
ORDER BY rowid
"""
SELECT_QUEUED_JOBS = """
SELECT id, agent, channel, from_channel, reason, created_at, request, state FROM invocations
WHERE agent = :agent AND channel = :channel AND state = 'queued' ORDER BY rowid
"""
SELECT_RECOVERIES = """
SELECT agent, channel, turn, drafts, outcome, updated_at AS at FROM response_recovery ORDER BY rowid
"""
SELECT_LIVE = """
SELECT broker_id, pid, endpoint, started_at, lease_until AS until, curve_public FROM brokers
WHERE lease_until > :now AND broker_id IS NOT :exclude ORDER BY started_at, broker_id
"""
COUNT_LIVE = """
SELECT count(*) AS live FROM brokers WHERE lease_until > :now AND broker_id IS NOT :exclude
"""

