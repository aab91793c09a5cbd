// What the client's calls take and answer, as plain objects with numbers: amounts are
// integers of the budget's unit, exact in a number up to 2^53 - 1 (the contract bounds
// amounts at 10^15). A value past that (only a budget's limit may be) throws RangeError.
import * as pb from './gen/earmark/v1/budget.js';
import { EarmarkClientError } from './errors.js';
import type { BudgetSettings } from './client.js';

/** How a job ended, for Settle. UNKNOWN keeps the hold IN_DOUBT at once (the work may
 * have run: a timeout, a lost connection or a 5xx after the request was sent). */
export type Outcome = 'SUCCEEDED' | 'FAILED' | 'CANCELLED' | 'UNKNOWN';

export const OUTCOME: Record<Outcome, pb.Outcome> = {
  SUCCEEDED: pb.Outcome.OUTCOME_SUCCEEDED,
  FAILED: pb.Outcome.OUTCOME_FAILED,
  CANCELLED: pb.Outcome.OUTCOME_CANCELLED,
  UNKNOWN: pb.Outcome.OUTCOME_UNKNOWN,
};

/** What a job may consume, priced by the sidecar when it reserves. Input and output 0:
 * the model alone, whose estimate the sidecar holds. */
export interface Shape {
  provider: string;
  model: string;
  inputTokens: number;
  maxOutputTokens: number;
  cachedInputTokens?: number;
  cacheWriteInputTokens?: number;
  /** The part of cacheWriteInputTokens written for an hour. */
  cacheWriteLongInputTokens?: number;
  attempts?: number;
  /** The provider's service tier ('' or absent: the default). */
  serviceTier?: string;
  /** The most server tool calls of each kind (e.g. web_search) the hold covers. */
  maxToolCalls?: Record<string, number>;
  /** The call sets no maximum of its own: it is held for, and told, the model's ceiling. */
  outputCeiling?: boolean;
}

/** What a provider reported, priced by the sidecar when it charges or settles. */
export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens?: number;
  cacheWriteInputTokens?: number;
  /** The part of cacheWriteInputTokens written for an hour. */
  cacheWriteLongInputTokens?: number;
  requests?: number;
  provider?: string;
  model?: string;
  /** The service tier the provider ran the call at ('' or absent: the hold's). */
  serviceTier?: string;
  /** Server tool calls by kind (e.g. web_search). */
  toolCalls?: Record<string, number>;
}

export type EstimateSource = 'CALLER' | 'SHAPE' | 'DEFAULT' | 'JOB_MEDIAN' | 'JOB_P75' | 'JOB_MAX' | 'UNSPECIFIED';
/** Why a Reserve was refused. TOO_MANY_OPEN, ADMISSIONS_SPENT and CLOSED are a budget's run
 * limits (issue 47): as many holds open at once as it allows (again once one closes), as
 * many Reserves admitted this period as it allows, past its closesAt. SHARE_LEASE_ENDED and
 * HOLD_OUTLIVES_SHARE come from a region's sidecar (issue 48, docs/regions.md): its share of
 * the budget has no lease left, or less than the hold's lease and the settle grace. */
export type RefusalReason =
  | 'INSUFFICIENT_BUDGET'
  | 'LIMIT_UNAVAILABLE'
  | 'RATE_LIMITED'
  | 'TOO_MANY_OPEN'
  | 'ADMISSIONS_SPENT'
  | 'CLOSED'
  | 'SHARE_LEASE_ENDED'
  | 'HOLD_OUTLIVES_SHARE'
  | 'UNSPECIFIED';
export type ReservationState = 'HELD' | 'SETTLED' | 'EXPIRED' | 'IN_DOUBT' | 'UNSPECIFIED';
/** How often a budget starts again at zero used and held (NEVER: it does not). */
export type Period = 'NEVER' | 'DAY' | 'WEEK' | 'MONTH' | 'QUARTER' | 'YEAR';
/** Whether a budget refuses what it has no room for (ENFORCE) or admits it and says it
 * would have refused it (OBSERVE). */
export type BudgetMode = 'ENFORCE' | 'OBSERVE';

export const PERIOD: Record<Period, pb.Period> = {
  NEVER: pb.Period.PERIOD_UNSPECIFIED,
  DAY: pb.Period.PERIOD_DAY,
  WEEK: pb.Period.PERIOD_WEEK,
  MONTH: pb.Period.PERIOD_MONTH,
  QUARTER: pb.Period.PERIOD_QUARTER,
  YEAR: pb.Period.PERIOD_YEAR,
};

export const BUDGET_MODE: Record<BudgetMode, pb.BudgetMode> = {
  ENFORCE: pb.BudgetMode.BUDGET_MODE_ENFORCE,
  OBSERVE: pb.BudgetMode.BUDGET_MODE_OBSERVE,
};

/** Reserve said yes. */
export interface Reservation {
  admitted: true;
  reservationId: string;
  budgetId: string;
  amount: number;
  /** What is left after this decision; null for an unlimited budget. */
  remaining: number | null;
  expiresAt: Date;
  estimateSource: EstimateSource;
  priceVersion: number;
  overLimit: boolean;
  /** What the Reserve's charge charged at once. */
  charged: number;
  /** A hold by shape: the most output tokens to tell the provider. */
  maxOutputTokens: number;
  /** maxOutputTokens was lowered below what the shape asked (degrade). */
  degraded: boolean;
  /** When the budget's period ends and it starts again at zero; null if it never resets. */
  resetsAt: Date | null;
  /** Admitted by a budget in OBSERVE mode that would have refused it in ENFORCE. */
  wouldRefuse: boolean;
  /** Why it would have (UNSPECIFIED when it would not have). */
  wouldRefuseReason: RefusalReason;
}

/** Reserve said no: a normal answer, returned rather than thrown. It held nothing. */
export interface Refusal {
  admitted: false;
  budgetId: string;
  reason: RefusalReason;
  message: string;
  remaining: number | null;
  /** Which budget refused (budgetId or one of alsoBudgetIds). */
  refusedBudgetId: string;
  /** With RATE_LIMITED: when the account's or the budget's window has room again, in ms;
   * else null. */
  retryAfterMs: number | null;
  /** When the budget's period ends and it starts again at zero; null if it never resets. */
  resetsAt: Date | null;
}

export interface Charged {
  charged: number;
  /** charged < what was asked: the hold is spent, stop. */
  capped: boolean;
  totalCharged: number;
  holdRemaining: number;
  expiresAt: Date | null;
  priceVersion: number;
  /** What this Charge asked for: the amount, or the usage priced. */
  requested: number;
  /** A Charge by usage on a money budget: the output rate it was priced at (0 otherwise). */
  outputUsdMicrosPerMtok: number;
}

export interface Settled {
  charged: number;
  released: number;
  overshoot: number;
  state: ReservationState;
  priceVersion: number;
}

export interface BudgetState {
  budgetId: string;
  limit: number | null;
  used: number;
  held: number;
  remaining: number | null;
  unit: string;
  openReservations: number;
  defaultEstimate: number | null;
  exceeded: boolean;
  /** How often it starts again at zero, at the local midnight of the period's first day
   * in timezone ('' is UTC); periodAnchor the ISO weekday (WEEK) or day of the month
   * (MONTH, QUARTER, YEAR) a period starts on, 0 the first. */
  period: Period;
  timezone: string;
  periodAnchor: number;
  /** The current period, [periodStart, resetsAt); null for a budget that never resets
   * (periodStart too until a budget given a period first resets). */
  periodStart: Date | null;
  resetsAt: Date | null;
  mode: BudgetMode;
  /** Notices at these shares of the limit, in basis points (8000 = 80%), lowest first. */
  thresholdBps: number[];
  /** Rate windows: at most this many admissions, and this much held, a minute; null: no
   * bound. */
  admissionsPerMinute: number | null;
  unitsPerMinute: number | null;
  /** What thresholdBps measure: COMMITTED, used + held; USED, settled spend alone. */
  thresholdBasis: 'COMMITTED' | 'USED';
  /** Reserves refused for want of room this period, and the first's and latest's time. */
  refusals: number;
  firstRefusedAt: Date | null;
  lastRefusedAt: Date | null;
  /** Run limits (issue 47): at most this many holds open at once, this many Reserves
   * admitted a period (null: no bound), none from closesAt on (null: never closes); and
   * the Reserves admitted this period. */
  maxOpenHolds: number | null;
  maxAdmissions: number | null;
  closesAt: Date | null;
  admissions: number;
  /** A temporary raise: the limit holds until limitUntil, then becomes limitAfter (null:
   * unlimited), for limitReason; all null and '' when there is none. */
  limitUntil: Date | null;
  limitAfter: number | null;
  limitReason: string;
  /** The template it was made from ('' if none), and whether a setting was since changed
   * by hand. */
  templateId: string;
  changedByHand: boolean;
}

/** A budget template as Admin answers it (issue 47): the settings (putBudget's) a budget
 * whose id matches pattern (one '/'-separated segment that is '*' alone, as 'end-user/*')
 * is made with on its first Reserve; its version, greater with each put (a budget made from
 * an older one takes the newer at its next period unless changed by hand), and when it was
 * last put; deletedAt once deleted (the budgets made from it stay). */
export interface BudgetTemplate {
  templateId: string;
  pattern: string;
  /** limit, unit and every option with a value; an optional one not set is absent. */
  settings: BudgetSettings;
  version: number;
  updatedAt: Date;
  deletedAt?: Date;
}

/** hold() (and metered calls) throw a refusal as this, unless asked for it back. reason is
 * the refusal's (INSUFFICIENT_BUDGET, RATE_LIMITED, LIMIT_UNAVAILABLE, TOO_MANY_OPEN,
 * ADMISSIONS_SPENT, CLOSED). */
export class RefusedError extends EarmarkClientError {
  readonly refusal: Refusal;

  constructor(refusal: Refusal) {
    super(`${refusal.budgetId}: ${refusal.message}`);
    this.refusal = refusal;
    this.reason = refusal.reason;
    this.about = { budget_id: refusal.refusedBudgetId || refusal.budgetId };
  }
}

/** An int64 from the wire as a number, exactly, or RangeError. */
export function num(value: bigint, what: string): number {
  if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
    throw new RangeError(`${what} is ${value}, past what a number holds exactly`);
  }
  return Number(value);
}

/** A number for an int64 on the wire: a safe integer, else RangeError naming it. */
export function int64(value: number, what: string): bigint {
  if (!Number.isSafeInteger(value)) {
    throw new RangeError(`${what} must be an integer (a safe one), not ${value}`);
  }
  return BigInt(value);
}

function suffix<T extends string>(name: string, prefix: string): T {
  return name.slice(prefix.length) as T;
}

export function reservationOf(reply: pb.ReserveResponse): Reservation | Refusal {
  const remaining = reply.remaining === undefined ? null : num(reply.remaining, 'remaining');
  if (!reply.admitted) {
    const retry = reply.retryAfter;
    return {
      admitted: false,
      budgetId: reply.budgetId,
      reason: suffix(pb.refusalReasonToJSON(reply.reason), 'REFUSAL_REASON_'),
      message: reply.message,
      remaining,
      refusedBudgetId: reply.refusedBudgetId,
      retryAfterMs: retry ? Number(retry.seconds) * 1000 + Math.floor(retry.nanos / 1e6) : null,
      resetsAt: reply.resetsAt ?? null,
    };
  }
  return {
    admitted: true,
    reservationId: reply.reservationId,
    budgetId: reply.budgetId,
    amount: num(reply.amount, 'amount'),
    remaining,
    expiresAt: reply.expiresAt ?? new Date(),
    estimateSource: suffix(pb.estimateSourceToJSON(reply.estimateSource), 'ESTIMATE_SOURCE_'),
    priceVersion: num(reply.priceVersion, 'price_version'),
    overLimit: reply.overLimit,
    charged: num(reply.charged, 'charged'),
    maxOutputTokens: num(reply.maxOutputTokens, 'max_output_tokens'),
    degraded: reply.degraded,
    resetsAt: reply.resetsAt ?? null,
    wouldRefuse: reply.wouldRefuse,
    wouldRefuseReason: suffix(pb.refusalReasonToJSON(reply.wouldRefuseReason), 'REFUSAL_REASON_'),
  };
}

export function chargedOf(reply: pb.ChargeResponse): Charged {
  return {
    charged: num(reply.charged, 'charged'),
    capped: reply.capped,
    totalCharged: num(reply.totalCharged, 'total_charged'),
    holdRemaining: num(reply.holdRemaining, 'hold_remaining'),
    expiresAt: reply.expiresAt ?? null,
    priceVersion: num(reply.priceVersion, 'price_version'),
    requested: num(reply.requested, 'requested'),
    outputUsdMicrosPerMtok: num(reply.outputUsdMicrosPerMtok, 'output_usd_micros_per_mtok'),
  };
}

export function settledOf(reply: pb.SettleResponse): Settled {
  return {
    charged: num(reply.charged, 'charged'),
    released: num(reply.released, 'released'),
    overshoot: num(reply.overshoot, 'overshoot'),
    state: suffix(pb.reservationStateToJSON(reply.state), 'RESERVATION_STATE_'),
    priceVersion: num(reply.priceVersion, 'price_version'),
  };
}

export function budgetStateOf(reply: pb.BudgetState): BudgetState {
  const maybe = (v: bigint | undefined, what: string) => (v === undefined ? null : num(v, what));
  return {
    budgetId: reply.budgetId,
    limit: maybe(reply.limit, 'limit'),
    used: num(reply.used, 'used'),
    held: num(reply.held, 'held'),
    remaining: maybe(reply.remaining, 'remaining'),
    unit: reply.unit,
    openReservations: num(reply.openReservations, 'open_reservations'),
    defaultEstimate: maybe(reply.defaultEstimate, 'default_estimate'),
    exceeded: reply.exceeded,
    period: reply.period === pb.Period.PERIOD_UNSPECIFIED ? 'NEVER' : suffix(pb.periodToJSON(reply.period), 'PERIOD_'),
    timezone: reply.timezone,
    periodAnchor: reply.periodAnchor,
    periodStart: reply.periodStart ?? null,
    resetsAt: reply.resetsAt ?? null,
    mode: reply.mode === pb.BudgetMode.BUDGET_MODE_OBSERVE ? 'OBSERVE' : 'ENFORCE',
    thresholdBps: [...reply.thresholdBps],
    admissionsPerMinute: maybe(reply.admissionsPerMinute, 'admissions_per_minute'),
    unitsPerMinute: maybe(reply.unitsPerMinute, 'units_per_minute'),
    thresholdBasis: reply.thresholdBasis === pb.ThresholdBasis.THRESHOLD_BASIS_USED ? 'USED' : 'COMMITTED',
    refusals: num(reply.refusals, 'refusals'),
    firstRefusedAt: reply.firstRefusedAt ?? null,
    lastRefusedAt: reply.lastRefusedAt ?? null,
    maxOpenHolds: maybe(reply.maxOpenHolds, 'max_open_holds'),
    maxAdmissions: maybe(reply.maxAdmissions, 'max_admissions'),
    closesAt: reply.closesAt ?? null,
    admissions: num(reply.admissions, 'admissions'),
    limitUntil: reply.limitUntil ?? null,
    limitAfter: reply.limitUntil ? maybe(reply.limitAfter, 'limit_after') : null,
    limitReason: reply.limitReason,
    templateId: reply.templateId,
    changedByHand: reply.changedByHand,
  };
}

export function shapeToWire(shape: Shape): pb.UsageShape {
  return {
    provider: shape.provider,
    model: shape.model,
    inputTokens: int64(shape.inputTokens, 'shape.inputTokens'),
    maxOutputTokens: int64(shape.maxOutputTokens, 'shape.maxOutputTokens'),
    cachedInputTokens: int64(shape.cachedInputTokens ?? 0, 'shape.cachedInputTokens'),
    cacheWriteInputTokens: int64(shape.cacheWriteInputTokens ?? 0, 'shape.cacheWriteInputTokens'),
    cacheWriteLongInputTokens: int64(
      shape.cacheWriteLongInputTokens ?? 0,
      'shape.cacheWriteLongInputTokens',
    ),
    attempts: int64(shape.attempts ?? 0, 'shape.attempts'),
    serviceTier: shape.serviceTier ?? '',
    maxToolCalls: countsToWire(shape.maxToolCalls, 'shape.maxToolCalls'),
    outputCeiling: shape.outputCeiling ?? false,
  };
}

function countsToWire(counts: Record<string, number> | undefined, field: string): Record<string, bigint> {
  const wire: Record<string, bigint> = {};
  for (const [kind, n] of Object.entries(counts ?? {})) {
    wire[kind] = int64(n, `${field}.${kind}`);
  }
  return wire;
}

export function usageToWire(usage: Usage): pb.TokenUsage {
  return {
    inputTokens: int64(usage.inputTokens, 'usage.inputTokens'),
    outputTokens: int64(usage.outputTokens, 'usage.outputTokens'),
    cachedInputTokens: int64(usage.cachedInputTokens ?? 0, 'usage.cachedInputTokens'),
    cacheWriteInputTokens: int64(usage.cacheWriteInputTokens ?? 0, 'usage.cacheWriteInputTokens'),
    cacheWriteLongInputTokens: int64(
      usage.cacheWriteLongInputTokens ?? 0,
      'usage.cacheWriteLongInputTokens',
    ),
    requests: int64(usage.requests ?? 0, 'usage.requests'),
    provider: usage.provider ?? '',
    model: usage.model ?? '',
    serviceTier: usage.serviceTier ?? '',
    toolCalls: countsToWire(usage.toolCalls, 'usage.toolCalls'),
  };
}

export function durationOf(seconds: number): { seconds: bigint; nanos: number } {
  const whole = Math.floor(seconds);
  return { seconds: BigInt(whole), nanos: Math.round((seconds - whole) * 1e9) };
}

export function templateOf(reply: pb.BudgetTemplate): BudgetTemplate {
  const budget = reply.budget ?? pb.PutBudgetRequest.fromPartial({});
  const settings: BudgetSettings = {
    limit: budget.limit === undefined ? null : num(budget.limit, 'limit'),
    unit: budget.unit,
    period:
      budget.period === pb.Period.PERIOD_UNSPECIFIED ? 'NEVER' : suffix<Period>(pb.periodToJSON(budget.period), 'PERIOD_'),
    timezone: budget.timezone,
    periodAnchor: budget.periodAnchor,
    thresholdBps: [...budget.thresholdBps],
    thresholdBasis: budget.thresholdBasis === pb.ThresholdBasis.THRESHOLD_BASIS_USED ? 'USED' : 'COMMITTED',
    mode: budget.mode === pb.BudgetMode.BUDGET_MODE_OBSERVE ? 'OBSERVE' : 'ENFORCE',
  };
  if (budget.defaultEstimate !== undefined) settings.defaultEstimate = num(budget.defaultEstimate, 'default_estimate');
  if (budget.admissionsPerMinute !== undefined) {
    settings.admissionsPerMinute = num(budget.admissionsPerMinute, 'admissions_per_minute');
  }
  if (budget.unitsPerMinute !== undefined) settings.unitsPerMinute = num(budget.unitsPerMinute, 'units_per_minute');
  if (budget.maxOpenHolds !== undefined) settings.maxOpenHolds = num(budget.maxOpenHolds, 'max_open_holds');
  if (budget.maxAdmissions !== undefined) settings.maxAdmissions = num(budget.maxAdmissions, 'max_admissions');
  if (budget.closesAt !== undefined) settings.closesAt = budget.closesAt;
  const template: BudgetTemplate = {
    templateId: reply.templateId,
    pattern: reply.pattern,
    settings,
    version: num(reply.version, 'version'),
    updatedAt: reply.updatedAt ?? new Date(0),
  };
  if (reply.deletedAt !== undefined) template.deletedAt = reply.deletedAt;
  return template;
}
