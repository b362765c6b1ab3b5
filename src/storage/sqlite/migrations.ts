/**
 * The data file's schema, as numbered steps: `PRAGMA user_version` says how many are applied, and the
 * application id marks the file as ours. Steps are only ever appended.
 */

import { notImplementedColumnSql, usageTablesSql } from '../shared/usage-columns'

/** 'PETS' in ASCII: marks a file as ours, so a foreign SQLite database is refused, not migrated. */
export const APPLICATION_ID = 0x50455453

export const MIGRATIONS: string[] = [
  `CREATE TABLE pets (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     name TEXT NOT NULL,
     category_id INTEGER NOT NULL,
     status TEXT NOT NULL CHECK (status IN ('available', 'pending', 'sold')),
     created_at INTEGER NOT NULL
   );
   CREATE INDEX pets_by_status ON pets (status, id);
   CREATE TABLE api_keys (
     id TEXT PRIMARY KEY,
     name TEXT NOT NULL,
     plan TEXT NOT NULL,
     rpm INTEGER NOT NULL,
     rpd INTEGER NOT NULL,
     secret_hash TEXT NOT NULL UNIQUE,
     created_at INTEGER NOT NULL,
     last_used_at INTEGER,
     revoked_at INTEGER
   );
   CREATE TABLE idempotency (
     key_id TEXT NOT NULL,
     idem_key TEXT NOT NULL,
     request_hash TEXT NOT NULL,
     status INTEGER NOT NULL,
     body TEXT NOT NULL,
     location TEXT NOT NULL,
     created_at INTEGER NOT NULL,
     PRIMARY KEY (key_id, idem_key)
   ) WITHOUT ROWID;
   CREATE INDEX idempotency_by_age ON idempotency (created_at);
   CREATE TABLE limiter_state (
     subject TEXT PRIMARY KEY,
     tokens REAL NOT NULL,
     updated_at INTEGER NOT NULL
   ) WITHOUT ROWID;`,
  // Signals from the CLI to a running server: pets seeded or reset, key limits reset.
  `CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
   INSERT INTO meta (name, value) VALUES ('pets_generation', 0);
   CREATE TABLE limit_resets (key_id TEXT PRIMARY KEY, requested_at INTEGER NOT NULL) WITHOUT ROWID;`,
  // Each create or revoke of a key takes the next change number, so a server reads only what changed.
  `ALTER TABLE api_keys ADD COLUMN change INTEGER NOT NULL DEFAULT 0;
   CREATE INDEX api_keys_by_change ON api_keys (change);
   INSERT INTO meta (name, value) VALUES ('keys_change', 0);`,
  // Per-key usage by minute and by hour, to which the server adds its counts.
  usageTablesSql('INTEGER'),
  // The console: operators, their sessions and tokens (by secret hash), failed sign-ins, the audit log.
  `CREATE TABLE operators (name TEXT PRIMARY KEY, password_hash TEXT NOT NULL, created_at INTEGER NOT NULL) WITHOUT ROWID;
   CREATE TABLE operator_credentials (
     hash TEXT PRIMARY KEY,
     operator TEXT NOT NULL REFERENCES operators (name) ON DELETE CASCADE,
     kind TEXT NOT NULL CHECK (kind IN ('session', 'token')),
     created_at INTEGER NOT NULL,
     last_seen_at INTEGER NOT NULL
   ) WITHOUT ROWID;
   CREATE INDEX operator_credentials_by_operator ON operator_credentials (operator, kind);
   CREATE TABLE sign_in_failures (name TEXT NOT NULL, at INTEGER NOT NULL);
   CREATE INDEX sign_in_failures_by_name ON sign_in_failures (name, at);
   CREATE TABLE audit_log (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     at INTEGER NOT NULL,
     actor TEXT NOT NULL,
     action TEXT NOT NULL,
     target TEXT NOT NULL
   );`,
  // Answers 501 (an operation not implemented, by design) counted apart from the 5xx; earlier rows keep theirs there.
  notImplementedColumnSql('INTEGER'),
  // Sign-in failures by client address: a name is throttled per address before it is for everyone.
  `ALTER TABLE sign_in_failures ADD COLUMN address TEXT NOT NULL DEFAULT '';`,
  // Key lifecycle: an expiry, a roll's previous secret with its end, each secret's last use, and the
  // secret's format (keys made before this step have secrets without a checksum).
  `ALTER TABLE api_keys ADD COLUMN expires_at INTEGER;
   ALTER TABLE api_keys ADD COLUMN secret_format TEXT NOT NULL DEFAULT 'legacy';
   ALTER TABLE api_keys ADD COLUMN secret_last_used_at INTEGER;
   ALTER TABLE api_keys ADD COLUMN rolled_at INTEGER;
   ALTER TABLE api_keys ADD COLUMN previous_secret_hash TEXT;
   ALTER TABLE api_keys ADD COLUMN previous_ends_at INTEGER;
   ALTER TABLE api_keys ADD COLUMN previous_last_used_at INTEGER;
   UPDATE api_keys SET secret_last_used_at = last_used_at;
   CREATE INDEX api_keys_by_previous_secret ON api_keys (previous_secret_hash) WHERE previous_secret_hash IS NOT NULL;`,
  // A saved day bucket's limits, the key's as it was counted: under others (a plan changed since) it is
  // not taken. Rows saved before this step have none.
  `ALTER TABLE limiter_state ADD COLUMN rpm INTEGER;
   ALTER TABLE limiter_state ADD COLUMN rpd INTEGER;`,
]
