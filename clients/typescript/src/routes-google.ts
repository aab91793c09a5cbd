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
// tunings, interactions, agents...) is refused before it is sent, naming it. A request
// that is not a POST passes. The live API (a websocket) is refused by metered.ts.
//
// The usage: promptTokenCount counts the whole prompt, cached content included
// (cachedContentTokenCount of it, a cache read) and toolUsePromptTokenCount apart (input
// too); candidatesTokenCount is the visible output and thoughtsTokenCount the thinking, which
// Google bills as output. A stream's events each carry usageMetadata, partial until the
// last: the last one read once a candidate has its finishReason is the bill, never a sum.
//
// What a request may ask that Earmark cannot price is refused before anything is held or
// sent, as the Python SDK's wire_gemini.py refuses it: a tool that bills a fee per call
// (Google Search and Maps grounding, enterprise web search, Vertex AI Search and RAG
// retrieval, file search; their fees are counted per prompt or per query in
// groundingMetadata, which is not settled yet) and a tool kind not classified
// (ToolNotMeteredError); an output modality other than text (images, speech) and audio input,
// billed at rates of their own (ModalityNotMeteredError).
import { ModalityNotMeteredError, ToolNotMeteredError } from './errors.js';
import {
  FREE,
  count,
  isObject,
  jsonChars,
  positive,
  promptEstimate,
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

/** Whether a Part carries audio (inline or a file), which bills above the text rate. */
function audio(part: Json): boolean {
  for (const [camel, snake] of [['inlineData', 'inline_data'], ['fileData', 'file_data']]) {
    const mime = field(field(part, camel, snake), 'mimeType', 'mime_type');
    if (typeof mime === 'string' && mime.toLowerCase().startsWith('audio/')) return true;
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
 * them, as cache reads), the thinking as output. */
export function geminiUsage(usage: JsonObject): Usage {
  const inputTokens = count(usage.promptTokenCount) + count(usage.toolUsePromptTokenCount);
  return {
    inputTokens,
    outputTokens: count(usage.candidatesTokenCount) + count(usage.thoughtsTokenCount),
    cachedInputTokens: Math.min(inputTokens, count(usage.cachedContentTokenCount)),
  };
}

function finished(answer: JsonObject): boolean {
  const candidates = Array.isArray(answer.candidates) ? answer.candidates.filter(isObject) : [];
  return candidates.some((candidate) => typeof candidate.finishReason === 'string' && candidate.finishReason !== '');
}

/** The last usageMetadata of a stream; the bill once a candidate has finished. */
class GeminiTally implements Tally {
  private last: JsonObject | null = null;
  private done = false;

  keep(_event: string, data: Json): boolean {
    if (!isObject(data)) return true;
    if (isObject(data.usageMetadata)) this.last = data.usageMetadata;
    if (finished(data)) this.done = true;
    return true;
  }

  usage(): Usage | null {
    return this.done && this.last !== null ? geminiUsage(this.last) : null;
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
        serviceTier: '',
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

    tally(): Tally {
      return new GeminiTally();
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
