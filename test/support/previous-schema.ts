/**
 * The schema's last steps taken back, newest first, the same statements on both engines: a data file or
 * database as an earlier release left it. TAKE_BACK[0] undoes the last step; the first n undo the last n.
 */
export const TAKE_BACK: readonly (readonly string[])[] = [
  // A saved day bucket's limits.
  ['ALTER TABLE limiter_state DROP COLUMN rpm', 'ALTER TABLE limiter_state DROP COLUMN rpd'],
  // The key lifecycle: expiry, a roll's previous secret, each secret's last use, the secret's format.
  [
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
  ],
  // Sign-in failures by client address.
  ['ALTER TABLE sign_in_failures DROP COLUMN address'],
  // Answers 501 counted apart from the 5xx.
  ['ALTER TABLE usage_minutes DROP COLUMN not_implemented', 'ALTER TABLE usage_hours DROP COLUMN not_implemented'],
]

export const TAKE_BACK_LAST_STEP = TAKE_BACK[0]!
