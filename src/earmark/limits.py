"""Every bound Earmark enforces, named with its unit last.

Relations between the limits are asserted at import, so a change that breaks one
fails at once instead of in production.
"""

from __future__ import annotations

# Identifiers and strings.
budget_id_length_max = 128
idempotency_key_length_max = 128
unit_length_max = 32
label_count_max = 16
label_key_length_max = 64
label_value_length_max = 256

# An error's ErrorInfo names at most error_about_keys_max fields, each value cut to
# error_about_chars_max characters (ids are shorter; a field's path may be longer).
error_about_keys_max = 8
error_about_chars_max = 256

# Metered model calls (earmark.client.llm): at most llm_attempts_max attempts of one call,
# each on its own hold.
llm_attempts_max = 10
# A maximum answer the wrapper sets for the provider (what the hold covers after the prompt)
# is at least llm_output_tokens_min: a hold that covers less refuses the call unsent.
llm_output_tokens_min = 1
# Metered calls at the wire (earmark.client.wire): a prompt is estimated at one token per
# llm_prompt_chars_per_token characters (fewer than the usual four: the hold errs high) and
# llm_message_overhead_tokens a message; a request with server tools that names no maximum
# number of calls is held for llm_tool_calls_default of each; a server-sent event of a
# stream is at most sse_event_bytes_max bytes (a larger one is passed on unread).
llm_prompt_chars_per_token = 3
llm_message_overhead_tokens = 4
llm_tool_calls_default = 10
sse_event_bytes_max = 16 << 20
# A metered client keeps at most llm_background_holds_max holds open for calls that run on
# after their answer (OpenAI's background responses), each renewing its lease until the
# call is read again ended; past it, the oldest goes in doubt, its id recorded for
# earmark reconcile.
llm_background_holds_max = 1_000
# The LiteLLM gate (earmark.integrations.litellm): a request that was sent and whose outcome
# LiteLLM has not logged litellm_outcome_grace_seconds after its task ended (its client went
# away mid-stream) is left in doubt; EARMARK_LITELLM_OUTCOME_GRACE_SECONDS sets it, up to
# litellm_outcome_grace_seconds_max.
litellm_outcome_grace_seconds = 10.0
litellm_outcome_grace_seconds_max = 600.0
# Holds the gate left in doubt that a late outcome may still settle: the most recent
# litellm_doubted_max, the oldest forgotten first (reconcile resolves those).
litellm_doubted_max = 10_000
# A budget refusal whose period resets within litellm_retry_after_seconds_max is answered 429
# with Retry-After (waiting mends it); one that resets later, or never, is final (LiteLLM's
# budget error, which SDKs do not retry).
litellm_retry_after_seconds_max = 3_600.0
# The random bytes of a held request's flight key (the token its events are matched by):
# 16 bytes, 128 bits, cannot be guessed by a caller reusing another's call id.
litellm_flight_key_bytes = 16
# A request through LiteLLM's pass-through routes whose outcome LiteLLM has not logged within
# litellm_pass_through_outcome_seconds of its hold (LiteLLM's pass-through timeout is 600 s)
# is left in doubt; an outcome that comes later still settles it.
litellm_pass_through_outcome_seconds = 660.0
# An end user's id (LiteLLM's end_user_id: the request's `user` field or customer header,
# which the caller chooses) that names an end-user budget (earmark_end_user_budget) is at
# most litellm_end_user_chars_max characters, one budget id segment; longer is a 400.
litellm_end_user_chars_max = 64

# The SDK (earmark.client): a call's deadline is at most client_timeout_seconds_max, and
# it is made at most client_attempts_max times, with backoff between attempts of at most
# client_backoff_seconds_max. Larger values are mistakes (a deadline in milliseconds).
client_timeout_seconds_max = 600.0
client_attempts_max = 100
client_backoff_seconds_max = 60.0
# A client's close() waits at most this long for the settles it sends in the background.
client_flush_seconds_max = 10.0
# A settlement journal's recover() sends at most journal_replay_records_max records a call,
# each at most journal_record_bytes_max (a Settle request is far smaller).
journal_replay_records_max = 10_000
journal_record_bytes_max = 1 << 16

# Amounts, in the budget's unit. PostgreSQL's bigint holds 9.2e18: an amount or a
# settle of at most 1e15 leaves room for millions of settles before a counter can
# overflow, and a limit of at most 1e18 keeps limit + amount inside int64.
amount_units_max = 10**15
limit_units_max = 10**18
int64_max = 2**63 - 1

# Money. Rates are micro-dollars per million tokens: at most $1,000,000 per million
# tokens, and a flat fee of at most $1,000 per call. Token counts of one request are at
# most 10^12 and attempts at most 1,000; a priced amount past amount_units_max is refused.
# The price book holds at most price_versions_max versions, all cached in every sidecar.
provider_length_max = 64
# A caller's x-request-id longer than this is replaced by a fresh one.
request_id_length_max = 64
model_length_max = 128
price_source_length_max = 512
rate_usd_micros_per_mtok_max = 10**12
request_fee_usd_micros_max = 10**9
tokens_per_request_max = 10**12
attempts_max = 1_000
price_versions_max = 10_000
job_length_max = 128
# A provider's service tier is a name of at most service_tier_length_max characters; a
# shape, usage or price names at most tool_kinds_max kinds of server tool (each of at most
# tool_kind_length_max characters), and at most tool_calls_per_request_max calls of each.
service_tier_length_max = 32
tool_kinds_max = 16
tool_kind_length_max = 64
tool_calls_per_request_max = 10_000

# Estimates: a job's last estimate_samples_max SUCCEEDED settles; p75 once it has
# estimate_p75_samples_min of them; the largest once used + held reach
# estimate_max_threshold_bps of the limit (8,000 basis points = 80%).
estimate_samples_max = 100
estimate_p75_samples_min = 5
bps_per_unit = 10_000
estimate_max_threshold_bps = 8_000

# Plans from the billing provider. A limit read is used as it is for
# limit_fresh_seconds_default, kept while the provider fails for up to
# limit_stale_seconds_default, and then new Reserves are refused. Reads of at most
# limit_cache_accounts_max accounts are kept in memory (the budget rows keep them all).
# Provider calls time out after provider_timeout_seconds, a token is renewed
# token_renew_margin_seconds before it expires, and a listing follows at most
# provider_pages_max pages.
limit_fresh_seconds_default = 60.0
limit_stale_seconds_default = 600.0
limit_retry_seconds = 5.0
limit_cache_accounts_max = 100_000
provider_timeout_seconds = 10.0
# An admission with no usable limit waits at most this long for the provider's read (which
# goes on behind it), well within the SDK's default deadline of 5 s, so that the caller is
# told LIMIT_UNAVAILABLE rather than DEADLINE_EXCEEDED; one with a usable limit never waits.
limit_wait_seconds_max = 3.0
# At most this many provider reads (limits and periods) run at once in a sidecar: many
# accounts going stale together queue their reads instead of opening a call each.
provider_reads_concurrent_max = 16
token_renew_margin_seconds = 60.0
provider_pages_max = 100
provider_page_size = 100
# The largest page_size Kinde's rate-limit page gives; a larger one is answered 400.
provider_page_size_max = 500
provider_response_bytes_max = 1 << 20
# A value the provider sent that cannot be used (a limit past limit_units_max, a string)
# is shown in errors and logs cut to provider_value_shown_chars_max characters: it came
# from outside and may be as large as the answer.
provider_value_shown_chars_max = 64
# Kinde's agreements: the one of an (account, feature) is kept until its billing period
# ends, or for agreement_cache_seconds_max when the agreement gives no period, for at most
# agreement_cache_keys_max (account, feature) keys. A 403 sends for a new token at most once
# per provider_token_refetch_seconds_min (each token counts against the Kinde plan); a 403
# with a younger token is a missing scope. A 429's RateLimit-Reset (whole seconds) is
# obeyed up to provider_rate_limit_reset_seconds_max; a missing or garbled one means
# provider_rate_limit_reset_seconds_default.
agreement_cache_seconds_max = 3_600.0
agreement_cache_keys_max = 100_000
provider_token_refetch_seconds_min = 60.0
provider_rate_limit_reset_seconds_default = 10
provider_rate_limit_reset_seconds_max = 3_600
cycle_anchor_day_max = 28
# An account's cycle budget is named ACCOUNT/FEATURE/YYYY-MM-DD, or ACCOUNT/FEATURE/
# YYYYMMDDTHHMMZ for a period that starts during a day: 64 + 1 + 48 + 1 + 14 fits in
# budget_id_length_max.
account_length_max = 64
feature_length_max = 48
admissions_per_minute_default = 120
admissions_per_minute_max = 1_000_000
# The meter reporter: a pass every interval, at most report_batch_size_max totals a pass,
# a claim lasting report_claim_seconds, and failed reports tried again with full-jitter
# backoff from report_backoff_seconds_base up to report_backoff_seconds_max.
report_interval_seconds_default = 1.0
report_batch_size_max = 100
report_claim_seconds = 60.0
report_backoff_seconds_base = 1.0
report_backoff_seconds_max = 300.0
# A reporter pass sends at most this many batches, then sleeps its interval.
report_batches_per_pass_max = 10
# ListCycles answers at most this many cycle budgets of an account.
cycles_listed_max = 120
# The stand-in provider (--limits-provider file): its TOML file is at most
# plans_file_bytes_max bytes, with at most plans_file_plans_max plans,
# plans_file_features_max features in a plan and plans_file_accounts_max accounts; a plan's
# name is at most plan_name_length_max characters. Whether the file changed (its mtime,
# size and inode) is looked at most once every plans_file_check_seconds.
plans_file_bytes_max = 4 << 20
plans_file_plans_max = 1_000
plans_file_features_max = 1_000
plans_file_accounts_max = 100_000
plan_name_length_max = 64
plans_file_check_seconds = 2.0

# Scopes and the operator's view. A Reserve may also hold on at most also_budget_ids_max
# other budgets (an organization, a team, a user...): each is one more budget row locked in
# its transaction. Output escrow is a share of the limit in basis points, below the whole.
# ListHolds and ListLedger answer pages of page_size_default rows, page_size_max at most,
# and take back page tokens of at most page_token_length_max characters.
also_budget_ids_max = 8
escrow_bps_max = 9_999
page_size_default = 100
page_size_max = 1_000
page_token_length_max = 1_024
# What a resolve may say proved its outcome (earmark reconcile's bucket and counts).
evidence_length_max = 1_024
# GetSpend answers spend_rows_default groups of a budget's spend, spend_rows_max at most
# (past those its answer says how many groups there are and what they used together).
spend_rows_default = 100
spend_rows_max = 1_000
# An amount typed as people write it ("$1,234.50", "10.00", "200,000"): at most
# amount_text_length_max characters, enough for the largest limit with its digit groups.
amount_text_length_max = 40

# A budget's calendar (core/periods.py): an IANA timezone name is at most
# timezone_length_max characters (the longest in the database is about 32).
timezone_length_max = 64
# Timezones read from the database and kept (core.periods.zone_named): the database has
# about 600 names, so a sidecar's budgets rarely ask for more.
timezones_cached_max = 1_024

# Budget notices (earmark.notices): a webhook secret is at least notify_secret_bytes_min
# bytes (Standard Webhooks' examples use 24 to 32), and a receiver accepts an attempt
# whose webhook-timestamp is within notify_tolerance_seconds of its clock (the spec's
# five minutes).
notify_secret_bytes_min = 24
notify_tolerance_seconds = 300

# A budget's threshold notices: at most thresholds_max thresholds, each a share of the
# limit up to threshold_bps_max basis points (past 100%: a SOFT budget's overage).
thresholds_max = 8
threshold_bps_max = 100_000
# UpdateBudget's update_mask (issue 43) names at most update_mask_paths_max paths: there are
# 18 fields, and `*`; a mask of more is refused before it is read.
update_mask_paths_max = 32
# An unknown path is quoted in its error cut to update_mask_path_shown_chars_max characters.
update_mask_path_shown_chars_max = 64
# A budget reads as refusing (CLI and console STATUS) while it refused a Reserve for want of
# room within the last refusing_recent_seconds (or has refused this period and has nothing
# left at all).
refusing_recent_seconds = 300
# A budget's rate window (issue 34) admits at most admissions_per_minute_max admissions a
# minute: past it, a window is no bound (its units window is bounded by limit_units_max).
admissions_per_minute_max = 1_000_000_000
# A budget's run limits (issue 47): max_open_holds at most open_holds_max (past any number
# of holds the sidecars could have open), max_admissions at most amount_units_max.
open_holds_max = 10**9
# A temporary limit (UpdateBudgetRequest.limit_until) ends at most limit_raise_days_max days
# after it is set; its reason is at most limit_reason_chars_max characters.
limit_raise_days_max = 366
limit_reason_chars_max = 256
# The sweeper ends at most this many idle budgets' temporary limits per transaction.
limit_lapses_per_sweep_max = 200
# Budget templates (issue 47): at most templates_max exist; an id is at most
# template_id_chars_max characters. A Reserve's batch makes at most one budget per budget
# it names (at most also_budget_ids_max + 1).
templates_max = 100
template_id_chars_max = 64
# A template makes at most template_budgets_max budgets: whoever may Reserve on ids its
# pattern matches chooses them, and each is a row; past it a Reserve on a new id is
# BUDGET_NOT_FOUND, as without the template, and the sidecar logs template_full.
template_budgets_max = 1_000_000

# Leases.
lease_seconds_default = 120.0
lease_seconds_min = 1.0
lease_seconds_max_default = 3600.0
lease_seconds_max_ceiling = 7 * 24 * 3600.0

# Group admission: operations are decided together in one transaction per lane; a
# budget always maps to the same lane, so its operations are decided in arrival order.
# One lane by default: batches running side by side in one sidecar read and insert on
# the same index pages, and SERIALIZABLE then aborts them against each other (measured
# with `make bench`, 1,000 budgets: 4 lanes ~1,000 calls/s with p99 ~500 ms, 1 lane
# ~3,300 calls/s with p99 ~30 ms).
lanes_default = 1
lanes_max = 64
batch_size_max = 256
lane_queue_depth_max = 10_000

# A batch first locks its budgets' stripes, before its snapshot, so that batches of
# sidecars on one budget wait for each other instead of aborting (migration 0006 creates
# exactly this many stripe tables). More stripes let more disjoint budgets proceed side by
# side; a batch locks at most one stripe per budget in it.
budget_stripes = 64

# Serializable transactions: retried with full-jitter exponential backoff.
tx_attempts_max = 8
tx_backoff_seconds_base = 0.005
tx_backoff_seconds_max = 1.0

# The sweeper closes at most this many expired holds per transaction, and at most
# sweep_batches_per_pass_max transactions a pass before it sleeps its interval.
sweep_batch_size_max = 500
sweep_batches_per_pass_max = 20
sweep_interval_seconds_default = 1.0

# Where a Charge/Renew/Settle finds its budget without a query.
route_cache_size_max = 100_000

# gRPC: calls beyond this many at once are refused by gRPC with RESOURCE_EXHAUSTED,
# and no request message may exceed this size.
rpc_concurrency_max = 10_000
rpc_message_bytes_max = 1 << 20

# Listeners and credentials. A Unix socket path is bounded by sockaddr_un (108 bytes
# with its NUL). Tokens are compared in constant time; files of tokens are bounded.
unix_socket_path_bytes_max = 107
token_length_min = 16
token_length_max = 512
token_file_bytes_max = 1 << 20
# A PEM file (a certificate chain, a key, a CA bundle) is read up to this size.
pem_file_bytes_max = 1 << 20
worker_tokens_max = 10_000
token_prefixes_max = 64
token_name_length_max = 64

# Distinct units across budgets: the unit is a label value on the database gauges.
units_max = 64

# Long-lived streams (health Watch, reflection) have their own cap, apart from the
# unary calls', and a cap per connection, so that idle streams cannot take the slots
# of Reserve and Settle.
streams_max = 256
streams_per_connection_max = 16

# The database pool: one connection kept open while idle (a sidecar per pod makes idle
# connections add up), more opened on demand up to the maximum and closed again after
# pool_idle_seconds_max idle. Prepared statements cached per connection (none behind
# PgBouncer's transaction pooling).
pool_size_min = 1
pool_idle_seconds_max = 30.0
statement_cache_size_default = 100
# A batch's write statement is made for the kinds of rows it writes (store/writes.py):
# at most write_statements_max of them are kept, fewer than a connection's prepared ones.
write_statements_max = 64
# The edge interceptor keeps each served method's wrapped handler: a listener serves far
# fewer methods than this (Budget, Admin, health, reflection).
edge_methods_max = 256
pool_size_max_default = 10
pool_acquire_timeout_seconds = 5.0
db_command_timeout_seconds = 10.0
db_connect_timeout_seconds = 5.0
db_probe_timeout_seconds = 1.0
health_probe_interval_seconds = 1.0

# The operator's pool: Admin's listings (ListHolds, ListLedger, ListPrices) run on
# connections of their own, made like the workers' and none kept while idle, so that no
# scan ever holds a connection the lanes or the sweeper wait for (10 concurrent full
# ListHolds scans on the workers' pool moved Reserve p50 from 9 ms to 295 ms). At most
# admin_scans_max listings run at once; admin_scans_waiting_max more wait their turn, and
# any beyond that are UNAVAILABLE (OVERLOADED) at once.
admin_pool_size_min = 0
admin_pool_size_max = 2
admin_scans_max = admin_pool_size_max
admin_scans_waiting_max = 32
# Turning a listing's rows into messages runs in Python on the event loop the workers' calls
# share (13.6 ms of CPU per 1,000 holds): it runs in slices of admin_slice_rows rows, one
# slice at a time, and takes at most admin_loop_share_max of the loop's time, so that a
# worker's call waits at most one slice (under 1 ms) at each of its steps.
admin_slice_rows = 100
admin_loop_share_max = 0.25

# The embedded PostgreSQL, if it dies, is started again at most this many times in a row,
# with full-jitter backoff between attempts; then liveness turns NOT_SERVING.
embedded_restart_attempts_max = 5
embedded_restart_backoff_seconds_base = 0.5
embedded_restart_backoff_seconds_max = 10.0

# Per-budget gauges: exported for at most this many budgets (a setting, capped here).
metrics_budgets_max_default = 100
metrics_budgets_max_ceiling = 10_000
metrics_refresh_interval_seconds = 10.0

# Shutdown: in-flight RPCs get this long to finish after SIGTERM.
shutdown_grace_seconds_default = 10.0
# Within that grace, holds this sidecar admitted that are still open may be charged and
# settled for this long (their workers are finishing); at most this many are tracked.
drain_holds_seconds_default = 10.0
drain_tracked_holds_max = 100_000
# Draining ends once no call has arrived for this long (or the grace period ends).
drain_quiet_seconds = 0.2
drain_quiet_seconds_max = 5.0
# Stopping the metrics endpoint wakes its thread with a connection this often until it
# has stopped.
metrics_stop_poke_seconds = 0.02
# The probes' listener (--health-listen) answers only health Check, at most this many at
# once, with requests of at most this size.
health_rpcs_max = 64
health_message_bytes_max = 1 << 10
drain_poll_seconds = 0.02
stream_grace_seconds = 0.5
# On SIGTERM the sidecar reads which of its tracked holds are still held (a hold in doubt
# is not waited for) within this long, else it waits for all of them; the stop's log line
# names at most stop_holds_shown_max of them.
stop_holds_read_seconds_max = 1.0
stop_holds_shown_max = 10
# After the drain's grace, stopping the rest (background loops, the pool, the embedded
# PostgreSQL) may take this long; past grace + this, the process exits at once, so that
# nothing it waits on (a thread stuck in a read) can hold SIGTERM for good.
stop_after_drain_seconds_max = 30.0
# The repricer (a background loop) looks for holds priced by shape whose price in effect
# moved every reprice_interval_seconds, and reprices at most reprice_holds_per_pass_max of
# them a pass, oldest first, going on where the pass before left off (holds it cannot move
# never starve the ones behind them).
reprice_interval_seconds = 1.0
reprice_holds_per_pass_max = 1_000
# A background loop asked to stop finishes its current transaction, at most this long.
background_stop_seconds_max = 12.0

# Background loops (the sweeper, the database watch, the gauges, the meter reporter) survive
# any exception: a failed pass is logged and counted, and the next one waits a full-jitter
# backoff of at most background_backoff_seconds_max (or the loop's own interval, if that is
# longer), so that the sweeper returns expired holds within a few seconds of the database
# writing again. A loop that has not finished a pass (or failed one on an unavailable
# database) for background_stall_intervals of its intervals, and at least
# background_stall_seconds_min, is stalled: liveness turns NOT_SERVING. A watchdog looks
# every background_watchdog_seconds.
background_backoff_seconds_max = 4.0
background_stall_intervals = 10
background_stall_seconds_min = 30.0
background_watchdog_seconds = 1.0
# A meter report batch may wait for the provider on every report it claimed (the loop
# beats after each batch, and after each sweeper transaction).
report_pass_seconds_max = report_batch_size_max * provider_timeout_seconds

# Budget notices' delivery (earmark.notices.deliver). One deliverer at a time across the
# sidecars on a database holds the notify_lease row, for notify_lease_seconds_default
# (--notify-lease-seconds, within [notify_lease_seconds_min, notify_lease_seconds_max]),
# renewed before each attempt and at each pass, every notify_interval_seconds (shorter than
# any lease, so that an idle holder keeps it). A pass posts at most notify_batch_max due
# events, one at a time in seq order; an attempt lasts at most notify_timeout_seconds, and
# at most half the lease, so that it ends while the lease it was made under still runs.
# An attempt that fails is tried again after a full-jitter backoff whose ceiling doubles
# from notify_backoff_seconds_base up to notify_backoff_seconds_max; the event is given up
# (failed) at its notify_attempts_max-th failed attempt: the ceilings between its attempts
# add up to about four hours (two on average, with the jitter) for a receiver to come back.
# An attempt's error is kept cut to notify_error_length_max characters. --notify-url is at
# most notify_url_length_max characters; --notify-secret-file holds at most
# notify_secrets_max secrets (two during a rotation). `earmark events list` shows
# events_listed_default events, at most events_listed_max. The notices loop beats after
# each event, which may wait out its attempt and a few database commands.
notify_lease_seconds_default = 60.0
notify_lease_seconds_min = 2.0
notify_lease_seconds_max = 600.0
notify_interval_seconds = 1.0
notify_batch_max = 100
notify_timeout_seconds = 10.0
notify_backoff_seconds_base = 2.0
notify_backoff_seconds_max = 3600.0
notify_attempts_max = 15
notify_error_length_max = 200
notify_url_length_max = 2048
notify_secrets_max = 4
events_listed_default = 50
events_listed_max = 1_000
notify_event_seconds_max = notify_timeout_seconds + 3 * (
    pool_acquire_timeout_seconds + db_command_timeout_seconds
)
assert 0 < notify_interval_seconds < notify_lease_seconds_min
assert notify_lease_seconds_min <= notify_lease_seconds_default <= notify_lease_seconds_max
assert 2 * notify_timeout_seconds <= notify_lease_seconds_default
assert 1 <= notify_batch_max <= 10_000
assert 0 < notify_backoff_seconds_base <= notify_backoff_seconds_max <= 86_400
assert 2 <= notify_attempts_max <= 100
assert 1 <= notify_error_length_max <= error_about_chars_max
assert len("https://") < notify_url_length_max <= 8_192
assert 2 <= notify_secrets_max <= 16
assert 1 <= events_listed_default <= events_listed_max <= 10_000

# The write probe (store/probe.py) fills this many rows of about 130 bytes, 16 blocks of
# 8 KiB, in a file of its own: the headroom a database must have again to be called
# writable after a full disk.
write_probe_rows = 1_000
write_probe_row_bytes = 100
# How long a write probe waits for another sidecar's probe of the same table.
write_probe_lock_timeout_ms = 1_000

# The data dir's lock file holds its holder's pid; at most this much of it is read back.
lock_file_bytes_max = 32

# At start, `earmark serve` waits this long by default for a database it cannot reach (0:
# fail at once; at most database_wait_seconds_max), trying again after a full-jitter
# backoff growing from database_wait_backoff_seconds_base to
# database_wait_backoff_seconds_max.
database_wait_seconds_default = 60.0
database_wait_seconds_max = 3600.0
database_wait_backoff_seconds_base = 0.5
database_wait_backoff_seconds_max = 5.0

# The operator's command line (earmark budgets, holds, ledger, lab, load): every call to
# Admin has a deadline of admin_call_seconds_default (--timeout-seconds changes it, within
# (0, admin_call_seconds_max]), and a listing follows page tokens for at most
# cli_pages_max pages of page_size_max rows, then says that more remain.
admin_call_seconds_default = 5.0
admin_call_seconds_max = 600.0
cli_pages_max = 100

# Plan changes pushed (`earmark kinde-webhooks`, issue 21). A webhook's body (a JWT) is at
# most webhook_body_bytes_max and must arrive within webhook_body_seconds_max (a client
# trickling it holds a slot no longer); at most webhook_requests_max requests are served at
# once (more are answered 503 by the server), and an event id is at most
# webhook_event_id_length_max characters. Kinde's signing keys (JWKS) are fetched with a
# timeout of webhook_jwks_timeout_seconds, used for webhook_jwks_max_age_seconds, and
# fetched again for a key id they lack at most once per webhook_jwks_refetch_seconds_min,
# so that tokens with made-up key ids cannot make the command hammer Kinde. A token's
# times may be off by webhook_clock_leeway_seconds; one without `exp` is accepted while its
# `iat` (else its `timestamp`) is at most webhook_delivery_age_seconds_max old (below), and
# one with `exp` only if that is at most webhook_token_lifetime_seconds_max ahead, so that
# every accepted event id is kept (for dropping a repeat) until its token has expired, and
# the table of them stays bounded. Each accepted event prunes at most webhook_prune_rows_max expired
# rows of each table. The command's own database pool has at most webhook_pool_size_max
# connections.
webhook_body_bytes_max = 1 << 16
webhook_requests_max = 64
webhook_body_seconds_max = 10.0
webhook_event_id_length_max = 128
webhook_jwks_timeout_seconds = 5.0
webhook_jwks_max_age_seconds = 600.0
webhook_jwks_refetch_seconds_min = 30.0
webhook_clock_leeway_seconds = 30.0
webhook_token_lifetime_seconds_max = 86_400.0
webhook_prune_rows_max = 100
webhook_pool_size_max = 2
# Kinde's webhooks as Kinde sends them (issue 30). Kinde sends again any delivery it did
# not get a 200 for during webhook_retry_window_seconds (36 h, its last attempts 12 h
# apart), so a token without `exp` is accepted while it is at most
# webhook_delivery_age_seconds_max old: the window and webhook_retry_margin_seconds for an
# attempt that runs late (an hour, as before, refused Kinde's own retries). A delivery's
# `webhook-id` header is at most webhook_delivery_id_length_max characters; it is kept
# with the event id as long as the token would verify, so that a repeated delivery is
# answered 200 and applied once, and then pruned. At most webhook_unknown_types_logged_max
# event types Kinde does not publish are each logged once; more are only counted.
webhook_retry_window_seconds = 129_600.0
webhook_retry_margin_seconds = 43_200.0
webhook_delivery_age_seconds_max = webhook_retry_window_seconds + webhook_retry_margin_seconds
webhook_delivery_id_length_max = 128
webhook_unknown_types_logged_max = 64
assert webhook_clock_leeway_seconds < webhook_retry_margin_seconds <= webhook_retry_window_seconds
assert webhook_delivery_age_seconds_max <= 7 * 86_400
assert 0 < webhook_delivery_id_length_max <= error_about_chars_max
assert 1 <= webhook_unknown_types_logged_max <= 1_000
# A Kinde agreement whose current_period_end has passed (Kinde's cycle roll or sync
# lagged) is kept, its period rolled forward by the gate, and read again after
# agreement_lagging_recheck_seconds: often enough to see the roll soon, seldom enough that
# every account rolling at once does not flood Kinde.
agreement_lagging_recheck_seconds = 60.0
assert limit_retry_seconds <= agreement_lagging_recheck_seconds <= agreement_cache_seconds_max
# A client that goes away mid-request, on any HTTP server Earmark runs (the webhook
# receiver, the console, the metrics listener), is logged in one line at most, and at most
# one line per http_disconnect_log_seconds per server, which counts those since the last:
# anyone can open and drop connections, and a log is no place for a flood of them.
http_disconnect_log_seconds = 10.0
assert 0 < http_disconnect_log_seconds <= 3_600
# Every sidecar with a limits provider looks for new plan marks every
# plan_marks_poll_seconds, reading at most plan_marks_rows_max marks a query and at most
# plan_marks_pages_max queries a pass. A mark whose transaction committed late can carry a
# time earlier than marks already seen, by at most one database command; each pass looks
# plan_marks_overlap_seconds back and skips the marks it has already applied. A mark is
# kept plan_marks_keep_seconds, long past any sidecar's next look.
plan_marks_poll_seconds = 0.5
plan_marks_rows_max = 1_000
plan_marks_pages_max = 10
plan_marks_overlap_seconds = 15.0
plan_marks_keep_seconds = 86_400.0

# The web console (`earmark console`, issue 23). A page lists console_page_rows_max budgets,
# holds or ledger entries (one Admin call each); a search prefix is at most
# console_search_length_max characters. A budget's chart is drawn from at most
# console_chart_entries_max of its ledger entries (the first ones: the ledger pages oldest
# first) and its nesting from at most console_nesting_holds_max of its holds. Pages poll
# for fresh numbers every console_poll_seconds while they are visible. A posted form is at
# most console_form_bytes_max bytes; at most console_requests_max requests are served at
# once. At most console_sessions_max sessions are kept (the oldest is dropped), each for
# console_session_seconds. One Lab run goes at a time, of at most console_lab_jobs_max
# jobs and amounts up to console_lab_amount_max, each job's step taking
# console_lab_step_seconds so that a person sees the bars fill; the last
# console_lab_runs_kept runs stay readable.
console_page_rows_max = 50
console_search_length_max = 200
console_chart_entries_max = 5_000
console_nesting_holds_max = 500
console_poll_seconds = 2.0
console_form_bytes_max = 1 << 14
console_requests_max = 64
console_sessions_max = 1_000
console_session_seconds = 12 * 3600.0
console_lab_jobs_max = 100
console_lab_amount_max = 10**12
console_lab_step_seconds = 0.25
console_lab_runs_kept = 8
# How often the Lab's page reads its run while it goes, and how long the list of host
# names the console answers to (--allowed-hosts) may be.
console_lab_poll_seconds = 0.15
console_allowed_hosts_length_max = 1_000
# The login's throttle (issue 30): at most console_login_failures_per_address_max wrong
# tokens from one client address, and console_login_failures_max from all addresses
# together, are looked at within console_login_window_seconds of the first; past either,
# logins (from that address, or from every address) are refused for
# console_login_window_seconds without the token being looked at. Each address is a row
# of a table of at most console_login_addresses_max rows (the oldest is dropped first);
# the overall limit means a full table holds mostly rows whose window has passed, so
# dropping the oldest frees no attacker.
console_login_failures_per_address_max = 10
console_login_failures_max = 100
console_login_window_seconds = 300.0
console_login_addresses_max = 10_000

assert 0 < budget_id_length_max <= 1024
assert 0 < token_length_min <= token_length_max
assert 1 <= streams_per_connection_max <= streams_max < rpc_concurrency_max
assert 1 <= units_max <= 10_000
assert 0 < idempotency_key_length_max <= 1024
assert 0 < amount_units_max <= limit_units_max
assert limit_units_max + amount_units_max <= int64_max
assert 1 <= estimate_p75_samples_min <= estimate_samples_max <= 1_000
assert 0 < estimate_max_threshold_bps <= bps_per_unit
assert 1 <= attempts_max
assert 1 <= price_versions_max <= 100_000
assert 0 < job_length_max <= 1024
assert 0 < model_length_max <= 1024
assert 0 < limit_fresh_seconds_default <= limit_stale_seconds_default
assert 0 < token_renew_margin_seconds
assert 1 <= provider_reads_concurrent_max <= 1_000
assert limit_fresh_seconds_default <= agreement_cache_seconds_max <= 24 * 3_600
assert 1 <= agreement_cache_keys_max
assert provider_timeout_seconds < provider_token_refetch_seconds_min
assert 0 < provider_rate_limit_reset_seconds_default <= provider_rate_limit_reset_seconds_max
assert provider_rate_limit_reset_seconds_max <= 24 * 3_600
assert 1 <= provider_pages_max <= 10_000
assert 1 <= provider_page_size <= provider_page_size_max
assert 1 <= cycle_anchor_day_max <= 28
assert len(str(limit_units_max)) + 3 <= provider_value_shown_chars_max <= error_about_chars_max
assert account_length_max + feature_length_max + 16 <= budget_id_length_max
assert 1 <= admissions_per_minute_default <= admissions_per_minute_max
assert 0 < report_backoff_seconds_base <= report_backoff_seconds_max
assert provider_timeout_seconds < report_claim_seconds
assert 1 <= plans_file_plans_max <= plans_file_accounts_max <= limit_cache_accounts_max
assert 1 <= plans_file_features_max <= 10_000
assert 1 <= plan_name_length_max <= error_about_chars_max
assert 0 < plans_file_check_seconds <= limit_fresh_seconds_default
assert 1 <= plans_file_bytes_max <= 64 << 20
assert 1 <= also_budget_ids_max <= 64
assert 0 <= escrow_bps_max < bps_per_unit
assert 1 <= page_size_default <= page_size_max <= 10_000
assert 1 <= spend_rows_default <= spend_rows_max <= 10_000
assert len("America/Argentina/ComodRivadavia") <= timezone_length_max <= 255
assert 16 <= notify_secret_bytes_min <= 64
assert 1 <= thresholds_max <= 64
assert 16 <= update_mask_paths_max <= 256
assert 10 <= refusing_recent_seconds <= 86_400
assert bps_per_unit <= threshold_bps_max <= 1_000 * bps_per_unit
assert 60 <= notify_tolerance_seconds <= 3600
assert len(f"${limit_units_max // 10**6:,}.000000") <= amount_text_length_max <= 100
assert page_token_length_max >= 2 * (idempotency_key_length_max + token_name_length_max) + 64
assert 0 < lease_seconds_min <= lease_seconds_default <= lease_seconds_max_default
assert lease_seconds_max_default <= lease_seconds_max_ceiling
assert 1 <= lanes_default <= lanes_max
assert 1 <= batch_size_max <= lane_queue_depth_max <= rpc_concurrency_max
assert budget_stripes == 64, "migration 0006 creates 64 stripe tables"
assert tx_attempts_max >= 1
assert 0 < tx_backoff_seconds_base <= tx_backoff_seconds_max
assert 1 <= sweep_batch_size_max <= 10_000
assert 1 <= pool_size_min <= pool_size_max_default
assert 0 <= admin_pool_size_min <= admin_pool_size_max < pool_size_max_default
# Listings queue at their gate, never on the pool.
assert 1 <= admin_scans_max <= admin_pool_size_max
assert 0 <= admin_scans_waiting_max <= rpc_concurrency_max - admin_scans_max
assert 1 <= admin_slice_rows <= page_size_max
assert 0 < admin_loop_share_max < 1
assert 0 <= metrics_budgets_max_default <= metrics_budgets_max_ceiling
assert 0 < db_probe_timeout_seconds <= health_probe_interval_seconds
assert 1 <= embedded_restart_attempts_max <= 100
assert 0 < embedded_restart_backoff_seconds_base <= embedded_restart_backoff_seconds_max
assert 0 < drain_poll_seconds < drain_quiet_seconds < shutdown_grace_seconds_default
assert 0 < stream_grace_seconds < shutdown_grace_seconds_default
assert 0 < stop_holds_read_seconds_max < shutdown_grace_seconds_default
assert 1 <= stop_holds_shown_max <= drain_tracked_holds_max
assert background_stop_seconds_max < stop_after_drain_seconds_max
assert 0 <= drain_holds_seconds_default <= shutdown_grace_seconds_default
assert 1 <= drain_tracked_holds_max <= route_cache_size_max
assert db_command_timeout_seconds < background_stop_seconds_max
assert 0 < background_backoff_seconds_max < background_stall_seconds_min
assert (
    db_command_timeout_seconds + pool_acquire_timeout_seconds + background_backoff_seconds_max
    < background_stall_seconds_min
), "a pass that waits out its timeouts once is not a stall"
assert 1 <= background_stall_intervals <= 1_000
assert 0 < background_watchdog_seconds < background_stall_seconds_min
assert 1 <= write_probe_rows <= 100_000
assert 1 <= write_probe_row_bytes <= 8_000
assert 0 < write_probe_lock_timeout_ms <= 1_000 * health_probe_interval_seconds
assert 1 <= sweep_batches_per_pass_max <= 1_000
assert 1 <= report_batches_per_pass_max <= 1_000
assert 0 <= database_wait_seconds_default <= database_wait_seconds_max
assert 0 < database_wait_backoff_seconds_base <= database_wait_backoff_seconds_max
assert budget_id_length_max <= error_about_chars_max
assert error_about_keys_max >= 4
assert 1 <= llm_attempts_max <= 100
assert 1 <= llm_output_tokens_min <= 4096
assert 0 < admin_call_seconds_default <= admin_call_seconds_max
assert 1 <= cli_pages_max * page_size_max <= 1_000_000
assert llm_attempts_max <= client_attempts_max
assert 0 < client_backoff_seconds_max <= client_timeout_seconds_max
assert 0 < webhook_body_bytes_max <= rpc_message_bytes_max
assert 1 <= webhook_requests_max <= rpc_concurrency_max
assert 0 < webhook_body_seconds_max <= 60
assert 0 < webhook_event_id_length_max <= error_about_chars_max
assert 0 < webhook_jwks_timeout_seconds < webhook_jwks_refetch_seconds_min
assert webhook_jwks_refetch_seconds_min <= webhook_jwks_max_age_seconds
assert 1 <= webhook_prune_rows_max <= 10_000
assert 1 <= webhook_pool_size_max <= pool_size_max_default
assert 0 < plan_marks_poll_seconds < limit_fresh_seconds_default
assert 1 <= plan_marks_rows_max * plan_marks_pages_max <= 100_000
assert db_command_timeout_seconds < plan_marks_overlap_seconds < plan_marks_keep_seconds
assert 1 <= console_page_rows_max <= page_size_max
assert 1 <= console_search_length_max <= 1_000
assert console_page_rows_max <= console_chart_entries_max <= 100_000
assert console_page_rows_max <= console_nesting_holds_max <= 10 * page_size_max
assert 0.5 <= console_poll_seconds <= 60
assert 1 << 10 <= console_form_bytes_max <= 1 << 20
assert 1 <= console_requests_max <= 1_024
assert 1 <= console_sessions_max <= 100_000
assert console_session_seconds >= 60
assert 1 <= console_lab_jobs_max <= 1_000
assert 1 <= console_lab_amount_max <= 10**18
assert 0 < console_lab_step_seconds <= 5
assert 1 <= console_lab_runs_kept <= 100
assert 0.05 <= console_lab_poll_seconds <= console_poll_seconds
assert 1 <= console_allowed_hosts_length_max <= 10_000
assert 1 <= console_login_failures_per_address_max <= console_login_failures_max <= 10_000
assert 1 <= console_login_window_seconds <= 86_400
# A row lives at most two windows, and the overall limit lets at most
# console_login_failures_max rows in per window: room for four windows' rows keeps every
# live row in the table.
assert 4 * console_login_failures_max <= console_login_addresses_max <= 1_000_000

assert write_statements_max < statement_cache_size_default
assert 1 <= llm_prompt_chars_per_token <= 4
assert 0 < litellm_outcome_grace_seconds <= litellm_outcome_grace_seconds_max
assert 1 <= litellm_doubted_max <= 1_000_000
assert 0 < litellm_retry_after_seconds_max <= 86_400
assert litellm_flight_key_bytes >= 16
assert litellm_outcome_grace_seconds < litellm_pass_through_outcome_seconds
assert 0 < litellm_end_user_chars_max < budget_id_length_max
assert 1 <= llm_tool_calls_default <= tool_calls_per_request_max
assert 1 << 16 <= sse_event_bytes_max <= 64 << 20
assert 1 <= llm_background_holds_max <= 100_000

# Reconciliation (earmark reconcile). A provider's usage report is read a page of
# reconcile_buckets_per_page_max one-minute buckets at a time (OpenAI and Anthropic allow
# 1,440), at most reconcile_pages_max pages a report, each request within
# reconcile_http_timeout_seconds. A bucket younger than reconcile_billing_delay_seconds may
# still be filling and is only reported as pending. A bucket's tokens agree within
# reconcile_tokens_tolerance_share of the larger count; a day's dollars within
# reconcile_drift_tolerance_share of the ledger's. The metrics name at most
# reconcile_models_max models (label values).
reconcile_buckets_per_page_max = 1_440
reconcile_pages_max = 1_000
reconcile_http_timeout_seconds = 30.0
reconcile_report_bytes_max = 16 * 1024 * 1024
reconcile_billing_delay_seconds = 600.0
reconcile_billing_delay_seconds_min = 60.0
reconcile_billing_delay_seconds_max = 86_400.0
reconcile_tokens_tolerance_share = 0.01
reconcile_drift_tolerance_share = 0.02
reconcile_models_max = 64
reconcile_range_days_max = 31
# With --project-key-file, a run retrieves at most reconcile_responses_max background
# responses (GET /responses/{id}) of in-doubt holds, the oldest first; the rest wait for
# the next run.
reconcile_responses_max = 1_000
# A background response created more than reconcile_response_clock_skew_seconds before the
# hold whose label names it (OpenAI's clock against the sidecar's; OpenAI's created_at is
# whole seconds) cannot be that hold's call, and is refused.
reconcile_response_clock_skew_seconds = 30.0
assert (
    reconcile_billing_delay_seconds_min
    <= reconcile_billing_delay_seconds
    <= reconcile_billing_delay_seconds_max
)
assert 1 <= reconcile_responses_max <= 100_000
assert 1 <= reconcile_response_clock_skew_seconds <= 300
# A report is checked before it is believed: each GET of it ends within
# reconcile_http_request_seconds in all (--http-deadline-seconds, between the _min and the
# _max; reconcile_http_timeout_seconds bounds each read of it), a count in it is an integer
# from 0 to reconcile_report_count_max, an amount at most reconcile_report_usd_max dollars
# either way, and a bucket starts at most reconcile_report_skew_seconds outside the range
# asked for.
# An in-doubt call may be billed in any minute from when it was sent to when it can have
# ended: its hold's expires_at, and at least reconcile_call_seconds after it was sent (a
# provider runs a request on after its client gave up; --call-seconds-max, between the
# _min and the _max).
reconcile_call_seconds = 600.0
reconcile_call_seconds_min = 60.0
reconcile_call_seconds_max = 86_400.0
assert reconcile_call_seconds_min <= reconcile_call_seconds <= reconcile_call_seconds_max
reconcile_http_request_seconds = 120.0
reconcile_http_request_seconds_min = 1.0
reconcile_http_request_seconds_max = 3_600.0
reconcile_report_count_max = 10**15
reconcile_report_usd_max = 10**9
reconcile_report_skew_seconds = 86_400
assert (
    reconcile_http_request_seconds_min
    <= reconcile_http_timeout_seconds
    <= reconcile_http_request_seconds
    <= reconcile_http_request_seconds_max
)

# A cost report's line that names no model (a tool's, storage's) is shown as the provider
# wrote it, cut to reconcile_line_item_shown_chars_max characters.
reconcile_line_item_shown_chars_max = 120
assert 16 <= reconcile_line_item_shown_chars_max <= 1_000
assert update_mask_path_shown_chars_max <= error_about_chars_max

# `earmark prices import` and `check` (issue 44): the output ceilings are read from a file
# (LiteLLM's model map: 3 MB in litellm 1.108) of at most price_ceilings_file_bytes_max
# bytes, and one import puts at most price_import_rows_max rows (a provider's every model,
# tier, window and dated version; the book holds price_versions_max in all).
price_ceilings_file_bytes_max = 64 * 2**20
price_import_rows_max = 5_000
assert price_import_rows_max <= price_versions_max

# price.changed: a version in effect at its put is noticed with it; the pass beside the
# repricer (every reprice_interval_seconds) notices at most price_notices_per_pass_max of
# those dated in the future whose effective_from passed, oldest first, the rest at the
# passes after (one transaction of bounded length each, as the deliverer's batches).
price_notices_per_pass_max = 100
assert 1 <= price_notices_per_pass_max <= notify_batch_max

# A cost a provider reports for one call (OpenRouter's usage.cost, issue 45) is believed,
# and the call's hold settled at it where the budget counts money, when it is a finite
# amount from 0 to llm_reported_cost_usd_micros_max micro-dollars ($1,000, past any one
# call's list price); any other is not, and the call is priced from its tokens instead.
llm_reported_cost_usd_micros_max = 10**9
assert 0 < llm_reported_cost_usd_micros_max <= amount_units_max

# A sync SDK client's settle (the metered sync clients: openai, anthropic, google-genai and
# boto3 with the sync Client) starts on the Client's loop client_sync_settle_start_seconds
# after its answer is handed back: started at once, the loop's thread takes the GIL from
# the caller's while it returns the answer (bench scenario 14 measured 0.32 ms of a
# Bedrock call's 0.52 there). flush() and close() wait for it as for any settle.
client_sync_settle_start_seconds = 0.003
assert 0 < client_sync_settle_start_seconds < client_flush_seconds_max

# Regions (issue 48). A budget's home leases shares of it to other regions (core/regions.py).
# Every node's clock is within region_clock_skew_seconds_max of the true time. A share's
# lease lasts region_share_lease_seconds on the home's clock from when it received the ask;
# the region counts it from when it sent the ask, less region_lease_margin_seconds (its own
# clock may wander by twice the skew over the lease). A region admits a hold only if it ends
# region_settle_grace_seconds before its view of the lease, and the home takes an expired
# share back the same margin after its lease ended (its own clock's wander), so that every
# hold admitted from the share ended at least the grace before; the region asks for a
# renewal once less than region_share_renew_seconds of it is left.
region_clock_skew_seconds_max = 1.0
region_lease_margin_seconds = 2 * region_clock_skew_seconds_max
region_share_lease_seconds = 600.0
region_share_renew_seconds = 300.0
region_settle_grace_seconds = 10.0
# A grant is at most region_grant_fraction_bps of what is free at the home (the demarcation
# rule: shares shrink near the limit), and leaves the region's outstanding share at most
# region_share_bps_max of the limit; one smaller than region_share_bps_min of the limit (and
# than 1 unit) is not made, and the budget's last units are admitted at the home.
region_grant_fraction_bps = 5_000
region_share_bps_min = 10
region_share_bps_max = 2_500
# A region asks for what it admitted in the last region_share_rate_seconds (its rate times
# that), tops up once its room is below half of that, and returns free room beyond what it
# admits in region_share_keep_seconds.
region_share_rate_seconds = 60.0
region_share_keep_seconds = 180.0
# A Reserve a region's share cannot admit is forwarded to the home if the region heard from
# the home within region_home_silence_seconds; else it is refused with the region's reason.
region_home_silence_seconds = 5.0
# A region's outbox sends the cumulative reports of at most region_outbox_batch_max budgets
# a message.
region_outbox_batch_max = 100
# A budget is shared with at most regions_per_budget_max regions, and a home tells its
# metrics of at most regions_max; a region's name is at most region_name_chars_max long.
regions_per_budget_max = 16
regions_max = 64
region_name_chars_max = 64
# ListShares answers the shares of at most shares_page_budgets_max budgets a call.
shares_page_budgets_max = 100
# A region's sidecar looks at its shares every region_tick_seconds (asks, returns, reports),
# at most region_shares_per_tick_max of them; a call to the home waits region_call_seconds
# at most, and a Reserve waiting on asks twice as long (the one under way, then its own).
region_tick_seconds = 1.0
region_shares_per_tick_max = 1_000
# A tick reads at most region_share_pages_per_tick_max pages of region_shares_per_tick_max
# shares (the next tick goes on from there); a region holds at most region_shares_max.
region_share_pages_per_tick_max = 10
region_shares_max = 100_000
region_call_seconds = 2.0
# A region's admission rate (what it asks for) is measured over this many ticks.
region_rate_samples_max = 60
assert 0 < region_clock_skew_seconds_max <= 60
assert region_lease_margin_seconds == 2 * region_clock_skew_seconds_max
assert 0 < region_settle_grace_seconds < region_share_renew_seconds < region_share_lease_seconds
# A hold of the shortest lease fits in a share just renewed.
assert (
    lease_seconds_min + region_settle_grace_seconds + region_lease_margin_seconds
    < region_share_renew_seconds
)
assert 0 < region_grant_fraction_bps <= bps_per_unit
assert regions_per_budget_max <= regions_max
assert region_outbox_batch_max <= region_shares_per_tick_max
# Every share is visited, and renewed if it needs it, well within the renewal window.
assert (
    region_shares_max
    / (region_shares_per_tick_max * region_share_pages_per_tick_max)
    * region_tick_seconds
    < region_share_renew_seconds / 10
)
# A Reserve waits on an ask no longer than the region waits to call the home silent.
assert region_call_seconds < region_home_silence_seconds
assert region_tick_seconds * region_rate_samples_max >= region_share_rate_seconds
assert 0 < region_share_bps_min <= region_share_bps_max <= bps_per_unit
assert 0 < region_share_rate_seconds < region_share_keep_seconds
assert 0 < region_home_silence_seconds < region_share_renew_seconds
assert 1 <= region_outbox_batch_max <= 10_000
