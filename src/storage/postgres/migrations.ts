/**
 * The PostgreSQL schema, as numbered steps recorded in `petstore_schema`. Steps are only ever
 * appended; each runs in the one start-up transaction, under an advisory lock, so instances that start
 * together migrate once.
 */

import { notImplementedColumnSql, usageTablesSql } from '../shared/usage-columns'

/** Advisory lock keys, each a constant of this application ('PETS' and a role). */
export const LOCKS = {
  /** Held by the start-up transaction: migrations and the bootstrap key. */
  schema: 0x5045_5453_0001n,
  /** Held by every transaction that gives out pet ids, until it commits: ids become visible in order. */
  petIds: 0x5045_5453_0002n,
  /** The same for the sequence numbers of limit resets, which instances read past. */
  limitResets: 0x5045_5453_0003n,
  /** The same for the change numbers of keys created or revoked, which instances read past. */
  keyChanges: 0x5045_5453_0004n,
} as const

export const MIGRATIONS: string[] = [
  `CREATE TABLE pets (
     id bigint PRIMARY KEY,
     name text NOT NULL,
     category_id bigint NOT NULL,
     status text NOT NULL CHECK (status IN ('available', 'pending', 'sold')),
     created_at bigint NOT NULL
   );
   CREATE SEQUENCE pets_id_seq AS bigint OWNED BY pets.id;
   CREATE INDEX pets_by_status ON pets (status, id);
   CREATE TABLE api_keys (
     id text PRIMARY KEY,
     name text NOT NULL,
     plan text NOT NULL,
     rpm bigint NOT NULL,
     rpd bigint NOT NULL,
     secret_hash text NOT NULL UNIQUE,
     created_at bigint NOT NULL,
     last_used_at bigint,
     revoked_at bigint
   );
   CREATE TABLE idempotency (
     key_id text NOT NULL,
     idem_key text NOT NULL,
     request_hash text NOT NULL,
     status integer NOT NULL,
     body text NOT NULL,
     location text NOT NULL,
     created_at bigint NOT NULL,
     PRIMARY KEY (key_id, idem_key)
   );
   CREATE INDEX idempotency_by_age ON idempotency (created_at);
   CREATE TABLE limiter_state (
     subject text PRIMARY KEY,
     tokens double precision NOT NULL,
     updated_at bigint NOT NULL
   );
   CREATE TABLE meta (name text PRIMARY KEY, value bigint NOT NULL);
   INSERT INTO meta (name, value) VALUES ('pets_generation', 0);
   CREATE SEQUENCE limit_resets_seq AS bigint;
   CREATE TABLE limit_resets (
     key_id text PRIMARY KEY,
     requested_at bigint NOT NULL,
     seq bigint NOT NULL
   );`,
  // Each create or revoke of a key takes the next change number, so an instance reads only what changed.
  // The default numbers the keys already there, each its own (instances page through them by number).
  `CREATE SEQUENCE api_keys_change_seq AS bigint;
   ALTER TABLE api_keys ADD COLUMN change bigint NOT NULL DEFAULT nextval('api_keys_change_seq');
   CREATE UNIQUE INDEX api_keys_by_change ON api_keys (change);`,
  // Per-key usage by minute and by hour, to which every instance adds its counts.
  usageTablesSql('bigint'),
  // The console: operators, their sessions and tokens (by secret hash), failed sign-ins, the audit log.
  `CREATE TABLE operators (name text PRIMARY KEY, password_hash text NOT NULL, created_at bigint NOT NULL);
   CREATE TABLE operator_credentials (
     hash text PRIMARY KEY,
     operator text NOT NULL REFERENCES operators (name) ON DELETE CASCADE,
     kind text NOT NULL CHECK (kind IN ('session', 'token')),
     created_at bigint NOT NULL,
     last_seen_at bigint NOT NULL
   );
   CREATE INDEX operator_credentials_by_operator ON operator_credentials (operator, kind);
   CREATE TABLE sign_in_failures (name text NOT NULL, at bigint NOT NULL);
   CREATE INDEX sign_in_failures_by_name ON sign_in_failures (name, at);
   CREATE TABLE audit_log (
     id bigserial PRIMARY KEY,
     at bigint NOT NULL,
     actor text NOT NULL,
     action text NOT NULL,
     target text NOT NULL
   );`,
  // Answers 501 (an operation not implemented, by design) counted apart from the 5xx; earlier rows keep theirs there.
  notImplementedColumnSql('bigint'),
  // Sign-in failures by client address: a name is throttled per address before it is for everyone.
  `ALTER TABLE sign_in_failures ADD COLUMN address text NOT NULL DEFAULT '';`,
  // Key lifecycle: an expiry, a roll's previous secret with its end, each secret's last use, and the
  // secret's format (keys made before this step have secrets without a checksum).
  `ALTER TABLE api_keys ADD COLUMN expires_at bigint,
     ADD COLUMN secret_format text NOT NULL DEFAULT 'legacy',
     ADD COLUMN secret_last_used_at bigint,
     ADD COLUMN rolled_at bigint,
     ADD COLUMN previous_secret_hash text,
     ADD COLUMN previous_ends_at bigint,
     ADD COLUMN previous_last_used_at bigint;
   UPDATE api_keys SET secret_last_used_at = last_used_at;
   CREATE INDEX api_keys_by_previous_secret ON api_keys (previous_secret_hash) WHERE previous_secret_hash IS NOT NULL;`,
  // A saved day bucket's limits, the key's as it was counted: under others (a plan changed since) it is
  // not taken. Rows saved before this step have none.
  `ALTER TABLE limiter_state ADD COLUMN rpm bigint, ADD COLUMN rpd bigint;`,
]
