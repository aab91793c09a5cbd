// earmarkMiddleware(): the AI SDK's language model middleware (ai 6, LanguageModelV3) that
// holds, caps and settles the calls of any AI SDK provider's model, generate and stream:
//
//   const model = wrapLanguageModel({ model: anthropic('claude-haiku-4-5'),
//                                     middleware: earmarkMiddleware(earmark, 'job-7') });
//
// It drives the held-call sequence (held.ts) at the AI SDK's own boundary, one level above
// the provider's HTTP: transformParams holds the call (RefusedError thrown before anything
// is sent) and sets maxOutputTokens to the cap the hold covers (the caller's own, else the
// model's ceiling: a provider told none sends its own default or none); wrapGenerate
// settles at the usage the AI SDK reports, wrapStream at the usage of the stream's finish
// part. A stream that errors or is cancelled before its finish part, a 5xx and a timeout
// leave the hold in doubt; a 4xx settles at nothing. The AI SDK retries a call by calling
// the model again: each attempt is held on its own.
//
// The usage is the AI SDK's normalized one: inputTokens.total counts cache reads and
// writes (cacheRead, cacheWrite), as Earmark's input does; outputTokens.total counts
// reasoning. The model is priced under the provider the AI SDK names it by (model.provider
// before its first '.': "openai", "anthropic", "google", "amazon-bedrock" as "aws", "xai"
// as "x-ai"...), or the one the options name, and its modelId (a Bedrock one as
// bedrockPriceName names it).
//
// What a call asks that Earmark cannot price is refused before anything is held or sent, as
// the wire routes refuse it: a tool that is not the caller's own function (a
// provider-defined tool, type 'provider': google.google_search, openai.web_search...: its
// fees are not in the AI SDK's usage) with ToolNotMeteredError naming its id, and a Gemini
// output other than text (providerOptions.google.responseModalities) with
// ModalityNotMeteredError. A service tier the provider options ask for
// (providerOptions.openai.serviceTier, providerOptions.google.serviceTier: priority, flex)
// is held and priced at that tier (refused unsent where the book has none), and settled at
// the tier the result says the call ran at.
import { bedrockPriceName } from './bedrock.js';
import type { EarmarkClient } from './client.js';
import { HeldCall, failedEnding, settingsOf, type MeterOptions, type Settings } from './held.js';
import { baseModel } from './routes-azure.js';
import { ModalityNotMeteredError, ToolNotMeteredError } from './errors.js';
import { SERVICE_TIER_LENGTH_MAX } from './limits.js';
import { servedTier } from './openai-background.js';
import { SERVED_TIERS } from './routes-google.js';
import { UNCLASSIFIED_TOOL, promptEstimate, type Call } from './routes.js';
import type { Usage } from './types.js';

/** The AI SDK's provider names (model.provider before its first '.') that the price book
 * names otherwise. */
const PROVIDER_NAMES: Readonly<Record<string, string>> = {
  'amazon-bedrock': 'aws',
  'google-vertex': 'google',
  vertex: 'google',
  xai: 'x-ai',
  togetherai: 'together',
  'azure-openai': 'azure',
};

/** What the middleware reads of a model: its provider and id. */
export interface ModelLike {
  readonly provider: string;
  readonly modelId: string;
}

/** What the middleware reads of a call's options (LanguageModelV3CallOptions). */
export interface CallOptionsLike {
  prompt?: unknown;
  tools?: unknown;
  maxOutputTokens?: number;
  providerOptions?: unknown;
}

/** The providerOptions keys each provider's AI SDK package reads its options under
 * (@ai-sdk/openai's openai, @ai-sdk/azure's azure then openai, @ai-sdk/google's google,
 * @ai-sdk/google-vertex's googleVertex, vertex then google), by the price book's provider. */
const OPTIONS_KEYS: Readonly<Record<string, readonly string[]>> = {
  openai: ['openai'],
  azure: ['azure', 'openai'],
  google: ['google', 'googleVertex', 'vertex'],
};
// The service tiers a providerOptions.openai.serviceTier (auto, default) or
// providerOptions.google.serviceTier (standard, unspecified) names that bill at the price
// book's default tier (''), as the wire routes read them.
const DEFAULT_TIERS: ReadonlySet<string> = new Set(['', 'auto', 'default', 'standard', 'unspecified', 'service_tier_unspecified']);

/** The options a call gives its provider (providerOptions[key], the first of the provider's
 * keys that is set); {} when it gives none. */
function providerOptionsOf(params: CallOptionsLike, provider: string): Record<string, unknown> {
  const given = isRecord(params.providerOptions) ? params.providerOptions : {};
  for (const key of OPTIONS_KEYS[provider] ?? []) {
    if (isRecord(given[key])) return given[key];
  }
  return {};
}

/** The service tier a call's provider options ask for, as the price book names it ('' the
 * default): held and priced at that tier, refused unsent where the book has none. */
function requestedTier(options: Record<string, unknown>): string {
  const tier = options.serviceTier;
  const name = typeof tier === 'string' ? tier.toLowerCase() : '';
  if (DEFAULT_TIERS.has(name)) return '';
  // A name the book cannot hold is sent to it as asked, and refused there, unsent.
  return servedTier(name) || name.slice(0, SERVICE_TIER_LENGTH_MAX + 1);
}

/** Throws ToolNotMeteredError for a tool that is not the caller's own function: a
 * provider-defined tool (type 'provider', 'provider-defined' in LanguageModelV2: Google
 * Search grounding, OpenAI's web search...) runs at the provider for fees the AI SDK's usage
 * does not report, and any other type is one Earmark has not classified. */
function refuseTools(tools: unknown): void {
  for (const tool of Array.isArray(tools) ? tools : []) {
    if (!isRecord(tool) || tool.type === 'function') continue;
    const id = typeof tool.id === 'string' ? tool.id : typeof tool.name === 'string' ? tool.name : String(tool.type);
    if (tool.type === 'provider' || tool.type === 'provider-defined') {
      throw new ToolNotMeteredError(id, PROVIDER_TOOL);
    }
    throw new ToolNotMeteredError(id, UNCLASSIFIED_TOOL);
  }
}
const PROVIDER_TOOL = "runs at the provider, for fees the AI SDK's usage does not report and Earmark cannot hold";

/** Throws ModalityNotMeteredError for a Gemini call asking for output other than text
 * (providerOptions.google.responseModalities: images), billed at rates of its own. */
function refuseModalities(options: Record<string, unknown>): void {
  const modalities = options.responseModalities;
  const listed = Array.isArray(modalities) ? modalities : typeof modalities === 'string' ? [modalities] : [];
  const other = listed.filter((modality) => String(modality).toUpperCase() !== 'TEXT');
  if (other.length > 0) throw new ModalityNotMeteredError(`${String(other[0])} output`.toLowerCase());
}

/** The tier a call ran at, from what its result says: the tier its provider's metadata
 * names (@ai-sdk/openai's Responses: providerMetadata.openai.serviceTier; @ai-sdk/google's
 * usageMetadata.trafficType, or its serviceTier), a default one as 'default'; else 'default'
 * when the body sent names no tier though the call was held at one (the AI SDK drops a tier
 * the model does not take, with a warning); else '' (the tier it was held at). */
function servedTierOf(result: unknown, provider: string, held: string): string {
  if (!isRecord(result)) return '';
  const metadata = isRecord(result.providerMetadata) ? result.providerMetadata : {};
  for (const key of OPTIONS_KEYS[provider] ?? []) {
    const each = isRecord(metadata[key]) ? metadata[key] : {};
    const usage = isRecord(each.usageMetadata) ? each.usageMetadata : {};
    const traffic = String(usage.trafficType ?? '').toUpperCase();
    if (Object.hasOwn(SERVED_TIERS, traffic)) return SERVED_TIERS[traffic];
    const served = typeof each.serviceTier === 'string' ? each.serviceTier.toLowerCase() : '';
    if (served !== '') return DEFAULT_TIERS.has(served) ? 'default' : servedTier(served);
  }
  if (held === '') return '';
  const request = isRecord(result.request) ? result.request : {};
  let body: unknown = request.body;
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body);
    } catch {
      return '';
    }
  }
  if (!isRecord(body)) return '';
  const told = body.service_tier ?? body.serviceTier;
  return told === undefined || told === null ? 'default' : '';
}

/** A language model middleware (the AI SDK's LanguageModelV3Middleware). */
export interface EarmarkMiddleware {
  readonly specificationVersion: 'v3';
  transformParams<P extends CallOptionsLike>(options: { type: 'generate' | 'stream'; params: P; model: ModelLike }): Promise<P>;
  wrapGenerate<R extends { usage?: unknown }>(options: {
    doGenerate: () => PromiseLike<R>;
    params: CallOptionsLike;
    model: ModelLike;
  }): Promise<R>;
  wrapStream<R extends { stream: ReadableStream<any> }>(options: {
    doStream: () => PromiseLike<R>;
    params: CallOptionsLike;
    model: ModelLike;
  }): Promise<R>;
}

function number(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : undefined;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function jsonLength(value: unknown): number {
  if (value === undefined || value === null) return 0;
  if (typeof value === 'string') return value.length;
  try {
    return JSON.stringify(value).length;
  } catch {
    return 0;
  }
}

/** The characters of a prompt (LanguageModelV3Prompt): a system message's text, and each
 * message's parts: text and reasoning, a tool call's input, a tool result's output. A
 * file's data is not counted by its encoding. */
function promptChars(prompt: unknown): { chars: number; messages: number } {
  const list = Array.isArray(prompt) ? prompt.filter(isRecord) : [];
  let chars = 0;
  for (const message of list) {
    const content = message.content;
    if (typeof content === 'string') {
      chars += content.length;
      continue;
    }
    for (const part of Array.isArray(content) ? content.filter(isRecord) : []) {
      if (typeof part.text === 'string') chars += part.text.length;
      chars += jsonLength(part.input) + jsonLength(part.output);
    }
  }
  return { chars, messages: list.length };
}

/** The AI SDK's usage (LanguageModelV3Usage) as Earmark prices it; null when it reports no
 * count of its input or of its output. */
export function aiSdkUsage(usage: unknown): Usage | null {
  if (!isRecord(usage)) return null;
  const input = isRecord(usage.inputTokens) ? usage.inputTokens : {};
  const output = isRecord(usage.outputTokens) ? usage.outputTokens : {};
  const read = number(input.cacheRead) ?? 0;
  const written = number(input.cacheWrite) ?? 0;
  const noCache = number(input.noCache);
  const inputTokens = number(input.total) ?? (noCache === undefined ? undefined : noCache + read + written);
  const text = number(output.text);
  const reasoning = number(output.reasoning);
  const outputTokens = number(output.total) ?? (text === undefined && reasoning === undefined ? undefined : (text ?? 0) + (reasoning ?? 0));
  if (inputTokens === undefined || outputTokens === undefined) return null;
  const found: Usage = { inputTokens, outputTokens, cachedInputTokens: read, cacheWriteInputTokens: written };
  // Anthropic's one-hour cache writes, which the normalized usage does not tell apart.
  const raw = isRecord(usage.raw) ? usage.raw : {};
  const byTtl = isRecord(raw.cache_creation) ? raw.cache_creation : {};
  const long = number(byTtl.ephemeral_1h_input_tokens);
  if (long !== undefined) found.cacheWriteLongInputTokens = Math.min(written, long);
  return found;
}

/** The price book's provider of model: model.provider before its first '.'. */
export function providerOf(model: ModelLike): string {
  const name = model.provider.split('.')[0];
  return PROVIDER_NAMES[name] ?? name;
}

/** The status of an AI SDK error (APICallError's statusCode); null when no answer came. */
function statusOf(error: unknown): number | null {
  const status = isRecord(error) ? error.statusCode : undefined;
  return typeof status === 'number' ? status : null;
}

/**
 * A language model middleware that holds each call of the model it wraps on budgetId
 * before the provider is called, tells the model the cap the hold covers, and settles at
 * the usage the AI SDK reports (see the module's text). Pass it to the AI SDK's
 * wrapLanguageModel({ model, middleware }).
 */
export function earmarkMiddleware(earmark: EarmarkClient, budgetId: string, options: MeterOptions = {}): EarmarkMiddleware {
  const held = new WeakMap<object, HeldCall>();
  // Streams whose reader let go of them unread: their holds end in doubt when collected,
  // rather than renew for the life of the process.
  const unread = new FinalizationRegistry<HeldCall>((call) => void call.end('doubt'));
  // The settings by provider: the options name one, or each model's own.
  const settingsByProvider = new Map<string, Settings>();
  const settingsFor = (model: ModelLike): Settings => {
    const provider = providerOf(model);
    let settings = settingsByProvider.get(provider);
    if (settings === undefined) {
      settings = settingsOf(provider, options);
      settingsByProvider.set(provider, settings);
    }
    return settings;
  };
  settingsOf('', options); // the options' bounds are checked now, not at the first call
  const { deployments } = options;

  return {
    specificationVersion: 'v3',

    async transformParams({ params, model }) {
      const settings = settingsFor(model);
      let name = model.modelId;
      if (deployments !== undefined) {
        // An Azure deployment is priced as its base model.
        name = baseModel(deployments, name);
      } else if (settings.provider === 'aws') {
        // A Bedrock modelId (an inference profile, an ARN) under genai-prices' name for it.
        name = bedrockPriceName(name);
      }
      // Read first: what cannot be priced refuses the call before its hold.
      refuseTools(params.tools);
      const providerOptions = providerOptionsOf(params, settings.provider);
      if (settings.provider === 'google') refuseModalities(providerOptions);
      const { chars, messages } = promptChars(params.prompt);
      const asked = number(params.maxOutputTokens) ?? null;
      const call: Call = {
        model: name,
        promptTokens: promptEstimate(chars + jsonLength(params.tools), messages),
        asked: asked === 0 ? null : asked,
        choices: 1,
        stream: false,
        serviceTier: requestedTier(providerOptions),
        toolCallsMax: {},
        hasOutput: true,
      };
      const opened = await HeldCall.open(earmark, budgetId, options, settings, call);
      const transformed = { ...params, maxOutputTokens: opened.maxOutputTokens ?? undefined };
      held.set(transformed, opened);
      return transformed;
    },

    async wrapGenerate({ doGenerate, params, model }) {
      const call = held.get(params);
      if (call === undefined) return doGenerate();
      let result;
      try {
        result = await doGenerate();
      } catch (error) {
        await call.end(failedEnding(error, statusOf(error)));
        throw error;
      }
      const usage = aiSdkUsage(result.usage);
      await call.end(usage === null ? 'doubt' : { usage: { ...usage, serviceTier: servedTierOf(result, settingsFor(model).provider, call.call.serviceTier) } });
      return result;
    },

    async wrapStream({ doStream, params, model }) {
      const call = held.get(params);
      if (call === undefined) return doStream();
      let result;
      try {
        result = await doStream();
      } catch (error) {
        await call.end(failedEnding(error, statusOf(error)));
        throw error;
      }
      const reader = result.stream.getReader();
      let failed = false;
      const stream = new ReadableStream({
        async pull(controller) {
          let item;
          try {
            item = await reader.read();
          } catch (error) {
            await call.end('doubt');
            controller.error(error);
            return;
          }
          if (item.done) {
            // Ended without its finish part: the provider may have billed what it sent.
            await call.end('doubt');
            controller.close();
            return;
          }
          const part: unknown = item.value;
          if (isRecord(part) && part.type === 'error') failed = true;
          if (isRecord(part) && part.type === 'finish') {
            // Settled before the caller sees the finish: a stream that failed on the way
            // reports what it counted so far, not the bill.
            const usage = failed ? null : aiSdkUsage(part.usage);
            const served = servedTierOf({ ...result, providerMetadata: part.providerMetadata }, settingsFor(model).provider, call.call.serviceTier);
            await call.end(usage === null ? 'doubt' : { usage: { ...usage, serviceTier: served } });
          }
          controller.enqueue(item.value);
        },
        async cancel(reason) {
          await reader.cancel(reason).catch(() => undefined);
          await call.end('doubt');
        },
      });
      unread.register(stream, call);
      return { ...result, stream };
    },
  };
}
