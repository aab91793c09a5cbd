// The bounds of metered provider calls, the same numbers as the Python SDK's
// (src/earmark/limits.py), so that one call is held alike from either language.

/** A prompt is counted as one token per this many characters: fewer than the usual four,
 * so that the hold errs high. */
export const PROMPT_CHARS_PER_TOKEN = 3;
/** Each message (or Responses input item) adds its role and framing. */
export const MESSAGE_OVERHEAD_TOKENS = 4;
/** The framing of the reply itself. */
export const REPLY_OVERHEAD_TOKENS = 3;
/** A request with server tools that names no maximum number of calls is held for this
 * many calls of each kind. */
export const TOOL_CALLS_DEFAULT = 10;
/** The most server tool calls of one kind a request may be held for (the sidecar's bound). */
export const TOOL_CALLS_PER_REQUEST_MAX = 10_000;
/** The most output tokens any one call may be held for: past every model's ceiling, and far
 * inside what an int64 amount holds at any price. */
export const OUTPUT_TOKENS_MAX = 10_000_000;
/** A server-sent event of a stream is read when it is at most this many characters; a
 * larger one (a line that never ends is not SSE) is passed on unread. */
export const SSE_EVENT_CHARS_MAX = 16 << 20;
/** The longest value a hold's label may have (the sidecar's bound). */
export const LABEL_VALUE_LENGTH_MAX = 256;
/** The longest service tier name the sidecar takes (limits.py service_tier_length_max): an
 * answer naming a longer one is charged at the held tier. */
export const SERVICE_TIER_LENGTH_MAX = 32;
/** The most tokens of any one kind one call may report: a count past it is no count. */
export const TOKENS_PER_REQUEST_MAX = 10 ** 12;
/** A metered client keeps at most this many holds open for calls that run on after their
 * answer (OpenAI's background responses), each renewing its lease until the call is read
 * again ended; past it, the oldest goes in doubt, its id recorded for earmark reconcile. */
export const LLM_BACKGROUND_HOLDS_MAX = 1_000;
/** A settlement journal's record is at most this many bytes (a Settle request is far
 * smaller): a file named as a record is read to this bound and no further, so a planted
 * sparse file of gigabytes is quarantined unread (the Python SDK's journal_record_bytes_max). */
export const JOURNAL_RECORD_BYTES_MAX = 1 << 16;
/** A cost a provider reports for one call (OpenRouter's usage.cost) is believed, and the
 * call's hold settled at it where the budget counts money, when it is a finite amount from
 * 0 to this many micro-dollars ($1,000, past any one call's list price); any other is not,
 * and the call is priced from its tokens instead (the Python SDK's
 * llm_reported_cost_usd_micros_max). */
export const LLM_REPORTED_COST_USD_MICROS_MAX = 10 ** 9;
