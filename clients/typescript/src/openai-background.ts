// OpenAI's Response object (the Responses API) as Earmark reads it: whether a response is
// still running or has ended, and the usage it reports, checked. The rules are the Python
// SDK's (src/earmark/client/openai_background.py).
//
// Why a response runs on after its answer: responses.create({ background: true }) answers
// at once with status "queued" (or "in_progress") and usage null, and the model runs on at
// OpenAI; responses.retrieve(id) (GET .../responses/{id}), a resumed stream (GET
// .../responses/{id}?stream=true&starting_after=N) and responses.cancel(id) (POST
// .../responses/{id}/cancel) answer the same Response later. Its status is one of
// ResponseStatus (the openai package's resources/responses/responses.d.ts): "queued" and
// "in_progress" while it runs; "completed", "incomplete", "failed" and "cancelled" once it
// has ended. Its usage is a ResponseUsage: input_tokens (cache reads and writes among
// them), input_tokens_details {cached_tokens, cache_write_tokens}, output_tokens
// (reasoning among them), present once the response has ended (completed or incomplete
// always; cancelled and failed when anything ran).
import {
  LABEL_VALUE_LENGTH_MAX,
  SERVICE_TIER_LENGTH_MAX,
  TOKENS_PER_REQUEST_MAX,
  TOOL_CALLS_PER_REQUEST_MAX,
} from './limits.js';
import { counts, isObject, reportedCount, text, type Ended, type Json, type JsonObject } from './routes.js';
import type { Usage } from './types.js';

/** The hold label a background response's id is recorded under once OpenAI answers with it
 * (a Renew's labels): `earmark reconcile --project-key-file` retrieves the response by it. */
export const RESPONSE_ID_LABEL = 'openai.response_id';
const RUNNING = new Set(['queued', 'in_progress']);
const TERMINAL = new Set(['completed', 'incomplete', 'failed', 'cancelled']);
// Ended responses that always report their usage.
const WITH_USAGE = new Set(['completed', 'incomplete']);
// The output items a Responses answer bills a built-in tool call for.
const TOOL_ITEMS: Record<string, string> = {
  web_search_call: 'web_search',
  file_search_call: 'file_search',
  code_interpreter_call: 'code_interpreter',
};
// A label's value is printed where it is read: no control, format or separator character
// but the space.
const PRINTABLE = /^(?:[^\p{C}\p{Z}]| )+$/u;

/** A Response that is not in OpenAI's published shape, or not the one asked for: nothing is
 * settled from it. field names what failed ("usage.output_tokens"). */
export class InvalidResponseError extends Error {
  constructor(
    message: string,
    readonly field = '',
  ) {
    super(message);
    this.name = 'InvalidResponseError';
  }
}

// A service tier name's characters the sidecar takes: printable ASCII without spaces.
const TIER_NAME = /^[\x21-\x7e]+$/;

// Why the next two bound what a report says (src/earmark/client/wire_usage.py): the
// sidecar refuses a usage whose cache parts exceed its input, or whose tier is no name it
// takes, and a refused Settle leaves the hold to be swept, the call charged nothing.

/** A count of input tokens read from (or written to) the provider's cache: a whole number
 * from 0 to inputTokens; anything else counts 0, its tokens priced as input. */
export function cachePart(value: Json | undefined, inputTokens: number): number {
  const most = Math.min(inputTokens, TOKENS_PER_REQUEST_MAX);
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 && value <= most ? value : 0;
}

/** [cache reads, cache writes] of inputTokens, each bounded by cachePart; when the two
 * together are more than the input, the reads count 0 (their tokens at the input rate, the
 * higher of the two). */
export function cacheParts(inputTokens: number, read: Json | undefined, written: Json | undefined): [number, number] {
  const cached = cachePart(read, inputTokens);
  const wrote = cachePart(written, inputTokens);
  return [cached + wrote > inputTokens ? 0 : cached, wrote];
}

/** The service tier an answer says it ran at, as given ("default" says the default tier);
 * '' (the tier it was held at) when it names none, or a name the sidecar would refuse. */
export function servedTier(value: Json | undefined): string {
  return typeof value === 'string' && value.length <= SERVICE_TIER_LENGTH_MAX && TIER_NAME.test(value) ? value : '';
}

/** Cancelled before it reported any usage: nothing ran that bills. */
export function billedNothing(ended: Ended): boolean {
  return ended.usage === null && ended.status === 'cancelled';
}

/** A response id a hold label can carry. */
export function validId(value: Json | undefined): value is string {
  return typeof value === 'string' && value.length > 0 && value.length <= LABEL_VALUE_LENGTH_MAX && PRINTABLE.test(value);
}

/** A token count: absent or null is 0; anything but a whole number from 0 to
 * TOKENS_PER_REQUEST_MAX throws when strict, and counts 0 otherwise (as the metered client
 * reads an answer it passes on). */
function tokens(value: Json | undefined, where: string, strict: boolean): number {
  const found = reportedCount(value);
  if (found !== null) return found;
  if (strict) throw new InvalidResponseError(`${where} is ${JSON.stringify(value).slice(0, 40)}, not a token count`, where);
  return 0;
}

/** A Response's usage (it must have one), and the built-in tool calls its output items
 * bill. strict: counts that are not whole numbers from 0 up, or cached and cache-written
 * tokens past the input they are part of, throw InvalidResponseError. */
export function responseUsage(response: JsonObject, strict = false): Usage {
  const usage = response.usage as JsonObject;
  let details = usage.input_tokens_details ?? {};
  if (!isObject(details)) {
    if (strict) throw new InvalidResponseError('usage.input_tokens_details is not an object', 'usage.input_tokens_details');
    details = {};
  }
  if (strict && !('input_tokens' in usage && 'output_tokens' in usage)) {
    throw new InvalidResponseError('usage lacks input_tokens or output_tokens', 'usage');
  }
  const inputTokens = tokens(usage.input_tokens, 'usage.input_tokens', strict);
  const outputTokens = tokens(usage.output_tokens, 'usage.output_tokens', strict);
  const of = 'usage.input_tokens_details';
  const read = tokens(details.cached_tokens, `${of}.cached_tokens`, strict);
  const wrote = tokens(details.cache_write_tokens, `${of}.cache_write_tokens`, strict);
  if (strict && read + wrote > inputTokens) {
    throw new InvalidResponseError(`${read} cached and ${wrote} cache-written tokens of ${inputTokens} input tokens`, of);
  }
  // Read as the metered client passes it on: parts the input cannot hold are priced as
  // input, rather than failing the Settle.
  const [cached, written] = cacheParts(inputTokens, read, wrote);
  const output = Array.isArray(response.output) ? response.output : [];
  const tools = counts(output.filter(isObject).map((item): [string, number] => [TOOL_ITEMS[text(item.type)] ?? '', 1]));
  delete tools[''];
  if (strict && Object.values(tools).some((n) => n > TOOL_CALLS_PER_REQUEST_MAX)) {
    throw new InvalidResponseError('more tool calls than one request can make', 'output');
  }
  return {
    inputTokens,
    outputTokens,
    cachedInputTokens: cached,
    cacheWriteInputTokens: written,
    // The tier the response ran at, which OpenAI bills (a request's may differ).
    serviceTier: servedTier(response.service_tier),
    toolCalls: tools,
  };
}

/**
 * How the response responseId ended, read from a Response object; null while it runs.
 * Throws InvalidResponseError for anything else: not a Response, another response's id, a
 * status OpenAI does not publish, a usage that is not in its shape, or a completed or
 * incomplete response without its usage.
 */
export function ending(response: Json | undefined, responseId: string): Ended | null {
  if (!isObject(response) || (response.object ?? 'response') !== 'response') {
    throw new InvalidResponseError('the answer is not a Response object', 'object');
  }
  if (response.id !== responseId) {
    throw new InvalidResponseError(`the answer is response ${JSON.stringify(response.id ?? null).slice(0, 80)}, not ${JSON.stringify(responseId)}`, 'id');
  }
  const status = text(response.status);
  if (typeof response.status === 'string' && RUNNING.has(status)) return null;
  if (typeof response.status !== 'string' || !TERMINAL.has(status)) {
    throw new InvalidResponseError(`status ${JSON.stringify(response.status ?? null).slice(0, 40)} is none that OpenAI publishes`, 'status');
  }
  const usage = response.usage;
  if (usage === undefined || usage === null) {
    if (WITH_USAGE.has(status)) throw new InvalidResponseError(`a ${status} response without its usage`, 'usage');
    return { status, usage: null };
  }
  if (!isObject(usage)) throw new InvalidResponseError('usage is not an object', 'usage');
  return { status, usage: responseUsage(response, true) };
}
