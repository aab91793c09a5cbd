import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RefusalReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REFUSAL_REASON_UNSPECIFIED: _ClassVar[RefusalReason]
    REFUSAL_REASON_INSUFFICIENT_BUDGET: _ClassVar[RefusalReason]
    REFUSAL_REASON_LIMIT_UNAVAILABLE: _ClassVar[RefusalReason]
    REFUSAL_REASON_RATE_LIMITED: _ClassVar[RefusalReason]

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_SUCCEEDED: _ClassVar[Outcome]
    OUTCOME_FAILED: _ClassVar[Outcome]
    OUTCOME_CANCELLED: _ClassVar[Outcome]

class ReservationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESERVATION_STATE_UNSPECIFIED: _ClassVar[ReservationState]
    RESERVATION_STATE_HELD: _ClassVar[ReservationState]
    RESERVATION_STATE_SETTLED: _ClassVar[ReservationState]
    RESERVATION_STATE_EXPIRED: _ClassVar[ReservationState]
REFUSAL_REASON_UNSPECIFIED: RefusalReason
REFUSAL_REASON_INSUFFICIENT_BUDGET: RefusalReason
REFUSAL_REASON_LIMIT_UNAVAILABLE: RefusalReason
REFUSAL_REASON_RATE_LIMITED: RefusalReason
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_SUCCEEDED: Outcome
OUTCOME_FAILED: Outcome
OUTCOME_CANCELLED: Outcome
RESERVATION_STATE_UNSPECIFIED: ReservationState
RESERVATION_STATE_HELD: ReservationState
RESERVATION_STATE_SETTLED: ReservationState
RESERVATION_STATE_EXPIRED: ReservationState

class ReserveRequest(_message.Message):
    __slots__ = ("budget_id", "amount", "idempotency_key", "lease", "labels")
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
    budget_id: str
    amount: int
    idempotency_key: str
    lease: _duration_pb2.Duration
    labels: _containers.ScalarMap[str, str]
    def __init__(self, budget_id: _Optional[str] = ..., amount: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ReserveResponse(_message.Message):
    __slots__ = ("admitted", "reservation_id", "amount", "remaining", "reason", "message", "expires_at")
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    admitted: bool
    reservation_id: str
    amount: int
    remaining: int
    reason: RefusalReason
    message: str
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, admitted: _Optional[bool] = ..., reservation_id: _Optional[str] = ..., amount: _Optional[int] = ..., remaining: _Optional[int] = ..., reason: _Optional[_Union[RefusalReason, str]] = ..., message: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ChargeRequest(_message.Message):
    __slots__ = ("reservation_id", "amount", "idempotency_key")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    amount: int
    idempotency_key: str
    def __init__(self, reservation_id: _Optional[str] = ..., amount: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class ChargeResponse(_message.Message):
    __slots__ = ("charged", "capped", "total_charged", "hold_remaining", "expires_at")
    CHARGED_FIELD_NUMBER: _ClassVar[int]
    CAPPED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_CHARGED_FIELD_NUMBER: _ClassVar[int]
    HOLD_REMAINING_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    charged: int
    capped: bool
    total_charged: int
    hold_remaining: int
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, charged: _Optional[int] = ..., capped: _Optional[bool] = ..., total_charged: _Optional[int] = ..., hold_remaining: _Optional[int] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("reservation_id", "lease")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    lease: _duration_pb2.Duration
    def __init__(self, reservation_id: _Optional[str] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RenewResponse(_message.Message):
    __slots__ = ("expires_at",)
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SettleRequest(_message.Message):
    __slots__ = ("reservation_id", "used", "outcome")
    RESERVATION_ID_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    reservation_id: str
    used: int
    outcome: Outcome
    def __init__(self, reservation_id: _Optional[str] = ..., used: _Optional[int] = ..., outcome: _Optional[_Union[Outcome, str]] = ...) -> None: ...

class SettleResponse(_message.Message):
    __slots__ = ("charged", "released", "overshoot", "state")
    CHARGED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    OVERSHOOT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    charged: int
    released: int
    overshoot: int
    state: ReservationState
    def __init__(self, charged: _Optional[int] = ..., released: _Optional[int] = ..., overshoot: _Optional[int] = ..., state: _Optional[_Union[ReservationState, str]] = ...) -> None: ...

class PutBudgetRequest(_message.Message):
    __slots__ = ("budget_id", "limit", "unit")
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    limit: int
    unit: str
    def __init__(self, budget_id: _Optional[str] = ..., limit: _Optional[int] = ..., unit: _Optional[str] = ...) -> None: ...

class GetBudgetRequest(_message.Message):
    __slots__ = ("budget_id",)
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    def __init__(self, budget_id: _Optional[str] = ...) -> None: ...

class BudgetState(_message.Message):
    __slots__ = ("budget_id", "limit", "used", "held", "remaining", "unit", "open_reservations")
    BUDGET_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    OPEN_RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    budget_id: str
    limit: int
    used: int
    held: int
    remaining: int
    unit: str
    open_reservations: int
    def __init__(self, budget_id: _Optional[str] = ..., limit: _Optional[int] = ..., used: _Optional[int] = ..., held: _Optional[int] = ..., remaining: _Optional[int] = ..., unit: _Optional[str] = ..., open_reservations: _Optional[int] = ...) -> None: ...
