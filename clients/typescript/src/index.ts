// @earmark/client: budgets held before AI workers spend. See docs/sdk-typescript.md.
export {
  EarmarkClient,
  backoffMs,
  DEFAULT_ADMIN_TARGET,
  DEFAULT_RETRY,
  DEFAULT_TARGET,
  TARGET_ENV,
  ADMIN_TARGET_ENV,
  type ChargeOptions,
  type ClientOptions,
  type Price,
  type PutBudgetOptions,
  type BudgetChanges,
  type BudgetSettings,
  type ReserveOptions,
  type RetryPolicy,
  type SettleOptions,
  type ThresholdBasis,
} from './client.js';
export * from './errors.js';
export {
  Journal,
  journalRecordName,
  FINAL_CODES,
  JOURNAL_RECORD_BYTES_MAX,
  JOURNAL_REPLAY_RECORDS_MAX,
  JOURNAL_SUFFIX,
  QUARANTINE,
  type JournalRecord,
  UnsafeJournalError,
} from './journal.js';
export { Hold, hold, type HoldOptions } from './hold.js';
export { metered, NOT_METERED_SCHEME, type FetchLike, type GoogleClientLike, type Meterable, type MeterableClient, type MeterOptions } from './metered.js';
export { HOSTS, namedProvider, streamsUsage } from './hosts.js';
export { BEDROCK_ATTEMPTS, BEDROCK_COMMANDS, BEDROCK_MIDDLEWARE, type BedrockClientLike } from './bedrock.js';
export * as limits from './limits.js';
export {
  RefusedError,
  type BudgetMode,
  type BudgetState,
  type BudgetTemplate,
  type Charged,
  type EstimateSource,
  type Outcome,
  type Period,
  type Refusal,
  type RefusalReason,
  type Reservation,
  type ReservationState,
  type Settled,
  type Shape,
  type Usage,
} from './types.js';
/** The messages and grpc-js clients generated from protos/ by ts-proto. */
export * as wire from './gen/earmark/v1/budget.js';
export { earmarkMiddleware, aiSdkUsage, type EarmarkMiddleware, type ModelLike, type CallOptionsLike } from './ai-sdk.js';
export { HeldCall, type Ending } from './held.js';
