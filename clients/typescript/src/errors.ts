// The SDK's errors: one base class, EarmarkClientError, for everything it throws. A failed
// call is a ClientError of its status code's class, or, for the reasons a worker acts on,
// of a class below it; the reason comes from the google.rpc.ErrorInfo the sidecar puts in
// the grpc-status-details-bin trailer (docs/contract.md lists every reason). These mirror
// the Python SDK's classes (src/earmark/client/errors.py) name for name.
import { BinaryReader } from '@bufbuild/protobuf/wire';
import { status as Status, type ServiceError } from '@grpc/grpc-js';
import { STANDS_FOR } from './stand-in.js';

/** The domain of Earmark's ErrorInfo. */
export const DOMAIN = 'earmark';
/** Where gRPC carries a google.rpc.Status. */
export const STATUS_DETAILS_KEY = 'grpc-status-details-bin';

/** Every reason the sidecar sends (docs/contract.md#error-reasons); reasons are only added. */
export const Reason = {
  INVALID_FIELD: 'INVALID_FIELD',
  BUDGET_NOT_FOUND: 'BUDGET_NOT_FOUND',
  RESERVATION_NOT_FOUND: 'RESERVATION_NOT_FOUND',
  TEMPLATE_NOT_FOUND: 'TEMPLATE_NOT_FOUND',
  KEY_REUSED: 'KEY_REUSED',
  HOLD_EXPIRED: 'HOLD_EXPIRED',
  HOLD_SETTLED: 'HOLD_SETTLED',
  HOLD_IN_DOUBT: 'HOLD_IN_DOUBT',
  HOLD_NOT_IN_DOUBT: 'HOLD_NOT_IN_DOUBT',
  SETTLE_MISMATCH: 'SETTLE_MISMATCH',
  UNIT_LOCKED: 'UNIT_LOCKED',
  UNIT_MISMATCH: 'UNIT_MISMATCH',
  UNITS_FULL: 'UNITS_FULL',
  UNIT_NOT_PRICED: 'UNIT_NOT_PRICED',
  PRICE_NOT_FOUND: 'PRICE_NOT_FOUND',
  PRICE_BOOK_FULL: 'PRICE_BOOK_FULL',
  BUDGET_ARCHIVED: 'BUDGET_ARCHIVED',
  BUDGET_HAS_OPEN_HOLDS: 'BUDGET_HAS_OPEN_HOLDS',
  TEMPLATES_OVERLAP: 'TEMPLATES_OVERLAP',
  TEMPLATES_FULL: 'TEMPLATES_FULL',
  COUNTER_OVERFLOW: 'COUNTER_OVERFLOW',
  DATABASE_REFUSED: 'DATABASE_REFUSED',
  NO_LIMITS_PROVIDER: 'NO_LIMITS_PROVIDER',
  FEATURE_NOT_IN_PLAN: 'FEATURE_NOT_IN_PLAN',
  CYCLE_BUDGET_NEEDS_ACCOUNT: 'CYCLE_BUDGET_NEEDS_ACCOUNT',
  TOKEN_UNKNOWN: 'TOKEN_UNKNOWN',
  BUDGET_NOT_PERMITTED: 'BUDGET_NOT_PERMITTED',
  HOLD_OF_ANOTHER_CALLER: 'HOLD_OF_ANOTHER_CALLER',
  STREAMS_FULL: 'STREAMS_FULL',
  SHUTTING_DOWN: 'SHUTTING_DOWN',
  OVERLOADED: 'OVERLOADED',
  DATABASE_UNAVAILABLE: 'DATABASE_UNAVAILABLE',
  DATABASE_STARTING: 'DATABASE_STARTING',
  DATABASE_DISK_FULL: 'DATABASE_DISK_FULL',
  DATABASE_OUT_OF_MEMORY: 'DATABASE_OUT_OF_MEMORY',
  DATABASE_READ_ONLY: 'DATABASE_READ_ONLY',
  DATABASE_IO_ERROR: 'DATABASE_IO_ERROR',
  DATABASE_BUSY: 'DATABASE_BUSY',
  DATABASE_CONNECTIONS_FULL: 'DATABASE_CONNECTIONS_FULL',
  CONFLICT_RETRIES_EXHAUSTED: 'CONFLICT_RETRIES_EXHAUSTED',
  LIMITS_UNAVAILABLE: 'LIMITS_UNAVAILABLE',
  INTERNAL: 'INTERNAL',
} as const;
export type Reason = (typeof Reason)[keyof typeof Reason];

/** The base of everything the SDK throws. reason is the sidecar's stable reason ("" when
 * the call failed before reaching it); about names the fields it concerns. */
export class EarmarkClientError extends Error {
  reason = '';
  about: Record<string, string> = {};

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }

  /** value is an instance of this class when it is one, or when it stands for one (an
   * Earmark error thrown through a provider SDK as the SDK's own: see stand-in.ts). */
  static override [Symbol.hasInstance](value: unknown): boolean {
    if (Function.prototype[Symbol.hasInstance].call(this, value)) return true;
    if (typeof value !== 'object' || value === null) return false;
    const real: unknown = (value as { [STANDS_FOR]?: unknown })[STANDS_FOR];
    return real !== undefined && Function.prototype[Symbol.hasInstance].call(this, real);
  }
}

/** A call failed; code and details are the server's (or the channel's). */
export class ClientError extends EarmarkClientError {
  readonly code: Status;
  readonly details: string;

  constructor(code: Status, details: string, reason = '', about: Record<string, string> = {}) {
    super(`${Status[code] ?? code}: ${details}`);
    this.code = code;
    this.details = details;
    this.reason = reason;
    this.about = { ...about };
  }
}

/** The request had a malformed field; about.field names it. */
export class InvalidArgumentError extends ClientError {}
/** The budget or reservation does not exist. */
export class NotFoundError extends ClientError {}
/** BUDGET_NOT_FOUND: no budget of that id (about.budget_id). */
export class BudgetNotFoundError extends NotFoundError {}
/** RESERVATION_NOT_FOUND: no reservation of that id (about.reservation_id). */
export class ReservationNotFoundError extends NotFoundError {}
/** An idempotency key was reused with other arguments. */
export class AlreadyExistsError extends ClientError {}
/** KEY_REUSED: the idempotency key was used for another request; use a new key. */
export class KeyReusedError extends AlreadyExistsError {}
/** The hold is no longer held, or the budget forbids the change. */
export class FailedPreconditionError extends ClientError {}
/** The hold is not HELD any more: the worker must stop spending on it. */
export class HoldClosedError extends FailedPreconditionError {}
/** HOLD_EXPIRED: its lease passed (or an operator released it) and its rest returned. */
export class HoldExpiredError extends HoldClosedError {}
/** HOLD_SETTLED: it was settled already. */
export class HoldSettledError extends HoldClosedError {}
/** HOLD_IN_DOUBT: its lease passed after a Charge; a Settle still records the truth. */
export class HoldInDoubtError extends HoldClosedError {}
/** SETTLE_MISMATCH: it was settled with another `used` (about.settled_used). */
export class SettleMismatchError extends FailedPreconditionError {}
/** UNIT_LOCKED: the budget is in use, so its unit cannot change. */
export class UnitLockedError extends FailedPreconditionError {}
/** BUDGET_ARCHIVED: the budget was deleted; a new budget needs a new id. */
export class BudgetArchivedError extends FailedPreconditionError {}
/** PRICE_NOT_FOUND: no price for the provider and model is in effect. */
export class PriceNotFoundError extends FailedPreconditionError {}
/** The sidecar needs a token and this call carried none, or an unknown one. */
export class UnauthenticatedError extends ClientError {}
/** The token may not use this budget, or the hold belongs to another token. */
export class PermissionDeniedError extends ClientError {}
/** The sidecar or its database stayed unreachable through every retry, or no sidecar
 * answered at the target within the call's deadline (the message names both). */
export class UnavailableError extends ClientError {}
/** The call's deadline passed; it may or may not have taken effect. */
export class DeadlineExceededError extends ClientError {}

/** A metered call's hold is spent (it covers no answer at all): the call was not sent, or,
 * for a stream, reading stopped. */
export class HoldCappedError extends EarmarkClientError {
  constructor(reservationId: string, what: string) {
    super(`reservation ${reservationId}: the hold is spent; ${what}`);
    this.reason = 'HOLD_CAPPED';
    this.about = { reservation_id: reservationId };
  }
}

/** A streamed answer was cut off by its hold. Metered streams are no longer cut client-side
 * (the provider stops at the cap it was told), so metered() never throws it; it stays, as
 * the Python SDK's does, for code that catches it. */
export class StreamCappedError extends HoldCappedError {
  constructor(reservationId: string, outputTokens: number) {
    super(reservationId, `the stream was closed after about ${outputTokens} output tokens`);
  }
}

/** A request to a provider endpoint that bills and that Earmark cannot price: it was not
 * sent. about.endpoint names it ("POST /v1/images/generations"). message is a subclass's
 * own. */
export class EndpointNotMeteredError extends EarmarkClientError {
  constructor(method: string, path: string, message?: string) {
    super(
      message ??
        `${method} ${path} bills and Earmark cannot price it; not sent ` +
          '(docs/sdk-typescript.md lists the endpoints that are metered)',
    );
    this.reason = 'ENDPOINT_NOT_METERED';
    this.about = { endpoint: `${method} ${path}` };
  }
}

/** A websocket surface of a provider's SDK given a metered client (openai's
 * OpenAIRealtimeWS, ResponsesWS...): Earmark meters the HTTP requests the SDK sends, and a
 * websocket is no HTTP request, so it is refused before any connection is made.
 * about.surface names it ("openai/realtime/ws OpenAIRealtimeWS"). */
export class SocketNotMeteredError extends EndpointNotMeteredError {
  constructor(surface: string) {
    super('WEBSOCKET', surface, `${surface} opens a websocket Earmark cannot meter; not connected`);
    this.about = { surface };
  }
}

/** A request to a metered endpoint that gives the model a built-in tool whose fee Earmark
 * cannot hold and settle (a tool the provider runs and bills apart from tokens, or one
 * Earmark has not classified): it was not sent, and nothing was held. tool names its type
 * (about.tool too: "image_generation"); why, what it bills that Earmark cannot hold. The
 * Python SDK's ToolNotMeteredError, reason for reason. */
export class ToolNotMeteredError extends EndpointNotMeteredError {
  readonly tool: string;
  readonly why: string;

  constructor(tool: string, why: string) {
    super('TOOL', tool, `the ${tool} tool ${why}; not sent (docs/sdk-typescript.md lists the metered tools)`);
    this.reason = 'TOOL_NOT_METERED';
    this.tool = tool;
    this.why = why;
    this.about = { tool };
  }
}

/** A Gemini generateContent request with input or output Earmark prices at the wrong rate
 * (audio in; images or speech out): it was not sent, and nothing was held. about.modality
 * names it ("image output"). The Python SDK's wire_gemini.ModalityNotMeteredError. */
export class ModalityNotMeteredError extends EndpointNotMeteredError {
  constructor(modality: string) {
    super('POST', 'generateContent', `${modality} bills at rates Earmark does not price; not sent`);
    this.about = { modality };
  }
}

/** The hold expired or was closed while the work ran: stop spending. reason and about are
 * those of the failure that found it gone (HOLD_EXPIRED, say). */
export class HoldLostError extends EarmarkClientError {
  constructor(message: string, cause?: unknown) {
    super(message, { cause });
    if (cause instanceof EarmarkClientError) {
      this.reason = cause.reason;
      this.about = { ...cause.about };
    }
  }
}

const ERROR_OF: Partial<Record<Status, new (...args: ConstructorParameters<typeof ClientError>) => ClientError>> = {
  [Status.INVALID_ARGUMENT]: InvalidArgumentError,
  [Status.NOT_FOUND]: NotFoundError,
  [Status.ALREADY_EXISTS]: AlreadyExistsError,
  [Status.FAILED_PRECONDITION]: FailedPreconditionError,
  [Status.UNAUTHENTICATED]: UnauthenticatedError,
  [Status.PERMISSION_DENIED]: PermissionDeniedError,
  [Status.UNAVAILABLE]: UnavailableError,
  [Status.DEADLINE_EXCEEDED]: DeadlineExceededError,
};

// Reasons with a class of their own; each class is below its status code's class.
const ERROR_OF_REASON: Partial<Record<string, typeof ClientError>> = {
  BUDGET_NOT_FOUND: BudgetNotFoundError,
  RESERVATION_NOT_FOUND: ReservationNotFoundError,
  KEY_REUSED: KeyReusedError,
  HOLD_EXPIRED: HoldExpiredError,
  HOLD_SETTLED: HoldSettledError,
  HOLD_IN_DOUBT: HoldInDoubtError,
  SETTLE_MISMATCH: SettleMismatchError,
  UNIT_LOCKED: UnitLockedError,
  BUDGET_ARCHIVED: BudgetArchivedError,
  PRICE_NOT_FOUND: PriceNotFoundError,
};

/** google.rpc.ErrorInfo, as the googleapis protos define it. */
export interface ErrorInfo {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
}

// google.rpc.Status { int32 code = 1; string message = 2; repeated google.protobuf.Any details = 3; }
// google.protobuf.Any { string type_url = 1; bytes value = 2; }
// google.rpc.ErrorInfo { string reason = 1; string domain = 2; map<string, string> metadata = 3; }
function decodeStatus(bytes: Uint8Array): { code: number; details: { typeUrl: string; value: Uint8Array }[] } {
  const reader = new BinaryReader(bytes);
  const status = { code: 0, details: [] as { typeUrl: string; value: Uint8Array }[] };
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === 1 && wireType === 0) status.code = reader.int32();
    else if (field === 3 && wireType === 2) {
      const any = new BinaryReader(reader.bytes());
      const detail: { typeUrl: string; value: Uint8Array } = { typeUrl: '', value: new Uint8Array() };
      while (any.pos < any.len) {
        const [f, w] = any.tag();
        if (f === 1 && w === 2) detail.typeUrl = any.string();
        else if (f === 2 && w === 2) detail.value = any.bytes();
        else any.skip(w);
      }
      status.details.push(detail);
    } else reader.skip(wireType);
  }
  return status;
}

function decodeErrorInfo(bytes: Uint8Array): ErrorInfo {
  const reader = new BinaryReader(bytes);
  const info: ErrorInfo = { reason: '', domain: '', metadata: {} };
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === 1 && wireType === 2) info.reason = reader.string();
    else if (field === 2 && wireType === 2) info.domain = reader.string();
    else if (field === 3 && wireType === 2) {
      const entry = new BinaryReader(reader.bytes());
      let key = '';
      let value = '';
      while (entry.pos < entry.len) {
        const [f, w] = entry.tag();
        if (f === 1 && w === 2) key = entry.string();
        else if (f === 2 && w === 2) value = entry.string();
        else entry.skip(w);
      }
      info.metadata[key] = value;
    } else reader.skip(wireType);
  }
  return info;
}

/** The ErrorInfo of Earmark's domain in a failed call's status details, if any. Details
 * that disagree with the call's code, or that do not decode, are not trusted. */
export function errorInfo(error: ServiceError): ErrorInfo | null {
  const [bytes] = error.metadata?.get(STATUS_DETAILS_KEY) ?? [];
  if (!(bytes instanceof Uint8Array)) return null;
  try {
    const status = decodeStatus(bytes);
    if (status.code !== error.code) return null;
    for (const detail of status.details) {
      if (detail.typeUrl.endsWith('/google.rpc.ErrorInfo')) {
        const info = decodeErrorInfo(detail.value);
        if (info.domain === DOMAIN) return info;
      }
    }
  } catch {
    return null;
  }
  return null;
}

/** The most specific ClientError for a failed call: its reason's class if it has one, else
 * its code's. A failure the sidecar did not describe (the channel's own UNAVAILABLE or
 * DEADLINE_EXCEEDED) names the target. */
export function fromServiceError(error: ServiceError, target = ''): ClientError {
  const code = error.code;
  const cls = ERROR_OF[code] ?? ClientError;
  const info = errorInfo(error);
  if (info === null) {
    let details = error.details ?? '';
    if (target && (code === Status.UNAVAILABLE || code === Status.DEADLINE_EXCEEDED)) {
      details = `${details} (target ${target})`;
    }
    return new cls(code, details);
  }
  const specific = ERROR_OF_REASON[info.reason];
  const chosen = specific !== undefined && specific.prototype instanceof cls ? specific : cls;
  return new chosen(code, error.details ?? '', info.reason, info.metadata);
}

/** The error of a call whose channel never connected within its deadline. */
export function unreachable(target: string, timeoutMs: number): UnavailableError {
  return new UnavailableError(
    Status.UNAVAILABLE,
    `no Earmark sidecar answered at ${target} within the call's deadline of ${timeoutMs / 1000} s ` +
      '(is it running, and are the target and the TLS settings right?)',
  );
}

/** A call to an Azure OpenAI deployment that metered() (or earmarkMiddleware()) was given
 * no base model for (its deployments option): Earmark cannot price it, so it was not sent.
 * about.deployment names it. */
export class DeploymentNotMappedError extends EndpointNotMeteredError {
  constructor(deployment: string) {
    super(
      'DEPLOYMENT',
      deployment,
      `the Azure deployment ${JSON.stringify(deployment)} has no base model in the deployments option, so Earmark cannot price it; not sent`,
    );
    this.about = { deployment };
  }
}

/** A chat stream to Azure OpenAI under an api-version that streams no usage (it takes no
 * stream_options: before 2024-10-21, or 2024-09-01-preview): its hold could only go in
 * doubt, so it was not sent (nothing was held). about.api_version names it. */
export class StreamUsageNotReportedError extends EndpointNotMeteredError {
  constructor(apiVersion: string) {
    super(
      'API-VERSION',
      apiVersion,
      `Azure OpenAI api-version ${JSON.stringify(apiVersion)} streams no usage (stream_options takes 2024-10-21 or ` +
        '2024-09-01-preview and later), so Earmark could not settle the stream; not sent: use a later apiVersion, or stream: false',
    );
    this.about = { api_version: apiVersion };
  }
}

/** metered() was given an OpenAI client whose base URL is no host Earmark knows the
 * provider of: its calls would be priced as OpenAI's models. Nothing was metered; pass the
 * provider option (genai-prices' id: "deepseek", "groq", "openai"...). about.host names the
 * host. */
export class ProviderNotNamedError extends EarmarkClientError {
  constructor(host: string) {
    super(
      `the base URL's host ${JSON.stringify(host)} is no provider Earmark knows: pass metered(..., { provider: '...' }) ` +
        "naming the provider its prices are under (genai-prices' id, such as 'deepseek', 'groq', 'mistral', 'together', " +
        "'openrouter', 'x-ai', or 'openai' for a proxy of OpenAI's own API)",
    );
    this.reason = 'PROVIDER_NOT_NAMED';
    this.about = { host };
  }
}
