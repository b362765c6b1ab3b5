/**
 * The console's request bodies, read by the bounded reader within budgets of this listener's own, never
 * the API's, and checked against their route's model. Sign-in's budget (anyone may send one) is apart
 * from the operators', so a flood of the first cannot stop keys being made; one address may hold a few
 * sign-ins' bytes, so that a client stalling bodies cannot lock operators out.
 */
import { BodyBudget, readJsonBody } from '../../../http/json-body'
import type { TSchema } from '@sinclair/typebox'
import { compileValidator } from '../../../http/validation'
import { OPERATOR_NAME_RULE } from '../../../domain/operator-name'
import { ExpiryChange, FIELD_RULES, MAX_BODY_BYTES, NewKey, PlanChange, Roll, SignIn } from '../model'

/** Console bodies of 8 KiB received at once, per budget (1 MiB). */
const BODIES_IN_FLIGHT = 128
/** A sign-in's body at most: a real one (a name of up to 64 characters, a generated password) is under 200 bytes. */
const SIGN_IN_MAX_BYTES = 1024
/** Sign-in bodies received at once (128 KiB), and from one client address (4 KiB). */
const SIGN_IN_BODIES = 128
const SIGN_IN_BODIES_PER_ADDRESS = 4
/** How long a sign-in's body may take: a browser sends its few bytes with the headers. */
const SIGN_IN_DEADLINE_MS = 2_000

const signInValidator = compileValidator(SignIn, { ...FIELD_RULES, name: OPERATOR_NAME_RULE })

export function consoleBodies() {
  const signIns = new BodyBudget(SIGN_IN_BODIES * SIGN_IN_MAX_BYTES, {
    perAddress: SIGN_IN_BODIES_PER_ADDRESS * SIGN_IN_MAX_BYTES,
    deadlineMs: SIGN_IN_DEADLINE_MS,
  })
  const operators = new BodyBudget(BODIES_IN_FLIGHT * MAX_BODY_BYTES)
  /** An operator's body of the schema's shape. */
  const operatorBody = <S extends TSchema>(schema: S) => {
    const validator = compileValidator(schema, FIELD_RULES)
    return async (request: Request) => validator.parse(await readJsonBody(request, MAX_BODY_BYTES, operators))
  }
  return {
    /** A sign-in's body, from the client address that sends it. */
    signIn: async (request: Request, address: string) =>
      signInValidator.parse(await readJsonBody(request, SIGN_IN_MAX_BYTES, signIns, address)),
    newKey: operatorBody(NewKey),
    plan: operatorBody(PlanChange),
    roll: operatorBody(Roll),
    expiry: operatorBody(ExpiryChange),
  }
}
