// Anthropic at the wire: the Messages API held, capped and settled from the usage
// Anthropic reports (the @anthropic-ai/sdk types Usage and MessageDeltaUsage: cache reads
// and writes by TTL, server tool use, service tier). The rules are the Python SDK's
// (src/earmark/client/wire_anthropic.py).
//
// Every POST is routed by ANTHROPIC_ROUTES, its whole path after the base URL's own path
// (none: Anthropic's paths start with /v1): metered, POST /v1/messages (create,
// create({ stream: true }), stream, parse, and beta.messages'); free, passed through,
// counting a message's tokens (/v1/messages/count_tokens), cancelling a message batch, and
// files (a standing cost); every other POST (message batches, skills, managed agents and
// their sessions, administration...) is refused before it is sent, naming it. A request
// that is not a POST passes. The package opens no websocket.
//
// Anthropic's input_tokens counts neither cache reads nor cache writes; Earmark's counts
// every input token, so they are added. A stream reports its usage twice: message_start's
// message (the input counts) and message_delta's cumulative usage (the output, and the
// input again once a server tool has run); the last value of each field is the bill.
import { TOOL_CALLS_PER_REQUEST_MAX } from './limits.js';
import {
  FREE,
  REFUSED,
  Routes,
  count,
  counts,
  isObject,
  jsonChars,
  positive,
  promptEstimate,
  text,
  type Call,
  type CallSettings,
  type Json,
  type JsonObject,
  type Route,
  type Routing,
  type Tally,
} from './routes.js';
import type { Usage } from './types.js';

// A server tool's type names its kind and version (web_search_20250305): the web search is
// priced per search. Web fetch has no fee of its own (its pages are input tokens), so it is
// not held as a tool call.
const SEARCH_TOOL = 'web_search_';
// The usage fields a stream's events carry, which message_delta updates one by one.
const USAGE_FIELDS = new Set([
  'input_tokens',
  'output_tokens',
  'cache_creation_input_tokens',
  'cache_read_input_tokens',
  'cache_creation',
  'server_tool_use',
  'service_tier',
]);

/** The characters of a system prompt or a message's content: a string, or blocks whose
 * text counts, and whose input (a tool call's) and content (a tool result's) count too. An
 * image's or a document's data does not: it is billed by its size, not its encoding. */
function chars(value: Json | undefined): number {
  if (typeof value === 'string') return value.length;
  if (!Array.isArray(value)) return 0;
  let total = 0;
  for (const block of value) {
    if (!isObject(block)) continue;
    total += text(block.text).length + jsonChars(block.input);
    if (block.type === 'tool_result') total += chars(block.content);
  }
  return total;
}

/** An Anthropic usage as Earmark prices it: every input token counted, the 1-hour cache
 * writes apart, and the web searches by count. */
export function messagesUsage(usage: JsonObject): Usage {
  const written = count(usage.cache_creation_input_tokens);
  const read = count(usage.cache_read_input_tokens);
  const byTtl = isObject(usage.cache_creation) ? usage.cache_creation : {};
  const tools = isObject(usage.server_tool_use) ? usage.server_tool_use : {};
  return {
    inputTokens: count(usage.input_tokens) + written + read,
    outputTokens: count(usage.output_tokens),
    cachedInputTokens: read,
    cacheWriteInputTokens: written,
    cacheWriteLongInputTokens: Math.min(written, count(byTtl.ephemeral_1h_input_tokens)),
    serviceTier: text(usage.service_tier),
    toolCalls: counts([['web_search', count(tools.web_search_requests)]]),
  };
}

/** message_start's usage, updated field by field by message_delta's cumulative one; the
 * bill is known once message_delta has come. */
class MessagesTally implements Tally {
  private readonly fields: JsonObject = {};
  private final = false;

  keep(event: string, data: Json): boolean {
    if (!isObject(data)) return true;
    const kind = event || text(data.type);
    if (kind === 'message_start' && isObject(data.message)) {
      this.merge(data.message.usage);
    } else if (kind === 'message_delta') {
      this.merge(data.usage);
      this.final = true;
    }
    return true;
  }

  private merge(usage: Json | undefined): void {
    if (!isObject(usage)) return;
    for (const [name, value] of Object.entries(usage)) {
      if (USAGE_FIELDS.has(name) && value !== null && value !== undefined) this.fields[name] = value;
    }
  }

  usage(): Usage | null {
    return this.final ? messagesUsage(this.fields) : null;
  }
}

/** POST .../v1/messages. */
const messages: Route = {
  call(body: JsonObject, settings: CallSettings): Call {
    const list = Array.isArray(body.messages) ? body.messages.filter(isObject) : [];
    let total = chars(body.system) + jsonChars(body.tools);
    for (const message of list) total += chars(message.content);
    const searches: [string, number][] = [];
    for (const tool of Array.isArray(body.tools) ? body.tools.filter(isObject) : []) {
      if (text(tool.type).startsWith(SEARCH_TOOL)) {
        const uses = positive(tool, 'max_uses') ?? settings.toolCallsMax;
        searches.push(['web_search', Math.min(uses, TOOL_CALLS_PER_REQUEST_MAX)]);
      }
    }
    return {
      model: text(body.model),
      promptTokens: promptEstimate(total, list.length),
      asked: positive(body, 'max_tokens'),
      choices: 1,
      stream: body.stream === true,
      // A request's service_tier ("auto", "standard_only") chooses capacity, not a price:
      // the tier the call ran at comes back in its usage, and is priced then.
      serviceTier: '',
      toolCallsMax: counts(searches),
      hasOutput: true,
    };
  },

  sent(body: JsonObject, _call: Call, cap: number | null) {
    return { body: cap === null ? body : { ...body, max_tokens: cap }, hiddenUsage: false };
  },

  usage(answer: Json): Usage | null {
    if (!isObject(answer) || !isObject(answer.usage)) return null;
    return messagesUsage(answer.usage);
  },

  tally(): Tally {
    return new MessagesTally();
  },
};

/**
 * Every POST of Anthropic's API, by the path after the base URL's own path (none), with
 * what Earmark does with it; a POST it does not list is refused too. test/surface.test.mjs
 * calls every method of the installed @anthropic-ai/sdk package and fails on a POST not
 * listed here. The Python SDK's wire_anthropic.ROUTES, path for path.
 */
export const ANTHROPIC_ROUTES = new Routes({
  // Metered: held, capped and settled at the provider's usage.
  '/v1/messages': messages,
  // Free: counting tokens and cancelling bill nothing; files are a standing cost.
  '/v1/messages/count_tokens': FREE,
  '/v1/messages/batches/{message_batch_id}/cancel': FREE,
  '/v1/files': FREE,
  // Refused: work that bills once started, out of the call that started it (message
  // batches; managed agents, their sessions, environments, deployments and dreams).
  '/v1/messages/batches': REFUSED,
  '/v1/skills/**': REFUSED,
  '/v1/agents/**': REFUSED,
  '/v1/sessions/**': REFUSED,
  '/v1/environments/**': REFUSED,
  '/v1/deployments/**': REFUSED,
  '/v1/dreams/**': REFUSED,
  '/v1/memory_stores/**': REFUSED,
  '/v1/vaults/**': REFUSED,
  '/v1/tunnels/**': REFUSED,
  '/v1/user_profiles/**': REFUSED,
  // Refused: administration, no metered worker's job; a metered client mints no key and
  // lifts no spend limit.
  '/v1/organizations/**': REFUSED,
  '/v1/compliance/**': REFUSED,
});

/** The route of a POST to path (the whole URL path), under a base URL whose own path is
 * prefix ('' for Anthropic's). */
export const anthropicRouting: Routing = (path, prefix = '') => ANTHROPIC_ROUTES.routing(path, prefix);
