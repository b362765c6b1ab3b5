/** What an operator's name may be, and the rule in the words a refusal uses (the console's document gives it as a pattern). */
export const OPERATOR_NAME = /^[A-Za-z0-9._@-]{1,64}$/
export const OPERATOR_NAME_RULE = 'an operator name is 1 to 64 characters of A-Z a-z 0-9 . _ @ -'
