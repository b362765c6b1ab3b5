/** What an incoming X-Request-Id must be to be echoed (otherwise the server makes one), and the rule in words. */
export const SANE_REQUEST_ID = /^[A-Za-z0-9._:@+=-]{1,128}$/
export const REQUEST_ID_RULE = '1 to 128 of A-Z a-z 0-9 . _ : @ + = -'
