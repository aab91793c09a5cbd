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
// their sessions, administration...) is refused before it is sent, naming it. A read or a
// delete passes; a PATCH or PUT is refused unless its path is free. The package opens no
// websocket.
//
// A request's tools are read by their type (ANTHROPIC_TOOLS): the web search is held for its
// max_uses and settled at the searches the usage counts; tools that bill only tokens pass;
// code execution (billed by container time), the advisor (another model's tokens), and a
// type Earmark has not classified are refused before anything is held or sent
// (ToolNotMeteredError).
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
  TOKENS_ONLY,
  count,
  counts,
  feeTool,
  heldTools,
  isObject,
  jsonChars,
  positive,
  reportedCounts,
  promptEstimate,
  refusedTool,
  text,
  type Call,
  type CallSettings,
  type Json,
  type JsonObject,
  type Route,
  type Routing,
  type Tally,
  type Tools,
} from './routes.js';
import type { Usage } from './types.js';

const WEB_SEARCH = feeTool('web_search');
const CODE_EXECUTION = refusedTool("bills its container's running time, which Earmark cannot hold");
/**
 * Every tool type of the Messages API (the @anthropic-ai/sdk package's ToolUnion and
 * BetaToolUnion), by what it bills beyond its tokens; a type not listed is refused before
 * anything is held or sent (ToolNotMeteredError). A type names its tool and version
 * (web_search_20250305). test/tools.test.mjs reads the installed package's types and fails
 * on one not listed here. The Python SDK's wire_anthropic.TOOLS, type for type.
 */
export const ANTHROPIC_TOOLS: Tools = Object.freeze({
  // Held: a fee per search, priced as web_search, held for each tool's max_uses and
  // settled at usage.server_tool_use.web_search_requests.
  web_search_20250305: WEB_SEARCH,
  web_search_20260209: WEB_SEARCH,
  web_search_20260318: WEB_SEARCH,
  // Tokens only, run at Anthropic for no fee: a web fetch bills the fetched content's
  // tokens (its count of calls is not settled as a fee); tool search loads the caller's
  // deferred tools; an MCP toolset's server is the caller's.
  web_fetch_20250910: TOKENS_ONLY,
  web_fetch_20260209: TOKENS_ONLY,
  web_fetch_20260309: TOKENS_ONLY,
  web_fetch_20260318: TOKENS_ONLY,
  tool_search_tool_bm25: TOKENS_ONLY,
  tool_search_tool_bm25_20251119: TOKENS_ONLY,
  tool_search_tool_regex: TOKENS_ONLY,
  tool_search_tool_regex_20251119: TOKENS_ONLY,
  mcp_toolset: TOKENS_ONLY,
  // Tokens only: the caller's own tools (custom: a tool with no type), and the tools the
  // caller runs (bash, a text editor, a computer, a browser, memory).
  custom: TOKENS_ONLY,
  bash_20241022: TOKENS_ONLY,
  bash_20250124: TOKENS_ONLY,
  text_editor_20241022: TOKENS_ONLY,
  text_editor_20250124: TOKENS_ONLY,
  text_editor_20250429: TOKENS_ONLY,
  text_editor_20250728: TOKENS_ONLY,
  computer_20241022: TOKENS_ONLY,
  computer_20250124: TOKENS_ONLY,
  computer_20251124: TOKENS_ONLY,
  computer_toolset_20260801: TOKENS_ONLY,
  browser_toolset_20260801: TOKENS_ONLY,
  memory_20250818: TOKENS_ONLY,
  // Refused: code execution bills container hours, and the advisor another model's tokens,
  // priced at that model's rates (the hold prices the request's model alone).
  code_execution_20250522: CODE_EXECUTION,
  code_execution_20250825: CODE_EXECUTION,
  code_execution_20260120: CODE_EXECUTION,
  code_execution_20260521: CODE_EXECUTION,
  advisor_20260301: refusedTool("bills another model's tokens at that model's rates, which Earmark cannot hold"),
});
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
 * writes apart, and the web searches by count; null when a count is not believed
 * (reportedCount): the call is left in doubt. */
export function messagesUsage(usage: JsonObject): Usage | null {
  const found = reportedCounts(usage, 'input_tokens', 'output_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens');
  if (found === null) return null;
  const [given, output, written, read] = found;
  const byTtl = isObject(usage.cache_creation) ? usage.cache_creation : {};
  const tools = isObject(usage.server_tool_use) ? usage.server_tool_use : {};
  return {
    inputTokens: given + written + read,
    outputTokens: output,
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
    // Read first: a tool whose fee cannot be held refuses the request before its hold. Each
    // fee is held for its tool's max_uses (the meter's toolCallsMax without one).
    const fees: [string, number][] = heldTools(body.tools, ANTHROPIC_TOOLS, 'custom').map(([kind, tool]) => [
      kind,
      Math.min(positive(tool, 'max_uses') ?? settings.toolCallsMax, TOOL_CALLS_PER_REQUEST_MAX),
    ]);
    const list = Array.isArray(body.messages) ? body.messages.filter(isObject) : [];
    let total = chars(body.system) + jsonChars(body.tools);
    for (const message of list) total += chars(message.content);
    return {
      model: text(body.model),
      promptTokens: promptEstimate(total, list.length),
      asked: positive(body, 'max_tokens'),
      choices: 1,
      stream: body.stream === true,
      // A request's service_tier ("auto", "standard_only") chooses capacity, not a price:
      // the tier the call ran at comes back in its usage, and is priced then.
      serviceTier: '',
      toolCallsMax: counts(fees),
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
