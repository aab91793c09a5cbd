// OpenAI at the wire: which requests bill, how each billable one is held and capped, and
// where its usage is, as OpenAI's published API has them (the openai package's types:
// CompletionUsage, ChatCompletionChunk, ResponseUsage and the Responses stream events,
// CreateEmbeddingResponse). The rules are the Python SDK's (src/earmark/client/wire_openai.py).
//
// Every POST is routed by OPENAI_ROUTES, its whole path after the base URL's own path (/v1):
// metered, POST /chat/completions (create, parse, the stream helper, withResponse),
// /responses (create, parse, stream) and /embeddings; free, passed through, the POSTs that
// bill nothing (a stored completion's update, counting a Responses input's tokens,
// cancelling or pausing, moderations) and the standing costs (files, uploads, vector stores,
// conversations); every other POST (images, audio, batches, fine-tuning and resuming it,
// containers, the legacy completions, realtime sessions and client secrets...) is refused
// before it is sent, naming it. A read or a delete passes; a PATCH or PUT is refused unless
// its path is free. The websockets the
// package opens from a client (OPENAI_SOCKETS: its realtime and Responses sockets) are
// refused by metered.ts before they connect.
//
// A metered request's built-in tools are read by their type (RESPONSES_TOOLS, CHAT_TOOLS): a
// tool with a fee per call Earmark prices (web search, file search, code interpreter) is
// held and settled; a tool that bills only tokens passes; one whose fee Earmark cannot hold
// (image generation, a hosted shell, Chat Completions' web_search_options), and a type it has
// not classified, is refused before anything is held or sent (ToolNotMeteredError).
import { REPORTS_COST } from './hosts.js';
import { TOKENS_PER_REQUEST_MAX, TOOL_CALLS_PER_REQUEST_MAX } from './limits.js';
import { reportedCost, withCost } from './reported.js';
import { ToolNotMeteredError } from './errors.js';
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
  type Ended,
  type Ends,
  type JsonObject,
  type Later,
  type Route,
  type Routing,
  type Tally,
  type ToolBill,
  type Tools,
  within,
} from './routes.js';
import {
  InvalidResponseError,
  RESPONSE_ID_LABEL,
  cacheParts,
  ending,
  responseUsage,
  servedTier,
  validId,
} from './openai-background.js';
import type { Usage } from './types.js';

/** A shell the caller runs (a local environment, or none named: the shell tool ran locally
 * before it had environments) bills tokens; one in a container at OpenAI bills the
 * container's time. */
function shell(tool: JsonObject): ToolBill {
  const environment = tool.environment;
  if (environment === undefined || environment === null || (isObject(environment) && environment.type === 'local')) return TOKENS_ONLY;
  return refusedTool('in a container at OpenAI bills its running time, which Earmark cannot hold');
}

/** A namespace groups the caller's own tools (the openai package's NamespaceTool's tools:
 * functions and custom tools), each classified as a tool of the request is. */
export const NAMESPACE_TOOLS: Tools = Object.freeze({ function: TOKENS_ONLY, custom: TOKENS_ONLY });

function namespace(tool: JsonObject): ToolBill {
  heldTools(tool.tools, NAMESPACE_TOOLS);
  return TOKENS_ONLY;
}

/**
 * Every tool type of the Responses API (the openai package's Tool union), by what it bills
 * beyond its tokens; a type not listed is refused before anything is held or sent
 * (ToolNotMeteredError). test/tools.test.mjs reads the installed package's types and fails
 * on one not listed here. The Python SDK's wire_openai.RESPONSES_TOOLS, type for type.
 */
export const RESPONSES_TOOLS: Tools = Object.freeze({
  // Held: a fee per call, priced by kind (the price's toolUsdMicros), held for the
  // request's max_tool_calls of each and settled at the calls the answer's output items
  // report (openai-background.ts). The dated types are the same tools, pinned.
  web_search: feeTool('web_search'),
  web_search_2025_08_26: feeTool('web_search'),
  web_search_preview: feeTool('web_search'),
  web_search_preview_2025_03_11: feeTool('web_search'),
  file_search: feeTool('file_search'),
  code_interpreter: feeTool('code_interpreter'),
  // Tokens only: the caller's own tools, and the tools the caller runs (a computer, a
  // local shell, patches), which bill only what the model reads and writes.
  function: TOKENS_ONLY,
  custom: TOKENS_ONLY,
  namespace,
  computer: TOKENS_ONLY,
  computer_use_preview: TOKENS_ONLY,
  local_shell: TOKENS_ONLY,
  apply_patch: TOKENS_ONLY,
  shell,
  // Tokens only, run at OpenAI for no fee: remote MCP servers and connectors (OpenAI bills
  // the tokens of their listings and results; the server is the caller's), and tool
  // search, which loads the caller's deferred tools.
  mcp: TOKENS_ONLY,
  tool_search: TOKENS_ONLY,
  // Refused: fees Earmark has no count or price for.
  image_generation: refusedTool("bills each image it generates at the image model's rates, which Earmark cannot hold"),
  programmatic_tool_calling: refusedTool('runs programs at OpenAI, at a cost Earmark has no price for'),
});
/** Chat Completions' tools are the caller's own (the openai package's ChatCompletionTool
 * union); its built-in web search is a parameter of its own. */
export const CHAT_TOOLS: Tools = Object.freeze({ function: TOKENS_ONLY, custom: TOKENS_ONLY });
/** Chat Completions' built-in tools that are parameters of the request, not tools: a search
 * model bills a search fee per call, and the answer counts no searches to settle it at. */
export const CHAT_TOOL_PARAMETERS: Readonly<Record<string, string>> = Object.freeze({
  web_search_options: 'bills a search fee per call that the answer does not count, which Earmark cannot hold and settle',
});
// A GET that reads a response again (retrieve, or a resumed stream), and a POST that
// cancels one: the id is the path's segment after /responses.
const READS: Record<string, RegExp> = {
  GET: /^\/responses\/([^/]+)$/,
  POST: /^\/responses\/([^/]+)\/cancel$/,
};
// The names a request uses for the default tier: the price book's '' row prices them.
const DEFAULT_TIERS = new Set(['', 'auto', 'default']);

/** The characters of a message's or item's text: a string, or parts with text. */
function chars(value: Json | undefined): number {
  if (typeof value === 'string') return value.length;
  if (Array.isArray(value)) {
    return value.reduce<number>((sum, part) => sum + (isObject(part) ? chars(part.text ?? '') : 0), 0);
  }
  return 0;
}

function tier(body: JsonObject): string {
  const asked = text(body.service_tier);
  return DEFAULT_TIERS.has(asked) ? '' : asked;
}

/** A CompletionUsage as Earmark prices it: prompt_tokens counts cached reads and cache
 * writes, completion_tokens counts reasoning. The caller names the provider and the model
 * the call was held for (an answer names a dated snapshot the book may not have).
 *
 * DeepSeek (OpenAI-compatible, api-docs.deepseek.com) reports its cache reads as
 * prompt_cache_hit_tokens, of prompt_tokens, beside prompt_cache_miss_tokens; its
 * prompt_tokens_details.cached_tokens is absent or 0, so its own count is read when it sends
 * one. The tier is the one the answer says it ran at, which OpenAI and Azure bill and which
 * may differ from the one asked for. null when a count is not believed (reportedCount): the
 * call is left in doubt. */
function chatUsage(usage: JsonObject, serviceTier: Json | undefined): Usage | null {
  const found = reportedCounts(usage, 'prompt_tokens', 'completion_tokens');
  if (found === null) return null;
  const [inputTokens, outputTokens] = found;
  const prompt = isObject(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
  const hits = usage.prompt_cache_hit_tokens;
  const read = hits === undefined || hits === null ? prompt.cached_tokens : hits;
  const [cached, written] = cacheParts(inputTokens, read, prompt.cache_write_tokens);
  return {
    inputTokens,
    outputTokens,
    cachedInputTokens: cached,
    cacheWriteInputTokens: written,
    serviceTier: servedTier(serviceTier),
  };
}

class ChatTally implements Tally {
  private found: Usage | null = null;
  private tier = '';

  constructor(private readonly hidden: boolean) {}

  keep(_event: string, data: Json): boolean {
    if (!isObject(data)) return true;
    if (typeof data.service_tier === 'string') this.tier = data.service_tier;
    if (isObject(data.usage)) {
      this.found = chatUsage(data.usage, this.tier);
      // The usage chunk Earmark asked for, which the caller did not, is not shown.
      const choices = Array.isArray(data.choices) ? data.choices.length : 0;
      return !(this.hidden && choices === 0);
    }
    const groq = data.x_groq;
    if (this.found === null && isObject(groq) && isObject(groq.usage)) {
      // Groq streams its usage under x_groq on the chunk that finishes the answer, and no
      // chunk has a top-level usage; a top-level usage, if it sends one too, is the one read.
      this.found = chatUsage(groq.usage, this.tier);
    }
    return true;
  }

  usage(): Usage | null {
    return this.found;
  }
}

/** POST .../chat/completions. */
const chat: Route = {
  call(body: JsonObject): Call {
    // A tool whose fee cannot be held is refused before the hold: nothing is held for a
    // request that is not sent.
    for (const [parameter, why] of Object.entries(CHAT_TOOL_PARAMETERS)) {
      if (body[parameter] !== undefined && body[parameter] !== null) throw new ToolNotMeteredError(parameter, why);
    }
    heldTools(body.tools, CHAT_TOOLS);
    const messages = Array.isArray(body.messages) ? body.messages.filter(isObject) : [];
    let total = jsonChars(body.tools);
    for (const message of messages) {
      total += chars(message.content) + text(message.name).length;
      if (message.tool_calls) total += jsonChars(message.tool_calls);
    }
    return {
      model: text(body.model),
      promptTokens: promptEstimate(total, messages.length),
      asked: positive(body, 'max_completion_tokens', 'max_tokens'),
      choices: positive(body, 'n') ?? 1,
      stream: body.stream === true,
      serviceTier: tier(body),
      toolCallsMax: {},
      hasOutput: true,
    };
  },

  sent(body: JsonObject, call: Call, cap: number | null) {
    const sent: JsonObject = { ...body };
    if (cap !== null) {
      // Every maximum the caller gave is lowered (a provider reads either name); with none,
      // the current name carries the cap.
      const named = ['max_completion_tokens', 'max_tokens'].filter((name) => body[name] != null);
      for (const name of named.length > 0 ? named : ['max_completion_tokens']) sent[name] = cap;
    }
    let hiddenUsage = false;
    if (call.stream) {
      const options = isObject(body.stream_options) ? body.stream_options : {};
      if (options.include_usage !== true) {
        sent.stream_options = { ...options, include_usage: true };
        hiddenUsage = true;
      }
    }
    return { body: sent, hiddenUsage };
  },

  usage(answer: Json): Usage | null {
    if (!isObject(answer) || !isObject(answer.usage)) return null;
    return chatUsage(answer.usage, answer.service_tier);
  },

  tally(_call: Call, hiddenUsage: boolean): Tally {
    return new ChatTally(hiddenUsage);
  },
};

/** A Response's usage (responseUsage, which counts 0 for a count out of shape); null when
 * its input or output count is not believed (reportedCount): the call is left in doubt. */
function responsesUsage(response: JsonObject): Usage | null {
  const usage = response.usage as JsonObject;
  return reportedCounts(usage, 'input_tokens', 'output_tokens') === null ? null : responseUsage(response);
}

// A Responses stream ends with one of these, whose response carries the usage.
const FINAL_EVENTS = new Set(['response.completed', 'response.incomplete', 'response.failed']);

class ResponsesTally implements Tally {
  private found: Usage | null = null;
  /** A background response's id, from the events that open its stream, and whether a final
   * event came: a background stream that stops before one leaves the response running at
   * OpenAI. */
  backgroundId: string | null = null;
  ended = false;

  keep(event: string, data: Json): boolean {
    if (!isObject(data)) return true;
    const kind = event || text(data.type);
    const response = data.response;
    if (!isObject(response)) return true;
    if (response.background === true && validId(response.id)) this.backgroundId = response.id;
    if (FINAL_EVENTS.has(kind)) {
      this.ended = true;
      if (isObject(response.usage)) this.found = responsesUsage(response);
    }
    return true;
  }

  usage(): Usage | null {
    return this.found;
  }
}

/** A resumed stream of a background response (GET .../responses/{id}?stream=true): its
 * final event's response says how the response ended; one that is not the response's, or
 * not in its published shape, says nothing. */
class Resumed implements Ends {
  private found: Ended | null = null;

  constructor(private readonly responseId: string) {}

  keep(event: string, data: Json): boolean {
    if (!isObject(data)) return true;
    const kind = event || text(data.type);
    if (FINAL_EVENTS.has(kind) && isObject(data.response)) {
      try {
        this.found = ending(data.response, this.responseId);
      } catch (error) {
        if (!(error instanceof InvalidResponseError)) throw error;
        this.found = null;
      }
    }
    return true;
  }

  usage(): Usage | null {
    return this.found?.usage ?? null;
  }

  ended(): Ended | null {
    return this.found;
  }
}

/**
 * OpenAI's background responses (POST .../responses with background: true): answered at
 * once, queued or in progress with no usage, they run on at OpenAI. The hold stays open,
 * the response's id recorded on it (RESPONSE_ID_LABEL), until a retrieve (GET
 * .../responses/{id}), a resumed stream (GET ...?stream=true) or a cancel (POST
 * .../responses/{id}/cancel) answers the response ended (openai-background.ts ending()).
 */
const background: Later = {
  label: RESPONSE_ID_LABEL,

  running(body: JsonObject, answer: Json): string | null {
    if (body.background !== true || !isObject(answer) || !validId(answer.id)) return null;
    try {
      return ending(answer, answer.id) === null ? answer.id : null;
    } catch (error) {
      if (error instanceof InvalidResponseError) return null;
      throw error;
    }
  },

  leftRunning(tally: Tally): string | null {
    return tally instanceof ResponsesTally && !tally.ended ? tally.backgroundId : null;
  },

  reads(method: string, path: string, prefix: string): string | null {
    const pattern = READS[method];
    const found = pattern !== undefined && within(path, prefix) ? pattern.exec(path.slice(prefix.length)) : null;
    return found === null ? null : found[1];
  },

  ended(answer: Json, callId: string): Ended | null {
    return ending(answer, callId);
  },

  resumed(callId: string): Ends {
    return new Resumed(callId);
  },
};

/** POST .../responses. A background one (background: true) runs on at OpenAI after its
 * answer: later says how its hold stays open until the response ends. */
const responses: Route = {
  call(body: JsonObject, settings: CallSettings): Call {
    // Read first: a tool whose fee cannot be held refuses the request before its hold.
    const kinds = new Set(heldTools(body.tools, RESPONSES_TOOLS).map(([kind]) => kind));
    const input = body.input;
    let total = chars(body.instructions) + jsonChars(body.tools);
    let items = 1;
    if (Array.isArray(input)) {
      items = input.length;
      for (const item of input) {
        if (isObject(item)) {
          total += chars(item.content) + chars(item.output) + text(item.arguments).length;
        }
      }
    } else {
      total += chars(input);
    }
    const most = Math.min(positive(body, 'max_tool_calls') ?? settings.toolCallsMax, TOOL_CALLS_PER_REQUEST_MAX);
    return {
      model: text(body.model),
      promptTokens: promptEstimate(total, items),
      asked: positive(body, 'max_output_tokens'),
      choices: 1,
      stream: body.stream === true,
      serviceTier: tier(body),
      toolCallsMax: counts([...kinds].map((kind): [string, number] => [kind, most])),
      hasOutput: true,
    };
  },

  sent(body: JsonObject, _call: Call, cap: number | null) {
    // A Responses stream always ends with its usage, in its final event.
    return { body: cap === null ? body : { ...body, max_output_tokens: cap }, hiddenUsage: false };
  },

  usage(answer: Json): Usage | null {
    if (!isObject(answer) || !isObject(answer.usage)) return null;
    return responsesUsage(answer);
  },

  tally(): Tally {
    return new ResponsesTally();
  },

  later: background,
};

/** POST .../embeddings: the input alone is billed. */
const embeddings: Route = {
  call(body: JsonObject): Call {
    const given = body.input;
    // A list of numbers is one input of token ids; a list of strings or of token lists is
    // several inputs.
    const single = !Array.isArray(given) || given.every((each) => typeof each === 'number');
    const inputs: Json[] = single ? [given ?? ''] : given;
    let tokens = 0;
    for (const each of inputs) {
      // Token ids count one each; text as any prompt does.
      tokens += Array.isArray(each) ? each.length : promptEstimate(text(each).length, 0);
    }
    return {
      model: text(body.model),
      // At least one token: a shape of no tokens at all would name the model alone, which
      // the sidecar holds at an estimate.
      promptTokens: Math.max(1, tokens),
      asked: null,
      choices: 1,
      stream: false,
      serviceTier: '',
      toolCallsMax: {},
      hasOutput: false,
    };
  },

  sent(body: JsonObject) {
    return { body, hiddenUsage: false };
  },

  usage(answer: Json): Usage | null {
    if (!isObject(answer) || !isObject(answer.usage)) return null;
    return { inputTokens: count(answer.usage.prompt_tokens), outputTokens: 0 };
  },

  tally(): Tally {
    // Embeddings are never streamed; an answer that streams anyway carries no usage, so
    // the hold ends in doubt.
    return { keep: () => true, usage: () => null };
  },
};

/**
 * Every POST of OpenAI's API, by the path after the base URL's own path (/v1), with what
 * Earmark does with it; a POST it does not list is refused too. test/surface.test.mjs calls
 * every method of the installed openai package and fails on a POST not listed here. The
 * Python SDK's wire_openai.ROUTES, path for path.
 */
export const OPENAI_ROUTES = new Routes({
  // Metered: held, capped and settled at the provider's usage.
  '/chat/completions': chat,
  '/responses': responses,
  '/embeddings': embeddings,
  // Free, billing nothing: a stored completion's metadata, counting a Responses input's
  // tokens, moderations, and cancelling or pausing what bills (its spend stops; resuming it
  // is refused below).
  '/chat/completions/{completion_id}': FREE,
  '/responses/input_tokens': FREE,
  '/moderations': FREE,
  '/responses/{response_id}/cancel': FREE,
  '/batches/{batch_id}/cancel': FREE,
  '/fine_tuning/jobs/{fine_tuning_job_id}/cancel': FREE,
  '/fine_tuning/jobs/{fine_tuning_job_id}/pause': FREE,
  // Free, a standing cost: stored files, uploads, vector stores (the files they index) and
  // conversations are billed by the gigabyte-day they keep, not by call.
  '/files': FREE,
  '/uploads': FREE,
  '/uploads/{upload_id}/parts': FREE,
  '/uploads/{upload_id}/complete': FREE,
  '/uploads/{upload_id}/cancel': FREE,
  '/vector_stores': FREE,
  '/vector_stores/{vector_store_id}': FREE,
  '/vector_stores/{vector_store_id}/files': FREE,
  '/vector_stores/{vector_store_id}/files/{file_id}': FREE,
  '/vector_stores/{vector_store_id}/file_batches': FREE,
  '/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel': FREE,
  '/conversations': FREE,
  '/conversations/{conversation_id}': FREE,
  '/conversations/{conversation_id}/items': FREE,
  // Refused: calls that bill what Earmark has no price for (the legacy completions,
  // compaction, images, audio, video; a search may run a model on its query).
  '/completions': REFUSED,
  '/responses/compact': REFUSED,
  '/vector_stores/{vector_store_id}/search': REFUSED,
  '/images/**': REFUSED,
  '/audio/**': REFUSED,
  '/videos/**': REFUSED,
  '/decisions': REFUSED,
  '/content_provenance_checks': REFUSED,
  // Refused: work that bills once started, out of the call that started it (batches,
  // fine-tuning and its resumption, graders, evals, container sessions, Assistants runs,
  // agents, skills).
  '/batches': REFUSED,
  '/fine_tuning/jobs': REFUSED,
  '/fine_tuning/jobs/{fine_tuning_job_id}/resume': REFUSED,
  '/fine_tuning/alpha/**': REFUSED,
  '/fine_tuning/checkpoints/**': REFUSED,
  '/evals/**': REFUSED,
  '/containers/**': REFUSED,
  '/assistants/**': REFUSED,
  '/threads/**': REFUSED,
  '/agents/**': REFUSED,
  '/chatkit/**': REFUSED,
  '/skills/**': REFUSED,
  '/vaults/**': REFUSED,
  // Refused: sessions and keys that bill where Earmark does not see it (a Realtime client
  // secret opens a session from a browser; calls and live sessions run audio models).
  '/realtime/**': REFUSED,
  '/live/**': REFUSED,
  // Refused: administration, no metered worker's job; a metered client mints no key and
  // lifts no spend limit.
  '/organization/**': REFUSED,
  '/projects/**': REFUSED,
  '/webhook_endpoints/**': REFUSED,
});
// Azure OpenAI names the model's deployment in the path, before the endpoint's own path
// (/openai/deployments/{deployment}/chat/completions); OpenAI's API has no such path.
const DEPLOYMENT = /^\/deployments\/(?!\.\.?\/)[^/]+(?=\/)/;

/** The openai package's websocket surfaces, by the module that opens each (its path in the
 * package, as imported: openai/realtime/ws) and the class it exports. They take a client
 * and open a socket from its baseURL and apiKey, no HTTP request, so a metered client
 * refuses them before they connect (metered.ts); test/sockets.test.mjs finds every module of
 * the installed package that opens a websocket and fails on one not listed here. */
export const OPENAI_SOCKETS: Readonly<Record<string, string>> = {
  'realtime/ws': 'OpenAIRealtimeWS',
  'realtime/websocket': 'OpenAIRealtimeWebSocket',
  'beta/realtime/ws': 'OpenAIRealtimeWS',
  'beta/realtime/websocket': 'OpenAIRealtimeWebSocket',
  'resources/responses/ws': 'ResponsesWS',
  'resources/beta/responses/ws': 'ResponsesWS',
};

/** Whether route is the chat completions route (OpenAI's own, unwrapped). */
export function isChat(route: Route): boolean {
  return route === chat;
}

// xAI (genai-prices "x-ai": its chat extractor adds completion_tokens_details
// .reasoning_tokens to completion_tokens): its completion_tokens leave the reasoning out.
export const XAI = 'x-ai';
// Providers that end every chat stream with its usage, asked or not: their streams are sent
// as the caller wrote them, and the caller sees the usage as it would unmetered. Mistral
// (its API validates strictly, and may refuse an argument it does not know) and OpenRouter
// ("stream_options ... deprecated and have no effect": its usage accounting docs).
export const STREAMS_USAGE_UNASKED: ReadonlySet<string> = new Set(['mistral', 'openrouter']);
// Providers whose chat API documents max_tokens as its maximum, and not OpenAI's newer
// max_completion_tokens: the cap is told as max_tokens, which they read, whether or not the
// caller named the newer one (the Python SDK's MAX_TOKENS_ONLY).
export const MAX_TOKENS_ONLY: ReadonlySet<string> = new Set(['deepseek', 'mistral', 'openrouter', 'together']);

/** sent with its maximum under max_tokens: the cap (null: the caller's
 * max_completion_tokens, where it named no max_tokens); max_completion_tokens kept only
 * where the caller named it. */
function toldMaxTokens(body: JsonObject, sent: JsonObject, cap: number | null): JsonObject {
  const limit = cap ?? sent.max_completion_tokens ?? null;
  if (limit === null || (cap === null && body.max_tokens != null)) return sent;
  const { max_completion_tokens: newer, ...told } = sent;
  return { ...told, ...(body.max_completion_tokens !== undefined ? { max_completion_tokens: newer } : {}), max_tokens: limit };
}

/** The reasoning tokens xAI's completion_tokens leave out: its reasoning_tokens, unless
 * total_tokens says completion_tokens counted them (then none). */
function unreported(usage: JsonObject): number {
  const details = usage.completion_tokens_details;
  const reasoning = isObject(details) ? count(details.reasoning_tokens) : 0;
  const total = usage.total_tokens;
  if (typeof total === 'number' && Number.isSafeInteger(total) && total === count(usage.prompt_tokens) + count(usage.completion_tokens)) return 0;
  return Math.min(reasoning, TOKENS_PER_REQUEST_MAX);
}

/** usage as provider name bills it, from the usage object it reported: xAI's reasoning
 * tokens added to its output, OpenRouter's reported cost carried (reported.ts). */
function adjusted(name: string, usage: Usage | null, reported: Json | undefined): Usage | null {
  if (usage === null || !isObject(reported)) return usage;
  let found = usage;
  if (name === XAI) found = { ...found, outputTokens: found.outputTokens + unreported(reported) };
  if (REPORTS_COST.has(name)) return withCost(found, reportedCost(reported));
  return found;
}

/** tally, its usage adjusted as provider name bills (from the last usage object the stream
 * carried at its top level: the usage chunk's). The tally itself, so that what reads its
 * class (a background response's stream: routes' later.leftRunning) still reads it. */
function adjustedTally(name: string, tally: Tally): Tally {
  let reported: Json | undefined = undefined;
  const keep = tally.keep.bind(tally);
  const usage = tally.usage.bind(tally);
  tally.keep = (event: string, data: Json): boolean => {
    if (isObject(data) && isObject(data.usage)) reported = data.usage;
    return keep(event, data);
  };
  tally.usage = (): Usage | null => adjusted(name, usage(), reported);
  return tally;
}

/** route, for an OpenAI-compatible provider whose answers differ from OpenAI's: its usage
 * carries the cost the provider reports (OpenRouter's usage.cost); xAI's reasoning tokens,
 * which its completion_tokens leave out, are output; a stream to a provider that ends every
 * stream with its usage is sent without stream_options; a chat call to one that reads only
 * max_tokens is told its cap there. */
function compatible(route: Route, name: string, chat: boolean): Route {
  return {
    ...route,
    sent(body: JsonObject, call: Call, cap: number | null) {
      const sent = route.sent(body, call, cap);
      if (chat && MAX_TOKENS_ONLY.has(name)) sent.body = toldMaxTokens(body, sent.body, cap);
      if (!sent.hiddenUsage || !STREAMS_USAGE_UNASKED.has(name)) return sent;
      // The caller's own stream_options, if any, as the caller wrote them.
      const { stream_options: _asked, ...rest } = sent.body;
      return { body: body.stream_options === undefined ? rest : { ...rest, stream_options: body.stream_options }, hiddenUsage: false };
    },
    usage(answer: Json, call: Call): Usage | null {
      return adjusted(name, route.usage(answer, call), isObject(answer) ? answer.usage : undefined);
    },
    tally(call: Call, hiddenUsage: boolean): Tally {
      return adjustedTally(name, route.tally(call, hiddenUsage));
    },
  };
}

/** routing, for the calls of provider name: its routes read as it bills when its answers
 * differ from OpenAI's (REPORTS_COST, XAI, STREAMS_USAGE_UNASKED, MAX_TOKENS_ONLY), else
 * routing itself. */
export function compatibleRouting(routing: Routing, name: string): Routing {
  if (!(REPORTS_COST.has(name) || STREAMS_USAGE_UNASKED.has(name) || MAX_TOKENS_ONLY.has(name) || name === XAI)) return routing;
  return (path, prefix) => {
    const route = routing(path, prefix);
    const chat = /\/chat\/completions\/?$/.test(path);
    return route === FREE || route === null ? route : compatible(route, name, chat);
  };
}

/** The route of a POST to path (the whole URL path), under a base URL whose own path is
 * prefix ('/v1' for OpenAI's). */
export const openaiRouting: Routing = (path, prefix = '/v1') => {
  const deployment = within(path, prefix) ? DEPLOYMENT.exec(path.slice(prefix.length)) : null;
  const routed = deployment === null ? path : prefix + path.slice(prefix.length + deployment[0].length);
  return OPENAI_ROUTES.routing(routed, prefix);
};
