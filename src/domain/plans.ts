/**
 * Plans and their rate limits, in one table. A key's limits are copied from its plan when the key is
 * made (so changing the table never changes an existing key); an enterprise key has limits of its own.
 * Requests without a valid key are limited per client address with the free plan's limits.
 */

export interface Limits {
  /** Requests per minute. */
  rpm: number
  /** Requests per day. */
  rpd: number
}

export const PLAN_LIMITS: Record<'free' | 'pro' | 'business', Limits> = {
  free: { rpm: 60, rpd: 1_000 },
  pro: { rpm: 300, rpd: 10_000 },
  business: { rpm: 1_000, rpd: 100_000 },
}

/** The plan whose keys carry limits of their own, given when the key is made. */
export const CUSTOM_PLAN = 'enterprise'

export type Plan = keyof typeof PLAN_LIMITS | typeof CUSTOM_PLAN
export const PLANS: Plan[] = [...(Object.keys(PLAN_LIMITS) as (keyof typeof PLAN_LIMITS)[]), CUSTOM_PLAN]

/** Whether two limits are the same: other limits start a subject's buckets afresh. */
export function sameLimits(a: Limits, b: Limits): boolean {
  return a.rpm === b.rpm && a.rpd === b.rpd
}
