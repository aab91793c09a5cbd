// Metered model calls: the official `openai` client whose every chat completion is held,
// called and settled through Earmark (@earmark/client/openai; `openai` is a peer).
//
//   const llm = metered(new OpenAI(), earmark, 'job-142');
//   const reply = await llm.chat.completions.create({ model: 'gpt-4o-mini', messages });
//
// Each create() call, by the rules of the Python wrapper (src/earmark/client/llm.py):
// - holds what it may cost: a shape from the request (the model; the prompt's characters,
//   messages and tools, counted at 3 per token so the hold errs high; max_completion_tokens
//   or max_tokens times n), priced by the sidecar; without a maximum, the budget's estimate
//   for the model (a shape naming the model only);
// - throws RefusedError before any HTTP request when the hold is refused, and
//   HoldCappedError (nothing sent, settled at nothing) when the hold cannot cover the prompt;
// - charges the prompt before sending it, so a worker killed during the call leaves its hold
//   in doubt, not returned (the provider may bill the call);
// - when the caller set no output limit, sends max_completion_tokens = the output tokens the
//   hold covers after the prompt: on a tokens budget what is left of the hold, on a money
//   budget what is left bought at the output rate the prompt's Charge answers with
//   (output_usd_micros_per_mtok), so that the provider itself stops within the hold;
// - turns the OpenAI client's retries off; a 429 is tried again on a new hold (the failed
//   one settled at nothing), 3 attempts in all;
// - settles at the response's `usage` (cached input tokens included). A 4xx settles at
//   nothing (the provider billed nothing). An unknown outcome (a timeout, a lost connection
//   or a 5xx after the request was sent) settles OUTCOME_UNKNOWN: the hold stays IN_DOUBT,
//   holding what it holds, with the usage so far charged, until ResolveHold or a later
//   Settle; then the error is rethrown. An abort by the caller settles CANCELLED at what
//   was charged;
// - streams ask for usage in the stream (its usage-only last chunk hidden unless the caller
//   asked for it), charge the hold every 32 output tokens, and, when a charge comes back
//   capped, close the stream, settle CANCELLED at the tokens read and throw
//   StreamCappedError. Read a stream to its end or close() it: until then its hold stays
//   open, renewed.
import type OpenAI from 'openai';
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParams,
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionCreateParamsStreaming,
} from 'openai/resources/chat/completions';
import type { EarmarkClient } from './client';
import { backoffMs, type RetryPolicy } from './client';
import { EarmarkClientError } from './errors';
import { Hold } from './hold';
import type { Charged, Shape, Usage } from './types';

// A prompt is counted as one token per this many characters: fewer than the usual four, so
// that the hold errs high. Each message adds its role and framing.
const PROMPT_CHARS_PER_TOKEN = 3;
const MESSAGE_OVERHEAD_TOKENS = 4;
const REPLY_OVERHEAD_TOKENS = 3;
// A streamed answer comes about a token a chunk; a chunk counts at least one token, and one
// per this many characters when it is longer.
const STREAM_CHARS_PER_TOKEN = 4;
/** A stream's hold is charged every this many output tokens. */
export const STREAM_CHARGE_TOKENS = 32;
// A Charge of this many output tokens answers (in `requested`) their price per million.

/** The call's hold is spent: it was not sent, or, for a stream, reading stopped. */
export class HoldCappedError extends EarmarkClientError {
  constructor(reservationId: string, what: string) {
    super(`reservation ${reservationId}: the hold is spent; ${what}`);
    this.reason = 'HOLD_CAPPED';
    this.about = { reservation_id: reservationId };
  }
}

/** A streamed answer was cut off: the stream was closed and the hold settled at the tokens
 * read. */
export class StreamCappedError extends HoldCappedError {
  constructor(reservationId: string, outputTokens: number) {
    super(reservationId, `the stream was closed after about ${outputTokens} output tokens`);
  }
}

export interface MeterOptions {
  /** The provider the price book knows the models under; "openai" by default. */
  provider?: string;
  /** The kind of job, whose estimates learn. */
  job?: string;
  alsoBudgetIds?: string[];
  /** With budgetId "": the calls hold on the account's current billing cycle. */
  account?: string;
  labels?: Record<string, string>;
  leaseSeconds?: number;
  /** Attempts in all (each on a hold of its own) for a 429, and the backoff between them. */
  retry?: Partial<RetryPolicy>;
  /** A stream's hold is charged every this many output tokens (32). */
  streamChargeTokens?: number;
}

function textChars(content: unknown): number {
  if (typeof content === 'string') return content.length;
  if (Array.isArray(content)) {
    return content.reduce(
      (sum: number, part) => sum + (part && typeof part === 'object' ? textChars((part as { text?: unknown }).text ?? '') : 0),
      0,
    );
  }
  return 0;
}

/** A conservative count of the request's input tokens, from its messages and tools. */
export function promptTokens(request: { messages?: unknown; tools?: unknown }): number {
  const messages = Array.isArray(request.messages) ? request.messages : [];
  let chars = 0;
  for (const message of messages) {
    if (message && typeof message === 'object') {
      const m = message as { content?: unknown; name?: unknown; tool_calls?: unknown };
      chars += textChars(m.content) + String(m.name ?? '').length;
      if (m.tool_calls) chars += JSON.stringify(m.tool_calls).length;
    }
  }
  if (request.tools) chars += JSON.stringify(request.tools).length;
  return Math.ceil(chars / PROMPT_CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS * messages.length + REPLY_OVERHEAD_TOKENS;
}

/**
 * The output tokens what is left of the hold after the prompt's Charge buys: as many tokens
 * on a tokens budget (no price version), else at the output rate the Charge was priced at;
 * null when output is free (no maximum is set then).
 */
export function coveredTokens(charged: Charged): number | null {
  if (charged.priceVersion === 0) return charged.holdRemaining;
  if (charged.outputUsdMicrosPerMtok <= 0) return null;
  return Number((BigInt(charged.holdRemaining) * 1_000_000n) / BigInt(charged.outputUsdMicrosPerMtok));
}

function outputLimit(request: ChatCompletionCreateParams): number | null {
  const most = request.max_completion_tokens ?? request.max_tokens;
  return most ? Number(most) : null;
}

/** What the call may cost: its prompt and its maximum answer (times n), or, without a
 * maximum, the model alone so that the sidecar holds its estimate. */
export function shapeOf(provider: string, request: ChatCompletionCreateParams): Shape {
  const most = outputLimit(request);
  if (most === null) return { provider, model: String(request.model), inputTokens: 0, maxOutputTokens: 0 };
  const choices = Math.max(1, Number(request.n ?? 1));
  return { provider, model: String(request.model), inputTokens: promptTokens(request), maxOutputTokens: most * choices };
}

type CompletionUsage = NonNullable<ChatCompletion['usage']>;

/** The provider's usage (cached input tokens included), or fallback when it sent none. */
export function usageOf(usage: CompletionUsage | null | undefined, fallback: Usage): Usage {
  if (!usage) return fallback;
  const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
  return {
    inputTokens: usage.prompt_tokens,
    outputTokens: usage.completion_tokens,
    cachedInputTokens: Math.min(cached, usage.prompt_tokens),
  };
}

type Ending = { outcome: 'FAILED' | 'CANCELLED' | 'UNKNOWN'; atNothing: boolean };

/** How a call that threw settles. The provider answered no (a 4xx) or nothing was sent: at
 * nothing. The caller aborted: CANCELLED at what was charged. Anything else after sending
 * (a timeout, a lost connection, a 5xx) may have been billed: UNKNOWN. */
function endingOf(error: unknown, sent: boolean): Ending {
  if (!sent || (error instanceof HoldCappedError && !(error instanceof StreamCappedError))) {
    return { outcome: 'CANCELLED', atNothing: true };
  }
  if (error instanceof StreamCappedError) return { outcome: 'CANCELLED', atNothing: false };
  const e = error as { status?: unknown; name?: unknown; constructor?: { name?: string }; cause?: unknown } | null;
  const name = String(e?.constructor?.name ?? e?.name ?? '');
  // A connection that was never made carried nothing to the provider.
  if (refused(e?.cause)) return { outcome: 'FAILED', atNothing: true };
  if (name === 'APIUserAbortError' || name === 'AbortError') return { outcome: 'CANCELLED', atNothing: false };
  if (typeof e?.status === 'number' && e.status >= 400 && e.status < 500) {
    return { outcome: 'FAILED', atNothing: true };
  }
  return { outcome: 'UNKNOWN', atNothing: false };
}

function refused(cause: unknown): boolean {
  for (let at = cause, depth = 0; at && typeof at === 'object' && depth < 4; depth += 1) {
    if ((at as { code?: unknown }).code === 'ECONNREFUSED') return true;
    at = (at as { cause?: unknown }).cause;
  }
  return false;
}

function rateLimited(error: unknown): boolean {
  return (error as { status?: unknown } | null)?.status === 429;
}

/** A stream of chunks whose hold is charged as they come and settled at its end (or when it
 * is closed early). */
export class MeteredStream implements AsyncIterable<ChatCompletionChunk> {
  private open = true;
  private outputTokens = 0;
  private uncharged = 0;
  private usage: CompletionUsage | null = null;
  private readonly iterator: AsyncIterator<ChatCompletionChunk>;

  constructor(
    private readonly raw: AsyncIterable<ChatCompletionChunk> & { controller?: AbortController },
    private readonly hold: Hold,
    private readonly prompt: number,
    private readonly wanted: boolean,
    private readonly chargeEvery: number,
  ) {
    this.iterator = raw[Symbol.asyncIterator]();
  }

  get reservationId(): string {
    return this.hold.reservationId;
  }

  [Symbol.asyncIterator](): AsyncIterator<ChatCompletionChunk> {
    return { next: () => this.next(), return: async () => (await this.close(), { done: true, value: undefined }) };
  }

  private read(chunk: ChatCompletionChunk): void {
    for (const choice of chunk.choices ?? []) {
      const text = choice.delta?.content;
      if (text) {
        const tokens = Math.max(1, Math.ceil(text.length / STREAM_CHARS_PER_TOKEN));
        this.outputTokens += tokens;
        this.uncharged += tokens;
      }
    }
    if (chunk.usage) this.usage = chunk.usage;
  }

  async next(): Promise<IteratorResult<ChatCompletionChunk>> {
    while (this.open) {
      let chunk: ChatCompletionChunk;
      try {
        const item = await this.iterator.next();
        if (item.done) {
          await this.end(null);
          return { done: true, value: undefined };
        }
        chunk = item.value;
        this.read(chunk);
        if (this.uncharged >= this.chargeEvery) {
          const step = this.uncharged;
          this.uncharged = 0;
          if ((await this.hold.charge({ usage: { inputTokens: 0, outputTokens: step } })).capped) {
            throw new StreamCappedError(this.hold.reservationId, this.outputTokens);
          }
        }
      } catch (error) {
        await this.end(error);
        throw error;
      }
      const hidden = !this.wanted && (chunk.choices ?? []).length === 0 && chunk.usage;
      if (!hidden) return { done: false, value: chunk };
    }
    return { done: true, value: undefined };
  }

  private async end(error: unknown): Promise<void> {
    if (!this.open) return;
    this.open = false;
    this.raw.controller?.abort();
    this.hold.usage = usageOf(this.usage, { inputTokens: this.prompt, outputTokens: this.outputTokens });
    if (error === null) {
      await this.hold.finish();
      return;
    }
    const ending = endingOf(error, true);
    this.hold.outcome = ending.outcome;
    if (ending.atNothing) {
      this.hold.usage = null;
      this.hold.used = 0;
    }
    await this.hold.finish(error, true);
  }

  /** Stops reading: the hold settles CANCELLED at the tokens read so far. */
  async close(): Promise<void> {
    if (!this.open) return;
    this.hold.outcome = 'CANCELLED';
    await this.end(null);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

type RequestOptions = Parameters<OpenAI['chat']['completions']['create']>[1];

class Completions {
  private readonly retry: RetryPolicy;

  constructor(
    private readonly openai: OpenAI,
    private readonly earmark: EarmarkClient,
    private readonly budgetId: string,
    private readonly meter: MeterOptions,
  ) {
    this.retry = { attemptsMax: 3, backoffBaseMs: 500, backoffMaxMs: 8000, ...meter.retry };
    if (!(this.retry.attemptsMax >= 1 && this.retry.attemptsMax <= 10)) {
      throw new RangeError(`retry.attemptsMax must be from 1 to 10 for model calls, not ${this.retry.attemptsMax}`);
    }
  }

  create(body: ChatCompletionCreateParamsNonStreaming, options?: RequestOptions): Promise<ChatCompletion>;
  create(body: ChatCompletionCreateParamsStreaming, options?: RequestOptions): Promise<MeteredStream>;
  create(body: ChatCompletionCreateParams, options?: RequestOptions): Promise<ChatCompletion | MeteredStream>;
  async create(body: ChatCompletionCreateParams, options?: RequestOptions): Promise<ChatCompletion | MeteredStream> {
    const m = this.meter;
    const request = { ...body, messages: [...body.messages] } as ChatCompletionCreateParams;
    const shape = shapeOf(m.provider ?? 'openai', request);
    const prompt = promptTokens(request);
    for (let attempt = 0; ; attempt += 1) {
      // Starting reserves; a refusal throws RefusedError before anything is sent.
      const hold = await new Hold(this.earmark, this.budgetId, 0, {
        shape,
        job: m.job,
        alsoBudgetIds: m.alsoBudgetIds,
        account: m.account,
        labels: m.labels,
        leaseSeconds: m.leaseSeconds,
      }).start();
      let sent = false;
      try {
        // Charged before it is sent: a worker that dies now leaves the hold in doubt, not
        // returned, since the provider may bill the call.
        const first = await hold.charge({ usage: { inputTokens: prompt, outputTokens: 0 } });
        if (first.capped) throw new HoldCappedError(hold.reservationId, 'the prompt is more than the hold covers; the call was not sent');
        const outgoing: ChatCompletionCreateParams = { ...request };
        const all = coveredTokens(first);
        if (outputLimit(request) === null && all !== null) {
          // No output limit from the caller: ask for no more than the hold covers.
          const choices = Math.max(1, Number(request.n ?? 1));
          const each = Math.floor(all / choices);
          if (each < 1) throw new HoldCappedError(hold.reservationId, 'nothing is left for the answer; the call was not sent');
          outgoing.max_completion_tokens = each;
          delete outgoing.max_tokens;
        }
        const noRetries = { ...options, maxRetries: 0 };
        if (request.stream) {
          const wanted = Boolean(request.stream_options?.include_usage);
          const streamed = { ...outgoing, stream: true, stream_options: { ...request.stream_options, include_usage: true } } as ChatCompletionCreateParamsStreaming;
          sent = true;
          const raw = await this.openai.chat.completions.create(streamed, noRetries);
          return new MeteredStream(raw, hold, prompt, wanted, m.streamChargeTokens ?? STREAM_CHARGE_TOKENS);
        }
        sent = true;
        const reply = await this.openai.chat.completions.create(outgoing as ChatCompletionCreateParamsNonStreaming, noRetries);
        hold.usage = usageOf(reply.usage, { inputTokens: prompt, outputTokens: 0 });
        await hold.finish();
        return reply;
      } catch (error) {
        if (hold.settled === null) {
          const ending = endingOf(error, sent);
          hold.outcome = ending.outcome;
          hold.used = ending.atNothing ? 0 : null;
          try {
            await hold.finish(error, true);
          } catch (settleError) {
            process.emitWarning(`earmark settle failed after ${String(error)}: ${(settleError as Error).message}`);
          }
        }
        if (!rateLimited(error) || attempt + 1 >= this.retry.attemptsMax) throw error;
      }
      await new Promise((resolve) => setTimeout(resolve, backoffMs(this.retry, attempt)));
    }
  }
}

/** An OpenAI client whose chat completions go through Earmark; `.openai` is the client
 * itself, for everything else. */
export interface MeteredOpenAI {
  readonly openai: OpenAI;
  readonly chat: { readonly completions: Completions };
}

/** The client, metered on budgetId (see the module's text). */
export function metered(openai: OpenAI, earmark: EarmarkClient, budgetId: string, options: MeterOptions = {}): MeteredOpenAI {
  return { openai, chat: { completions: new Completions(openai, earmark, budgetId, options) } };
}
