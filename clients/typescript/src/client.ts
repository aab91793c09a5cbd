// EarmarkClient: Budget's calls (reserve, charge, renew, settle) on the workers' port and a
// few of Admin's (putBudget, updateBudget, getBudget, putPrice, putTemplate, listTemplates,
// deleteTemplate) on the admin listener, over @grpc/grpc-js
// with the messages ts-proto generated from protos/ (src/gen/).
//
// Every call has a deadline (timeoutMs, 5 s by default) and waits within it for the
// sidecar to be ready; when nothing answered by then it throws UnavailableError naming the
// target, without another attempt. Otherwise UNAVAILABLE and DEADLINE_EXCEEDED are retried
// with bounded full-jitter backoff (5 attempts, 50 ms doubling to 2 s), which is safe
// because each call that changes something carries an idempotency key generated once per
// logical call and sent again on every retry (Settle is idempotent by its `used`).
import { randomUUID } from 'node:crypto';
import {
  ChannelCredentials,
  Client as GrpcClient,
  credentials as grpcCredentials,
  Metadata,
  status as Status,
  type ServiceError,
} from '@grpc/grpc-js';
import * as pb from './gen/earmark/v1/budget.js';
import { ClientError, fromServiceError, unreachable } from './errors.js';
import { FINAL_CODES, Journal } from './journal.js';
import {
  BUDGET_MODE,
  budgetStateOf,
  chargedOf,
  durationOf,
  int64,
  OUTCOME,
  PERIOD,
  reservationOf,
  settledOf,
  shapeToWire,
  templateOf,
  usageToWire,
  type BudgetMode,
  type BudgetState,
  type BudgetTemplate,
  type Charged,
  type Outcome,
  type Period,
  type Refusal,
  type Reservation,
  type Settled,
  type Shape,
  type Usage,
} from './types.js';

export const DEFAULT_TARGET = '127.0.0.1:50051';
export const DEFAULT_ADMIN_TARGET = 'unix:.earmark/admin.sock';
export const TARGET_ENV = 'EARMARK_TARGET';
export const ADMIN_TARGET_ENV = 'EARMARK_ADMIN_TARGET';

/** How UNAVAILABLE and DEADLINE_EXCEEDED are retried: at most attemptsMax calls in all,
 * with full-jitter exponential backoff from backoffBaseMs up to backoffMaxMs. */
export interface RetryPolicy {
  attemptsMax: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attemptsMax: 5, backoffBaseMs: 50, backoffMaxMs: 2000 };

/** flush() waits at most this long when given no timeout (the Python SDK's
 * client_flush_seconds_max), and may be given at most FLUSH_TIMEOUT_MS_MAX. */
export const FLUSH_TIMEOUT_MS_DEFAULT = 10_000;
export const FLUSH_TIMEOUT_MS_MAX = 3_600_000;

/** The states a Settle's answer can carry. An answer in any other state is not a settled
 * answer: the Settle may have landed or not, so its journal record stays and recover() sends
 * it again. */
const SETTLE_ANSWER_STATES: ReadonlySet<pb.ReservationState> = new Set([
  pb.ReservationState.RESERVATION_STATE_SETTLED,
  pb.ReservationState.RESERVATION_STATE_EXPIRED,
  pb.ReservationState.RESERVATION_STATE_IN_DOUBT,
]);

/** answer, when it is what a Settle answers; else a ClientError (INTERNAL, which is not
 * final) saying the outcome is unknown. */
function settleAnswer(request: pb.SettleRequest, answer: pb.SettleResponse): pb.SettleResponse {
  const amounts = [answer.charged, answer.released, answer.overshoot];
  if (SETTLE_ANSWER_STATES.has(answer.state) && amounts.every((amount) => amount >= 0n)) return answer;
  throw new ClientError(
    Status.INTERNAL,
    `the settle of reservation ${request.reservationId} was answered with state ${answer.state}, ` +
      `amounts ${amounts.join(', ')}: it may or may not have landed`,
  );
}

/** The wait before attempt + 1: uniform in [0, min(max, base * 2^attempt)]. */
export function backoffMs(policy: RetryPolicy, attempt: number, random: () => number = Math.random): number {
  return random() * Math.min(policy.backoffMaxMs, policy.backoffBaseMs * 2 ** attempt);
}

export interface ClientOptions {
  /** The workers' port; else EARMARK_TARGET, else 127.0.0.1:50051. */
  target?: string;
  /** The admin listener; else EARMARK_ADMIN_TARGET, else unix:.earmark/admin.sock. */
  adminTarget?: string;
  /** The worker token (sent as `authorization: Bearer ...`), when the sidecar has one. */
  token?: string;
  adminToken?: string;
  /** Each call's deadline, per attempt; 5000 by default. */
  timeoutMs?: number;
  retry?: Partial<RetryPolicy>;
  /** TLS (grpc.credentials.createSsl(...)); insecure by default (localhost). */
  credentials?: ChannelCredentials;
  /** Metadata sent with every call beside the token (x-request-id, traceparent...). */
  metadata?: Record<string, string>;
  /** A settlement journal's directory: every Settle is written there before it is sent and
   * removed once answered or refused for good, and recover() sends what a client that died
   * left there (see journal.ts). None by default. */
  journalDir?: string;
}

export interface ReserveOptions {
  /** What the job may cost, priced by the sidecar, instead of an amount. */
  shape?: Shape;
  /** The kind of job, whose estimates learn. */
  job?: string;
  /** With budgetId "": the account's current billing cycle for feature. */
  account?: string;
  feature?: string;
  idempotencyKey?: string;
  /** The lease; the sidecar's default (120 s) when absent. */
  leaseSeconds?: number;
  labels?: Record<string, string>;
  /** Hold the same amount on these budgets too, all or nothing. */
  alsoBudgetIds?: string[];
  /** The job's final phase, which may use a budget's output escrow. */
  final?: boolean;
  /** Usage charged on the new hold at once (a call's prompt, about to be sent). */
  charge?: Usage;
  /** With a shape: hold the largest output the budget covers instead of refusing. */
  degrade?: boolean;
}

export interface ChargeOptions {
  /** What the step consumed, priced now, instead of an amount. */
  usage?: Usage;
  idempotencyKey?: string;
}

export interface SettleOptions {
  /** The job's total usage as the provider reported it, priced now, instead of used. */
  usage?: Usage;
}

/** A budget's settings beside its limit and unit; each one not given takes its default
 * (PutBudget sets every field). */
export interface PutBudgetOptions {
  defaultEstimate?: number;
  /** How often it starts again at zero used and held [NEVER]; a change takes effect at
   * the next boundary. */
  period?: Period;
  /** The IANA timezone whose local midnights the periods start at ['': UTC]. */
  timezone?: string;
  /** WEEK: the ISO weekday a period starts on (1 Monday to 7 Sunday); MONTH, QUARTER,
   * YEAR: the day of the month (1 to 31) [0: the first]. */
  periodAnchor?: number;
  /** Notices at these shares of the limit, in basis points (8000 = 80%), once a period;
   * needs a limit. */
  thresholdBps?: number[];
  /** OBSERVE admits what ENFORCE would refuse, and says so (wouldRefuse) [ENFORCE]. */
  mode?: BudgetMode;
  /** At most this many admissions a minute, over a sliding window [no bound]. */
  admissionsPerMinute?: number;
  /** At most this much held a minute, over a sliding window [no bound]. */
  unitsPerMinute?: number;
  /** What thresholdBps are shares of: COMMITTED, used + held; USED, settled spend alone
   * [COMMITTED]. */
  thresholdBasis?: ThresholdBasis;
  /** Run limits (issue 47): at most this many holds open at once (past it a Reserve is
   * refused TOO_MANY_OPEN), this many Reserves admitted a period (ADMISSIONS_SPENT), none
   * from closesAt on (CLOSED) [no such limit]. */
  maxOpenHolds?: number;
  maxAdmissions?: number;
  closesAt?: Date;
}

/** A budget's whole settings, as putBudget takes them (its limit, null: unlimited; its
 * unit; its options): what putTemplate makes each matching budget with, and what a
 * BudgetTemplate answers. */
export interface BudgetSettings extends PutBudgetOptions {
  limit: number | null;
  unit: string;
}

/** What updateBudget changes: each setting given (not undefined) is named in the update's
 * mask and set; every other stays as the budget has it. null clears an optional one (limit
 * null: unlimited). limitUntil and reason are not settings: with limitUntil (and limit) the
 * limit is temporary, in force until then, the limit before any temporary one after it (at
 * most a year ahead); reason (at most 256 characters) says why the limit changes, kept with
 * its ledger entry and event. */
export interface BudgetChanges {
  limit?: number | null;
  unit?: string;
  defaultEstimate?: number | null;
  period?: Period;
  timezone?: string;
  periodAnchor?: number;
  thresholdBps?: number[];
  thresholdBasis?: ThresholdBasis;
  mode?: BudgetMode;
  admissionsPerMinute?: number | null;
  unitsPerMinute?: number | null;
  maxOpenHolds?: number | null;
  maxAdmissions?: number | null;
  closesAt?: Date | null;
  limitUntil?: Date;
  reason?: string;
}

/** Each BudgetChanges setting, as the mask's path (PutBudgetRequest's field name). */
const CHANGE_PATHS: Record<Exclude<keyof BudgetChanges, 'limitUntil' | 'reason'>, string> = {
  limit: 'limit',
  unit: 'unit',
  defaultEstimate: 'default_estimate',
  period: 'period',
  timezone: 'timezone',
  periodAnchor: 'period_anchor',
  thresholdBps: 'threshold_bps',
  thresholdBasis: 'threshold_basis',
  mode: 'mode',
  admissionsPerMinute: 'admissions_per_minute',
  unitsPerMinute: 'units_per_minute',
  maxOpenHolds: 'max_open_holds',
  maxAdmissions: 'max_admissions',
  closesAt: 'closes_at',
};

export type ThresholdBasis = 'COMMITTED' | 'USED';
const THRESHOLD_BASIS: Record<ThresholdBasis, pb.ThresholdBasis> = {
  COMMITTED: pb.ThresholdBasis.THRESHOLD_BASIS_COMMITTED,
  USED: pb.ThresholdBasis.THRESHOLD_BASIS_USED,
};

export interface Price {
  provider: string;
  model: string;
  effectiveFrom: Date;
  inputUsdMicrosPerMtok: number;
  outputUsdMicrosPerMtok: number;
  cachedInputUsdMicrosPerMtok?: number;
  cacheWriteUsdMicrosPerMtok?: number;
  requestUsdMicros?: number;
  source?: string;
  /** The most output tokens one call of the model may produce: the cap a call that sets
   * none is sent with (0 or absent: unknown, so such a call is refused). */
  maxOutputTokens?: number;
  /** One-hour cache writes (Anthropic's); 0 or absent: the cache-write rate. */
  cacheWriteLongUsdMicrosPerMtok?: number;
  /** The service tier these rates are for ("priority", "flex"); '' or absent: the default. */
  serviceTier?: string;
  /** A fee per server tool call, by kind (e.g. web_search), in micro-dollars. */
  toolUsdMicros?: Record<string, number>;
}

type Unary<Req, Res> = (
  request: Req,
  metadata: Metadata,
  options: { deadline: Date },
  callback: (error: ServiceError | null, response: Res) => void,
) => unknown;

const RETRIED = new Set<Status>([Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED]);

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Each client's Settles under way, and the holds metered clients keep open on it past
// their call's answer (a background response's), each with what ends it in doubt: for
// metered.ts, which settles such holds in the background (flush() waits for them) and
// leaves close() to end those still open.
const SETTLING = new WeakMap<EarmarkClient, Set<Promise<unknown>>>();
const KEPT = new WeakMap<EarmarkClient, Map<object, () => Promise<void>>>();

/** Counts work (a Settle that starts once its hold's labels are sent) among client's
 * settles under way, which flush() waits for. */
export function settlingOn(client: EarmarkClient, work: Promise<unknown>): void {
  const settling = SETTLING.get(client);
  if (settling === undefined) return;
  settling.add(work);
  const done = (): void => void settling.delete(work);
  work.then(done, done);
}

/** The holds kept open on client past their call's answer, each with what ends it in doubt
 * (answering once its Settle is answered): close() ends them. */
export function keptOn(client: EarmarkClient): Map<object, () => Promise<void>> {
  let kept = KEPT.get(client);
  if (kept === undefined) {
    kept = new Map();
    KEPT.set(client, kept);
  }
  return kept;
}

export class EarmarkClient {
  readonly target: string;
  readonly adminTarget: string;
  readonly timeoutMs: number;
  readonly retry: RetryPolicy;
  private readonly budget: pb.BudgetClient;
  private adminStub: pb.AdminClient | null = null;
  private readonly credentials: ChannelCredentials;
  private readonly metadata: Metadata;
  private readonly adminMetadata: Metadata;
  private readonly journal: Journal | null;
  // Every Settle under way, whoever awaits it (a hold's end, a metered call's, a caller's
  // settle()): flush() waits for these.
  private readonly settling = new Set<Promise<unknown>>();

  constructor(options: ClientOptions = {}) {
    SETTLING.set(this, this.settling);
    this.target = options.target || process.env[TARGET_ENV] || DEFAULT_TARGET;
    this.adminTarget = options.adminTarget || process.env[ADMIN_TARGET_ENV] || DEFAULT_ADMIN_TARGET;
    this.timeoutMs = options.timeoutMs ?? 5000;
    if (!(this.timeoutMs > 0 && this.timeoutMs <= 3_600_000)) {
      throw new RangeError(`timeoutMs must be over 0 and at most 3600000, not ${this.timeoutMs}`);
    }
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    const { attemptsMax, backoffBaseMs, backoffMaxMs } = this.retry;
    if (!(Number.isInteger(attemptsMax) && attemptsMax >= 1 && attemptsMax <= 20)) {
      throw new RangeError(`retry.attemptsMax must be from 1 to 20, not ${attemptsMax}`);
    }
    if (!(backoffBaseMs > 0 && backoffBaseMs <= backoffMaxMs && backoffMaxMs <= 60_000)) {
      throw new RangeError(
        `retry backoff must be 0 < backoffBaseMs <= backoffMaxMs <= 60000, not ${backoffBaseMs} and ${backoffMaxMs}`,
      );
    }
    this.credentials = options.credentials ?? grpcCredentials.createInsecure();
    this.metadata = metadataOf(options.token, options.metadata);
    this.adminMetadata = metadataOf(options.adminToken, options.metadata);
    // The journal first: a directory it refuses (UnsafeJournalError) leaves no channel open.
    this.journal = options.journalDir ? new Journal(options.journalDir) : null;
    this.budget = new pb.BudgetClient(this.target, this.credentials);
  }

  private admin(): pb.AdminClient {
    this.adminStub ??= new pb.AdminClient(this.adminTarget, this.credentials);
    return this.adminStub;
  }

  /** Sends request (the same one, so the same idempotency key) until it is answered, or
   * fails with something other than UNAVAILABLE or DEADLINE_EXCEEDED, or the attempts run
   * out; a failure becomes the most specific ClientError. */
  private async unary<Req, Res>(
    stub: GrpcClient,
    call: Unary<Req, Res>,
    request: Req,
    target: string,
    metadata: Metadata,
  ): Promise<Res> {
    for (let attempt = 0; ; attempt += 1) {
      const deadline = new Date(Date.now() + this.timeoutMs);
      const ready = await new Promise<boolean>((resolve) =>
        stub.waitForReady(deadline, (error) => resolve(error === undefined || error === null)),
      );
      if (!ready) throw unreachable(target, this.timeoutMs);
      try {
        return await new Promise<Res>((resolve, reject) => {
          call.call(stub, request, metadata, { deadline }, (error, response) =>
            error ? reject(error) : resolve(response),
          );
        });
      } catch (error) {
        const failure = error as ServiceError;
        if (typeof failure.code !== 'number') throw error;
        if (!RETRIED.has(failure.code) || attempt + 1 >= this.retry.attemptsMax) {
          throw fromServiceError(failure, target);
        }
      }
      await sleep(backoffMs(this.retry, attempt));
    }
  }

  private budgetCall<Req, Res>(call: Unary<Req, Res>, request: Req): Promise<Res> {
    return this.unary(this.budget, call, request, this.target, this.metadata);
  }

  private adminCall<Req, Res>(call: (stub: pb.AdminClient) => Unary<Req, Res>, request: Req): Promise<Res> {
    const stub = this.admin();
    return this.unary(stub, call(stub), request, this.adminTarget, this.adminMetadata);
  }

  /** Checks and holds part of budgetId: amount, or what options.shape may cost, or
   * (neither) the sidecar's estimate for options.job. A refusal is returned, not thrown. */
  async reserve(budgetId: string, amount = 0, options: ReserveOptions = {}): Promise<Reservation | Refusal> {
    const request: pb.ReserveRequest = {
      budgetId,
      amount: int64(amount, 'amount'),
      idempotencyKey: options.idempotencyKey ?? randomUUID(),
      lease: options.leaseSeconds === undefined ? undefined : durationOf(options.leaseSeconds),
      labels: { ...options.labels },
      shape: options.shape === undefined ? undefined : shapeToWire(options.shape),
      job: options.job ?? '',
      account: options.account ?? '',
      feature: options.feature ?? '',
      alsoBudgetIds: [...(options.alsoBudgetIds ?? [])],
      phase: options.final ? pb.Phase.PHASE_FINAL : pb.Phase.PHASE_UNSPECIFIED,
      charge: options.charge === undefined ? undefined : usageToWire(options.charge),
      degrade: options.degrade ?? false,
    };
    return reservationOf(await this.budgetCall(this.budget.reserve, request));
  }

  /** Debits one step against the hold before the step runs: an amount, or usage priced
   * now; capped means the hold is spent. */
  async charge(reservationId: string, amount = 0, options: ChargeOptions = {}): Promise<Charged> {
    const request: pb.ChargeRequest = {
      reservationId,
      amount: int64(amount, 'amount'),
      idempotencyKey: options.idempotencyKey ?? randomUUID(),
      usage: options.usage === undefined ? undefined : usageToWire(options.usage),
    };
    return chargedOf(await this.budgetCall(this.budget.charge, request));
  }

  /** Extends the lease to now + leaseSeconds (the sidecar's default when absent); answers
   * the new deadline. */
  async renew(reservationId: string, leaseSeconds?: number, options: { labels?: Record<string, string> } = {}): Promise<Date> {
    const request: pb.RenewRequest = {
      reservationId,
      lease: leaseSeconds === undefined ? undefined : durationOf(leaseSeconds),
      labels: { ...options.labels },
    };
    const reply = await this.budgetCall(this.budget.renew, request);
    return reply.expiresAt ?? new Date();
  }

  /** Charges what the job used in all (absolute) and returns the rest of the hold. */
  async settle(
    reservationId: string,
    used: number,
    outcome: Outcome = 'SUCCEEDED',
    options: SettleOptions = {},
  ): Promise<Settled> {
    const request: pb.SettleRequest = {
      reservationId,
      used: int64(used, 'used'),
      outcome: OUTCOME[outcome],
      usage: options.usage === undefined ? undefined : usageToWire(options.usage),
    };
    const sent =
      this.journal === null ? this.budgetCall(this.budget.settle, request) : this.journaled(this.journal, request);
    settlingOn(this, sent);
    return settledOf(await sent);
  }

  /** Settle, its request on disk before it leaves, removed once answered or refused for
   * good; left for recover() when the answer may yet come. */
  private async journaled(journal: Journal, request: pb.SettleRequest): Promise<pb.SettleResponse> {
    let record: string;
    try {
      record = await journal.write(request);
    } catch (error) {
      // The journal's own failure is the operator's to know, and it does not stop the settle:
      // sent without a record, the spend is only as safe as without a journal.
      process.emitWarning(
        `earmark journal: the settle of ${request.reservationId} could not be written (${(error as Error).message}); sending it without a record`,
      );
      return settleAnswer(request, await this.budgetCall(this.budget.settle, request));
    }
    let answer: pb.SettleResponse;
    try {
      answer = settleAnswer(request, await this.budgetCall(this.budget.settle, request));
    } catch (error) {
      if (error instanceof ClientError && FINAL_CODES.has(error.code)) await this.forget(journal, record, request);
      throw error;
    }
    await this.forget(journal, record, request);
    return answer;
  }

  /** Removes an answered record. A removal that fails is a warning, not the settle's failure:
   * the record is sent again later and answered the same. */
  private async forget(journal: Journal, record: string, request: pb.SettleRequest): Promise<void> {
    try {
      await journal.remove(record, request.reservationId);
    } catch (error) {
      process.emitWarning(
        `earmark journal: the answered settle of ${request.reservationId} stays on disk (${(error as Error).message})`,
      );
    }
  }

  /** Waits, at most timeoutMs, for the settles under way (settle(), hold()'s and the metered
   * clients', which settle through it). Resolves true when all of them were answered (or
   * failed), false when some were still unanswered at the timeout: those are not cancelled,
   * and their journal records stay on disk for the next recover(), so a worker shutting
   * down may close() and exit then. */
  async flush(timeoutMs: number = FLUSH_TIMEOUT_MS_DEFAULT): Promise<boolean> {
    if (!(timeoutMs >= 0 && timeoutMs <= FLUSH_TIMEOUT_MS_MAX)) {
      throw new RangeError(`timeoutMs must be from 0 to ${FLUSH_TIMEOUT_MS_MAX}, not ${timeoutMs}`);
    }
    const deadline = Date.now() + timeoutMs;
    // Again while the wait lasts: a settle may start meanwhile (a stream read to its end).
    while (this.settling.size > 0) {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), left);
      });
      const answered = Promise.allSettled([...this.settling]).then(() => false);
      const timedOut = await Promise.race([answered, late]);
      clearTimeout(timer);
      if (timedOut) return this.settling.size === 0;
    }
    return true;
  }

  /** Sends again every Settle the journal holds (a client that died before its answer
   * came), each as it was first sent, oldest first; resolves to how many were answered or
   * refused for good (and removed). Those that fail for now stay for the next recover(),
   * each named in a warning. Without a journalDir, 0. */
  async recover(): Promise<number> {
    if (this.journal === null) return 0;
    let done = 0;
    for (const { path: record, request } of await this.journal.pending()) {
      try {
        settleAnswer(request, await this.budgetCall(this.budget.settle, request));
      } catch (error) {
        if (!(error instanceof ClientError)) throw error;
        if (!FINAL_CODES.has(error.code)) {
          process.emitWarning(`earmark journal: settle of ${request.reservationId} not sent yet: ${error.message}`);
          continue;
        }
      }
      await this.forget(this.journal, record, request);
      done += 1;
    }
    return done;
  }

  /** Admin: a budget's limit, used, held and remaining. */
  async getBudget(budgetId: string): Promise<BudgetState> {
    return budgetStateOf(await this.adminCall((s) => s.getBudget, { budgetId }));
  }

  /** Admin: creates or replaces a budget (limit null: unlimited). */
  async putBudget(
    budgetId: string,
    limit: number | null,
    unit: string,
    options: PutBudgetOptions = {},
  ): Promise<BudgetState> {
    const request = putBudgetRequest(budgetId, limit, unit, options);
    return budgetStateOf(await this.adminCall((s) => s.putBudget, request));
  }

  /** Admin: creates or replaces a budget template (PutBudgetTemplate, issue 47): a budget
   * whose id matches pattern (a budget id with one '/'-separated segment that is '*' alone,
   * as 'end-user/*') and does not exist is made with settings (putBudget's) on its first
   * Reserve. Throws FailedPreconditionError for a pattern that overlaps another template's,
   * or past the most templates there may be; InvalidArgumentError naming the field for an
   * id, pattern or setting refused. */
  async putTemplate(templateId: string, pattern: string, settings: BudgetSettings): Promise<BudgetTemplate> {
    const { limit, unit, ...options } = settings;
    const request: pb.PutBudgetTemplateRequest = {
      templateId,
      pattern,
      budget: putBudgetRequest('', limit, unit, options),
    };
    return templateOf(await this.adminCall((s) => s.putBudgetTemplate, request));
  }

  /** Admin: every budget template (ListBudgetTemplates). */
  async listTemplates(): Promise<BudgetTemplate[]> {
    const reply = await this.adminCall((s) => s.listBudgetTemplates, {});
    return reply.templates.map(templateOf);
  }

  /** Admin: deletes a budget template (DeleteBudgetTemplate): no budget is made from it from
   * now on; those made from it stay as they are. Answers it, with deletedAt. */
  async deleteTemplate(templateId: string): Promise<BudgetTemplate> {
    return templateOf(await this.adminCall((s) => s.deleteBudgetTemplate, { templateId }));
  }

  /** Admin: changes only the settings given of an existing budget (UpdateBudget,
   * AIP-134); every other stays. updateMask, when given, names the fields instead
   * (PutBudgetRequest's names, or ['*'] for every field, as putBudget); a field it names
   * that is not given is cleared. changes.limitUntil makes the limit given temporary, and
   * changes.reason says why (see BudgetChanges). Throws BudgetNotFoundError for a budget
   * that does not exist, InvalidArgumentError naming the field for a merge PutBudget would
   * refuse (or a limitUntil not ahead, too far ahead or without limit, or a reason too
   * long), and RangeError when nothing is named. */
  async updateBudget(budgetId: string, changes: BudgetChanges, updateMask?: string[]): Promise<BudgetState> {
    const given = (Object.keys(CHANGE_PATHS) as (keyof typeof CHANGE_PATHS)[]).filter((k) => changes[k] !== undefined);
    const paths = updateMask ?? given.map((k) => CHANGE_PATHS[k]).sort();
    if (paths.length === 0) throw new RangeError('updateBudget: give a setting to change, or an updateMask');
    const optional = (v: number | null | undefined, what: string) =>
      v === undefined || v === null ? undefined : int64(v, what);
    const budget: pb.PutBudgetRequest = {
      budgetId,
      limit: optional(changes.limit, 'limit'),
      unit: changes.unit ?? '',
      defaultEstimate: optional(changes.defaultEstimate, 'defaultEstimate'),
      estimatePolicy: pb.EstimatePolicy.ESTIMATE_POLICY_UNSPECIFIED,
      escrowBps: 0,
      overagePolicy: pb.OveragePolicy.OVERAGE_POLICY_UNSPECIFIED,
      overageLimit: undefined,
      period: PERIOD[changes.period ?? 'NEVER'],
      timezone: changes.timezone ?? '',
      periodAnchor: changes.periodAnchor ?? 0,
      thresholdBps: [...(changes.thresholdBps ?? [])],
      thresholdBasis: THRESHOLD_BASIS[changes.thresholdBasis ?? 'COMMITTED'],
      mode: BUDGET_MODE[changes.mode ?? 'ENFORCE'],
      admissionsPerMinute: optional(changes.admissionsPerMinute, 'admissionsPerMinute'),
      unitsPerMinute: optional(changes.unitsPerMinute, 'unitsPerMinute'),
      maxOpenHolds: optional(changes.maxOpenHolds, 'maxOpenHolds'),
      maxAdmissions: optional(changes.maxAdmissions, 'maxAdmissions'),
      closesAt: changes.closesAt ?? undefined,
    };
    const request: pb.UpdateBudgetRequest = {
      budget,
      updateMask: paths,
      limitUntil: changes.limitUntil,
      reason: changes.reason ?? '',
    };
    return budgetStateOf(await this.adminCall((s) => s.updateBudget, request));
  }

  /** Admin: appends a price version for a provider's model; answers its version. */
  async putPrice(price: Price): Promise<number> {
    const wire = pb.Price.fromPartial({
      provider: price.provider,
      model: price.model,
      effectiveFrom: price.effectiveFrom,
      inputUsdMicrosPerMtok: int64(price.inputUsdMicrosPerMtok, 'inputUsdMicrosPerMtok'),
      outputUsdMicrosPerMtok: int64(price.outputUsdMicrosPerMtok, 'outputUsdMicrosPerMtok'),
      cachedInputUsdMicrosPerMtok: int64(price.cachedInputUsdMicrosPerMtok ?? 0, 'cachedInputUsdMicrosPerMtok'),
      cacheWriteUsdMicrosPerMtok: int64(price.cacheWriteUsdMicrosPerMtok ?? 0, 'cacheWriteUsdMicrosPerMtok'),
      requestUsdMicros: int64(price.requestUsdMicros ?? 0, 'requestUsdMicros'),
      source: price.source ?? '',
      maxOutputTokens: int64(price.maxOutputTokens ?? 0, 'maxOutputTokens'),
      cacheWriteLongUsdMicrosPerMtok: int64(
        price.cacheWriteLongUsdMicrosPerMtok ?? 0,
        'cacheWriteLongUsdMicrosPerMtok',
      ),
      serviceTier: price.serviceTier ?? '',
      toolUsdMicros: Object.fromEntries(
        Object.entries(price.toolUsdMicros ?? {}).map(([kind, fee]) => [kind, int64(fee, `toolUsdMicros.${kind}`)]),
      ),
    });
    const reply = await this.adminCall((s) => s.putPrice, { price: wire });
    return Number(reply.version);
  }

  /**
   * Ends the holds metered clients keep open for calls still running at the provider (a
   * background response's: in doubt, its id recorded on the hold for `earmark reconcile`),
   * then closes the channels: at once when there are none, else once their Settles are
   * answered (within flush()'s default wait). Calls after this fail; any other settle still
   * under way fails, and its journal record stays for recover(): on shutdown,
   * `await flush(timeoutMs)` first.
   */
  close(): Promise<void> {
    const ending = [...keptOn(this).values()].map((end) => end());
    if (ending.length === 0) {
      this.closeChannels();
      return Promise.resolve();
    }
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, FLUSH_TIMEOUT_MS_DEFAULT);
    });
    return Promise.race([Promise.allSettled(ending), late]).then(() => {
      clearTimeout(timer);
      this.closeChannels();
    });
  }

  private closeChannels(): void {
    this.budget.close();
    this.adminStub?.close();
  }

  [Symbol.dispose](): void {
    void this.close();
  }
}

/** PutBudget's request: budgetId (ignored in a template's) with limit (null: unlimited),
 * unit and options; each option not given takes its default. */
function putBudgetRequest(
  budgetId: string,
  limit: number | null,
  unit: string,
  options: PutBudgetOptions,
): pb.PutBudgetRequest {
  return {
    budgetId,
    limit: limit === null ? undefined : int64(limit, 'limit'),
    unit,
    defaultEstimate:
      options.defaultEstimate === undefined ? undefined : int64(options.defaultEstimate, 'defaultEstimate'),
    estimatePolicy: pb.EstimatePolicy.ESTIMATE_POLICY_UNSPECIFIED,
    escrowBps: 0,
    overagePolicy: pb.OveragePolicy.OVERAGE_POLICY_UNSPECIFIED,
    overageLimit: undefined,
    period: PERIOD[options.period ?? 'NEVER'],
    timezone: options.timezone ?? '',
    periodAnchor: options.periodAnchor ?? 0,
    thresholdBps: [...(options.thresholdBps ?? [])],
    thresholdBasis: THRESHOLD_BASIS[options.thresholdBasis ?? 'COMMITTED'],
    mode: BUDGET_MODE[options.mode ?? 'ENFORCE'],
    admissionsPerMinute:
      options.admissionsPerMinute === undefined
        ? undefined
        : int64(options.admissionsPerMinute, 'admissionsPerMinute'),
    unitsPerMinute:
      options.unitsPerMinute === undefined ? undefined : int64(options.unitsPerMinute, 'unitsPerMinute'),
    maxOpenHolds: options.maxOpenHolds === undefined ? undefined : int64(options.maxOpenHolds, 'maxOpenHolds'),
    maxAdmissions: options.maxAdmissions === undefined ? undefined : int64(options.maxAdmissions, 'maxAdmissions'),
    closesAt: options.closesAt,
  };
}

function metadataOf(token: string | undefined, extra: Record<string, string> | undefined): Metadata {
  const metadata = new Metadata();
  if (token) metadata.set('authorization', `Bearer ${token}`);
  for (const [key, value] of Object.entries(extra ?? {})) metadata.set(key, value);
  return metadata;
}
