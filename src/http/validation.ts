/**
 * Turns TypeBox's findings into one 400 that names the field and says what it must be.
 */
import type { Static, TObject, TSchema } from '@sinclair/typebox'
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler'
import { ValueErrorType } from '@sinclair/typebox/errors'
import { badRequest } from './api-errors'

export function compileValidator<S extends TSchema>(schema: S, rules: Record<string, string>, what = 'body') {
  const check: TypeCheck<S> = TypeCompiler.Compile(schema)
  const known = Object.keys((schema as unknown as TObject).properties ?? {}).join(', ')
  return {
    /** Returns the value typed, or throws a 400 naming the first offending field. */
    parse(value: unknown): Static<S> {
      if (check.Check(value)) return value
      const error = check.Errors(value).First()!
      const field = error.path.split('/').filter(Boolean).join('.')
      if (!field) throw badRequest(`${what}: must be a JSON object`)
      if (error.type === ValueErrorType.ObjectAdditionalProperties)
        throw badRequest(`${field}: is not a known property; allowed are ${known}`)
      if (error.type === ValueErrorType.ObjectRequiredProperty) throw badRequest(`${field}: is required`)
      throw badRequest(`${field}: ${rules[field] ?? 'is not valid'}`)
    },
  }
}
