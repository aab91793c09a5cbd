// A call's cost as its provider reports it (OpenRouter's usage.cost, in dollars of its
// credits: openrouter.ai/docs/use-cases/usage-accounting), and a hold settled at it where the
// budget counts money. The Python SDK's src/earmark/client/reported.py, rule for rule.
//
// Why settle at it: OpenRouter bills what it reports, whichever upstream provider served the
// call and at whatever rate; the book's price of the model under "openrouter" is a list
// price. The hold is made as any other (its shape priced from the book, or counted in
// tokens), and ends:
// - where the budget counts money (usd_micros): at the reported cost, in micro-dollars
//   (settled as the call's used); a budget counts money exactly when its hold's shape was
//   priced at a price version (a tokens budget prices none: Reservation.priceVersion is 0),
//   so no setting can say it wrongly;
// - where it counts tokens: at the usage's tokens, as every call.
// A cost out of its published shape (not a finite number, below 0, past
// LLM_REPORTED_COST_USD_MICROS_MAX) is not believed: the call settles at its tokens, priced
// by the book. A BYOK call (usage.is_byok) is charged OpenRouter's fee (cost) and the
// upstream provider's own bill (cost_details.upstream_inference_cost) both.
import { LLM_REPORTED_COST_USD_MICROS_MAX } from './limits.js';
import { isObject, type Json } from './routes.js';
import type { Reservation, Usage } from './types.js';

const MICROS_PER_DOLLAR = 1_000_000;
// The decimal places of a dollar that a micro-dollar is.
const MICROS_DIGITS = 6;
// A number as JavaScript writes it (the shortest text that reads back as it): sign, digits,
// fraction and exponent.
const DECIMAL = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]?\d+))?$/;

/** A usage whose provider also reported what the call cost, in micro-dollars. */
export interface ReportedUsage extends Usage {
  costUsdMicros: number;
}

/** A reported amount in dollars as micro-dollars, rounded up as Earmark rounds; null for
 * one not believed (not a number, not finite, below 0, past the bound). */
export function dollarsToMicros(value: Json | undefined): number | null {
  if (typeof value !== 'number' || !Number.isFinite(value)) return null;
  const found = DECIMAL.exec(String(value));
  if (found === null) return null;
  const [, sign, whole, fraction = '', exponent = '0'] = found;
  // The number as the JSON wrote it (0.95 is 950,000, not 949,999.99...): its decimal
  // digits times a power of ten, exactly.
  const digits = BigInt(whole + fraction);
  const scale = Number(exponent) - fraction.length + MICROS_DIGITS;
  let micros: bigint;
  if (scale >= 0) {
    micros = digits * 10n ** BigInt(scale);
  } else {
    const divisor = 10n ** BigInt(-scale);
    // Up: toward +infinity, for either sign.
    const rest = digits % divisor === 0n ? 0n : 1n;
    micros = sign === '-' ? -(digits / divisor) : digits / divisor + rest;
  }
  if (sign === '-' && scale >= 0) micros = -micros;
  if (micros < 0n || micros > BigInt(LLM_REPORTED_COST_USD_MICROS_MAX)) return null;
  return Number(micros);
}

/** The cost an OpenRouter usage object reports, in micro-dollars: cost, plus the upstream
 * provider's for a BYOK call; null when it reports none, or one not believed. */
export function reportedCost(usage: Json | undefined): number | null {
  if (!isObject(usage) || usage.cost === undefined) return null;
  let cost = dollarsToMicros(usage.cost);
  if (cost !== null && usage.is_byok === true) {
    const details = usage.cost_details;
    const upstream = isObject(details) ? details.upstream_inference_cost : undefined;
    const given = upstream !== undefined && upstream !== null;
    const added = given ? dollarsToMicros(upstream) : null;
    if (given && added === null) cost = null;
    else if (added !== null) cost = cost + added;
  }
  if (cost === null || cost > LLM_REPORTED_COST_USD_MICROS_MAX) {
    process.emitWarning(
      `earmark: the call's reported cost ${JSON.stringify(usage.cost) ?? String(usage.cost)} is not believed (at most ` +
        `$${LLM_REPORTED_COST_USD_MICROS_MAX / MICROS_PER_DOLLAR}, finite, not below 0); it is priced from its tokens`,
    );
    return null;
  }
  return cost;
}

/** usage carrying cost (null: as it is). */
export function withCost(usage: Usage | null, cost: number | null): Usage | null {
  if (usage === null || cost === null) return usage;
  const reported: ReportedUsage = { ...usage, costUsdMicros: cost };
  return reported;
}

/** The usage to settle a hold at, or the amount (its reported cost) where the hold's budget
 * counts money: a reservation priced at a price version. */
export function settledAt(usage: Usage, reservation: Reservation | null): { usage: Usage } | { used: number } {
  const { costUsdMicros, ...rest } = usage as Partial<ReportedUsage> & Usage;
  if (costUsdMicros === undefined) return { usage };
  if (reservation !== null && reservation.priceVersion > 0) return { used: costUsdMicros };
  return { usage: rest };
}
