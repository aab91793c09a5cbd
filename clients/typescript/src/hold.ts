// hold(): the main way a worker uses Earmark.
//
//   const answer = await hold(client, 'acme/tokens', 40_000, async (h) => {
//     const step = await h.charge(estimate);     // before the step runs
//     if (step.capped) return null;              // the hold is spent: stop
//     const reply = await llm(prompt);
//     h.used = tokensUsedInAll;                  // the truth, settled at the end
//     return reply;
//   });
//
// It reserves (throwing RefusedError, or with returnRefusal handing the Refusal back
// without running fn); while fn runs it renews the lease at a third of its length; in
// `finally` it settles: SUCCEEDED with h.used (what was charged, if fn never set it), FAILED
// when fn throws, CANCELLED when the caller's signal aborted, before the error reaches the
// caller. If a renewal finds the hold gone, h.signal aborts and the next charge throws
// HoldLostError. A retry of the expensive work must take a new hold: each hold() has its own
// idempotency key, so a cheap first attempt never authorizes an expensive second one.
import { randomUUID } from 'node:crypto';
import type { EarmarkClient, ReserveOptions } from './client.js';
import {
  EarmarkClientError,
  HoldClosedError,
  HoldLostError,
  InvalidArgumentError,
  ReservationNotFoundError,
} from './errors.js';
import { RefusedError, type Charged, type Outcome, type Refusal, type Reservation, type Settled, type Usage } from './types.js';

export interface HoldOptions extends Omit<ReserveOptions, 'idempotencyKey'> {
  /** Aborting it settles the hold CANCELLED (fn should stop on h.signal). */
  signal?: AbortSignal;
  /** Hand a refusal back instead of throwing RefusedError; fn does not run. */
  returnRefusal?: boolean;
}

// Renew when this fraction of the lease has passed, so two renewals can fail in a row
// before the hold expires.
const RENEW_FRACTION = 1 / 3;
const LEASE_SECONDS_MIN = 1;

function gone(error: unknown): boolean {
  return error instanceof HoldClosedError || error instanceof ReservationNotFoundError;
}

/** One reservation for the length of fn. */
export class Hold {
  readonly client: EarmarkClient;
  readonly budgetId: string;
  readonly amount: number;
  readonly idempotencyKey = randomUUID();
  /** What the job used in all, set before fn ends; else what was charged is settled. */
  used: number | null = null;
  /** The provider's usage in all, priced by the sidecar; wins over used. */
  usage: Usage | null = null;
  /** How the hold settles; decided from how fn ended unless set. */
  outcome: Outcome | null = null;
  charged = 0;
  reservation: Reservation | null = null;
  refusal: Refusal | null = null;
  settled: Settled | null = null;
  private lost: unknown = null;
  private timer: NodeJS.Timeout | null = null;
  private readonly controller = new AbortController();
  private combined: AbortSignal | null = null;
  private readonly options: HoldOptions;
  // Labels added by label() that no Renew has carried yet: the next renewal carries them,
  // so that a Renew that failed does not lose them.
  private readonly unsent: Record<string, string> = {};

  constructor(client: EarmarkClient, budgetId: string, amount: number, options: HoldOptions = {}) {
    this.client = client;
    this.budgetId = budgetId;
    this.amount = amount;
    this.options = options;
  }

  /** Aborts when the caller's signal does, or when the hold was found gone. */
  get signal(): AbortSignal {
    this.combined ??= this.options.signal
      ? AbortSignal.any([this.options.signal, this.controller.signal])
      : this.controller.signal;
    return this.combined;
  }

  get admitted(): boolean {
    return this.reservation !== null;
  }

  get reservationId(): string {
    if (this.reservation === null) throw new RefusedError(this.refusal!);
    return this.reservation.reservationId;
  }

  /** Reserves; a refusal is kept in this.refusal (and thrown unless returnRefusal). */
  async start(): Promise<this> {
    const { signal: _signal, returnRefusal, ...reserve } = this.options;
    const result = await this.client.reserve(this.budgetId, this.amount, {
      ...reserve,
      idempotencyKey: this.idempotencyKey,
    });
    if (!result.admitted) {
      this.refusal = result;
      if (!returnRefusal) throw new RefusedError(result);
      return this;
    }
    this.reservation = result;
    // What the Reserve charged at once (a call's prompt) is charged like any Charge: a
    // settle that falls back to what was charged counts it.
    this.charged = result.charged;
    this.scheduleRenewal();
    return this;
  }

  /** Debits one step against the hold before the step runs: an amount, or usage. */
  async charge(amount: number | { usage: Usage }, idempotencyKey?: string): Promise<Charged> {
    const rid = this.reservationId;
    if (this.lost !== null) throw new HoldLostError(`reservation ${rid} is gone: ${String(this.lost)}`, this.lost);
    try {
      const result =
        typeof amount === 'number'
          ? await this.client.charge(rid, amount, { idempotencyKey })
          : await this.client.charge(rid, 0, { usage: amount.usage, idempotencyKey });
      this.charged = result.totalCharged;
      return result;
    } catch (error) {
      if (gone(error)) {
        this.markLost(error);
        throw new HoldLostError(`reservation ${rid} is gone: ${(error as Error).message}`, error);
      }
      throw error;
    }
  }

  /**
   * Adds labels to the hold now, in a Renew that carries them: what was learned after the
   * Reserve (the provider's id for a call that runs on after its answer). When that Renew
   * fails the next renewal carries them again; labels the sidecar refuses
   * (InvalidArgumentError: past its bounds, or a key the hold has with another value) are
   * dropped and thrown, and a hold that is gone throws HoldLostError.
   */
  async label(labels: Record<string, string>): Promise<void> {
    const rid = this.reservationId;
    Object.assign(this.unsent, labels);
    try {
      await this.renewCarrying(rid);
    } catch (error) {
      if (error instanceof InvalidArgumentError) {
        // Sent again, they would fail every renewal after this one, and the lease.
        for (const key of Object.keys(labels)) delete this.unsent[key];
      } else if (gone(error)) {
        this.markLost(error);
        throw new HoldLostError(`reservation ${rid} is gone: ${(error as Error).message}`, error);
      }
      throw error;
    }
  }

  /** One Renew, with the labels no Renew has carried yet; those it carried are not sent
   * again. */
  private async renewCarrying(reservationId: string): Promise<void> {
    const carried = { ...this.unsent };
    await this.client.renew(reservationId, this.options.leaseSeconds, { labels: carried });
    for (const [key, value] of Object.entries(carried)) if (this.unsent[key] === value) delete this.unsent[key];
  }

  private markLost(error: unknown): void {
    this.lost = error;
    this.controller.abort(new HoldLostError(`reservation ${this.reservation?.reservationId} is gone`, error));
  }

  private leaseMs(): number {
    if (this.options.leaseSeconds !== undefined) return this.options.leaseSeconds * 1000;
    const granted = this.reservation!.expiresAt.getTime() - Date.now();
    return Math.max(LEASE_SECONDS_MIN * 1000, granted);
  }

  private scheduleRenewal(): void {
    const period = this.leaseMs() * RENEW_FRACTION;
    this.timer = setTimeout(() => void this.renewOnce(), period);
    // A renewal never keeps the process alive by itself: fn's own work does.
    this.timer.unref();
  }

  private async renewOnce(): Promise<void> {
    if (this.timer === null) return;
    try {
      await this.renewCarrying(this.reservationId);
    } catch (error) {
      if (gone(error)) {
        this.markLost(error);
        return;
      }
      if (error instanceof InvalidArgumentError) {
        // Labels the sidecar refuses would fail every renewal, and so the lease.
        process.emitWarning(
          `earmark labels ${Object.keys(this.unsent).sort().join(', ')} of reservation ${this.reservationId} dropped: ${error.message}`,
        );
        for (const key of Object.keys(this.unsent)) delete this.unsent[key];
        if (this.timer !== null) this.scheduleRenewal();
        return;
      }
      // Still unreachable after the client's retries: the lease may yet hold, so try again
      // at the next tick.
      process.emitWarning(
        `earmark renew of reservation ${this.reservationId} failed (retried at the next ` +
          `renewal; the work goes on): ${(error as Error).message}`,
      );
    }
    if (this.timer !== null) this.scheduleRenewal();
  }

  /** Stops renewing and settles: outcome (else what error says), at this.usage, else
   * this.used, else what was charged. */
  async finish(error?: unknown, failed = error !== undefined): Promise<Settled | null> {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.reservation === null || this.settled !== null) return this.settled;
    let outcome = this.outcome;
    if (outcome === null) {
      if (this.options.signal?.aborted) outcome = 'CANCELLED';
      else if (!failed) outcome = 'SUCCEEDED';
      else if (error instanceof Error && error.name === 'AbortError') {
        outcome = 'CANCELLED';
      } else outcome = 'FAILED';
    }
    const used = this.usage !== null ? 0 : (this.used ?? this.charged);
    this.settled = await this.client.settle(this.reservation.reservationId, used, outcome, {
      usage: this.usage ?? undefined,
    });
    return this.settled;
  }
}

/** Runs fn under a hold of amount on budgetId (see the module's text); answers what fn
 * answered, or, with returnRefusal, the Refusal when the Reserve said no. */
export async function hold<T>(
  client: EarmarkClient,
  budgetId: string,
  amount: number,
  fn: (h: Hold) => Promise<T> | T,
  options: HoldOptions & { returnRefusal: true },
): Promise<T | Refusal>;
export async function hold<T>(
  client: EarmarkClient,
  budgetId: string,
  amount: number,
  fn: (h: Hold) => Promise<T> | T,
  options?: HoldOptions,
): Promise<T>;
export async function hold<T>(
  client: EarmarkClient,
  budgetId: string,
  amount: number,
  fn: (h: Hold) => Promise<T> | T,
  options: HoldOptions = {},
): Promise<T | Refusal> {
  const h = await new Hold(client, budgetId, amount, options).start();
  if (h.refusal !== null) return h.refusal;
  let result: T;
  try {
    result = await fn(h);
  } catch (error) {
    try {
      await h.finish(error, true);
    } catch (settleError) {
      // fn's own error matters more; the hold's lease lapses and the sweeper ends it (in
      // doubt when it was charged, returned when not).
      if (settleError instanceof EarmarkClientError) {
        process.emitWarning(`earmark settle failed after ${String(error)}: ${settleError.message}`);
      } else throw settleError;
    }
    throw error;
  }
  await h.finish();
  return result;
}
