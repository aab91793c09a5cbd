// What metering at the wire reads from a provider's requests and answers, whichever the
// provider: the JSON values, a billable call as read from its body, the fees of the built-in
// tools it gives the model (heldTools: each tool type held, passed or refused by its
// provider's table), the shape and prompt charge it is reserved with, the cap it is sent
// with, and the table a provider's POSTs are routed by (Routes: each whole path metered, free
// or refused, any other refused).
// routes-openai.ts and routes-anthropic.ts hold each provider's routes, as the Python SDK's
// wire_openai.py and wire_anthropic.py do, rule for rule.
import { ToolNotMeteredError } from './errors.js';
import { MESSAGE_OVERHEAD_TOKENS, PROMPT_CHARS_PER_TOKEN, REPLY_OVERHEAD_TOKENS, TOKENS_PER_REQUEST_MAX } from './limits.js';
import type { Shape, Usage } from './types.js';

/** A JSON value as JSON.parse answers it. */
export type Json = null | boolean | number | string | Json[] | JsonObject;
export interface JsonObject {
  [key: string]: Json | undefined;
}

/** The meter's settings a route reads when it reads a call. */
export interface CallSettings {
  /** Server tool calls of each kind a request that names no maximum is held for. */
  toolCallsMax: number;
}

/** A billable request as read from its body: what to hold, and how to send it. */
export interface Call {
  model: string;
  /** A conservative count of the prompt's tokens, charged when the hold is made. */
  promptTokens: number;
  /** The caller's own maximum output per choice; null when it set none. */
  asked: number | null;
  choices: number;
  stream: boolean;
  /** The service tier the request asks for; '' for the default. */
  serviceTier: string;
  /** The most server tool calls of each kind the request may make. */
  toolCallsMax: Record<string, number>;
  /** Embeddings produce no output: their hold is the prompt alone. */
  hasOutput: boolean;
}

/** Reads a stream's events as they pass to the caller, for the provider's own usage. */
export interface Tally {
  /** Notes one event (its SSE name, '' without one, and its JSON data); false drops it
   * from what the caller sees. */
  keep(event: string, data: Json): boolean;
  /** The provider's final usage, once the stream has carried it. */
  usage(): Usage | null;
}

/** One billable endpoint of a provider. */
export interface Route {
  call(body: JsonObject, settings: CallSettings): Call;
  /** The body to send with the output cap set (null: as the caller asked), and whether
   * the stream's usage event is Earmark's alone (to be dropped from what the caller sees). */
  sent(body: JsonObject, call: Call, cap: number | null): { body: JsonObject; hiddenUsage: boolean };
  /** The usage of a JSON answer; null when it carries none. */
  usage(answer: Json, call: Call): Usage | null;
  tally(call: Call, hiddenUsage: boolean): Tally;
  /** What becomes of the route's calls that run on after their answer; absent when none do. */
  readonly later?: Later;
}

/** How a call that ran on after its answer ended: its final status, and the usage the
 * provider reports (null: it reports none). */
export interface Ended {
  status: string;
  usage: Usage | null;
}

/** The tally of a stream that reads a running call again: how the call ended, once an
 * event said so. */
export interface Ends extends Tally {
  ended(): Ended | null;
}

/**
 * A route's calls that run on after their answer (OpenAI's background responses,
 * routes-openai.ts): which answer leaves one running, which request reads one again, and
 * how one ended. The metered client keeps such a call's hold open, renewing, its id
 * recorded on it under label, until a request through it reads the call again ended.
 */
export interface Later {
  /** The hold label the call's id is recorded under. */
  readonly label: string;
  /** The id of the call a billable request's JSON answer left running; null when the
   * answer ends it. */
  running(body: JsonObject, answer: Json): string | null;
  /** The id of the call a billable stream that stopped before its end left running. */
  leftRunning(tally: Tally): string | null;
  /** The id of the call a request (its method and whole path, under a base URL whose own
   * path is prefix) reads again; null for any other request. */
  reads(method: string, path: string, prefix: string): string | null;
  /** How callId ended, from a JSON answer that read it again; null while it runs. Throws
   * for an answer that is not the call's, or not in its shape. */
  ended(answer: Json, callId: string): Ended | null;
  /** The tally of a stream that reads callId again. */
  resumed(callId: string): Ends;
}

/** A POST that bills nothing: sent as it is, with no hold. */
export const FREE = 'free';
/** What a route table says of a POST it lists that bills, or may, and that Earmark cannot
 * price: refused before it is sent, as a POST the table does not list is. */
export const REFUSED = 'refused';
/** Where a POST to path goes, under a base URL whose own path is prefix ('/v1'; '' for
 * none): a billable route, FREE, or null (refused unsent: it bills and Earmark cannot price
 * it, the table does not list it, or it is outside prefix). */
export type Routing = (path: string, prefix: string) => Route | typeof FREE | null;

// One id in a path: any segment but an empty one or a dot segment, which a server may
// resolve into another path.
const ID = '(?!\\.\\.?(?:/|$))[^/]+';

function isTemplate(template: string): boolean {
  return template.includes('{') || template.endsWith('/**');
}

function pattern(template: string): RegExp {
  const area = template.endsWith('/**');
  const segments = (area ? template.slice(0, -3) : template).split('/');
  const parts = segments.map((s) => (s.startsWith('{') && s.endsWith('}') ? ID : s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
  return new RegExp(`^${parts.join('/')}${area ? '(?:/.*)?' : ''}$`, 's');
}

/** Literal segments sort before ids, ids before an area's rest. */
function specificity(template: string): number[] {
  return template.split('/').map((s) => (s === '**' ? 2 : s.startsWith('{') ? 1 : 0));
}

function bySpecificity(a: string, b: string): number {
  const [x, y] = [specificity(a), specificity(b)];
  for (let i = 0; i < Math.min(x.length, y.length); i += 1) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

/** Whether path is under prefix (a base URL's own path, '' or '/v1'), segment-wise. */
export function within(path: string, prefix: string): boolean {
  return path.startsWith(`${prefix}/`);
}

/**
 * A provider's POST paths, each with what Earmark does with it: a metered Route, FREE or
 * REFUSED. A path is a template of the whole path after the base URL's own path ('/v1'):
 * '{name}' stands for one segment (an id: not empty, not '.' nor '..'), and a last '/**'
 * for the rest of the path, which only REFUSED may take (an area refused whole, with the
 * paths an SDK upgrade adds to it). A literal segment is preferred to an id, so
 * /threads/runs is not /threads/{thread_id}. Whole paths, not suffixes: /containers/c/files
 * is not /files. The Python SDK's wire.Routes, rule for rule.
 */
export class Routes {
  readonly table: ReadonlyMap<string, Route | typeof FREE | typeof REFUSED>;
  private readonly literal = new Map<string, Route | typeof FREE | typeof REFUSED>();
  private readonly templates: [RegExp, Route | typeof FREE | typeof REFUSED][] = [];

  constructor(table: Record<string, Route | typeof FREE | typeof REFUSED>) {
    this.table = new Map(Object.entries(table));
    for (const [template, what] of this.table) {
      if (template.endsWith('/**') && what !== REFUSED) throw new RangeError(`${template}: only REFUSED takes a whole area`);
      if (!template.startsWith('/')) throw new RangeError(`${template}: a path starts with /`);
      if (!isTemplate(template)) this.literal.set(template, what);
    }
    const templates = [...this.table.keys()].filter(isTemplate).sort(bySpecificity);
    for (const template of templates) this.templates.push([pattern(template), this.table.get(template)!]);
  }

  /** What the table says of a POST to path (after the base URL's own path); null when it
   * does not list it. */
  find(path: string): Route | typeof FREE | typeof REFUSED | null {
    const found = this.literal.get(path);
    if (found !== undefined) return found;
    for (const [template, what] of this.templates) if (template.test(path)) return what;
    return null;
  }

  /** The route of a POST to path, under a base URL whose own path is prefix: FREE for one
   * that bills nothing; null for one refused, one the table does not list, and one outside
   * prefix. */
  routing(path: string, prefix: string): Route | typeof FREE | null {
    const found = within(path, prefix) ? this.find(path.slice(prefix.length)) : null;
    return found === null || found === REFUSED ? null : found;
  }
}

/**
 * What a tool type bills beyond the tokens it adds, and so what a request that gives the
 * model one gets: fee, a kind of fee per call the price book prices (held for the calls the
 * request allows, settled at the calls the answer reports); refused, why its fee cannot be
 * held (the request is refused, unsent); neither, tokens only (the tool runs at the
 * caller's, or at the provider's for no fee). The Python SDK's wire.Tool.
 */
export interface ToolBill {
  readonly fee: string;
  readonly refused: string;
}

/** A tool that bills its tokens alone. */
export const TOKENS_ONLY: ToolBill = Object.freeze({ fee: '', refused: '' });

export function feeTool(fee: string): ToolBill {
  return Object.freeze({ fee, refused: '' });
}

export function refusedTool(why: string): ToolBill {
  return Object.freeze({ fee: '', refused: why });
}

/** What a provider's tool types bill, by type: a ToolBill, or for a type whose bill depends
 * on how the tool is set up (where a shell runs), what reads the tool and says. */
export type Tools = Readonly<Record<string, ToolBill | ((tool: JsonObject) => ToolBill)>>;

/** Why a tool of a type no table lists is refused. */
export const UNCLASSIFIED_TOOL = 'is of a type Earmark has not classified, and may bill a fee it cannot hold';

/** What table says of a tool type, or null when it does not list it (own keys only: a type
 * named "constructor" is no classified one). */
export function classified(table: Tools, tool: JsonObject, kind: string): ToolBill | null {
  if (!Object.hasOwn(table, kind)) return null;
  const what = table[kind];
  return typeof what === 'function' ? what(tool) : what;
}

/**
 * The tools of a request's `tools` that bill a fee per call, each with its fee kind. Throws
 * ToolNotMeteredError for a tool table refuses, and for one it does not list: a tool type
 * Earmark has not classified may bill anything. untyped is the type of a tool that names
 * none or null (Anthropic's custom tools); null refuses such a tool, named "untyped". An
 * entry that is not an object is no tool the provider runs (it answers 400): passed over.
 * The Python SDK's wire.held_tools, rule for rule.
 */
export function heldTools(given: Json | undefined, table: Tools, untyped: string | null = null): [string, JsonObject][] {
  const found: [string, JsonObject][] = [];
  for (const tool of Array.isArray(given) ? given : []) {
    if (!isObject(tool)) continue;
    const kind = tool.type === undefined || tool.type === null ? untyped : tool.type;
    const name = typeof kind === 'string' ? kind : 'untyped';
    const what = typeof kind === 'string' ? classified(table, tool, kind) : null;
    if (what === null) throw new ToolNotMeteredError(name, UNCLASSIFIED_TOOL);
    if (what.refused) throw new ToolNotMeteredError(name, what.refused);
    if (what.fee) found.push([what.fee, tool]);
  }
  return found;
}

export function isObject(value: Json | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A count from a provider's JSON: a whole number of at least 0 (absent, null or anything
 * else: 0). */
export function count(value: Json | undefined): number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : 0;
}

/** A token count from a provider's usage report: absent or null, 0; a whole number from 0
 * to TOKENS_PER_REQUEST_MAX, itself; anything else (a string, a fraction, a boolean, a count
 * below 0 or past the bound) null: not believed, so that the call is left in doubt rather
 * than settled at a count read as 0. The Python SDK's wire_usage.reported_count. */
export function reportedCount(value: Json | undefined): number | null {
  if (value === undefined || value === null) return 0;
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 && value <= TOKENS_PER_REQUEST_MAX ? value : null;
}

/** The counts of names in usage (reportedCount), or null when one is not believed. */
export function reportedCounts(usage: JsonObject, ...names: string[]): number[] | null {
  const found: number[] = [];
  for (const name of names) {
    const n = reportedCount(usage[name]);
    if (n === null) return null;
    found.push(n);
  }
  return found;
}

/** The first of names the body sets to a positive whole number, else null. */
export function positive(body: JsonObject, ...names: string[]): number | null {
  for (const name of names) {
    const value = body[name];
    if (typeof value === 'number' && Number.isSafeInteger(value) && value > 0) return value;
  }
  return null;
}

export function text(value: Json | undefined): string {
  return typeof value === 'string' ? value : '';
}

/** The length of value as JSON, as the prompt counts a tool definition or a call. */
export function jsonChars(value: Json | undefined): number {
  return value === undefined || value === null ? 0 : JSON.stringify(value).length;
}

/** A conservative count of a prompt's tokens from its characters: one token per
 * PROMPT_CHARS_PER_TOKEN characters, plus each message's framing and the reply's. */
export function promptEstimate(chars: number, messages: number): number {
  return Math.ceil(chars / PROMPT_CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS * messages + REPLY_OVERHEAD_TOKENS;
}

/** Kinds and counts, without the kinds counted 0. */
export function counts(entries: Iterable<[string, number]>): Record<string, number> {
  const found: Record<string, number> = {};
  for (const [kind, n] of entries) if (n > 0) found[kind] = (found[kind] ?? 0) + n;
  return found;
}

/** The Reserve's shape and its prompt charge: the caller's maximum (each choice's, times
 * the choices), lowered to outputTokensMax when that is set; with neither, the model's
 * ceiling (outputCeiling), which the sidecar reads from the price. */
export function shapeOf(provider: string, call: Call, outputTokensMax: number | null): { shape: Shape; charge: Usage } {
  let most = call.asked;
  if (outputTokensMax !== null) most = most === null ? outputTokensMax : Math.min(most, outputTokensMax);
  const shape: Shape = {
    provider,
    model: call.model,
    inputTokens: call.promptTokens,
    maxOutputTokens: call.hasOutput && most !== null ? most * call.choices : 0,
    serviceTier: call.serviceTier,
    maxToolCalls: call.toolCallsMax,
    outputCeiling: call.hasOutput && most === null,
  };
  const charge: Usage = { inputTokens: call.promptTokens, outputTokens: 0, provider, model: call.model };
  return { shape, charge };
}

/**
 * The per-choice output cap to put in the body (null: send the caller's own), from told,
 * the most output tokens the Reserve answered for all choices together: what the hold
 * covers when the caller set none, when the meter lowered the caller's, or when degrade
 * did. The cap a provider is told is what the budget pays, never an estimate. 0 means the
 * hold covers not one token a choice: the call must not be sent.
 */
export function capToSend(call: Call, told: number, degraded: boolean): number | null {
  if (!call.hasOutput) return null;
  const each = Math.floor(told / Math.max(1, call.choices));
  if (each <= 0) return 0;
  if (call.asked === null || degraded || each < call.asked) return each;
  return null;
}
