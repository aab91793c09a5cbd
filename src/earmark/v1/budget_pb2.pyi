import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PHASE_WORK: _ClassVar[Phase]
    PHASE_FINAL: _ClassVar[Phase]

class OveragePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERAGE_POLICY_UNSPECIFIED: _ClassVar[OveragePolicy]
    OVERAGE_POLICY_HARD: _ClassVar[OveragePolicy]
    OVERAGE_POLICY_SOFT: _ClassVar[OveragePolicy]

class Period(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERIOD_UNSPECIFIED: _ClassVar[Period]
    PERIOD_DAY: _ClassVar[Period]
    PERIOD_WEEK: _ClassVar[Period]
    PERIOD_MONTH: _ClassVar[Period]
    PERIOD_QUARTER: _ClassVar[Period]
    PERIOD_YEAR: _ClassVar[Period]

class BudgetMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUDGET_MODE_UNSPECIFIED: _ClassVar[BudgetMode]
    BUDGET_MODE_ENFORCE: _ClassVar[BudgetMode]
    BUDGET_MODE_OBSERVE: _ClassVar[BudgetMode]

class RefusalReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REFUSAL_REASON_UNSPECIFIED: _ClassVar[RefusalReason]
    REFUSAL_REASON_INSUFFICIENT_BUDGET: _ClassVar[RefusalReason]
    REFUSAL_REASON_LIMIT_UNAVAILABLE: _ClassVar[RefusalReason]
    REFUSAL_REASON_RATE_LIMITED: _ClassVar[RefusalReason]
    REFUSAL_REASON_TOO_MANY_OPEN: _ClassVar[RefusalReason]
    REFUSAL_REASON_ADMISSIONS_SPENT: _ClassVar[RefusalReason]
    REFUSAL_REASON_CLOSED: _ClassVar[RefusalReason]
    REFUSAL_REASON_SHARE_LEASE_ENDED: _ClassVar[RefusalReason]
    REFUSAL_REASON_HOLD_OUTLIVES_SHARE: _ClassVar[RefusalReason]

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_SUCCEEDED: _ClassVar[Outcome]
    OUTCOME_FAILED: _ClassVar[Outcome]
    OUTCOME_CANCELLED: _ClassVar[Outcome]
    OUTCOME_UNKNOWN: _ClassVar[Outcome]

class ReservationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESERVATION_STATE_UNSPECIFIED: _ClassVar[ReservationState]
    RESERVATION_STATE_HELD: _ClassVar[ReservationState]
    RESERVATION_STATE_SETTLED: _ClassVar[ReservationState]
    RESERVATION_STATE_EXPIRED: _ClassVar[ReservationState]
    RESERVATION_STATE_IN_DOUBT: _ClassVar[ReservationState]

class ThresholdBasis(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    THRESHOLD_BASIS_UNSPECIFIED: _ClassVar[ThresholdBasis]
    THRESHOLD_BASIS_COMMITTED: _ClassVar[ThresholdBasis]
    THRESHOLD_BASIS_USED: _ClassVar[ThresholdBasis]

class EstimateSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ESTIMATE_SOURCE_UNSPECIFIED: _ClassVar[EstimateSource]
    ESTIMATE_SOURCE_CALLER: _ClassVar[EstimateSource]
    ESTIMATE_SOURCE_SHAPE: _ClassVar[EstimateSource]
    ESTIMATE_SOURCE_DEFAULT: _ClassVar[EstimateSource]
    ESTIMATE_SOURCE_JOB_MEDIAN: _ClassVar[EstimateSource]
    ESTIMATE_SOURCE_JOB_P75: _ClassVar[EstimateSource]
    ESTIMATE_SOURCE_JOB_MAX: _ClassVar[EstimateSource]

class EstimatePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ESTIMATE_POLICY_UNSPECIFIED: _ClassVar[EstimatePolicy]
    ESTIMATE_POLICY_MEDIAN: _ClassVar[EstimatePolicy]
    ESTIMATE_POLICY_P75: _ClassVar[EstimatePolicy]

class SpendGroup(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPEND_GROUP_UNSPECIFIED: _ClassVar[SpendGroup]
    SPEND_GROUP_MODEL: _ClassVar[SpendGroup]
    SPEND_GROUP_JOB: _ClassVar[SpendGroup]
    SPEND_GROUP_DAY: _ClassVar[SpendGroup]
PHASE_UNSPECIFIED: Phase
PHASE_WORK: Phase
PHASE_FINAL: Phase
OVERAGE_POLICY_UNSPECIFIED: OveragePolicy
OVERAGE_POLICY_HARD: OveragePolicy
OVERAGE_POLICY_SOFT: OveragePolicy
PERIOD_UNSPECIFIED: Period
PERIOD_DAY: Period
PERIOD_WEEK: Period
PERIOD_MONTH: Period
PERIOD_QUARTER: Period
PERIOD_YEAR: Period
BUDGET_MODE_UNSPECIFIED: BudgetMode
BUDGET_MODE_ENFORCE: BudgetMode
BUDGET_MODE_OBSERVE: BudgetMode
REFUSAL_REASON_UNSPECIFIED: RefusalReason
REFUSAL_REASON_INSUFFICIENT_BUDGET: RefusalReason
REFUSAL_REASON_LIMIT_UNAVAILABLE: RefusalReason
REFUSAL_REASON_RATE_LIMITED: RefusalReason
REFUSAL_REASON_TOO_MANY_OPEN: RefusalReason
REFUSAL_REASON_ADMISSIONS_SPENT: RefusalReason
REFUSAL_REASON_CLOSED: RefusalReason
REFUSAL_REASON_SHARE_LEASE_ENDED: RefusalReason
REFUSAL_REASON_HOLD_OUTLIVES_SHARE: RefusalReason
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_SUCCEEDED: Outcome
OUTCOME_FAILED: Outcome
OUTCOME_CANCELLED: Outcome
OUTCOME_UNKNOWN: Outcome
RESERVATION_STATE_UNSPECIFIED: ReservationState
RESERVATION_STATE_HELD: ReservationState
RESERVATION_STATE_SETTLED: ReservationState
RESERVATION_STATE_EXPIRED: ReservationState
RESERVATION_STATE_IN_DOUBT: ReservationState
THRESHOLD_BASIS_UNSPECIFIED: ThresholdBasis
THRESHOLD_BASIS_COMMITTED: ThresholdBasis
THRESHOLD_BASIS_USED: ThresholdBasis
ESTIMATE_SOURCE_UNSPECIFIED: EstimateSource
ESTIMATE_SOURCE_CALLER: EstimateSource
ESTIMATE_SOURCE_SHAPE: EstimateSource
ESTIMATE_SOURCE_DEFAULT: EstimateSource
ESTIMATE_SOURCE_JOB_MEDIAN: EstimateSource
ESTIMATE_SOURCE_JOB_P75: EstimateSource
ESTIMATE_SOURCE_JOB_MAX: EstimateSource
ESTIMATE_POLICY_UNSPECIFIED: EstimatePolicy
ESTIMATE_POLICY_MEDIAN: EstimatePolicy
ESTIMATE_POLICY_P75: EstimatePolicy
SPEND_GROUP_UNSPECIFIED: SpendGroup
SPEND_GROUP_MODEL: SpendGroup
SPEND_GROUP_JOB: SpendGroup
SPEND_GROUP_DAY: SpendGroup

class ReserveRequest(_message.Message):
    __slots__ = ("budget_id", "amount", "idempotency_key", "lease", "labels", "shape", "job", "account", "feature", "also_budget_ids", "phase", "charge", "degrade")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    FEATURE_FIELD_NUMBER: _ClassVar[int]
    ALSO_BUDGET_IDS_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    CHARGE_FIELD_NUMBER: _ClassVar[int]
    DEGRADE_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    amount: int
    idempotency_key: str
    lease: _duration_pb2.Duration
    labels: _containers.ScalarMap[str, str]
    shape: UsageShape
    job: str
    account: str
    feature: str
    also_budget_ids: _containers.RepeatedScalarFieldContainer[str]
    phase: Phase
    charge: TokenUsage
    degrade: bool
    def __init__(self, budget_id: _Optional[str] = ..., amount: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., shape: _Optional[_Union[UsageShape, _Mapping]] = ..., job: _Optional[str] = ..., account: _Optional[str] = ..., feature: _Optional[str] = ..., also_budget_ids: _Optional[_Iterable[str]] = ..., phase: _Optional[_Union[Phase, str]] = ..., charge: _Optional[_Union[TokenUsage, _Mapping]] = ..., degrade: _Optional[bool] = ...) -> None: ...

class ReserveResponse(_message.Message):
    __slots__ = ("admitted", "reservation_id", "amount", "remaining", "reason", "message", "expires_at", "estimate_source", "price_version", "retry_after", "budget_id", "refused_budget_id", "overage_policy", "over_limit", "charged", "max_output_tokens", "degraded", "resets_at", "would_refuse", "would_refuse_reason")
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    PRICE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    REFUSED_BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    OVERAGE_POLICY_FIELD_NUMBER: _ClassVar[int]
    OVER_LIMIT_FIELD_NUMBER: _ClassVar[int]
    CHARGED_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    RESETS_AT_FIELD_NUMBER: _ClassVar[int]
    WOULD_REFUSE_FIELD_NUMBER: _ClassVar[int]
    WOULD_REFUSE_REASON_FIELD_NUMBER: _ClassVar[int]
    admitted: bool
    reservation_id: str
    amount: int
    remaining: int
    reason: RefusalReason
    message: str
    expires_at: _timestamp_pb2.Timestamp
    estimate_source: EstimateSource
    price_version: int
    retry_after: _duration_pb2.Duration
    budget_id: str
    refused_budget_id: str
    overage_policy: OveragePolicy
    over_limit: bool
    charged: int
    max_output_tokens: int
    degraded: bool
    resets_at: _timestamp_pb2.Timestamp
    would_refuse: bool
    would_refuse_reason: RefusalReason
    def __init__(self, admitted: _Optional[bool] = ..., reservation_id: _Optional[str] = ..., amount: _Optional[int] = ..., remaining: _Optional[int] = ..., reason: _Optional[_Union[RefusalReason, str]] = ..., message: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., estimate_source: _Optional[_Union[EstimateSource, str]] = ..., price_version: _Optional[int] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., budget_id: _Optional[str] = ..., refused_budget_id: _Optional[str] = ..., overage_policy: _Optional[_Union[OveragePolicy, str]] = ..., over_limit: _Optional[bool] = ..., charged: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., degraded: _Optional[bool] = ..., resets_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., would_refuse: _Optional[bool] = ..., would_refuse_reason: _Optional[_Union[RefusalReason, str]] = ...) -> None: ...

class ChargeRequest(_message.Message):
    __slots__ = ("reservation_id", "amount", "idempotency_key", "usage")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    amount: int
    idempotency_key: str
    usage: TokenUsage
    def __init__(self, reservation_id: _Optional[str] = ..., amount: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ...) -> None: ...

class ChargeResponse(_message.Message):
    __slots__ = ("charged", "capped", "total_charged", "hold_remaining", "expires_at", "price_version", "requested", "output_usd_micros_per_mtok")
    CHARGED_FIELD_NUMBER: _ClassVar[int]
    CAPPED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_CHARGED_FIELD_NUMBER: _ClassVar[int]
    HOLD_REMAINING_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    PRICE_VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_USD_MICROS_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
    charged: int
    capped: bool
    total_charged: int
    hold_remaining: int
    expires_at: _timestamp_pb2.Timestamp
    price_version: int
    requested: int
    output_usd_micros_per_mtok: int
    def __init__(self, charged: _Optional[int] = ..., capped: _Optional[bool] = ..., total_charged: _Optional[int] = ..., hold_remaining: _Optional[int] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., price_version: _Optional[int] = ..., requested: _Optional[int] = ..., output_usd_micros_per_mtok: _Optional[int] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("reservation_id", "lease", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    lease: _duration_pb2.Duration
    labels: _containers.ScalarMap[str, str]
    def __init__(self, reservation_id: _Optional[str] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RenewResponse(_message.Message):
    __slots__ = ("expires_at",)
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SettleRequest(_message.Message):
    __slots__ = ("reservation_id", "used", "outcome", "usage")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    used: int
    outcome: Outcome
    usage: TokenUsage
    def __init__(self, reservation_id: _Optional[str] = ..., used: _Optional[int] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ...) -> None: ...

class SettleResponse(_message.Message):
    __slots__ = ("charged", "released", "overshoot", "state", "price_version")
    CHARGED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    OVERSHOOT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PRICE_VERSION_FIELD_NUMBER: _ClassVar[int]
    charged: int
    released: int
    overshoot: int
    state: ReservationState
    price_version: int
    def __init__(self, charged: _Optional[int] = ..., released: _Optional[int] = ..., overshoot: _Optional[int] = ..., state: _Optional[_Union[ReservationState, str]] = ..., price_version: _Optional[int] = ...) -> None: ...

class PutBudgetRequest(_message.Message):
    __slots__ = ("budget_id", "limit", "unit", "default_estimate", "estimate_policy", "escrow_bps", "overage_policy", "overage_limit", "period", "timezone", "period_anchor", "threshold_bps", "mode", "admissions_per_minute", "units_per_minute", "threshold_basis", "max_open_holds", "max_admissions", "closes_at")
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_POLICY_FIELD_NUMBER: _ClassVar[int]
    ESCROW_BPS_FIELD_NUMBER: _ClassVar[int]
    OVERAGE_POLICY_FIELD_NUMBER: _ClassVar[int]
    OVERAGE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    PERIOD_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    PERIOD_ANCHOR_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_BPS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ADMISSIONS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    UNITS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_BASIS_FIELD_NUMBER: _ClassVar[int]
    MAX_OPEN_HOLDS_FIELD_NUMBER: _ClassVar[int]
    MAX_ADMISSIONS_FIELD_NUMBER: _ClassVar[int]
    CLOSES_AT_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    limit: int
    unit: str
    default_estimate: int
    estimate_policy: EstimatePolicy
    escrow_bps: int
    overage_policy: OveragePolicy
    overage_limit: int
    period: Period
    timezone: str
    period_anchor: int
    threshold_bps: _containers.RepeatedScalarFieldContainer[int]
    mode: BudgetMode
    admissions_per_minute: int
    units_per_minute: int
    threshold_basis: ThresholdBasis
    max_open_holds: int
    max_admissions: int
    closes_at: _timestamp_pb2.Timestamp
    def __init__(self, budget_id: _Optional[str] = ..., limit: _Optional[int] = ..., unit: _Optional[str] = ..., default_estimate: _Optional[int] = ..., estimate_policy: _Optional[_Union[EstimatePolicy, str]] = ..., escrow_bps: _Optional[int] = ..., overage_policy: _Optional[_Union[OveragePolicy, str]] = ..., overage_limit: _Optional[int] = ..., period: _Optional[_Union[Period, str]] = ..., timezone: _Optional[str] = ..., period_anchor: _Optional[int] = ..., threshold_bps: _Optional[_Iterable[int]] = ..., mode: _Optional[_Union[BudgetMode, str]] = ..., admissions_per_minute: _Optional[int] = ..., units_per_minute: _Optional[int] = ..., threshold_basis: _Optional[_Union[ThresholdBasis, str]] = ..., max_open_holds: _Optional[int] = ..., max_admissions: _Optional[int] = ..., closes_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class UpdateBudgetRequest(_message.Message):
    __slots__ = ("budget", "update_mask", "limit_until", "reason")
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    LIMIT_UNTIL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    budget: PutBudgetRequest
    update_mask: _field_mask_pb2.FieldMask
    limit_until: _timestamp_pb2.Timestamp
    reason: str
    def __init__(self, budget: _Optional[_Union[PutBudgetRequest, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., limit_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class GetBudgetRequest(_message.Message):
    __slots__ = ("budget_id",)
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    def __init__(self, budget_id: _Optional[str] = ...) -> None: ...

class BudgetState(_message.Message):
    __slots__ = ("budget_id", "limit", "used", "held", "remaining", "unit", "open_reservations", "default_estimate", "estimate_policy", "exceeded", "account", "feature", "cycle_start", "cycle_end", "limit_read_at", "escrow_bps", "overage_policy", "overage_limit", "overage_since", "archived_at", "period", "timezone", "period_start", "resets_at", "mode", "threshold_bps", "admissions_per_minute", "units_per_minute", "period_anchor", "threshold_basis", "refusals", "first_refused_at", "last_refused_at", "max_open_holds", "max_admissions", "closes_at", "admissions", "limit_until", "limit_after", "limit_reason", "template_id", "changed_by_hand")
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    OPEN_RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_POLICY_FIELD_NUMBER: _ClassVar[int]
    EXCEEDED_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    FEATURE_FIELD_NUMBER: _ClassVar[int]
    CYCLE_START_FIELD_NUMBER: _ClassVar[int]
    CYCLE_END_FIELD_NUMBER: _ClassVar[int]
    LIMIT_READ_AT_FIELD_NUMBER: _ClassVar[int]
    ESCROW_BPS_FIELD_NUMBER: _ClassVar[int]
    OVERAGE_POLICY_FIELD_NUMBER: _ClassVar[int]
    OVERAGE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    OVERAGE_SINCE_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_AT_FIELD_NUMBER: _ClassVar[int]
    PERIOD_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    PERIOD_START_FIELD_NUMBER: _ClassVar[int]
    RESETS_AT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_BPS_FIELD_NUMBER: _ClassVar[int]
    ADMISSIONS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    UNITS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    PERIOD_ANCHOR_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_BASIS_FIELD_NUMBER: _ClassVar[int]
    REFUSALS_FIELD_NUMBER: _ClassVar[int]
    FIRST_REFUSED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_REFUSED_AT_FIELD_NUMBER: _ClassVar[int]
    MAX_OPEN_HOLDS_FIELD_NUMBER: _ClassVar[int]
    MAX_ADMISSIONS_FIELD_NUMBER: _ClassVar[int]
    CLOSES_AT_FIELD_NUMBER: _ClassVar[int]
    ADMISSIONS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_UNTIL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_REASON_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    CHANGED_BY_HAND_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    limit: int
    used: int
    held: int
    remaining: int
    unit: str
    open_reservations: int
    default_estimate: int
    estimate_policy: EstimatePolicy
    exceeded: bool
    account: str
    feature: str
    cycle_start: _timestamp_pb2.Timestamp
    cycle_end: _timestamp_pb2.Timestamp
    limit_read_at: _timestamp_pb2.Timestamp
    escrow_bps: int
    overage_policy: OveragePolicy
    overage_limit: int
    overage_since: _timestamp_pb2.Timestamp
    archived_at: _timestamp_pb2.Timestamp
    period: Period
    timezone: str
    period_start: _timestamp_pb2.Timestamp
    resets_at: _timestamp_pb2.Timestamp
    mode: BudgetMode
    threshold_bps: _containers.RepeatedScalarFieldContainer[int]
    admissions_per_minute: int
    units_per_minute: int
    period_anchor: int
    threshold_basis: ThresholdBasis
    refusals: int
    first_refused_at: _timestamp_pb2.Timestamp
    last_refused_at: _timestamp_pb2.Timestamp
    max_open_holds: int
    max_admissions: int
    closes_at: _timestamp_pb2.Timestamp
    admissions: int
    limit_until: _timestamp_pb2.Timestamp
    limit_after: int
    limit_reason: str
    template_id: str
    changed_by_hand: bool
    def __init__(self, budget_id: _Optional[str] = ..., limit: _Optional[int] = ..., used: _Optional[int] = ..., held: _Optional[int] = ..., remaining: _Optional[int] = ..., unit: _Optional[str] = ..., open_reservations: _Optional[int] = ..., default_estimate: _Optional[int] = ..., estimate_policy: _Optional[_Union[EstimatePolicy, str]] = ..., exceeded: _Optional[bool] = ..., account: _Optional[str] = ..., feature: _Optional[str] = ..., cycle_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cycle_end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., limit_read_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., escrow_bps: _Optional[int] = ..., overage_policy: _Optional[_Union[OveragePolicy, str]] = ..., overage_limit: _Optional[int] = ..., overage_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., archived_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., period: _Optional[_Union[Period, str]] = ..., timezone: _Optional[str] = ..., period_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resets_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., mode: _Optional[_Union[BudgetMode, str]] = ..., threshold_bps: _Optional[_Iterable[int]] = ..., admissions_per_minute: _Optional[int] = ..., units_per_minute: _Optional[int] = ..., period_anchor: _Optional[int] = ..., threshold_basis: _Optional[_Union[ThresholdBasis, str]] = ..., refusals: _Optional[int] = ..., first_refused_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_refused_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_open_holds: _Optional[int] = ..., max_admissions: _Optional[int] = ..., closes_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., admissions: _Optional[int] = ..., limit_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., limit_after: _Optional[int] = ..., limit_reason: _Optional[str] = ..., template_id: _Optional[str] = ..., changed_by_hand: _Optional[bool] = ...) -> None: ...

class ListCyclesRequest(_message.Message):
    __slots__ = ("account",)
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    account: str
    def __init__(self, account: _Optional[str] = ...) -> None: ...

class ListCyclesResponse(_message.Message):
    __slots__ = ("cycles",)
    CYCLES_FIELD_NUMBER: _ClassVar[int]
    cycles: _containers.RepeatedCompositeFieldContainer[BudgetState]
    def __init__(self, cycles: _Optional[_Iterable[_Union[BudgetState, _Mapping]]] = ...) -> None: ...

class RefreshLimitsRequest(_message.Message):
    __slots__ = ("account",)
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    account: str
    def __init__(self, account: _Optional[str] = ...) -> None: ...

class Price(_message.Message):
    __slots__ = ("provider", "model", "effective_from", "effective_to", "input_usd_micros_per_mtok", "output_usd_micros_per_mtok", "cached_input_usd_micros_per_mtok", "request_usd_micros", "source", "captured_at", "version", "daily_from_minute", "daily_to_minute", "cache_write_usd_micros_per_mtok", "max_output_tokens", "cache_write_long_usd_micros_per_mtok", "service_tier", "tool_usd_micros", "input_tokens_above", "window_timezone")
    class ToolUsdMicrosEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_FROM_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_TO_FIELD_NUMBER: _ClassVar[int]
    INPUT_USD_MICROS_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_USD_MICROS_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_USD_MICROS_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
    REQUEST_USD_MICROS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_AT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DAILY_FROM_MINUTE_FIELD_NUMBER: _ClassVar[int]
    DAILY_TO_MINUTE_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_USD_MICROS_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_LONG_USD_MICROS_PER_MTOK_FIELD_NUMBER: _ClassVar[int]
    SERVICE_TIER_FIELD_NUMBER: _ClassVar[int]
    TOOL_USD_MICROS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_ABOVE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    effective_from: _timestamp_pb2.Timestamp
    effective_to: _timestamp_pb2.Timestamp
    input_usd_micros_per_mtok: int
    output_usd_micros_per_mtok: int
    cached_input_usd_micros_per_mtok: int
    request_usd_micros: int
    source: str
    captured_at: _timestamp_pb2.Timestamp
    version: int
    daily_from_minute: int
    daily_to_minute: int
    cache_write_usd_micros_per_mtok: int
    max_output_tokens: int
    cache_write_long_usd_micros_per_mtok: int
    service_tier: str
    tool_usd_micros: _containers.ScalarMap[str, int]
    input_tokens_above: int
    window_timezone: str
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ..., effective_from: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., effective_to: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., input_usd_micros_per_mtok: _Optional[int] = ..., output_usd_micros_per_mtok: _Optional[int] = ..., cached_input_usd_micros_per_mtok: _Optional[int] = ..., request_usd_micros: _Optional[int] = ..., source: _Optional[str] = ..., captured_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[int] = ..., daily_from_minute: _Optional[int] = ..., daily_to_minute: _Optional[int] = ..., cache_write_usd_micros_per_mtok: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., cache_write_long_usd_micros_per_mtok: _Optional[int] = ..., service_tier: _Optional[str] = ..., tool_usd_micros: _Optional[_Mapping[str, int]] = ..., input_tokens_above: _Optional[int] = ..., window_timezone: _Optional[str] = ...) -> None: ...

class PutPriceRequest(_message.Message):
    __slots__ = ("price",)
    PRICE_FIELD_NUMBER: _ClassVar[int]
    price: Price
    def __init__(self, price: _Optional[_Union[Price, _Mapping]] = ...) -> None: ...

class ListPricesRequest(_message.Message):
    __slots__ = ("provider", "model")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class ListPricesResponse(_message.Message):
    __slots__ = ("prices",)
    PRICES_FIELD_NUMBER: _ClassVar[int]
    prices: _containers.RepeatedCompositeFieldContainer[Price]
    def __init__(self, prices: _Optional[_Iterable[_Union[Price, _Mapping]]] = ...) -> None: ...

class UsageShape(_message.Message):
    __slots__ = ("provider", "model", "input_tokens", "max_output_tokens", "cached_input_tokens", "attempts", "cache_write_input_tokens", "cache_write_long_input_tokens", "service_tier", "max_tool_calls", "output_ceiling")
    class MaxToolCallsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_LONG_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_TIER_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_CEILING_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    input_tokens: int
    max_output_tokens: int
    cached_input_tokens: int
    attempts: int
    cache_write_input_tokens: int
    cache_write_long_input_tokens: int
    service_tier: str
    max_tool_calls: _containers.ScalarMap[str, int]
    output_ceiling: bool
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ..., input_tokens: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ..., attempts: _Optional[int] = ..., cache_write_input_tokens: _Optional[int] = ..., cache_write_long_input_tokens: _Optional[int] = ..., service_tier: _Optional[str] = ..., max_tool_calls: _Optional[_Mapping[str, int]] = ..., output_ceiling: _Optional[bool] = ...) -> None: ...

class TokenUsage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "cached_input_tokens", "requests", "provider", "model", "cache_write_input_tokens", "cache_write_long_input_tokens", "service_tier", "tool_calls")
    class ToolCallsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_LONG_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_TIER_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    requests: int
    provider: str
    model: str
    cache_write_input_tokens: int
    cache_write_long_input_tokens: int
    service_tier: str
    tool_calls: _containers.ScalarMap[str, int]
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ..., requests: _Optional[int] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., cache_write_input_tokens: _Optional[int] = ..., cache_write_long_input_tokens: _Optional[int] = ..., service_tier: _Optional[str] = ..., tool_calls: _Optional[_Mapping[str, int]] = ...) -> None: ...

class Hold(_message.Message):
    __slots__ = ("reservation_id", "budget_id", "also_budget_ids", "state", "amount", "charged", "dispatched", "phase", "idempotency_key", "owner", "job", "labels", "created_at", "expires_at", "closed_at", "settled_used", "released")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    ALSO_BUDGET_IDS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    CHARGED_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CLOSED_AT_FIELD_NUMBER: _ClassVar[int]
    SETTLED_USED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    budget_id: str
    also_budget_ids: _containers.RepeatedScalarFieldContainer[str]
    state: ReservationState
    amount: int
    charged: int
    dispatched: bool
    phase: Phase
    idempotency_key: str
    owner: str
    job: str
    labels: _containers.ScalarMap[str, str]
    created_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    closed_at: _timestamp_pb2.Timestamp
    settled_used: int
    released: bool
    def __init__(self, reservation_id: _Optional[str] = ..., budget_id: _Optional[str] = ..., also_budget_ids: _Optional[_Iterable[str]] = ..., state: _Optional[_Union[ReservationState, str]] = ..., amount: _Optional[int] = ..., charged: _Optional[int] = ..., dispatched: _Optional[bool] = ..., phase: _Optional[_Union[Phase, str]] = ..., idempotency_key: _Optional[str] = ..., owner: _Optional[str] = ..., job: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., closed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., settled_used: _Optional[int] = ..., released: _Optional[bool] = ...) -> None: ...

class ListHoldsRequest(_message.Message):
    __slots__ = ("budget_id", "state", "page_size", "page_token")
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    state: ReservationState
    page_size: int
    page_token: str
    def __init__(self, budget_id: _Optional[str] = ..., state: _Optional[_Union[ReservationState, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListHoldsResponse(_message.Message):
    __slots__ = ("holds", "next_page_token")
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    holds: _containers.RepeatedCompositeFieldContainer[Hold]
    next_page_token: str
    def __init__(self, holds: _Optional[_Iterable[_Union[Hold, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class LedgerEntry(_message.Message):
    __slots__ = ("entry_id", "budget_id", "reservation_id", "kind", "held_delta", "used_delta", "at", "evidence", "limit_before", "limit_after", "limit_until", "reason")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    HELD_DELTA_FIELD_NUMBER: _ClassVar[int]
    USED_DELTA_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_BEFORE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_UNTIL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    entry_id: int
    budget_id: str
    reservation_id: str
    kind: str
    held_delta: int
    used_delta: int
    at: _timestamp_pb2.Timestamp
    evidence: str
    limit_before: int
    limit_after: int
    limit_until: _timestamp_pb2.Timestamp
    reason: str
    def __init__(self, entry_id: _Optional[int] = ..., budget_id: _Optional[str] = ..., reservation_id: _Optional[str] = ..., kind: _Optional[str] = ..., held_delta: _Optional[int] = ..., used_delta: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., evidence: _Optional[str] = ..., limit_before: _Optional[int] = ..., limit_after: _Optional[int] = ..., limit_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class ListLedgerRequest(_message.Message):
    __slots__ = ("budget_id", "page_size", "page_token")
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    page_size: int
    page_token: str
    def __init__(self, budget_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListLedgerResponse(_message.Message):
    __slots__ = ("entries", "next_page_token")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[LedgerEntry]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[LedgerEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListBudgetsRequest(_message.Message):
    __slots__ = ("prefix", "page_size", "page_token")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    page_size: int
    page_token: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListBudgetsResponse(_message.Message):
    __slots__ = ("budgets", "next_page_token")
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    budgets: _containers.RepeatedCompositeFieldContainer[BudgetState]
    next_page_token: str
    def __init__(self, budgets: _Optional[_Iterable[_Union[BudgetState, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResolveHoldRequest(_message.Message):
    __slots__ = ("reservation_id", "used", "usage", "evidence")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    used: int
    usage: TokenUsage
    evidence: str
    def __init__(self, reservation_id: _Optional[str] = ..., used: _Optional[int] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ..., evidence: _Optional[str] = ...) -> None: ...

class ReleaseHoldRequest(_message.Message):
    __slots__ = ("reservation_id",)
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    def __init__(self, reservation_id: _Optional[str] = ...) -> None: ...

class DeleteBudgetRequest(_message.Message):
    __slots__ = ("budget_id",)
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    def __init__(self, budget_id: _Optional[str] = ...) -> None: ...

class Call(_message.Message):
    __slots__ = ("reservation_id", "budget_id", "also_budget_ids", "provider", "model", "service_tier", "key_label", "sent_at", "state", "amount", "charged", "usage", "settled_used", "evidence", "unit")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    ALSO_BUDGET_IDS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SERVICE_TIER_FIELD_NUMBER: _ClassVar[int]
    KEY_LABEL_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    CHARGED_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SETTLED_USED_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    budget_id: str
    also_budget_ids: _containers.RepeatedScalarFieldContainer[str]
    provider: str
    model: str
    service_tier: str
    key_label: str
    sent_at: _timestamp_pb2.Timestamp
    state: ReservationState
    amount: int
    charged: int
    usage: TokenUsage
    settled_used: int
    evidence: str
    unit: str
    def __init__(self, reservation_id: _Optional[str] = ..., budget_id: _Optional[str] = ..., also_budget_ids: _Optional[_Iterable[str]] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., service_tier: _Optional[str] = ..., key_label: _Optional[str] = ..., sent_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[ReservationState, str]] = ..., amount: _Optional[int] = ..., charged: _Optional[int] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ..., settled_used: _Optional[int] = ..., evidence: _Optional[str] = ..., unit: _Optional[str] = ...) -> None: ...

class ListCallsRequest(_message.Message):
    __slots__ = ("provider", "since", "until", "key_label", "page_size", "page_token")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    KEY_LABEL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    provider: str
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    key_label: str
    page_size: int
    page_token: str
    def __init__(self, provider: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., key_label: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListCallsResponse(_message.Message):
    __slots__ = ("calls", "next_page_token")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[Call]
    next_page_token: str
    def __init__(self, calls: _Optional[_Iterable[_Union[Call, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetSpendRequest(_message.Message):
    __slots__ = ("budget_id", "group_by", "since", "until", "max_rows")
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    group_by: SpendGroup
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    max_rows: int
    def __init__(self, budget_id: _Optional[str] = ..., group_by: _Optional[_Union[SpendGroup, str]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_rows: _Optional[int] = ...) -> None: ...

class SpendRow(_message.Message):
    __slots__ = ("key", "used", "holds")
    KEY_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    key: str
    used: int
    holds: int
    def __init__(self, key: _Optional[str] = ..., used: _Optional[int] = ..., holds: _Optional[int] = ...) -> None: ...

class GetSpendResponse(_message.Message):
    __slots__ = ("rows", "used", "groups", "unit")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[SpendRow]
    used: int
    groups: int
    unit: str
    def __init__(self, rows: _Optional[_Iterable[_Union[SpendRow, _Mapping]]] = ..., used: _Optional[int] = ..., groups: _Optional[int] = ..., unit: _Optional[str] = ...) -> None: ...

class PutBudgetTemplateRequest(_message.Message):
    __slots__ = ("template_id", "pattern", "budget")
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    pattern: str
    budget: PutBudgetRequest
    def __init__(self, template_id: _Optional[str] = ..., pattern: _Optional[str] = ..., budget: _Optional[_Union[PutBudgetRequest, _Mapping]] = ...) -> None: ...

class BudgetTemplate(_message.Message):
    __slots__ = ("template_id", "pattern", "budget", "version", "updated_at", "deleted_at")
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    DELETED_AT_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    pattern: str
    budget: PutBudgetRequest
    version: int
    updated_at: _timestamp_pb2.Timestamp
    deleted_at: _timestamp_pb2.Timestamp
    def __init__(self, template_id: _Optional[str] = ..., pattern: _Optional[str] = ..., budget: _Optional[_Union[PutBudgetRequest, _Mapping]] = ..., version: _Optional[int] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deleted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListBudgetTemplatesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListBudgetTemplatesResponse(_message.Message):
    __slots__ = ("templates",)
    TEMPLATES_FIELD_NUMBER: _ClassVar[int]
    templates: _containers.RepeatedCompositeFieldContainer[BudgetTemplate]
    def __init__(self, templates: _Optional[_Iterable[_Union[BudgetTemplate, _Mapping]]] = ...) -> None: ...

class DeleteBudgetTemplateRequest(_message.Message):
    __slots__ = ("template_id",)
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    def __init__(self, template_id: _Optional[str] = ...) -> None: ...

class ShareRequest(_message.Message):
    __slots__ = ("region", "asks")
    REGION_FIELD_NUMBER: _ClassVar[int]
    ASKS_FIELD_NUMBER: _ClassVar[int]
    region: str
    asks: _containers.RepeatedCompositeFieldContainer[ShareAsk]
    def __init__(self, region: _Optional[str] = ..., asks: _Optional[_Iterable[_Union[ShareAsk, _Mapping]]] = ...) -> None: ...

class ShareAsk(_message.Message):
    __slots__ = ("budget_id", "sent_at", "want", "need", "returned", "used", "doubt", "smallest_need")
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    WANT_FIELD_NUMBER: _ClassVar[int]
    NEED_FIELD_NUMBER: _ClassVar[int]
    RETURNED_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    DOUBT_FIELD_NUMBER: _ClassVar[int]
    SMALLEST_NEED_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    sent_at: _timestamp_pb2.Timestamp
    want: int
    need: int
    returned: int
    used: int
    doubt: int
    smallest_need: int
    def __init__(self, budget_id: _Optional[str] = ..., sent_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., want: _Optional[int] = ..., need: _Optional[int] = ..., returned: _Optional[int] = ..., used: _Optional[int] = ..., doubt: _Optional[int] = ..., smallest_need: _Optional[int] = ...) -> None: ...

class ShareResponse(_message.Message):
    __slots__ = ("answers",)
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[ShareAnswer]
    def __init__(self, answers: _Optional[_Iterable[_Union[ShareAnswer, _Mapping]]] = ...) -> None: ...

class ShareAnswer(_message.Message):
    __slots__ = ("budget_id", "found", "message", "asked_at", "granted", "released", "short", "granted_now", "unit")
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ASKED_AT_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    SHORT_FIELD_NUMBER: _ClassVar[int]
    GRANTED_NOW_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    found: bool
    message: str
    asked_at: _timestamp_pb2.Timestamp
    granted: int
    released: int
    short: bool
    granted_now: int
    unit: str
    def __init__(self, budget_id: _Optional[str] = ..., found: _Optional[bool] = ..., message: _Optional[str] = ..., asked_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., granted: _Optional[int] = ..., released: _Optional[int] = ..., short: _Optional[bool] = ..., granted_now: _Optional[int] = ..., unit: _Optional[str] = ...) -> None: ...

class ListSharesRequest(_message.Message):
    __slots__ = ("budget_id", "after_budget_id")
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    after_budget_id: str
    def __init__(self, budget_id: _Optional[str] = ..., after_budget_id: _Optional[str] = ...) -> None: ...

class ListSharesResponse(_message.Message):
    __slots__ = ("shares", "next_budget_id")
    SHARES_FIELD_NUMBER: _ClassVar[int]
    NEXT_BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    shares: _containers.RepeatedCompositeFieldContainer[Share]
    next_budget_id: str
    def __init__(self, shares: _Optional[_Iterable[_Union[Share, _Mapping]]] = ..., next_budget_id: _Optional[str] = ...) -> None: ...

class Share(_message.Message):
    __slots__ = ("budget_id", "region", "home", "granted", "released", "used", "outstanding", "doubt", "lease_until", "heard_at", "reclaimed")
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    HOME_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    OUTSTANDING_FIELD_NUMBER: _ClassVar[int]
    DOUBT_FIELD_NUMBER: _ClassVar[int]
    LEASE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    HEARD_AT_FIELD_NUMBER: _ClassVar[int]
    RECLAIMED_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    region: str
    home: bool
    granted: int
    released: int
    used: int
    outstanding: int
    doubt: int
    lease_until: _timestamp_pb2.Timestamp
    heard_at: _timestamp_pb2.Timestamp
    reclaimed: int
    def __init__(self, budget_id: _Optional[str] = ..., region: _Optional[str] = ..., home: _Optional[bool] = ..., granted: _Optional[int] = ..., released: _Optional[int] = ..., used: _Optional[int] = ..., outstanding: _Optional[int] = ..., doubt: _Optional[int] = ..., lease_until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., heard_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reclaimed: _Optional[int] = ...) -> None: ...
