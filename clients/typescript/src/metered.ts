// Metered provider clients: metered(new OpenAI(), earmark, budgetId),
// metered(new AzureOpenAI(), earmark, budgetId, { deployments }) and
// metered(new Anthropic(), earmark, budgetId) answer a client of the provider SDK's own
// class (instanceof OpenAI, instanceof Anthropic) whose every HTTP request passes one
// interception point, a fetch around the one the client had. metered(new GoogleGenAI(...))
// meters that client in place, at the fetch its ApiClient reads at each request (it has no
// copies of its own), and metered(new BedrockRuntimeClient(...)) meters that client in place
// with a middleware in its stack (bedrock.ts). Each drives held.ts's one held-call sequence.
//
// Why the HTTP boundary: both SDKs take a `fetch`, and everything they call goes through it:
// every method of every resource, withResponse() and asResponse(), the parse and stream
// helpers, and the frameworks that are handed the client. Metering there, from each
// provider's published wire format (paths, JSON bodies, server-sent events, usage fields),
// covers all of them with one mechanism and survives SDK upgrades that add methods; a
// wrapper around methods covered only the methods it named and was not the SDK's type.
// The Python SDK meters the same way, at its HTTP transport (src/earmark/client/wire*.py).
//
// Each POST is routed by its provider's table (routes-openai.ts, routes-anthropic.ts,
// routes-google.ts; routes-azure.ts prices OpenAI's routes by deployment), its
// whole path after the base URL's own path: one that does not bill passes through untouched;
// one that bills and that Earmark cannot price, or that the table does not list, is refused
// before it is sent (EndpointNotMeteredError). A read or a delete (GET, HEAD, OPTIONS,
// DELETE) passes; any other write (PATCH, PUT) is routed as a POST to its path is, and
// refused unless the table says its path is free. A POST that bills and can be priced is:
// - reserved by shape with its prompt charged in the same Reserve (a worker that dies
//   during the call leaves its hold in doubt, not returned), and refused before it is sent
//   when the budget cannot pay for it (RefusedError: the provider sees nothing);
// - sent with the cap the budget can pay: the caller's own maximum, or without one the
//   model's ceiling (the Reserve's answer names it), never an estimate;
// - renewed while it runs, and settled from the provider's own count of what it billed:
//   the JSON answer's usage, or the stream's final usage event. A stream that ends without
//   its usage, a timeout, a dropped connection or a 5xx leave the hold in doubt (the
//   provider may bill the call); a 4xx, or a connection refused before anything was sent,
//   settles at nothing.
// The SDK's own retries go through the fetch too, each attempt on a hold of its own.
//
// A call that runs on after its answer (OpenAI's background responses: its route's
// `later`) keeps its hold open and renewing, the call's id recorded on the hold as soon as
// the answer gives it (Hold.label, a Renew's labels). A request through the same metered
// client (or a copy of it) that reads the call again (a retrieve, a resumed stream, a
// cancel) settles the hold once its answer says the call ended, at the usage it reports;
// the Earmark client's close() leaves it in doubt, the id recorded for `earmark reconcile`,
// as a process that dies does when the lease passes. At most LLM_BACKGROUND_HOLDS_MAX are
// kept a metered client, the oldest going in doubt past it.
//
// What the fetch does not carry is refused too. The openai package's websocket classes
// (OpenAIRealtimeWS, OpenAIRealtimeWebSocket, ResponsesWS: routes-openai.ts OPENAI_SOCKETS)
// take a client and open a socket from its baseURL and apiKey, no HTTP request. A metered
// OpenAI client's baseURL is its provider's behind a scheme of Earmark's
// ("earmark-not-metered+https://api.openai.com/v1"): its requests, which all go through the
// metered fetch, are sent to the provider's own URL, and a URL built from it anywhere else
// has a scheme no websocket library (nor fetch) connects to, so that a socket made from
// the client fails before connecting, whatever made it. The known classes are refused by
// name first: reading the baseURL from one of their modules throws SocketNotMeteredError.
import { keptOn, settlingOn, type EarmarkClient } from './client.js';
import { EarmarkClientError, EndpointNotMeteredError, SocketNotMeteredError, UnavailableError } from './errors.js';
import { HeldCall, endCall, neverSent, reserveCall, settingsOf, type Ending, type MeterOptions, type Settings } from './held.js';
import type { Hold } from './hold.js';
import { LLM_BACKGROUND_HOLDS_MAX } from './limits.js';
import { InvalidResponseError, billedNothing } from './openai-background.js';
import { anthropicRouting } from './routes-anthropic.js';
import { azureRouting } from './routes-azure.js';
import { googleRouting } from './routes-google.js';
import { isBedrock, meterBedrock, type BedrockClientLike } from './bedrock.js';
import { AZURE, hostOf, namedProvider } from './hosts.js';
import { OPENAI_SOCKETS, compatibleRouting, openaiRouting } from './routes-openai.js';
import { FREE, isObject, type Call, type Ended, type Json, type JsonObject, type Later, type Route, type Routing } from './routes.js';
import { Events } from './sse.js';
import { standIn } from './stand-in.js';
import { RefusedError, type Reservation } from './types.js';

/** The fetch both provider SDKs take (their `Fetch` type). */
export type FetchLike = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** A provider SDK client metered() takes: openai's OpenAI (5 or later) or
 * @anthropic-ai/sdk's Anthropic (0.50 or later), whose copies take a `fetch`. */
export interface MeterableClient {
  readonly baseURL: string;
  withOptions(options: { fetch?: FetchLike }): unknown;
}

/** A client metered() takes: an OpenAI, AzureOpenAI or Anthropic client (a copy of it is
 * answered), or a GoogleGenAI or BedrockRuntimeClient (metered in place, and answered). */
export type Meterable = MeterableClient | GoogleClientLike | BedrockClientLike;

export type { MeterOptions } from './held.js';

/** The API a client speaks, and so the routes its requests take. */
type Api = 'openai' | 'anthropic';

const ROUTING: Record<Api, Routing> = { openai: openaiRouting, anthropic: anthropicRouting };

/** The provider SDK's client as metered() reaches it: its public baseURL and withOptions,
 * and two members its type declares private or protected, fetch (the fetch it sends with)
 * and makeStatusError (how it turns an answer's error status into what it throws). */
interface Internals {
  readonly baseURL: string;
  fetch?: FetchLike;
  withOptions(options: { fetch?: FetchLike }): Internals;
  makeStatusError?: (status: number, error: unknown, message: string | undefined, headers: Headers) => Error;
}

// A metered fetch, and the fetch it wraps: metering a metered client again replaces its
// meter rather than holding each call twice.
const INNER = new WeakMap<FetchLike, FetchLike>();
// The error of a request refused before it was sent, by the headers of the answer that
// stands for it (see refusedAnswer).
const EARLY = new WeakMap<Headers, Error>();
// What a copy of an answer leaves out of the provider's headers: the body was read and
// decoded, so its length and encoding no longer hold.
const READ_HEADERS = new Set(['content-encoding', 'content-length', 'transfer-encoding']);
// Requests that bill nothing whatever their path: reads and deletes (the Python SDK's
// wire_transport.PASSED_METHODS).
const PASSED_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'DELETE']);
// Statuses whose answers have no body.
const NULL_BODY = new Set([101, 204, 205, 304]);
// What a metered OpenAI client's baseURL puts before its provider's: a scheme of its own,
// which the WHATWG URL parser keeps when a websocket class sets its URL's protocol to wss,
// and which ws, the platform's WebSocket and fetch refuse before resolving the host.
export const NOT_METERED_SCHEME = 'earmark-not-metered+';
// A frame of a call stack in one of the openai package's modules (the last node_modules/openai
// of its file's path: pnpm nests them), or in its TypeScript source when the stack is
// source-mapped (node --enable-source-maps): the module's path in the package, without its
// extension.
const OPENAI_FRAME = /^\s*at .*[\\/]node_modules[\\/]openai[\\/](?:src[\\/])?(.+?)\.[cm]?[jt]s:\d+:\d+\)?$/;
// How many frames are searched for a websocket class's: it reads the baseURL a few calls
// down from its constructor.
const SOCKET_FRAMES_MAX = 32;

/** The base URL a metered client's requests are read under: its path ('/v1'; the routes
 * are the paths after it) and its host ('' for none checked), which named its provider. */
interface Base {
  path: string;
  host: string;
}

/** A hold kept open after its call answered, while the call runs on at the provider. */
interface Running {
  hold: Hold;
  call: Call;
  callId: string;
  later: Later;
  /** The Renew that records callId on the hold, waited for before the hold settles: a
   * label sent after the Settle would find the hold closed, and reconcile without it. */
  labelling: Promise<void>;
}

/** What an AzureOpenAI client (the openai package) has that an OpenAI one has not. */
interface AzureInternals {
  readonly apiVersion: string;
  readonly deploymentName: string | undefined;
}

/** Whether client is the openai package's AzureOpenAI. */
function isAzure(client: object): boolean {
  return typeof (client as Partial<AzureInternals>).apiVersion === 'string' && 'deploymentName' in client;
}

function apiOf(client: object): Api {
  const copies = typeof (client as { withOptions?: unknown }).withOptions === 'function';
  if (copies && 'chat' in client && 'responses' in client) return 'openai';
  if (copies && 'messages' in client) return 'anthropic';
  throw new TypeError(
    'metered() takes an OpenAI or AzureOpenAI client (the openai package, 5 or later), an Anthropic one ' +
      '(@anthropic-ai/sdk, 0.50 or later), a GoogleGenAI (@google/genai 2.30 or later) or a BedrockRuntimeClient ' +
      '(@aws-sdk/client-bedrock-runtime)',
  );
}

/**
 * The HTTP status of a request Earmark refused, by the refusal's reason. A refusal that
 * passes with time on its own is 429, Too Many Requests, which a client may send again
 * later: RATE_LIMITED once the window has room, TOO_MANY_OPEN once one of the budget's
 * open holds closes (a call in flight ends), without anyone acting. The others are 402,
 * Payment Required: sending again does not help until an operator acts or the period
 * resets, whether the money is spent (INSUFFICIENT_BUDGET), the period's admissions are
 * (ADMISSIONS_SPENT) or the budget has closed for good (CLOSED); a 429 would invite
 * retries that can only fail. In a region (issue 48), a share whose lease ended or is too
 * short for the hold (SHARE_LEASE_ENDED, HOLD_OUTLIVES_SHARE) is 503, Service Unavailable:
 * the region cannot reach the budget's home now, and a later attempt may pass.
 */
export function refusalStatus(reason: string): 429 | 402 | 503 {
  if (reason === 'SHARE_LEASE_ENDED' || reason === 'HOLD_OUTLIVES_SHARE') return 503;
  return reason === 'RATE_LIMITED' || reason === 'TOO_MANY_OPEN' ? 429 : 402;
}

/**
 * The answer that stands for a request refused before it was sent. A fetch that throws is
 * taken by both SDKs for a connection error, retried, and rethrown wrapped; an answer with
 * `x-should-retry: false` is not retried, and the client's makeStatusError (replaced on a
 * metered client) throws the Earmark error, as a stand-in of the SDK's base error. Without
 * that replacement (a client built from a metered one by other means than withOptions) the
 * SDK throws its own error of this status, with the Earmark error's message: still unsent,
 * and not retried.
 */
function refusedAnswer(error: unknown): Response {
  const cause = error instanceof Error ? error : new EarmarkClientError(String(error));
  const reason = cause instanceof EarmarkClientError ? cause.reason : '';
  let status = 400;
  if (cause instanceof RefusedError) status = refusalStatus(reason);
  else if (cause instanceof EndpointNotMeteredError) status = 403;
  else if (cause instanceof UnavailableError) status = 503;
  const body = { type: 'error', error: { type: 'earmark', code: reason || null, param: null, message: cause.message } };
  const answer = new Response(JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json', 'x-should-retry': 'false', 'x-earmark-error': reason || 'ERROR' },
  });
  EARLY.set(answer.headers, cause);
  return answer;
}

/** A URL's path as the routes read it: percent-decoded, so that an id holding an encoded
 * '/' is more than one segment (and no template's id) rather than one a server may decode
 * into another path; null when it does not decode. */
function decodedPath(pathname: string): string | null {
  try {
    return decodeURIComponent(pathname);
  } catch {
    return null;
  }
}

/** url without the scheme a metered OpenAI client's baseURL puts before it. */
function unsealed(url: string): string {
  return url.startsWith(NOT_METERED_SCHEME) ? url.slice(NOT_METERED_SCHEME.length) : url;
}

/** The websocket surface of the openai package whose module the current call comes from
 * ("openai/realtime/ws OpenAIRealtimeWS"), or null. The stack is the only witness of who
 * reads a client's baseURL: the SDK's own requests and a websocket class read it alike. */
function socketSurface(): string | null {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = SOCKET_FRAMES_MAX;
  const stack = new Error().stack ?? '';
  Error.stackTraceLimit = limit;
  for (const line of stack.split('\n')) {
    const module = OPENAI_FRAME.exec(line)?.[1].replace(/\\/g, '/');
    if (module !== undefined && Object.hasOwn(OPENAI_SOCKETS, module)) return `openai/${module} ${OPENAI_SOCKETS[module]}`;
  }
  return null;
}

/**
 * client (a metered OpenAI client) with its baseURL sealed (see the module's text): read,
 * it answers the provider's behind NOT_METERED_SCHEME, or throws SocketNotMeteredError when
 * a websocket class of the openai package reads it; set, it takes the new URL, whose path
 * base.path follows (its host base.host does not: a billable request to another host than
 * the one that named the provider is refused).
 */
function seal(client: Internals, base: Base): void {
  let url = unsealed(client.baseURL);
  base.path = basePathOf(url);
  base.host = hostOf(url);
  Object.defineProperty(client, 'baseURL', {
    configurable: true,
    enumerable: true,
    get(): string {
      const surface = socketSurface();
      if (surface !== null) throw new SocketNotMeteredError(surface);
      return NOT_METERED_SCHEME + url;
    },
    set(value: string) {
      url = unsealed(String(value));
      base.path = basePathOf(url);
      // The host stays the one that named the client's provider: a billable request to
      // another is refused, as a copy on it would be priced anew (withOptions).
    },
  });
}

/** The path of the client's base URL ('/v1' for OpenAI's, '' for Anthropic's): the routes
 * are the paths after it. */
function basePathOf(baseURL: string): string {
  try {
    return (decodedPath(new URL(baseURL).pathname) ?? '').replace(/\/+$/, '');
  } catch {
    return '';
  }
}

async function jsonBody(input: string | URL | Request, init: RequestInit | undefined, where: string): Promise<JsonObject> {
  const body = init?.body ?? (input instanceof Request ? await input.clone().text() : null);
  let raw: string;
  if (typeof body === 'string') raw = body;
  else if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) raw = new TextDecoder().decode(body);
  else throw new EarmarkClientError(`${where}: the body is not JSON; not sent`);
  let parsed: Json;
  try {
    parsed = JSON.parse(raw) as Json;
  } catch {
    throw new EarmarkClientError(`${where}: the body is not JSON; not sent`);
  }
  if (!isObject(parsed)) throw new EarmarkClientError(`${where}: the body is not a JSON object; not sent`);
  return parsed;
}

/** The request init to send body with, from what the SDK passed. */
function sending(input: string | URL | Request, init: RequestInit | undefined, body: string): RequestInit {
  const headers = new Headers(input instanceof Request ? input.headers : undefined);
  new Headers(init?.headers).forEach((value, name) => headers.set(name, value));
  headers.delete('content-length');
  const fromRequest = input instanceof Request ? { method: input.method, signal: input.signal } : {};
  return { ...fromRequest, ...init, headers, body };
}

/** The provider's headers for an answer Earmark has read. */
function readHeaders(from: Headers): Headers {
  const headers = new Headers();
  from.forEach((value, name) => {
    if (!READ_HEADERS.has(name.toLowerCase())) headers.append(name, value);
  });
  return headers;
}

/** The provider's headers for an answer Earmark has read, with what the hold told it. */
function answeredHeaders(from: Headers, reservation: Reservation): Headers {
  const headers = readHeaders(from);
  headers.set('x-earmark-reservation-id', reservation.reservationId);
  headers.set('x-earmark-max-output-tokens', String(reservation.maxOutputTokens));
  headers.set('x-earmark-degraded', String(reservation.degraded));
  return headers;
}

function isStream(response: Response): boolean {
  return (response.headers.get('content-type') ?? '').includes('text/event-stream') && response.body !== null;
}

/**
 * response's stream passed on as it arrives through events (which read it on the way, and
 * may drop events), end run once whichever way it ends: read to its end, failed, cancelled
 * by its reader, or aborted by signal (the SDK aborts the request when its reader stops
 * early, a break out of the loop or a timeout: the stream may never be read again).
 */
function relayed(response: Response, events: Events, finish: () => Promise<void>, signal?: AbortSignal): { stream: ReadableStream<Uint8Array>; end: () => Promise<void> } {
  const reader = response.body!.getReader();
  let ended: Promise<void> | null = null;
  const end = (): Promise<void> => {
    ended ??= (async () => {
      signal?.removeEventListener('abort', aborted);
      await finish();
    })();
    return ended;
  };
  const aborted = (): void => void end();
  signal?.addEventListener('abort', aborted, { once: true });
  const stream = new ReadableStream<Uint8Array>({
    pull: async (controller) => {
      let item: Awaited<ReturnType<typeof reader.read>>;
      try {
        item = await reader.read();
      } catch (error) {
        await end();
        controller.error(error);
        return;
      }
      if (item.done) {
        const rest = events.rest();
        if (rest.length > 0) controller.enqueue(rest);
        await end();
        controller.close();
        return;
      }
      const kept = events.feed(item.value);
      if (kept.length > 0) controller.enqueue(kept);
    },
    cancel: async (reason) => {
      await reader.cancel(reason).catch(() => undefined);
      await end();
    },
  });
  return { stream, end };
}

function parsed(content: string): Json {
  try {
    return JSON.parse(content) as Json;
  } catch {
    return null;
  }
}

/** One budget's meter: how a request is held, sent and settled. */
class Meter {
  // Streams whose reader let go of them unread: their holds end in doubt when they are
  // collected, rather than renew for the life of the process.
  private readonly unread = new FinalizationRegistry<() => Promise<void>>((end) => void end());
  // The calls running on after their answer, by id, oldest first, and what reads them again.
  private readonly running = new Map<string, Running>();
  private later: Later | null = null;

  constructor(
    private readonly earmark: EarmarkClient,
    private readonly budgetId: string,
    private readonly options: MeterOptions,
    private readonly settings: Settings,
    private readonly routing: Routing,
    /** Whether a request refused before sending throws its error from the fetch (an SDK
     * that rethrows what its fetch throws, @google/genai's) rather than answering with a
     * refusedAnswer for the SDK to throw. */
    private readonly throwsRefusals = false,
  ) {}

  /** What the fetch does with a request refused before it was sent. */
  private refused(error: unknown): Response {
    if (this.throwsRefusals) throw error;
    return refusedAnswer(error);
  }

  /** A fetch that meters each request and sends it with inner; base is the client's base
   * URL's path and host, set once the client exists. */
  fetch(inner: FetchLike, base: Base): FetchLike {
    const metered: FetchLike = (input, init) => this.send(inner, base, input, init);
    INNER.set(metered, inner);
    return metered;
  }

  private async send(
    inner: FetchLike,
    base: Base,
    given: string | URL | Request,
    init: RequestInit | undefined,
  ): Promise<Response> {
    // A metered OpenAI client builds its URLs from its sealed baseURL: each is sent to the
    // provider's own.
    const address = given instanceof Request ? given.url : String(given);
    let input = given;
    if (address.startsWith(NOT_METERED_SCHEME)) {
      input = given instanceof Request ? new Request(unsealed(address), given) : unsealed(address);
    }
    const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
    const basePath = base.path;
    if (PASSED_METHODS.has(method)) return this.passed(inner, input, init, method, basePath);
    const url = new URL(input instanceof Request ? input.url : String(input));
    const path = decodedPath(url.pathname);
    // A write other than POST (PATCH, PUT: @google/genai's caches.update extends a cache
    // billed by the hour) is routed as a POST to its path is, and refused unless its path is
    // free: the routes hold POST bodies alone.
    const route = path === null ? null : this.routing(path, basePath);
    if (route === FREE) return this.passed(inner, input, init, method, basePath);
    // A billable request to another host than the client's base URL names (an absolute URL
    // given a call) would be priced as the provider that host named: refused.
    const elsewhere = base.host !== '' && hostOf(url.href) !== base.host;
    if (route === null || method !== 'POST' || elsewhere) {
      return this.refused(new EndpointNotMeteredError(method, elsewhere ? `//${url.hostname}${url.pathname}` : url.pathname));
    }
    let call: Call;
    let body: JsonObject;
    let held: HeldCall;
    try {
      body = await jsonBody(input, init, `${method} ${url.pathname}`);
      call = route.call(body, this.settings);
      // Refused (RefusedError, HoldCappedError, the sidecar unreachable): nothing is sent.
      held = await HeldCall.open(this.earmark, this.budgetId, this.options, this.settings, call);
    } catch (error) {
      return this.refused(error);
    }
    const { hold, reservation, cap } = held;
    const sent = route.sent(body, call, cap);
    const signal = init?.signal ?? (input instanceof Request ? input.signal : undefined);
    if (signal?.aborted) {
      // The SDK's timeout (or its caller) gave up while the hold was being made: nothing was
      // sent, so nothing was billed.
      await this.end(hold, call, 'nothing');
      throw signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
    }
    let response: Response;
    try {
      response = await inner(input instanceof Request ? input.url : input, sending(input, init, JSON.stringify(sent.body)));
    } catch (error) {
      await this.end(hold, call, neverSent(error) ? 'nothing' : 'doubt');
      throw error;
    }
    if (!response.ok) {
      // The SDK reads the error's body; the status says whether the provider billed.
      await this.end(hold, call, response.status >= 500 ? 'doubt' : 'nothing');
      return response;
    }
    const headers = answeredHeaders(response.headers, reservation);
    if (isStream(response)) return this.streamed(response, headers, hold, call, route, sent.hiddenUsage, signal ?? undefined);
    let content: string;
    try {
      content = await response.text();
    } catch (error) {
      // The answer was cut off: it ran, and may be billed.
      await this.end(hold, call, 'doubt');
      throw error;
    }
    const answer = parsed(content);
    const callId = route.later?.running(body, answer) ?? null;
    if (callId !== null) {
      // Kept before the answer reaches the caller, who may read the call again at once.
      this.keep(hold, call, route.later!, callId);
    } else {
      const usage = route.usage(answer, call);
      await this.end(hold, call, usage === null ? 'doubt' : { usage });
    }
    return new Response(NULL_BODY.has(response.status) ? null : content, { status: response.status, statusText: response.statusText, headers });
  }

  /** A request that passes through, sent as it is: when it reads again a call this client
   * keeps a hold open for (a retrieve, a resumed stream, a cancel), its answer is read on
   * the way and the hold settled once it says the call ended. */
  private async passed(
    inner: FetchLike,
    input: string | URL | Request,
    init: RequestInit | undefined,
    method: string,
    basePath: string,
  ): Promise<Response> {
    const running = this.reading(input, method, basePath);
    const response = await inner(input, init);
    return running === null ? response : this.readAgain(response, running);
  }

  /** The running call of this client that a request reads again, if it is one. */
  private reading(input: string | URL | Request, method: string, basePath: string): Running | null {
    if (this.later === null || this.running.size === 0) return null;
    const path = decodedPath(new URL(input instanceof Request ? input.url : String(input)).pathname);
    const callId = path === null ? null : this.later.reads(method, path, basePath);
    return callId === null ? null : (this.running.get(callId) ?? null);
  }

  /** The answer to a request that read a running call again, its hold settled when the
   * answer says the call ended; an error status says nothing of the call. */
  private async readAgain(response: Response, running: Running): Promise<Response> {
    if (!response.ok) return response;
    const headers = readHeaders(response.headers);
    if (isStream(response)) {
      const tally = running.later.resumed(running.callId);
      const { stream } = relayed(response, new Events(tally), async () => {
        // A resumed stream that stops before its final event leaves the call running.
        const ended = tally.ended();
        if (ended !== null) await this.endSoon(running, ended);
      });
      return new Response(stream, { status: response.status, statusText: response.statusText, headers });
    }
    const content = await response.text();
    const ended = this.endedBy(running, parsed(content));
    if (ended !== null) void this.endSoon(running, ended);
    const answer = NULL_BODY.has(response.status) ? null : content;
    return new Response(answer, { status: response.status, statusText: response.statusText, headers });
  }

  /** Reserves the call's hold by shape, with its prompt charged at once. */
  private reserve(call: Call): Promise<Hold> {
    return reserveCall(this.earmark, this.budgetId, this.options, this.settings, call);
  }

  /** A streamed answer passed to the SDK as it arrives, read for its usage on the way, its
   * hold settled once when it ends, fails, is cancelled or is aborted; kept open when it
   * stopped before the end of a call that runs on after it (a background response). */
  private streamed(
    response: Response,
    headers: Headers,
    hold: Hold,
    call: Call,
    route: Route,
    hiddenUsage: boolean,
    signal: AbortSignal | undefined,
  ): Response {
    const events = new Events(route.tally(call, hiddenUsage));
    const { stream, end } = relayed(
      response,
      events,
      async () => {
        const usage = events.tally.usage();
        const callId = usage === null ? (route.later?.leftRunning(events.tally) ?? null) : null;
        if (callId !== null) this.keep(hold, call, route.later!, callId);
        else await this.end(hold, call, usage === null ? 'doubt' : { usage });
      },
      signal,
    );
    this.unread.register(stream, end);
    return new Response(stream, { status: response.status, statusText: response.statusText, headers });
  }

  /** Keeps hold open, renewing, while its call runs on, and records callId on it at once.
   * Past LLM_BACKGROUND_HOLDS_MAX running, the oldest goes in doubt (its id recorded:
   * reconcile resolves it). */
  private keep(hold: Hold, call: Call, later: Later, callId: string): void {
    // A hold ended before its call says how it ended stays in doubt.
    hold.outcome = 'UNKNOWN';
    this.later = later;
    const earlier = this.running.get(callId);
    if (earlier !== undefined) void this.endSoon(earlier, null);
    while (this.running.size >= LLM_BACKGROUND_HOLDS_MAX) {
      const oldest: Running = this.running.values().next().value!;
      process.emitWarning(
        `earmark: ${this.running.size} calls of one metered client run on after their answer, the most it keeps; ` +
          `the hold of ${oldest.callId} goes in doubt, its id recorded for earmark reconcile`,
      );
      void this.endSoon(oldest, null);
    }
    const labelling = hold.label({ [later.label]: callId }).catch((error: unknown) => {
      process.emitWarning(
        `earmark: the hold ${hold.reservationId} did not record ${callId} yet (its next renewal carries it): ${(error as Error).message}`,
      );
    });
    const running: Running = { hold, call, callId, later, labelling };
    this.running.set(callId, running);
    keptOn(this.earmark).set(running, () => this.endSoon(running, null));
  }

  /** How an answer that read running again says it ended; null while it runs, and for an
   * answer that is not its Response (nothing is settled from it). */
  private endedBy(running: Running, answer: Json): Ended | null {
    try {
      return running.later.ended(answer, running.callId);
    } catch (error) {
      if (!(error instanceof InvalidResponseError)) throw error;
      process.emitWarning(`earmark: an answer about ${running.callId} is not its Response (${error.message}); its hold stays open`);
      return null;
    }
  }

  /** Settles running's hold in the background, once: as ended says, or in doubt (null).
   * Answers once its Settle is answered (at once when another ended it first). */
  private endSoon(running: Running, ended: Ended | null): Promise<void> {
    if (this.running.get(running.callId) !== running) return Promise.resolve();
    this.running.delete(running.callId);
    keptOn(this.earmark).delete(running);
    const settling = this.settleRunning(running, ended);
    settlingOn(this.earmark, settling);
    return settling;
  }

  private async settleRunning(running: Running, ended: Ended | null): Promise<void> {
    const { hold, call } = running;
    if (ended !== null && ended.usage !== null) {
      hold.usage = { ...ended.usage, provider: this.settings.provider, model: call.model };
      // A failed or cancelled call bills what it ran, and teaches no estimate.
      hold.outcome = ended.status === 'failed' ? 'FAILED' : ended.status === 'cancelled' ? 'CANCELLED' : 'SUCCEEDED';
    } else if (ended !== null && billedNothing(ended)) {
      hold.used = 0;
      hold.outcome = 'CANCELLED';
    }
    await running.labelling;
    try {
      await hold.finish();
    } catch (error) {
      process.emitWarning(`earmark settle of reservation ${hold.reservationId} failed: ${(error as Error).message}`);
    }
  }

  /** Settles hold as ending says (held.ts endCall). */
  private end(hold: Hold, call: Call, ending: Ending): Promise<void> {
    return endCall(hold, this.settings.provider, call, ending);
  }
}

function define<T extends object>(target: T, name: string, value: unknown): void {
  Object.defineProperty(target, name, { value, configurable: true, writable: true, enumerable: false });
}

/** The SDK's base error (openai's OpenAIError, @anthropic-ai/sdk's AnthropicError), which
 * both SDKs hang on their client's class; null when it is not there. */
function sdkErrorOf(client: object, api: Api): (new (message: string) => Error) | null {
  const statics = client.constructor as { OpenAIError?: unknown; AnthropicError?: unknown };
  const base = api === 'openai' ? statics.OpenAIError : statics.AnthropicError;
  return typeof base === 'function' ? (base as new (message: string) => Error) : null;
}

/** The meter of a client by the base URL it sends to (unsealed), and its Azure api-version
 * (null for none): a copy on another host is routed, and its provider named, anew. */
type MeterOf = (baseURL: string, apiVersion: string | null) => Meter;

/**
 * A copy of source made with the SDK's own withOptions (options, and a fetch that is the
 * meter's around inner: the meter of the copy's base URL, meterOf's), that throws the errors
 * of requests refused unsent as stand-ins of the SDK's base error (stand-in.ts), and whose
 * own copies (withOptions) are metered too. The SDK's withOptions is its class's, so that a
 * metered client metered again is copied around its inner fetch once, not metered twice.
 */
function install(
  source: Internals,
  options: { fetch?: FetchLike; baseURL?: string | null; apiVersion?: string },
  api: Api,
  meterOf: MeterOf,
  inner: FetchLike,
  sdkError: (new (message: string) => Error) | null,
): Internals {
  const sdkWithOptions = (Object.getPrototypeOf(source) as Internals).withOptions;
  const base: Base = { path: '', host: '' };
  let apiVersion: string | null = null;
  if (isAzure(source)) {
    // AzureOpenAI's copies are made by its constructor, which reads its apiVersion and
    // deployment from its options (else from the environment), not from the client copied.
    const azure = source as unknown as AzureInternals;
    options = { apiVersion: azure.apiVersion, deployment: azure.deploymentName, ...options } as typeof options;
    apiVersion = options.apiVersion ?? null;
  }
  // The copy's host, which names its provider: the one it is given, else the source's.
  const baseURL = options.baseURL === undefined || options.baseURL === null ? unsealed(source.baseURL) : String(options.baseURL);
  const meter = meterOf(baseURL, apiVersion);
  // The SDK's copy takes the source's baseURL as it reads, sealed when the source is a
  // metered client: seal() takes the provider's back.
  const copy = sdkWithOptions.call(source, { ...options, fetch: meter.fetch(inner, base) });
  if (api === 'openai') seal(copy, base);
  else {
    base.path = basePathOf(copy.baseURL);
    // The client's own host as it stands at each request: @anthropic-ai/sdk adopts a base
    // URL its credential profile names; its provider is anthropic whatever the host.
    Object.defineProperty(base, 'host', { get: () => hostOf(copy.baseURL) });
  }
  const statusError = copy.makeStatusError;
  if (typeof statusError === 'function') {
    define(copy, 'makeStatusError', function (this: Internals, status: number, error: unknown, message: string | undefined, headers: Headers) {
      const early = EARLY.get(headers);
      if (early === undefined) return statusError.call(this, status, error, message, headers);
      return sdkError === null ? early : standIn(early, sdkError);
    });
  }
  define(copy, 'withOptions', function (this: Internals, more: { fetch?: FetchLike; baseURL?: string | null }) {
    return install(this, more, api, meterOf, more.fetch ?? inner, sdkError);
  });
  return copy;
}

/**
 * client, metered on budgetId: a client of the same class (instanceof holds, and so does
 * its type) whose every billable request is held before it is sent and settled from what
 * the provider answered (see the module's text). A request refused before sending throws
 * RefusedError, EndpointNotMeteredError, HoldCappedError or the Earmark client's own error
 * (UnavailableError...), not retried; thrown through the SDK as a stand-in of its base error
 * (stand-in.ts), which `instanceof` counts as the Earmark error.
 */
export function metered<C extends Meterable>(
  client: C,
  earmark: EarmarkClient,
  budgetId: string,
  options: MeterOptions = {},
): C {
  if (isGoogle(client)) return meterGoogle(client, earmark, budgetId, options);
  if (isBedrock(client)) return meterBedrock(client, earmark, budgetId, options);
  const api = apiOf(client);
  const internals = client as unknown as Internals;
  const had = internals.fetch ?? (globalThis.fetch as FetchLike);
  const inner = INNER.get(had) ?? had;
  const azure = api === 'openai' && isAzure(client);
  if (options.deployments !== undefined && api !== 'openai') {
    throw new TypeError('deployments (Azure OpenAI) takes an OpenAI or AzureOpenAI client');
  }
  // The meter of each host and api-version a client or its copies send to, the first made
  // here: a copy given another base URL (withOptions({ baseURL })) is priced under the
  // provider its host names, not the original's.
  const meters = new Map<string, Meter>();
  const meterOf: MeterOf = (baseURL, apiVersion) => {
    // An OpenAI client is priced under the provider its base URL's host names, unless the
    // caller names one (hosts.ts); with deployments, under Azure's.
    let provider = options.provider ?? api;
    if (api === 'openai' && options.provider === undefined) {
      provider = options.deployments !== undefined || azure ? AZURE : namedProvider(baseURL);
    }
    const key = JSON.stringify([provider, apiVersion]);
    const found = meters.get(key);
    if (found !== undefined) return found;
    const settings = settingsOf(provider, options);
    let routing = ROUTING[api];
    if (options.deployments !== undefined) {
      // An AzureOpenAI client's api-version says whether its chat streams carry their usage.
      routing = azureRouting(routing, options.deployments, apiVersion);
    } else if (azure || settings.provider === AZURE) {
      throw new TypeError(
        "metered() of an AzureOpenAI client takes deployments: { deployment: baseModel } (e.g. { 'my-gpt4o': 'gpt-4o' }), " +
          'the model each deployment is priced as',
      );
    }
    if (api === 'openai') routing = compatibleRouting(routing, settings.provider);
    const meter = new Meter(earmark, budgetId, options, settings, routing);
    meters.set(key, meter);
    return meter;
  };
  return install(internals, {}, api, meterOf, inner, sdkErrorOf(client, api)) as unknown as C;
}

/** @google/genai's GoogleGenAI as metered() reaches it: its models, and (a member its type
 * declares protected) the ApiClient every request goes through, whose httpOptions.fetch it
 * reads at each request. */
export interface GoogleClientLike {
  readonly models: object;
  readonly vertexai: boolean;
  readonly live: object;
}

/** A request as @google/genai's ApiClient.request and requestStream take it: the call's own
 * httpOptions (a method's config.httpOptions) are merged over the client's for it alone. */
interface GoogleRequest {
  httpOptions?: { fetch?: FetchLike; [key: string]: unknown };
  [key: string]: unknown;
}

interface GoogleApiClient {
  clientOptions: { httpOptions?: { fetch?: FetchLike; [key: string]: unknown } };
  getBaseUrl(): string;
  getFetch(): FetchLike | undefined;
  request(request: GoogleRequest): Promise<unknown>;
  requestStream(request: GoogleRequest): Promise<unknown>;
}

interface GoogleInternals {
  apiClient: GoogleApiClient;
  [key: string]: unknown;
}

// The ApiClient's methods every request of a GoogleGenAI goes through, which take a call's
// own httpOptions.
const GOOGLE_REQUESTS = ['request', 'requestStream'] as const;

// The clients a GoogleGenAI builds at first use from its ApiClient's fetch (its NextGen
// surfaces: interactions, agents...): dropped when it is metered, so that they are built
// again from the metered fetch.
const GOOGLE_BUILT = ['_nextGenClient', '_interactions', '_webhooks', '_agents', '_triggers', '_environments', '_credentials', '_voices'];

function isGoogle(client: object): client is GoogleClientLike {
  const api = (client as Partial<GoogleInternals>).apiClient;
  return 'models' in client && typeof api === 'object' && api !== null && typeof api.getFetch === 'function' && typeof api.clientOptions === 'object';
}

/**
 * A GoogleGenAI metered in place (it has no copies of its own: metered() answers the client
 * it was given): the fetch its ApiClient sends every request with is wrapped, and its live
 * API, a websocket Earmark cannot meter, is refused at first touch (SocketNotMeteredError).
 * The SDK rethrows what its fetch throws, so a request refused before it is sent throws the
 * Earmark error itself. A call's own fetch (config.httpOptions.fetch) is metered too: its
 * request goes through the meter around that fetch.
 */
function meterGoogle<C extends GoogleClientLike>(client: C, earmark: EarmarkClient, budgetId: string, options: MeterOptions): C {
  const internals = client as unknown as GoogleInternals;
  const apiClient = internals.apiClient;
  const httpOptions = apiClient.clientOptions.httpOptions ?? {};
  const had = httpOptions.fetch ?? (globalThis.fetch as FetchLike);
  const inner = INNER.get(had) ?? had;
  const meter = new Meter(earmark, budgetId, options, settingsOf('google', options), googleRouting, true);
  // The host is not checked: a call's own baseUrl (an upload's URL among them) names
  // another.
  const base: Base = { path: basePathOf(apiClient.getBaseUrl()), host: '' };
  apiClient.clientOptions.httpOptions = { ...httpOptions, fetch: meter.fetch(inner, base) };
  // A call's own httpOptions.fetch (a method's config.httpOptions) replaces the client's for
  // that request (the ApiClient's patchHttpOptions): such a call is sent through the meter
  // around its own fetch, routed as the client's are (a call's own baseUrl, an upload's
  // URL among them, is sent through the meter's fetch as it was).
  const prototype = Object.getPrototypeOf(apiClient) as GoogleApiClient;
  for (const name of GOOGLE_REQUESTS) {
    const send = prototype[name];
    if (typeof send !== 'function') continue;
    define(apiClient, name, function (this: GoogleApiClient, request: GoogleRequest) {
      const given = request?.httpOptions?.fetch;
      if (typeof given !== 'function') return send.call(this, request);
      const fetch = meter.fetch(INNER.get(given) ?? given, base);
      return send.call(this, { ...request, httpOptions: { ...request.httpOptions, fetch } });
    });
  }
  for (const name of GOOGLE_BUILT) delete internals[name];
  Object.defineProperty(client, 'live', {
    configurable: true,
    enumerable: false,
    get(): never {
      throw new SocketNotMeteredError('@google/genai live');
    },
  });
  return client;
}
