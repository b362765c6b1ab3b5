/**
 * Orders, in the interface's store area. The interface names GET /store/orders without describing it, so it exists,
 * authenticated and rate limited like every operation, and answers 501.
 */
import { Elysia } from 'elysia'
import { notImplemented } from '../../http/api-errors'
import { errorResponses } from '../../http/openapi'

export function ordersModule() {
  return new Elysia({ name: 'orders' }).get(
    '/store/orders',
    () => {
      throw notImplemented('GET /store/orders')
    },
    {
      detail: {
        operationId: 'listOrders',
        summary: 'List orders (not implemented)',
        description:
          'Part of the interface whose shape is not described; this server answers 501 (503 while the shared rate limiter does not ' +
          'answer, and 400 for a Host header it cannot read, as every operation).',
        tags: ['store'],
        responses: errorResponses([400, 401, 429, 501, 503]),
      },
    },
  )
}
