// Bedrock (@aws-sdk/client-bedrock-runtime's BedrockRuntimeClient), metered in its
// middleware stack: metered(client, earmark, budgetId) adds one middleware at the stack's
// initialize step, the outermost, which sees each command's input before it is serialized
// (where the hold is made and the cap set, and a refusal stops the command before anything
// is sent) and its parsed output (where the usage is), once per command: the SDK's retries
// run inside it, on the one hold. A second middleware, inside the retries, sees each
// attempt: one that answered 5xx or was lost after it was sent leaves the hold in doubt even
// when a later attempt answers (AWS may have run both). The client itself is metered and
// answered.
//
// Commands: metered, Converse and ConverseStream (every model family: Bedrock normalizes the
// cap, inferenceConfig.maxTokens, and the usage), InvokeModel and
// InvokeModelWithResponseStream for the Anthropic family (Anthropic's Messages body and
// usage, routes-anthropic.ts) and the Amazon Nova family (messages-v1: inferenceConfig's
// maxTokens or max_new_tokens; usage inputTokens, outputTokens and the cache's
// ...InputTokenCount); free, CountTokens and reading async invocations; every other command
// (another family's InvokeModel, StartAsyncInvoke, ApplyGuardrail, a bidirectional stream...)
// is refused before it is sent (EndpointNotMeteredError). A model is priced under provider
// "aws" and the name genai-prices (and `earmark prices import --provider aws`) gives its
// modelId (bedrockPriceName, the Python SDK's wire_bedrock.price_name): AWS bills a global
// cross-region inference profile (global.) apart from an in-region call or a geographic
// profile (us., eu., apac....), for the model families it prices apart (regional.{id}).
//
// Converse's usage: inputTokens counts neither cache reads (cacheReadInputTokens) nor writes
// (cacheWriteInputTokens; cacheDetails by TTL), which Earmark's input counts; a stream's
// usage is its metadata event, its last. A stream that ends without it, fails or is left
// unread leaves the hold in doubt; a 4xx settles at nothing, a 5xx or a timeout in doubt.
//
// What a request asks that bills where Earmark has no price is refused before anything is
// held or sent (ToolNotMeteredError), as the Python SDK's wire_bedrock.py refuses it: a
// guardrail (guardrailConfig, or InvokeModel's guardrailIdentifier: billed per text unit), a
// latency other than standard (performanceConfig.latency, InvokeModel's
// performanceConfigLatency: rates of its own), one of AWS's system tools (toolConfig's
// systemTool), and a tool kind not classified (BEDROCK_TOOL_KINDS). Nova Sonic (speech) is no
// Nova body Earmark reads: its InvokeModel is refused.
import type { EarmarkClient } from './client.js';
import { EndpointNotMeteredError, ToolNotMeteredError } from './errors.js';
import { HeldCall, failedEnding, settingsOf, type Ending, type MeterOptions, type Settings } from './held.js';
import { ANTHROPIC_ROUTES } from './routes-anthropic.js';
import { FREE, count, isObject, jsonChars, positive, promptEstimate, reportedCounts, text, type Call, type Json, type JsonObject, type Route, type Tally } from './routes.js';
import type { Usage } from './types.js';

/** A BedrockRuntimeClient as metered() reaches it: its middleware stack and its config. */
export interface BedrockClientLike {
  readonly middlewareStack: {
    add(middleware: (next: any, context: any) => any, options: { step: string; name: string; priority?: string }): void;
    remove(name: string): boolean;
  };
  readonly config: object;
  send(command: any, ...rest: any[]): Promise<unknown>;
}

/** The name of Earmark's middleware in the stack: metering a client again replaces it. */
export const BEDROCK_MIDDLEWARE = 'earmarkMeter';
/** The name of the middleware that watches each attempt, inside the SDK's retries. */
export const BEDROCK_ATTEMPTS = 'earmarkAttempts';
const SERVICE_ID = 'Bedrock Runtime';
/**
 * Every command of @aws-sdk/client-bedrock-runtime, with what Earmark does with it: metered
 * (held, capped and settled), free (bills nothing: sent as it is) or refused (bills, and
 * Earmark cannot price it: refused before it is sent). A command not listed (an SDK
 * upgrade's) is refused too; test/bedrock.test.mjs fails on an exported command not listed.
 */
export const BEDROCK_COMMANDS: Readonly<Record<string, 'metered' | 'free' | 'refused'>> = {
  ConverseCommand: 'metered',
  ConverseStreamCommand: 'metered',
  // The Anthropic and Amazon Nova families; another family's body is refused.
  InvokeModelCommand: 'metered',
  InvokeModelWithResponseStreamCommand: 'metered',
  // Counting tokens, and reading what async invocations did.
  CountTokensCommand: 'free',
  GetAsyncInvokeCommand: 'free',
  ListAsyncInvokesCommand: 'free',
  // Guardrails bill per text unit, a bidirectional stream (speech) by the second, and an
  // async invocation (video) runs on out of the call: Earmark has no price for them.
  ApplyGuardrailCommand: 'refused',
  InvokeGuardrailChecksCommand: 'refused',
  InvokeModelWithBidirectionalStreamCommand: 'refused',
  StartAsyncInvokeCommand: 'refused',
};
/** The kinds of a Converse tool (the SDK's Tool union: an object whose one key names its
 * kind) that bill tokens only; systemTool (AWS's, run for a fee) and any other kind are
 * refused. test/tools.test.mjs reads the installed package's Tool members and fails on one
 * not classified. */
export const BEDROCK_TOOL_KINDS: readonly string[] = Object.freeze(['toolSpec', 'cachePoint']);

/** Throws ToolNotMeteredError for what a request's parameters (or a Nova body) ask that
 * bills where Earmark has no price: guardrails (per text unit), latency-optimized inference
 * (its own rates), AWS's system tools, a tool kind not classified. The Python SDK's
 * wire_bedrock._refuse_unpriced. */
function refuseUnpriced(params: JsonObject): void {
  if ((params.guardrailConfig !== undefined && params.guardrailConfig !== null) || params.guardrailIdentifier) {
    throw new ToolNotMeteredError('guardrail', 'bills its text units apart from tokens, which Earmark cannot hold');
  }
  const performance = params.performanceConfig;
  const latency = isObject(performance) ? performance.latency : params.performanceConfigLatency;
  if (latency !== undefined && latency !== null && latency !== 'standard') {
    throw new ToolNotMeteredError(`${String(latency)} latency`, 'bills at rates the price book does not name');
  }
  const tools = isObject(params.toolConfig) && Array.isArray(params.toolConfig.tools) ? params.toolConfig.tools : [];
  for (const tool of tools.filter(isObject)) {
    for (const kind of Object.keys(tool)) {
      if (tool[kind] === undefined) continue;
      if (kind === 'systemTool') {
        const system = tool[kind];
        const name = isObject(system) ? system.name : null;
        throw new ToolNotMeteredError(typeof name === 'string' && name !== '' ? name : kind, 'runs at AWS for a fee Earmark cannot hold');
      }
      if (!BEDROCK_TOOL_KINDS.includes(kind)) {
        throw new ToolNotMeteredError(kind, 'is of a kind Earmark has not classified, and may bill a fee');
      }
    }
  }
}

// Nova 2 models name their maximum maxTokens; Nova 1's schema names it max_new_tokens.
const NOVA_2 = /amazon\.nova-2/;
// The geographic prefixes of AWS's system-defined cross-region inference profiles, billed
// as an in-region call is ("regional."); global. is billed apart.
const GEOGRAPHIES = new Set(['us', 'us-gov', 'eu', 'apac', 'au', 'jp', 'ca', 'in']);
const GLOBAL = 'global.';
const REGIONAL = 'regional.';
// The model families genai-prices 0.2.3 prices apart for global and regional calls (its
// regional. ids); any other model has one price, under its bare id. The Python SDK's
// REGIONAL_PRICED, which its tests check against the installed genai-prices.
const REGIONAL_PRICED = ['anthropic.', 'amazon.nova-2-lite', 'moonshotai.', 'openai.gpt-5.6', 'openai.gpt-6', 'zai.'];
const ARN = /^arn:aws[a-z-]*:bedrock:[^:]*:[^:]*:([a-z-]+)\/(.+)$/;

/**
 * The name the price book knows a Bedrock modelId by: a foundation model's or a
 * system-defined inference profile's ARN is read as its id; a geographic profile (us.,
 * eu....) and an in-region id are priced as genai-prices' regional. id for a family it prices
 * apart (else the bare id); a global profile keeps its global. name. Any other ARN (an
 * application inference profile, a provisioned or custom model) names no model Earmark can
 * see: named as given, so that an operator may put its price by hand.
 */
export function bedrockPriceName(modelId: string): string {
  let name = modelId;
  const arn = ARN.exec(name);
  if (arn !== null) {
    if (arn[1] !== 'foundation-model' && arn[1] !== 'inference-profile') return name;
    name = arn[2];
  }
  if (name.startsWith(GLOBAL) || name.startsWith(REGIONAL)) return name;
  const dot = name.indexOf('.');
  const base = dot > 0 && GEOGRAPHIES.has(name.slice(0, dot)) ? name.slice(dot + 1) : name;
  return REGIONAL_PRICED.some((family) => base.startsWith(family)) ? REGIONAL + base : base;
}

export function isBedrock(client: object): client is BedrockClientLike {
  const config = (client as { config?: { serviceId?: unknown } }).config;
  return 'middlewareStack' in client && typeof config === 'object' && config !== null && config.serviceId === SERVICE_ID;
}

/** How a command is held and settled: its call, its input with the cap set, and the usage
 * of its output (a JSON answer, or a stream's events one by one). */
interface Operation {
  call: Call;
  capped(cap: number): JsonObject;
  usage(output: JsonObject): Usage | null;
  /** The stream of a streaming command's output, and the tally of its events. */
  stream?: { member: string; tally: Tally; event(event: unknown): Json };
}

function blocksChars(value: Json | undefined): number {
  if (!Array.isArray(value)) return 0;
  let total = 0;
  for (const block of value) {
    if (!isObject(block)) continue;
    total += text(block.text).length;
    if (isObject(block.toolUse)) total += jsonChars(block.toolUse.input);
    if (isObject(block.toolResult)) total += jsonChars(block.toolResult.content);
  }
  return total;
}

/** Converse's (and ConverseStream's, and Nova's) messages and system prompt, counted. */
function messagesPrompt(input: JsonObject, extra: Json | undefined): number {
  const messages = Array.isArray(input.messages) ? input.messages.filter(isObject) : [];
  let chars = blocksChars(input.system) + jsonChars(extra);
  for (const message of messages) chars += blocksChars(message.content);
  return promptEstimate(chars, messages.length);
}

/** A Bedrock usage (Converse's TokenUsage, or a Nova invoke's, whose cache counts are
 * named read and written) as Earmark prices it: inputTokens counts neither cache reads nor
 * writes, so both are added; the writes kept for an hour apart (cacheDetails); the tier the
 * answer says it ran at. null when a count is not believed (reportedCount): the call is left
 * in doubt. The Python SDK's wire_bedrock.bedrock_usage. */
function bedrockUsage(usage: JsonObject, read: Json | undefined, written: Json | undefined, serviceTier: Json | undefined): Usage | null {
  const found = reportedCounts({ inputTokens: usage.inputTokens, outputTokens: usage.outputTokens, read, written }, 'inputTokens', 'outputTokens', 'read', 'written');
  if (found === null) return null;
  const [fresh, output, reads, writes] = found;
  let long = 0;
  for (const detail of Array.isArray(usage.cacheDetails) ? usage.cacheDetails.filter(isObject) : []) {
    if (detail.ttl === '1h') long += count(detail.inputTokens);
  }
  return {
    inputTokens: fresh + reads + writes,
    outputTokens: output,
    cachedInputTokens: reads,
    cacheWriteInputTokens: writes,
    cacheWriteLongInputTokens: Math.min(long, writes),
    serviceTier: tierOf(serviceTier),
  };
}

/** A Converse usage (TokenUsage) as Earmark prices it. */
export function converseUsage(usage: JsonObject, serviceTier: Json | undefined): Usage | null {
  return bedrockUsage(usage, usage.cacheReadInputTokens, usage.cacheWriteInputTokens, serviceTier);
}

/** The service tier a request asks for, or an answer says it ran at ('' for the default):
 * Converse's serviceTier { type }, InvokeModel's serviceTier (a header). The Python SDK's
 * wire_bedrock._tier. */
function tierOf(serviceTier: Json | undefined): string {
  const name = isObject(serviceTier) ? text(serviceTier.type) : text(serviceTier);
  return name === 'default' ? '' : name;
}

/** The events of a Converse stream as the SDK yields them: { metadata: { usage } } last. */
class ConverseTally implements Tally {
  private found: Usage | null = null;

  keep(_event: string, data: Json): boolean {
    if (isObject(data) && isObject(data.metadata) && isObject(data.metadata.usage)) {
      this.found = converseUsage(data.metadata.usage, data.metadata.serviceTier);
    }
    return true;
  }

  usage(): Usage | null {
    return this.found;
  }
}

function converse(input: JsonObject, streaming: boolean): Operation {
  refuseUnpriced(input);
  const config = isObject(input.inferenceConfig) ? input.inferenceConfig : {};
  return {
    call: {
      model: bedrockPriceName(text(input.modelId)),
      promptTokens: messagesPrompt(input, input.toolConfig),
      asked: positive(config, 'maxTokens'),
      choices: 1,
      stream: streaming,
      serviceTier: tierOf(input.serviceTier),
      toolCallsMax: {},
      hasOutput: true,
    },
    capped: (cap) => ({ ...input, inferenceConfig: { ...config, maxTokens: cap } }),
    usage: (output) => (isObject(output.usage) ? converseUsage(output.usage, output.serviceTier) : null),
    stream: streaming ? { member: 'stream', tally: new ConverseTally(), event: (event) => event as Json } : undefined,
  };
}

/** A Nova invoke's usage: Converse's counts, its cache's named ...InputTokenCount. */
function novaUsage(usage: JsonObject): Usage | null {
  const read = usage.cacheReadInputTokenCount ?? usage.cacheReadInputTokens;
  const written = usage.cacheWriteInputTokenCount ?? usage.cacheWriteInputTokens;
  return bedrockUsage(usage, read, written, undefined);
}

class NovaTally implements Tally {
  private found: Usage | null = null;

  keep(_event: string, data: Json): boolean {
    if (isObject(data) && isObject(data.metadata) && isObject(data.metadata.usage)) this.found = novaUsage(data.metadata.usage);
    return true;
  }

  usage(): Usage | null {
    return this.found;
  }
}

const decoder = new TextDecoder();

/** The JSON of an invoke's body (a string or bytes); null when it is not a JSON object. */
function bodyJson(body: unknown): JsonObject | null {
  let raw: string;
  if (typeof body === 'string') raw = body;
  else if (body instanceof Uint8Array) raw = decoder.decode(body);
  else return null;
  try {
    const parsed = JSON.parse(raw) as Json;
    return isObject(parsed) ? parsed : null;
  } catch {
    return null;
  }
}

/** A streamed invoke's event, { chunk: { bytes } }, as the JSON its bytes carry. */
function chunkJson(event: unknown): Json {
  const chunk = (event as { chunk?: { bytes?: unknown } } | null)?.chunk;
  return chunk === undefined ? null : bodyJson(chunk.bytes);
}

function invoke(input: JsonObject, rawBody: unknown, streaming: boolean, command: string, settings: Settings): Operation {
  refuseUnpriced(input);
  const modelId = text(input.modelId);
  const body = bodyJson(rawBody);
  if (body === null) throw new EndpointNotMeteredError('BEDROCK', `${command} ${modelId}`, `${command} of ${modelId}: the body is not JSON; not sent`);
  const encoded = (value: JsonObject): JsonObject => {
    const json = JSON.stringify(value);
    return { ...input, body: typeof rawBody === 'string' ? json : (new TextEncoder().encode(json) as unknown as Json) };
  };
  if (/(^|[.:/])anthropic\./.test(modelId)) {
    const route = ANTHROPIC_ROUTES.find('/v1/messages') as Route;
    const call = { ...route.call(body, settings), model: bedrockPriceName(modelId), stream: streaming, serviceTier: tierOf(input.serviceTier) };
    return {
      call,
      capped: (cap) => encoded(route.sent(body, call, cap).body),
      usage: (output) => route.usage(bodyJson(output.body), call),
      stream: streaming ? { member: 'body', tally: route.tally(call, false), event: chunkJson } : undefined,
    };
  }
  // Nova Sonic is speech, bidirectional: no messages-v1 body Earmark reads.
  if (/(^|[.:/])amazon\.nova-/.test(modelId) && !bedrockPriceName(modelId).includes('sonic')) {
    refuseUnpriced(body);
    const config = isObject(body.inferenceConfig) ? body.inferenceConfig : {};
    const named = ['maxTokens', 'max_new_tokens'].filter((name) => config[name] != null);
    return {
      call: {
        model: bedrockPriceName(modelId),
        promptTokens: messagesPrompt(body, body.toolConfig),
        asked: positive(config, 'maxTokens', 'max_new_tokens'),
        choices: 1,
        stream: streaming,
        // InvokeModel's serviceTier is a parameter (a header), not in the body.
        serviceTier: tierOf(input.serviceTier),
        toolCallsMax: {},
        hasOutput: true,
      },
      capped: (cap) => {
        const names = named.length > 0 ? named : [NOVA_2.test(modelId) ? 'maxTokens' : 'max_new_tokens'];
        const capped: JsonObject = { ...config };
        for (const name of names) capped[name] = cap;
        return encoded({ ...body, inferenceConfig: capped });
      },
      usage: (output) => {
        const answer = bodyJson(output.body);
        return answer !== null && isObject(answer.usage) ? novaUsage(answer.usage) : null;
      },
      stream: streaming ? { member: 'body', tally: new NovaTally(), event: chunkJson } : undefined,
    };
  }
  throw new EndpointNotMeteredError(
    'BEDROCK',
    `${command} ${modelId}`,
    `${command} of ${modelId}: Earmark meters InvokeModel for the Anthropic and Amazon Nova families, not Nova Sonic (Converse for any); not sent`,
  );
}

/** How a command is held, or FREE, or null (refused unsent). */
function operationOf(command: string, input: JsonObject, rawBody: unknown, settings: Settings): Operation | typeof FREE | null {
  const what = Object.hasOwn(BEDROCK_COMMANDS, command) ? BEDROCK_COMMANDS[command] : 'refused';
  if (what === 'free') return FREE;
  if (what === 'refused') return null;
  if (command === 'ConverseCommand') return converse(input, false);
  if (command === 'ConverseStreamCommand') return converse(input, true);
  if (command === 'InvokeModelCommand') return invoke(input, rawBody, false, command, settings);
  if (command === 'InvokeModelWithResponseStreamCommand') return invoke(input, rawBody, true, command, settings);
  return null;
}

function statusOf(error: unknown): number | null {
  const status = (error as { $metadata?: { httpStatusCode?: unknown } } | null)?.$metadata?.httpStatusCode;
  return typeof status === 'number' ? status : null;
}

/** A stream of events passed to the caller as it reads them, each shown to the tally; the
 * hold ends once, at the tally's usage or in doubt, however the reading ends. */
async function* tallied(events: AsyncIterable<unknown>, op: NonNullable<Operation['stream']>, held: HeldCall, doubt: boolean): AsyncGenerator<unknown> {
  try {
    for await (const event of events) {
      op.tally.keep('', op.event(event));
      yield event;
    }
  } finally {
    const usage = doubt ? null : op.tally.usage();
    await held.end(usage === null ? 'doubt' : { usage });
  }
}

/** A command's attempts as the attempts middleware sees them: whether one answered 5xx or
 * was lost after it was sent, by the command's context (one per send, shared by every step
 * of its stack). */
const DOUBTED = new WeakMap<object, { doubt: boolean }>();

/** The middleware (initialize step) that meters each command of the client. */
function meter(earmark: EarmarkClient, budgetId: string, options: MeterOptions, settings: Settings) {
  // Streams whose reader let go of them unread: their holds end in doubt when collected.
  const unread = new FinalizationRegistry<HeldCall>((held) => void held.end('doubt'));
  return (next: (args: any) => Promise<any>, context: { commandName?: string }) =>
    async (args: { input: JsonObject }) => {
      const command = context.commandName ?? '';
      const op = operationOf(command, args.input, args.input.body, settings);
      if (op === FREE) return next(args);
      if (op === null) throw new EndpointNotMeteredError('BEDROCK', command, `${command} bills and Earmark cannot price it; not sent`);
      const held = await HeldCall.open(earmark, budgetId, options, settings, op.call);
      const attempts = { doubt: false };
      DOUBTED.set(context, attempts);
      // An earlier attempt answered 5xx or was lost after it was sent: AWS may have run it
      // too, so a later attempt's answer does not say what the call billed.
      const ending = (found: Ending): Ending => (attempts.doubt ? 'doubt' : found);
      const input = held.cap === null ? args.input : op.capped(held.cap);
      let result: { output: JsonObject };
      try {
        result = await next({ ...args, input });
      } catch (error) {
        await held.end(ending(failedEnding(error, statusOf(error))));
        throw error;
      }
      const output = result.output;
      const events = op.stream === undefined ? undefined : (output[op.stream.member] as unknown as AsyncIterable<unknown> | undefined);
      if (op.stream !== undefined && events !== undefined && events !== null) {
        const stream = tallied(events, op.stream, held, attempts.doubt);
        unread.register(stream, held);
        return { ...result, output: { ...output, [op.stream.member]: stream } };
      }
      const usage = op.usage(output);
      await held.end(ending(usage === null ? 'doubt' : { usage }));
      return result;
    };
}

/**
 * The middleware that sees each attempt of a metered command: inside the SDK's retries
 * (finalizeRequest, after its retry middleware, which runs at high priority), around the
 * send and the answer's parsing. An attempt that answered 5xx, or failed after it may have
 * been sent (a timeout, a dropped connection), marks its command's hold for doubt, whatever a
 * later attempt answers; a 4xx (throttling too) or a connection never made bills nothing.
 */
function attemptsWatch() {
  return (next: (args: any) => Promise<any>, context: object) =>
    async (args: unknown) => {
      try {
        return await next(args);
      } catch (error) {
        const attempts = DOUBTED.get(context);
        if (attempts !== undefined && failedEnding(error, statusOf(error)) === 'doubt') attempts.doubt = true;
        throw error;
      }
    };
}

/** client, metered on budgetId in place (see the module's text): answers client. */
export function meterBedrock<C extends BedrockClientLike>(client: C, earmark: EarmarkClient, budgetId: string, options: MeterOptions = {}): C {
  const settings = settingsOf('aws', options);
  client.middlewareStack.remove(BEDROCK_MIDDLEWARE);
  client.middlewareStack.remove(BEDROCK_ATTEMPTS);
  client.middlewareStack.add(meter(earmark, budgetId, options, settings), { step: 'initialize', name: BEDROCK_MIDDLEWARE });
  client.middlewareStack.add(attemptsWatch(), { step: 'finalizeRequest', priority: 'low', name: BEDROCK_ATTEMPTS });
  return client;
}
