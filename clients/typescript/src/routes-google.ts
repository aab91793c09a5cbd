// Gemini at the wire (@google/genai's GoogleGenAI, the Gemini API and Vertex AI): which POSTs
// bill, how a billable one is held and capped, and where its usage is, as Google publishes
// generateContent and streamGenerateContent (GenerateContentRequest, GenerateContentResponse
// and its usageMetadata).
//
// Every POST is routed by its whole path after the base URL's own path, whatever the API
// version (v1, v1beta, v1beta1): metered, {version}/models/{model}:generateContent and
// :streamGenerateContent (?alt=sse), and Vertex's .../publishers/google/models/{model}:...
// (with or without projects/{p}/locations/{l}); free, counting or computing tokens and
// files (a standing cost); every other POST (embeddings, images, videos, batches, caches,
// tunings, interactions, agents...) is refused before it is sent, naming it. A read or a
// delete passes; a PATCH or PUT (caches.update, extending a cache billed by the hour) is
// refused unless its path is free. The live API (a websocket) is refused by metered.ts.
//
// The usage: promptTokenCount counts the whole prompt, cached content included
// (cachedContentTokenCount of it, a cache read) and toolUsePromptTokenCount apart (input
// too); candidatesTokenCount is the visible output and thoughtsTokenCount the thinking, which
// Google bills as output. A stream's events each carry usageMetadata, partial until the
// last: the last one read once every candidate (candidateCount) has its finishReason, or the
// prompt was blocked, is the bill, never a sum; a count that is no whole number in bounds
// leaves the call in doubt. A call asking for the priority or flex tier (serviceTier) is
// held and priced at that tier, and settled at the one usageMetadata.trafficType names.
//
// What a request may ask that Earmark cannot price is refused before anything is held or
// sent, as the Python SDK's wire_gemini.py refuses it: a tool that bills a fee per call
// (Google Search and Maps grounding, enterprise web search, Vertex AI Search and RAG
// retrieval, file search; their fees are counted per prompt or per query in
// groundingMetadata, which is not settled yet) and a tool kind not classified
// (ToolNotMeteredError); an output modality other than text (images, speech) and audio input,
// billed at rates of their own (ModalityNotMeteredError).
import { ModalityNotMeteredError, ToolNotMeteredError } from './errors.js';
import { SERVICE_TIER_LENGTH_MAX } from './limits.js';
import { cachePart, servedTier } from './openai-background.js';
import {
  FREE,
  isObject,
  jsonChars,
  positive,
  promptEstimate,
  reportedCount,
  reportedCounts,
  text,
  within,
  type Call,
  type Json,
  type JsonObject,
  type Route,
  type Routing,
  type Tally,
} from './routes.js';
import type { Usage } from './types.js';

// A model's method: {version}/[projects/{p}/locations/{l}/][publishers/google/]models/{model}:{method}.
const MODEL_METHOD = /^\/v\d+[a-z0-9]*\/(?:projects\/[^/]+\/locations\/[^/]+\/)?(?:publishers\/google\/)?models\/((?!\.\.?:)[^/:]+):([A-Za-z]+)$/;
// Files, uploaded or registered: a standing cost, not a call.
const FILES = /^\/(?:upload\/)?v\d+[a-z0-9]*\/files(?:[:/].*)?$/s;
const FREE_METHODS = new Set(['countTokens', 'computeTokens']);

const GROUNDING = 'bills a fee per grounded prompt or search query (counted in groundingMetadata), which Earmark does not hold and settle yet';
const FILE_SEARCH = 'bills the embeddings of the stores it searches, which Earmark cannot hold';
/**
 * A Gemini tool is an object whose one key names its kind (the published Tool message:
 * functionDeclarations, googleSearch...); each kind by why it is refused, '' for one that
 * bills tokens only. A kind not listed is refused (ToolNotMeteredError). @google/genai
 * sends camelCase; protobuf's JSON reader takes the snake_case names too, so both are
 * listed. test/tools.test.mjs reads the installed package's Tool fields and fails on one
 * not listed here (or not refused as unclassified, as Python refuses it). The Python SDK's
 * wire_gemini.TOOLS, kind for kind.
 */
const PARTNER_SEARCH = "bills each search query at its partner's rate, which Earmark cannot hold";
export const GEMINI_TOOLS: Readonly<Record<string, string>> = Object.freeze({
  // Tokens only: the caller's own functions, code run in Gemini's sandbox (billed as
  // tokens), URLs fetched into the context, a computer the caller drives.
  functionDeclarations: '',
  function_declarations: '',
  codeExecution: '',
  code_execution: '',
  urlContext: '',
  url_context: '',
  computerUse: '',
  computer_use: '',
  // Remote MCP servers Gemini calls for the model: their results are tokens, and the
  // servers bill their owner, not Google (as the Responses API's mcp tool).
  mcpServers: '',
  mcp_servers: '',
  // Refused: fees per call Earmark does not hold yet.
  googleSearch: GROUNDING,
  google_search: GROUNDING,
  googleSearchRetrieval: GROUNDING,
  google_search_retrieval: GROUNDING,
  enterpriseWebSearch: GROUNDING,
  enterprise_web_search: GROUNDING,
  googleMaps: GROUNDING,
  google_maps: GROUNDING,
  retrieval: 'bills Vertex AI Search or RAG Engine queries, which Earmark cannot hold',
  fileSearch: FILE_SEARCH,
  file_search: FILE_SEARCH,
  // Vertex AI's partner web search (Exa, Parallel): billed per query.
  exaAiSearch: PARTNER_SEARCH,
  exa_ai_search: PARTNER_SEARCH,
  parallelAiSearch: PARTNER_SEARCH,
  parallel_ai_search: PARTNER_SEARCH,
});
const UNCLASSIFIED_KIND = 'is of a kind Earmark has not classified, and may bill a fee it cannot hold';

/** Throws ToolNotMeteredError for a tool that bills a fee Earmark cannot hold, and for a
 * kind it has not classified. */
function checkTools(given: Json | undefined): void {
  for (const tool of Array.isArray(given) ? given.filter(isObject) : []) {
    for (const kind of Object.keys(tool)) {
      if (tool[kind] === undefined) continue;
      if (!Object.hasOwn(GEMINI_TOOLS, kind)) throw new ToolNotMeteredError(kind, UNCLASSIFIED_KIND);
      if (GEMINI_TOOLS[kind]) throw new ToolNotMeteredError(kind, GEMINI_TOOLS[kind]);
    }
  }
}

/** A field of a request object by either of its JSON names (camelCase first). */
function field(holder: Json | undefined, camel: string, snake: string): Json | undefined {
  if (!isObject(holder)) return undefined;
  const value = holder[camel];
  return value === undefined || value === null ? holder[snake] : value;
}

/** Whether a Part may carry audio (inline or a file), which bills above the text rate: an
 * audio mimeType, or a file that names none (the REST API's fileData.mimeType is optional,
 * and Google reads the file's own type). */
function audio(part: Json): boolean {
  for (const [camel, snake] of [['inlineData', 'inline_data'], ['fileData', 'file_data']]) {
    const blob = field(part, camel, snake);
    const mime = field(blob, 'mimeType', 'mime_type');
    if (typeof mime === 'string' && mime.toLowerCase().startsWith('audio/')) return true;
    if (camel === 'fileData' && isObject(blob) && !mime) return true;
  }
  return false;
}

/** Whether a usageMetadata says audio tokens were billed (its prompt's or its cached
 * content's modality details): at a rate above the text one the hold was not made for, so
 * the call is left in doubt (the Python SDK's wire_gemini._audio_billed). */
function audioBilled(usage: JsonObject): boolean {
  for (const name of ['promptTokensDetails', 'cacheTokensDetails']) {
    const details = usage[name];
    for (const detail of Array.isArray(details) ? details.filter(isObject) : []) {
      if (String(detail.modality ?? '').toUpperCase() === 'AUDIO' && reportedCount(detail.tokenCount) !== 0) return true;
    }
  }
  return false;
}

/** Throws ModalityNotMeteredError for output other than text (responseModalities, or a
 * speechConfig) and for audio in the prompt. */
function checkModalities(body: JsonObject): void {
  const config = field(body, 'generationConfig', 'generation_config');
  const modalities = field(config, 'responseModalities', 'response_modalities');
  const listed = Array.isArray(modalities) ? modalities : typeof modalities === 'string' ? [modalities] : [];
  const other = listed.filter((modality) => String(modality).toUpperCase() !== 'TEXT');
  const speech = field(config, 'speechConfig', 'speech_config');
  if (other.length > 0 || (speech !== undefined && speech !== null)) {
    throw new ModalityNotMeteredError(`${other.length > 0 ? String(other[0]) : 'AUDIO'} output`.toLowerCase());
  }
  const contents = Array.isArray(body.contents) ? body.contents : [body.contents];
  for (const content of [...contents, field(body, 'systemInstruction', 'system_instruction')]) {
    const parts = isObject(content) && Array.isArray(content.parts) ? content.parts : [];
    if (parts.some(audio)) throw new ModalityNotMeteredError('audio input');
  }
}

/** The characters of a Content list (or one Content): its parts' text, and a function
 * call's arguments or a function response's JSON. Inline data is billed by its size, not its
 * encoding, and is not counted. */
function chars(value: Json | undefined): number {
  if (Array.isArray(value)) return value.reduce<number>((sum, each) => sum + chars(each), 0);
  if (typeof value === 'string') return value.length;
  if (!isObject(value)) return 0;
  let total = 0;
  for (const part of Array.isArray(value.parts) ? value.parts.filter(isObject) : []) {
    total += text(part.text).length + jsonChars(part.functionCall) + jsonChars(part.functionResponse);
  }
  return total;
}

/** A usageMetadata as Earmark prices it: every input token counted (the cached content among
 * them, as cache reads), the thinking as output, at the tier trafficType says the call ran
 * at; null when a count is not believed (reportedCount): the call is left in doubt. */
export function geminiUsage(usage: JsonObject): Usage | null {
  const found = reportedCounts(usage, 'promptTokenCount', 'toolUsePromptTokenCount', 'candidatesTokenCount', 'thoughtsTokenCount');
  if (found === null || audioBilled(usage)) return null;
  const [prompt, toolUse, candidates, thoughts] = found;
  const inputTokens = prompt + toolUse;
  const traffic = String(usage.trafficType ?? '').toUpperCase();
  return {
    inputTokens,
    outputTokens: candidates + thoughts,
    cachedInputTokens: cachePart(usage.cachedContentTokenCount, inputTokens),
    serviceTier: Object.hasOwn(SERVED_TIERS, traffic) ? SERVED_TIERS[traffic] : '',
  };
}

/** The service tiers a request asks for (GenerateContentConfig.serviceTier, the body's
 * serviceTier) that bill at the standard rates: the price book's default tier (''). */
export const STANDARD_TIERS: ReadonlySet<string> = new Set(['', 'standard', 'unspecified', 'service_tier_unspecified']);
/** The tier an answer says it was billed at (usageMetadata.trafficType): the price book's
 * tier names; any other (provisioned throughput...) says nothing, and the call is priced at
 * the tier it was held at. The Python SDK's wire_gemini.SERVED_TIERS. */
export const SERVED_TIERS: Readonly<Record<string, string>> = Object.freeze({
  ON_DEMAND: 'default',
  ON_DEMAND_PRIORITY: 'priority',
  ON_DEMAND_FLEX: 'flex',
});

/** The service tier a request asks for, as the price book names it ('' the standard one): a
 * priority or flex call is held and priced at that tier's rates, refused unsent where the
 * book has none (PriceNotFoundError). */
export function requestedTier(body: JsonObject): string {
  const tier = field(body, 'serviceTier', 'service_tier');
  const name = typeof tier === 'string' ? tier.toLowerCase() : '';
  if (STANDARD_TIERS.has(name)) return '';
  // A name the book cannot hold is sent to it as asked, and refused there, unsent.
  return servedTier(name) || name.slice(0, SERVICE_TIER_LENGTH_MAX + 1);
}

/** What a chunk says ended: the indexes of the candidates it gives a finishReason, and
 * whether the prompt was blocked (promptFeedback.blockReason, sent with no candidates),
 * which ends the answer whole. */
function finished(chunk: JsonObject): { done: number[]; blocked: boolean } {
  const candidates = Array.isArray(chunk.candidates) ? chunk.candidates.filter(isObject) : [];
  const done: number[] = [];
  for (const candidate of candidates) {
    if (typeof candidate.finishReason !== 'string' || candidate.finishReason === '') continue;
    done.push(typeof candidate.index === 'number' && Number.isSafeInteger(candidate.index) ? candidate.index : 0);
  }
  const feedback = chunk.promptFeedback;
  return { done, blocked: isObject(feedback) && Boolean(feedback.blockReason) };
}

/** A stream's usage: the last usageMetadata a chunk carried, known once the answer has
 * ended, every one of its candidates (candidateCount) with a finishReason, or its prompt
 * blocked; earlier ones may be partial (the prompt alone, or a candidate still running when
 * the stream was cut). The Python SDK's wire_gemini.GenerateTally. */
class GeminiTally implements Tally {
  private last: JsonObject | null = null;
  private readonly finished = new Set<number>();
  private blocked = false;

  constructor(private readonly candidates: number) {}

  keep(_event: string, data: Json): boolean {
    if (!isObject(data)) return true;
    if (isObject(data.usageMetadata)) this.last = data.usageMetadata;
    const { done, blocked } = finished(data);
    for (const index of done) this.finished.add(index);
    this.blocked ||= blocked;
    return true;
  }

  usage(): Usage | null {
    const ended = this.blocked || this.finished.size >= this.candidates;
    return ended && this.last !== null ? geminiUsage(this.last) : null;
  }
}

/** POST .../models/{model}:generateContent, or :streamGenerateContent (streaming). */
function generate(model: string, streaming: boolean): Route {
  return {
    call(body: JsonObject): Call {
      // Read first: what cannot be priced refuses the request before its hold.
      checkTools(body.tools);
      checkModalities(body);
      const contents = Array.isArray(body.contents) ? body.contents : body.contents === undefined ? [] : [body.contents];
      const config = isObject(body.generationConfig) ? body.generationConfig : {};
      return {
        model,
        promptTokens: promptEstimate(chars(contents) + chars(body.systemInstruction) + jsonChars(body.tools), contents.length),
        asked: positive(config, 'maxOutputTokens'),
        choices: positive(config, 'candidateCount') ?? 1,
        stream: streaming,
        serviceTier: requestedTier(body),
        toolCallsMax: {},
        hasOutput: true,
      };
    },

    sent(body: JsonObject, _call: Call, cap: number | null) {
      if (cap === null) return { body, hiddenUsage: false };
      // maxOutputTokens caps each candidate, thinking included.
      const config = isObject(body.generationConfig) ? body.generationConfig : {};
      return { body: { ...body, generationConfig: { ...config, maxOutputTokens: cap } }, hiddenUsage: false };
    },

    usage(answer: Json): Usage | null {
      if (!isObject(answer) || !isObject(answer.usageMetadata)) return null;
      return geminiUsage(answer.usageMetadata);
    },

    tally(call: Call): Tally {
      return new GeminiTally(call.choices);
    },
  };
}

/** The route of a POST to path (the whole URL path), under a base URL whose own path is
 * prefix ('' for Google's). */
export const googleRouting: Routing = (path, prefix = '') => {
  if (!within(path, prefix)) return null;
  const rest = path.slice(prefix.length);
  if (FILES.test(rest)) return FREE;
  const found = MODEL_METHOD.exec(rest);
  if (found === null) return null;
  const [, model, method] = found;
  if (FREE_METHODS.has(method)) return FREE;
  if (method === 'generateContent') return generate(model, false);
  if (method === 'streamGenerateContent') return generate(model, true);
  return null;
};
