/**
 * The last schema step taken back (the key lifecycle's columns of api_keys and their index), the same
 * statements on both engines: a data file or database as the previous release left it.
 */
export const TAKE_BACK_LAST_STEP = [
  'DROP INDEX api_keys_by_previous_secret',
  ...[
    'expires_at',
    'secret_format',
    'secret_last_used_at',
    'rolled_at',
    'previous_secret_hash',
    'previous_ends_at',
    'previous_last_used_at',
  ].map((column) => `ALTER TABLE api_keys DROP COLUMN ${column}`),
]
