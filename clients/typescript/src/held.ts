// The held-call sequence every metered surface drives, whichever the provider and however
// its SDK is reached (a fetch, a middleware stack, an AI SDK middleware):
//
//   const held = await HeldCall.open(earmark, budgetId, options, settings, call);
//   //  reserved by shape, the prompt charged in the same Reserve; RefusedError (the budget
//   //  cannot pay) or HoldCappedError (it covers no output token) thrown before sending
//   send(held.cap ?? call.asked);           // the cap the budget pays, never an estimate
//   await held.end({ usage });              // the provider's own count of what it billed
//   await held.end('nothing');              // a 4xx, or nothing was sent
//   await held.end('doubt');                // a 5xx, a timeout, a stream cut before its usage
//
// A provider is then a small module that reads a Call (model, prompt, the caller's cap) from
// its request, tells the request the cap, and reads a Usage from its answer: routes-*.ts for
// the SDKs that take a fetch (metered.ts), bedrock.ts and ai-sdk.ts for the others.
import type { EarmarkClient } from './client.js';
import { HoldCappedError } from './errors.js';
import { Hold } from './hold.js';
import { OUTPUT_TOKENS_MAX, TOOL_CALLS_DEFAULT, TOOL_CALLS_PER_REQUEST_MAX } from './limits.js';
import { settledAt } from './reported.js';
import { capToSend, shapeOf, type Call } from './routes.js';
import { RefusedError, type Reservation, type Usage } from './types.js';

export interface MeterOptions {
  /** The provider the price book knows the models under: "openai" for an OpenAI client,
   * "anthropic" for an Anthropic one, "azure" for an AzureOpenAI one, "google" for a
   * GoogleGenAI one, "aws" for a BedrockRuntimeClient, by default (another name for an
   * OpenAI-compatible API priced apart: deepseek, groq, mistral, openrouter, together, x-ai).
   * An OpenAI client given none is priced under the provider its base URL's host names
   * (hosts.ts: api.deepseek.com is deepseek...; OpenAI's own, none or a loopback host
   * openai); a host Earmark does not know throws ProviderNotNamedError from metered(). */
  provider?: string;
  /** The kind of job, whose estimates learn (a SOFT budget holds them). */
  job?: string;
  /** Hold each call on these budgets too, all or nothing. */
  alsoBudgetIds?: string[];
  /** With budgetId "": the calls hold on the account's current billing cycle. */
  account?: string;
  labels?: Record<string, string>;
  /** Each hold's lease; the sidecar's default when absent. The hold renews while its call
   * runs. */
  leaseSeconds?: number;
  /** When the budget cannot cover a call's maximum, send it with the largest maximum the
   * budget covers instead of refusing it (the answer's x-earmark-degraded header says so). */
  degrade?: boolean;
  /** The most output tokens one call is held for and sent with: a request asking for more
   * (Anthropic's required max_tokens is often far above what a call needs), or for none,
   * is sent with this maximum. Absent: the request's own, else the model's ceiling. */
  outputTokensMax?: number;
  /** Server tool calls of each kind (web_search...) a request that names no maximum of its
   * own is held for; 10 by default. */
  toolCallsMax?: number;
  /** The id of the provider key (OpenAI's "key_...", Anthropic's "apikey_...") or project
   * the calls are sent with, never the key itself: recorded with each call (the label
   * "earmark.key") so that `earmark reconcile` compares that key's usage report with these
   * calls. */
  keyLabel?: string;
  /** Azure OpenAI: each deployment's base model, { deployment: baseModel }, which the call
   * is priced as (under provider "azure"). A call to a deployment not named here is refused
   * before it is sent (DeploymentNotMappedError). */
  deployments?: Record<string, string>;
}

/** How a hold ends: at the provider's usage, at nothing (nothing was billed), or in doubt
 * (the provider may have billed the call). */
export type Ending = { usage: Usage } | 'nothing' | 'doubt';

/** What a call is held under, read once from the options. */
export interface Settings {
  readonly provider: string;
  readonly outputTokensMax: number | null;
  readonly toolCallsMax: number;
}

/** The settings of options, whose provider is provider unless they name one. */
export function settingsOf(provider: string, options: MeterOptions): Settings {
  const { outputTokensMax, toolCallsMax = TOOL_CALLS_DEFAULT } = options;
  if (outputTokensMax !== undefined && !(Number.isSafeInteger(outputTokensMax) && outputTokensMax >= 1 && outputTokensMax <= OUTPUT_TOKENS_MAX)) {
    throw new RangeError(`outputTokensMax must be a whole number from 1 to ${OUTPUT_TOKENS_MAX}, not ${outputTokensMax}`);
  }
  if (!(Number.isSafeInteger(toolCallsMax) && toolCallsMax >= 1 && toolCallsMax <= TOOL_CALLS_PER_REQUEST_MAX)) {
    throw new RangeError(`toolCallsMax must be a whole number from 1 to ${TOOL_CALLS_PER_REQUEST_MAX}, not ${toolCallsMax}`);
  }
  return { provider: options.provider ?? provider, outputTokensMax: outputTokensMax ?? null, toolCallsMax };
}

/** Reserves call's hold by shape, with its prompt charged at once; a refusal is kept on the
 * hold (hold.refusal), not thrown. */
export function reserveCall(earmark: EarmarkClient, budgetId: string, options: MeterOptions, settings: Settings, call: Call): Promise<Hold> {
  const { shape, charge } = shapeOf(settings.provider, call, settings.outputTokensMax);
  const o = options;
  return new Hold(earmark, budgetId, 0, {
    shape,
    charge,
    degrade: o.degrade ?? false,
    job: o.job,
    alsoBudgetIds: o.alsoBudgetIds,
    account: o.account,
    labels: o.keyLabel ? { ...o.labels, 'earmark.key': o.keyLabel } : o.labels,
    leaseSeconds: o.leaseSeconds,
    returnRefusal: true,
  }).start();
}

/** Settles hold as ending says; a settle that fails is a warning, not the call's error:
 * the provider's answer stands, and the hold ends in doubt when its lease passes. */
export async function endCall(hold: Hold, provider: string, call: Call, ending: Ending): Promise<void> {
  if (ending === 'nothing') {
    hold.used = 0;
    hold.outcome = 'FAILED';
  } else if (ending === 'doubt') {
    hold.outcome = 'UNKNOWN';
  } else {
    // A provider that reports what the call cost (OpenRouter) is settled at it where the
    // budget counts money (reported.ts).
    const at = settledAt(ending.usage, hold.reservation);
    if ('used' in at) hold.used = at.used;
    else hold.usage = { ...at.usage, provider, model: call.model };
    hold.outcome = 'SUCCEEDED';
  }
  try {
    await hold.finish();
  } catch (error) {
    process.emitWarning(`earmark settle of reservation ${hold.reservationId} failed: ${(error as Error).message}`);
  }
}

// Codes of errors raised before a request's bytes left: the connection was never made, so
// the provider saw nothing and billed nothing.
const NOT_SENT = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EAI_NONAME',
  'ENETUNREACH',
  'EHOSTUNREACH',
  'EADDRNOTAVAIL',
  'UND_ERR_CONNECT_TIMEOUT',
]);
// How deep an error's causes are searched for a code: SDKs and fetch wrap it twice.
const CAUSE_DEPTH_MAX = 8;

/** Whether error (or what caused it) is one raised before the request left. */
export function neverSent(error: unknown): boolean {
  let at = error;
  for (let depth = 0; at !== null && typeof at === 'object' && depth < CAUSE_DEPTH_MAX; depth += 1) {
    const code = (at as { code?: unknown }).code;
    if (typeof code === 'string' && NOT_SENT.has(code)) return true;
    at = (at as { cause?: unknown }).cause;
  }
  return false;
}

/** How a call that failed with error ends, given the HTTP status its answer had (null: no
 * answer came): a 4xx, or an error raised before anything was sent, bills nothing; a 5xx,
 * a timeout or a dropped connection may have been billed. */
export function failedEnding(error: unknown, status: number | null): Ending {
  if (status !== null && status >= 400 && status < 500) return 'nothing';
  if (status === null && neverSent(error)) return 'nothing';
  return 'doubt';
}

/** One held call: reserved before it is sent, told the cap the budget pays, ended once. */
export class HeldCall {
  private ending: Promise<void> | null = null;

  private constructor(
    readonly hold: Hold,
    readonly call: Call,
    /** The per-choice output cap to send; null: send the caller's own (call.asked). */
    readonly cap: number | null,
    private readonly provider: string,
  ) {}

  /** Holds call: throws RefusedError when the budget cannot pay for it, HoldCappedError
   * when the hold covers not one output token, and the Earmark client's own error when the
   * sidecar cannot be reached; in each case nothing may be sent. */
  static async open(earmark: EarmarkClient, budgetId: string, options: MeterOptions, settings: Settings, call: Call): Promise<HeldCall> {
    const hold = await reserveCall(earmark, budgetId, options, settings, call);
    if (hold.refusal !== null) throw new RefusedError(hold.refusal);
    const reservation = hold.reservation!;
    const cap = capToSend(call, reservation.maxOutputTokens, reservation.degraded);
    if (cap === 0) {
      await endCall(hold, settings.provider, call, 'nothing');
      throw new HoldCappedError(reservation.reservationId, 'it covers no output token a choice; the call was not sent');
    }
    return new HeldCall(hold, call, cap, settings.provider);
  }

  get reservation(): Reservation {
    return this.hold.reservation!;
  }

  /** The output maximum to send: the cap, else the caller's own. */
  get maxOutputTokens(): number | null {
    return this.cap ?? this.call.asked;
  }

  get ended(): boolean {
    return this.ending !== null;
  }

  /** Settles the hold as ending says, once: a second end is the first's. */
  end(ending: Ending): Promise<void> {
    this.ending ??= endCall(this.hold, this.provider, this.call, ending);
    return this.ending;
  }
}
