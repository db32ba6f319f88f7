"""The PostgreSQL schema of the store, its migrations, and every statement it runs.

Plain text only (see :mod:`broker.store.postgres` for the code that runs it). The
tables live in one schema per bus, chosen by the connection's ``search_path``, so no
statement names it. The schema is versioned in ``meta``; it is created or migrated
by the first broker that opens it, in one transaction, under an advisory lock
(:data:`MIGRATION_LOCK`): two brokers starting at once take turns.

The tables are the SQLite store's (same columns, same record field names), with
PostgreSQL's types: BYTEA for msgpack payloads, BOOLEAN for flags, DOUBLE PRECISION
for wall-clock times. ``pos`` (an identity column) stands for SQLite's rowid where
load order is first-save order: an upsert keeps it, a delete and a new save moves
the row last. Parameters are psycopg's ``%(name)s``, named after record fields;
lists are ``text[]`` parameters.

Compare-and-set writes (session claims, job starts, run adoption) are each one
conditional statement: PostgreSQL locks the row it finds and checks the condition
again on the committed version, so two brokers racing for one row cannot both win.
"""

SCHEMA_VERSION = 3
# pg_advisory_xact_lock's key space is shared by every application on the server: the
# key is derived from this text and the schema name (see broker.store.postgres).
MIGRATION_LOCK = "intercom-bus schema migration"

SCHEMA_EXISTS = "SELECT 1 FROM pg_namespace WHERE nspname = %s"
META_EXISTS = "SELECT to_regclass('meta')"
META = "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
SCHEMA_VERSION_READ = "SELECT value FROM meta WHERE key = 'schema_version'"
SCHEMA_VERSION_WRITE = """
INSERT INTO meta (key, value) VALUES ('schema_version', %(version)s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value
"""

# The whole schema at version 1; response_recovery holds agents' exact undelivered
# output: sensitive, never read back through a session (see the README).
TABLES = """
CREATE TABLE brokers (
    broker_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, endpoint TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL, lease_until DOUBLE PRECISION NOT NULL,
    curve_public TEXT NOT NULL DEFAULT '');
CREATE TABLE session_identity (
    session_id TEXT PRIMARY KEY, atomic_session_id TEXT, token_hash TEXT NOT NULL,
    name TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL);
CREATE TABLE session_claims (
    session_id TEXT PRIMARY KEY, broker_id TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    attempt BIGINT NOT NULL DEFAULT 0, instance TEXT NOT NULL DEFAULT '');
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, record BYTEA NOT NULL, owner TEXT NOT NULL DEFAULT '',
    pos BIGINT GENERATED ALWAYS AS IDENTITY, epoch BIGINT NOT NULL DEFAULT 0);
CREATE INDEX runs_owner ON runs (owner);
CREATE TABLE sticky (
    seq BIGINT PRIMARY KEY, run_id TEXT NOT NULL, target TEXT NOT NULL,
    sender_id TEXT NOT NULL, sender_name TEXT NOT NULL, message_id TEXT NOT NULL,
    message TEXT NOT NULL, attachments BYTEA NOT NULL, sent_at DOUBLE PRECISION NOT NULL,
    ack BOOLEAN NOT NULL, position INTEGER, not_in_known_set BOOLEAN NOT NULL DEFAULT FALSE,
    delivered_to BYTEA,
    UNIQUE (sender_id, message_id));
CREATE INDEX sticky_run ON sticky (run_id);
CREATE TABLE sticky_delivery (
    seq BIGINT NOT NULL, stage TEXT NOT NULL, transcript TEXT NOT NULL, state TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL, pos BIGINT GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (seq, stage, transcript));
CREATE TABLE conversations (
    agent TEXT NOT NULL, channel TEXT NOT NULL, remote BOOLEAN NOT NULL,
    last_active_at DOUBLE PRECISION, session_id TEXT, pos BIGINT GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (agent, channel));
CREATE TABLE invocations (
    id TEXT PRIMARY KEY, agent TEXT NOT NULL, channel TEXT NOT NULL,
    from_channel TEXT NOT NULL, reason TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
    request TEXT NOT NULL, state TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    error TEXT, started_by TEXT NOT NULL DEFAULT '', pos BIGINT GENERATED ALWAYS AS IDENTITY);
CREATE INDEX invocations_destination ON invocations (agent, channel, state);
CREATE TABLE response_recovery (
    agent TEXT NOT NULL, channel TEXT NOT NULL, turn TEXT NOT NULL, drafts BYTEA NOT NULL,
    outcome TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    pos BIGINT GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (agent, channel))
"""

# Step from the keyed version to the next one.
MIGRATIONS: dict[int, str] = {
    # Every run write is fenced by the owner's epoch (broker.core.cluster.ownership).
    1: "ALTER TABLE runs ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0",
    # The hello attempt that took each claim: the newest attempt wins (SessionClaimed).
    2: "ALTER TABLE session_claims ADD COLUMN attempt BIGINT NOT NULL DEFAULT 0, "
       "ADD COLUMN instance TEXT NOT NULL DEFAULT ''",
}
assert set(MIGRATIONS) == set(range(1, SCHEMA_VERSION)), "one migration step per old version"

# -- writes, one or more per record type ---------------------------------------------

# The database's clock, in the wall-clock seconds leases are kept in: the one clock
# that decides who is alive (no broker's own clock does).
DB_NOW = "extract(epoch FROM clock_timestamp())::float8"
# The fence of every write for a run (records with an ``epoch``): it applies only
# while the run is still the writer's, at the writer's epoch. Epoch 0: not fenced.
FENCE = """(%(epoch)s::bigint = 0 OR EXISTS (SELECT 1 FROM runs AS fence
            WHERE fence.run_id = %(run_id)s AND fence.owner = %(owner)s
            AND fence.epoch = %(epoch)s::bigint))"""
# First in a batch that writes for runs: their rows are locked against an adoption
# until the batch commits (an adopter's UPDATE waits, then reads what it committed),
# so a fenced write that found the run still the writer's is in what the adopter loads.
LOCK_RUNS = """
SELECT run_id FROM runs WHERE run_id = ANY(%(runs)s::text[]) ORDER BY run_id FOR SHARE
"""

UPSERT_IDENTITY = """
INSERT INTO session_identity (session_id, atomic_session_id, token_hash, name, updated_at)
VALUES (%(session_id)s, %(atomic_session_id)s, %(token_hash)s, %(name)s, %(at)s)
ON CONFLICT (session_id) DO UPDATE SET atomic_session_id = excluded.atomic_session_id,
    token_hash = excluded.token_hash, name = excluded.name, updated_at = excluded.updated_at
"""
DELETE_ENDPOINT_PREDECESSOR = """
DELETE FROM brokers WHERE endpoint = %(endpoint)s AND broker_id <> %(broker_id)s
"""
# With ``lease_s``, the lease ends that long after the database's clock, not ``until``.
UPSERT_LEASE = """
INSERT INTO brokers (broker_id, pid, endpoint, started_at, lease_until, curve_public)
VALUES (%(broker_id)s, %(pid)s, %(endpoint)s, %(started_at)s,
        CASE WHEN %(lease_s)s::float8 > 0 THEN """ + DB_NOW + """ + %(lease_s)s::float8
             ELSE %(until)s::float8 END, %(curve_public)s)
ON CONFLICT (broker_id) DO UPDATE SET lease_until = excluded.lease_until
"""
DELETE_LEASE = "DELETE FROM brokers WHERE broker_id = %(broker_id)s"
FORGET_CLAIMS = "DELETE FROM session_claims WHERE broker_id NOT IN (SELECT broker_id FROM brokers)"
# One statement: the identity check, the insert, and on a conflict the holder's check,
# made on the row as committed and locked. A row comes back when the claim is taken.
CLAIM = """
INSERT INTO session_claims (session_id, broker_id, at, attempt, instance)
SELECT %(session_id)s, %(broker_id)s, %(at)s, %(attempt)s, %(instance)s
WHERE %(token_hash)s::text IS NULL OR EXISTS (
    SELECT 1 FROM session_identity
    WHERE session_id = %(session_id)s AND token_hash = %(token_hash)s::text)
ON CONFLICT (session_id) DO UPDATE SET broker_id = excluded.broker_id, at = excluded.at,
    attempt = CASE WHEN excluded.instance = session_claims.instance
                   THEN GREATEST(excluded.attempt, session_claims.attempt)
                   ELSE excluded.attempt END,
    instance = excluded.instance
WHERE NOT (excluded.instance <> '' AND excluded.instance = session_claims.instance
           AND excluded.attempt > 0 AND excluded.attempt < session_claims.attempt) AND (
      session_claims.broker_id = excluded.broker_id
   OR session_claims.broker_id NOT IN (SELECT broker_id FROM brokers
                                       WHERE lease_until > """ + DB_NOW + """)
   OR session_claims.broker_id = ANY(%(gone)s::text[])
   OR (excluded.instance <> '' AND excluded.instance = session_claims.instance
       AND session_claims.attempt > 0 AND excluded.attempt > session_claims.attempt))
RETURNING broker_id
"""
CLAIM_ROW = "SELECT instance, attempt FROM session_claims WHERE session_id = %(session_id)s"
UNCLAIM = """
DELETE FROM session_claims WHERE session_id = %(session_id)s AND broker_id = %(broker_id)s
"""
# A deposed broker (the run was adopted: owner or epoch changed) writes nothing to
# it: the adopter's copy is the run. No row returned: refused.
UPSERT_RUN = """
INSERT INTO runs (run_id, record, owner, epoch)
VALUES (%(run_id)s, %(record)s, %(owner)s, %(epoch)s)
ON CONFLICT (run_id) DO UPDATE SET record = excluded.record, owner = excluded.owner,
    epoch = excluded.epoch
WHERE runs.owner = '' OR (excluded.epoch = 0 AND runs.owner = excluded.owner)
   OR (runs.owner = excluded.owner AND runs.epoch = excluded.epoch)
RETURNING run_id
"""
# At start: a broker takes the runs nobody live owns (its own, a dead broker's, none's),
# each under a new epoch. ``gone``: brokers whose lease row is live but which stopped.
TAKE_RUNS = """
UPDATE runs SET owner = %(owner)s, epoch = epoch + 1
WHERE owner = %(owner)s OR owner NOT IN (
    SELECT broker_id FROM brokers WHERE lease_until > """ + DB_NOW + """
    AND broker_id <> ALL(%(gone)s::text[]))
RETURNING run_id
"""
# Each run to one adopter, and only once the dead broker's lease has ended by the
# database's clock (or from itself: a broker taking back its own runs after it could
# not renew its lease), under a new epoch: a second adopter waits on the row lock,
# then finds the owner changed and takes nothing.
ADOPT_RUNS = """
UPDATE runs SET owner = %(owner)s, epoch = epoch + 1
WHERE owner = %(dead)s AND (%(dead)s = %(owner)s OR %(dead)s NOT IN (
    SELECT broker_id FROM brokers WHERE lease_until > """ + DB_NOW + """))
RETURNING run_id
"""
RUN_OWNERS = "SELECT run_id, owner FROM runs WHERE owner <> %(owner)s"
DELETE_RUN_DELIVERIES = """
DELETE FROM sticky_delivery WHERE seq IN (SELECT seq FROM sticky WHERE run_id = %(run_id)s)
    AND """ + FENCE
DELETE_RUN_ENTRIES = "DELETE FROM sticky WHERE run_id = %(run_id)s AND " + FENCE
DELETE_RUN = "DELETE FROM runs WHERE run_id = %(run_id)s AND " + FENCE
# Consecutive entries of a batch go in two statements, whatever their number (arrays,
# one element per entry, in batch order): the insert, where an entry whose request is
# stored already (or was earlier in the same arrays) is not written; then, for each
# entry whose request another seq holds, that entry as kept, and whether this seq is
# stored too (a broker bug: the batch fails).
INSERT_STICKY_MANY = """
INSERT INTO sticky (seq, run_id, target, sender_id, sender_name, message_id, message,
                    attachments, sent_at, ack, position, not_in_known_set)
SELECT seq, run_id, target, sender_id, sender_name, message_id, message, attachments, sent_at,
       ack, position, not_in_known_set
FROM unnest(%(seq)s::bigint[], %(run_id)s::text[], %(target)s::text[], %(sender_id)s::text[],
            %(sender_name)s::text[], %(message_id)s::text[], %(message)s::text[],
            %(attachments)s::bytea[], %(sent_at)s::float8[], %(ack)s::boolean[],
            %(position)s::integer[], %(not_in_known_set)s::boolean[], %(owner)s::text[],
            %(epoch)s::bigint[])
     WITH ORDINALITY AS entry(seq, run_id, target, sender_id, sender_name, message_id, message,
                              attachments, sent_at, ack, position, not_in_known_set, owner,
                              epoch, ord)
WHERE entry.epoch = 0 OR EXISTS (SELECT 1 FROM runs AS fence WHERE fence.run_id = entry.run_id
                                 AND fence.owner = entry.owner AND fence.epoch = entry.epoch)
ORDER BY ord
ON CONFLICT (sender_id, message_id) DO NOTHING
RETURNING seq
"""
# The entries not written and not kept: fenced out (the run is no longer the writer's).
FENCED_STICKY_MANY = """
SELECT entry.ord FROM unnest(%(run_id)s::text[], %(owner)s::text[], %(epoch)s::bigint[])
     WITH ORDINALITY AS entry(run_id, owner, epoch, ord)
WHERE entry.epoch <> 0 AND NOT EXISTS (SELECT 1 FROM runs AS fence
    WHERE fence.run_id = entry.run_id AND fence.owner = entry.owner AND fence.epoch = entry.epoch)
"""
KEPT_STICKY_MANY = """
SELECT entry.ord, EXISTS (SELECT 1 FROM sticky WHERE seq = entry.seq) AS seq_taken,
       kept.seq, kept.run_id, kept.target, kept.sender_id, kept.sender_name, kept.message_id,
       kept.message, kept.attachments, kept.sent_at, kept.ack, kept.position,
       kept.not_in_known_set, kept.delivered_to
FROM unnest(%(seq)s::bigint[], %(sender_id)s::text[], %(message_id)s::text[])
     WITH ORDINALITY AS entry(seq, sender_id, message_id, ord)
JOIN sticky AS kept ON kept.sender_id = entry.sender_id AND kept.message_id = entry.message_id
    AND kept.seq <> entry.seq
"""
ANSWER_STICKY = """
UPDATE sticky SET delivered_to = %(delivered_to)s WHERE seq = %(seq)s AND """ + FENCE
UPSERT_DELIVERY = """
INSERT INTO sticky_delivery (seq, stage, transcript, state, at)
SELECT %(seq)s, %(stage)s, %(transcript)s, %(state)s, %(at)s WHERE """ + FENCE + """
ON CONFLICT (seq, stage, transcript) DO UPDATE SET state = excluded.state, at = excluded.at
"""
DELETE_ENTRY_DELIVERIES = "DELETE FROM sticky_delivery WHERE seq = %(seq)s AND " + FENCE
DELETE_ENTRY = "DELETE FROM sticky WHERE seq = %(seq)s AND " + FENCE
UPSERT_CONVERSATION = """
INSERT INTO conversations (agent, channel, remote, last_active_at, session_id)
VALUES (%(agent)s, %(channel)s, %(remote)s, %(last_active_at)s, %(session_id)s)
ON CONFLICT (agent, channel) DO UPDATE SET remote = excluded.remote,
    last_active_at = excluded.last_active_at, session_id = excluded.session_id
"""
DELETE_QUEUED_JOBS = """
DELETE FROM invocations WHERE agent = %(agent)s AND channel = %(channel)s AND state = 'queued'
"""
DELETE_RECOVERY = "DELETE FROM response_recovery WHERE agent = %(agent)s AND channel = %(channel)s"
DELETE_CONVERSATION = "DELETE FROM conversations WHERE agent = %(agent)s AND channel = %(channel)s"
INSERT_INVOCATION = """
INSERT INTO invocations (id, agent, channel, from_channel, reason, created_at, request, state,
                         updated_at)
VALUES (%(id)s, %(agent)s, %(channel)s, %(from_channel)s, %(reason)s, %(created_at)s,
        %(request)s, %(state)s, %(created_at)s)
"""
INVOCATION_STATE = """
UPDATE invocations SET state = %(state)s, updated_at = %(at)s, error = %(error)s WHERE id = %(id)s
"""
# The hand-over's compare-and-set: a row comes back when this broker started the job.
START_INVOCATION = """
UPDATE invocations SET state = %(state)s, updated_at = %(at)s, error = %(error)s,
    started_by = %(broker_id)s
WHERE id = %(id)s AND state = 'queued'
RETURNING id
"""
UPSERT_RECOVERY = """
INSERT INTO response_recovery (agent, channel, turn, drafts, outcome, updated_at)
VALUES (%(agent)s, %(channel)s, %(turn)s, %(drafts)s, %(outcome)s, %(at)s)
ON CONFLICT (agent, channel) DO UPDATE SET turn = excluded.turn, drafts = excluded.drafts,
    outcome = excluded.outcome, updated_at = excluded.updated_at
"""

# -- reads, columns named as the record fields they fill ------------------------------

ALL_RUN_IDS = "SELECT run_id FROM runs UNION SELECT run_id FROM sticky"
PRUNE_IDENTITIES = "DELETE FROM session_identity WHERE updated_at < %(cutoff)s"
# The newest %(limit)s, and those of the ids in %(named)s, oldest first. "C": byte
# order, as SQLite and Python compare text.
SELECT_IDENTITIES = """
SELECT * FROM (
    (SELECT session_id, atomic_session_id, token_hash, name, updated_at AS at
     FROM session_identity ORDER BY updated_at DESC, session_id COLLATE "C" DESC LIMIT %(limit)s)
    UNION
    SELECT session_id, atomic_session_id, token_hash, name, updated_at AS at
    FROM session_identity WHERE session_id = ANY(%(named)s::text[])) AS chosen
ORDER BY at, session_id COLLATE "C"
"""
SELECT_RUNS = "SELECT run_id, record, owner, epoch FROM runs WHERE run_id = ANY(%(runs)s::text[]) ORDER BY pos"
SELECT_STICKY = """
SELECT seq, run_id, target, sender_id, sender_name, message_id, message, attachments,
       sent_at, ack, position, not_in_known_set, delivered_to
FROM sticky WHERE run_id = ANY(%(runs)s::text[]) ORDER BY seq
"""
SELECT_ALL_DELIVERIES = "SELECT seq, stage, transcript, state, at FROM sticky_delivery ORDER BY pos"
SELECT_DELIVERIES = """
SELECT seq, stage, transcript, state, at FROM sticky_delivery
WHERE seq IN (SELECT seq FROM sticky WHERE run_id = ANY(%(runs)s::text[]))
ORDER BY pos
"""
SELECT_CONVERSATIONS = """
SELECT agent, channel, remote, last_active_at, session_id FROM conversations ORDER BY pos
"""
PRUNE_INVOCATIONS = """
DELETE FROM invocations WHERE state NOT IN ('queued', 'started') AND updated_at < %(cutoff)s
"""
# Unfinished jobs, less those started by another live broker (%(owner)s; all if NULL).
SELECT_INVOCATIONS = """
SELECT id, agent, channel, from_channel, reason, created_at, request, state FROM invocations
WHERE state = 'queued' OR (state = 'started' AND (%(owner)s::text IS NULL OR started_by NOT IN (
    SELECT broker_id FROM brokers WHERE lease_until > """ + DB_NOW + """ AND broker_id <> %(owner)s::text
    AND broker_id <> ALL(%(gone)s::text[]))))
ORDER BY pos
"""
SELECT_QUEUED_JOBS = """
SELECT id, agent, channel, from_channel, reason, created_at, request, state FROM invocations
WHERE agent = %(agent)s AND channel = %(channel)s AND state = 'queued' ORDER BY pos
"""
SELECT_RECOVERIES = """
SELECT agent, channel, turn, drafts, outcome, updated_at AS at FROM response_recovery ORDER BY pos
"""
SELECT_CLAIMS = "SELECT session_id, broker_id FROM session_claims"
GRANT_KEY_MAKE = """
INSERT INTO meta (key, value) VALUES ('grant_key', %(value)s) ON CONFLICT (key) DO NOTHING
"""
GRANT_KEY_READ = "SELECT value FROM meta WHERE key = 'grant_key'"
SELECT_LIVE = """
SELECT broker_id, pid, endpoint, started_at, lease_until AS until, curve_public FROM brokers
WHERE lease_until > """ + DB_NOW + """ AND broker_id IS DISTINCT FROM %(exclude)s::text
ORDER BY started_at, broker_id COLLATE "C"
"""
COUNT_LIVE = """
SELECT count(*) AS live FROM brokers
WHERE lease_until > """ + DB_NOW + """ AND broker_id IS DISTINCT FROM %(exclude)s::text
"""
