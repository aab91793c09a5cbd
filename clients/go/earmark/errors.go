package earmark

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the google.rpc.ErrorInfo domain of the reasons the sidecar sends.
const Domain = "earmark"

// Error is a failed call: the status code, the server's (or the channel's) message, and
// the stable reason of its google.rpc.ErrorInfo ("" when the call failed before reaching
// the sidecar), with the fields it concerns (Metadata). Match it with errors.Is against
// the Err* values, or read it with errors.As.
type Error struct {
	Code     codes.Code
	Message  string
	Reason   string
	Metadata map[string]string
}

func (e *Error) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("earmark: %s (%s): %s", e.Code, e.Reason, e.Message)
	}
	return fmt.Sprintf("earmark: %s: %s", e.Code, e.Message)
}

// GRPCStatus lets status.FromError and status.Code read the call's code.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// Is matches the Err* kinds: by code, or by code and one of the kind's reasons.
func (e *Error) Is(target error) bool {
	k, ok := target.(*kind)
	if !ok || k.code != e.Code {
		return false
	}
	if len(k.reasons) == 0 {
		return true
	}
	for _, r := range k.reasons {
		if r == e.Reason {
			return true
		}
	}
	return false
}

// kind is an Err* value: a status code and, for the specific ones, the reasons they stand
// for (the classes of the Python SDK's earmark.client.errors).
type kind struct {
	name    string
	code    codes.Code
	reasons []string
}

func (k *kind) Error() string { return "earmark: " + k.name }

// What a failed call can be matched with, by code...
var (
	ErrInvalidArgument    error = &kind{"invalid argument", codes.InvalidArgument, nil}
	ErrNotFound           error = &kind{"not found", codes.NotFound, nil}
	ErrAlreadyExists      error = &kind{"already exists", codes.AlreadyExists, nil}
	ErrFailedPrecondition error = &kind{"failed precondition", codes.FailedPrecondition, nil}
	ErrUnauthenticated    error = &kind{"unauthenticated", codes.Unauthenticated, nil}
	ErrPermissionDenied   error = &kind{"permission denied", codes.PermissionDenied, nil}
	ErrUnavailable        error = &kind{"unavailable", codes.Unavailable, nil}
	ErrDeadlineExceeded   error = &kind{"deadline exceeded", codes.DeadlineExceeded, nil}
)

// ... and by the reason of its ErrorInfo (docs/contract.md lists them).
var (
	ErrBudgetNotFound      error = &kind{"BUDGET_NOT_FOUND", codes.NotFound, []string{"BUDGET_NOT_FOUND"}}
	ErrReservationNotFound error = &kind{"RESERVATION_NOT_FOUND", codes.NotFound, []string{"RESERVATION_NOT_FOUND"}}
	ErrKeyReused           error = &kind{"KEY_REUSED", codes.AlreadyExists, []string{"KEY_REUSED"}}
	// ErrHoldClosed: the hold is not HELD any more (expired, settled or in doubt); the
	// worker must stop spending on it.
	ErrHoldClosed error = &kind{"hold closed", codes.FailedPrecondition,
		[]string{"HOLD_EXPIRED", "HOLD_SETTLED", "HOLD_IN_DOUBT"}}
	ErrHoldExpired    error = &kind{"HOLD_EXPIRED", codes.FailedPrecondition, []string{"HOLD_EXPIRED"}}
	ErrHoldSettled    error = &kind{"HOLD_SETTLED", codes.FailedPrecondition, []string{"HOLD_SETTLED"}}
	ErrHoldInDoubt    error = &kind{"HOLD_IN_DOUBT", codes.FailedPrecondition, []string{"HOLD_IN_DOUBT"}}
	ErrSettleMismatch error = &kind{"SETTLE_MISMATCH", codes.FailedPrecondition, []string{"SETTLE_MISMATCH"}}
	ErrUnitLocked     error = &kind{"UNIT_LOCKED", codes.FailedPrecondition, []string{"UNIT_LOCKED"}}
	ErrBudgetArchived error = &kind{"BUDGET_ARCHIVED", codes.FailedPrecondition, []string{"BUDGET_ARCHIVED"}}
	ErrPriceNotFound  error = &kind{"PRICE_NOT_FOUND", codes.FailedPrecondition, []string{"PRICE_NOT_FOUND"}}
)

// retryableReasons are the UNAVAILABLE reasons the sidecar sends (earmark.errors.Reason):
// each is safe to retry with the same idempotency key. An UNAVAILABLE without an
// ErrorInfo is the channel's own (no sidecar answered) and is retried too.
var retryableReasons = map[string]bool{
	"SHUTTING_DOWN":              true,
	"OVERLOADED":                 true,
	"DATABASE_UNAVAILABLE":       true,
	"DATABASE_DISK_FULL":         true,
	"DATABASE_OUT_OF_MEMORY":     true,
	"DATABASE_READ_ONLY":         true,
	"DATABASE_IO_ERROR":          true,
	"DATABASE_CONNECTIONS_FULL":  true,
	"DATABASE_BUSY":              true,
	"DATABASE_STARTING":          true,
	"CONFLICT_RETRIES_EXHAUSTED": true,
	"LIMITS_UNAVAILABLE":         true,
}

// retryable says whether a failed attempt may be sent again, unchanged: UNAVAILABLE
// (the channel's, or one of the retryable reasons) and DEADLINE_EXCEEDED (the call may
// have been decided; the same idempotency key makes the retry answer the same).
func retryable(e *Error) bool {
	switch e.Code {
	case codes.Unavailable:
		return e.Reason == "" || retryableReasons[e.Reason]
	case codes.DeadlineExceeded:
		return true
	}
	return false
}

// fromError maps a gRPC call's error to an *Error, with the ErrorInfo of Earmark's
// domain from the status details when there is one.
func fromError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	s, ok := status.FromError(err)
	if !ok {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return &Error{Code: codes.DeadlineExceeded, Message: err.Error()}
		case errors.Is(err, context.Canceled):
			return &Error{Code: codes.Canceled, Message: err.Error()}
		}
		return &Error{Code: codes.Unknown, Message: err.Error()}
	}
	e = &Error{Code: s.Code(), Message: s.Message()}
	for _, d := range s.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			e.Reason = info.GetReason()
			e.Metadata = info.GetMetadata()
			break
		}
	}
	return e
}

// RefusedError is what Hold returns when the Reserve was refused: the refusal itself is
// an answer (Reservation.Admitted is false), not a failure, so it is never retried.
type RefusedError struct{ Reservation *Reservation }

func (e *RefusedError) Error() string {
	r := e.Reservation
	return fmt.Sprintf("earmark: refused (%s) on %s: %s", r.Reason, r.refusedBy(), r.Message)
}

// ErrOutcomeUnknown marks an error after which the caller cannot tell whether its work
// ran (a timeout or a lost connection after the provider was sent the request): Hold
// settles with OUTCOME_UNKNOWN and the hold stays in doubt. Mark one with Unknown.
var ErrOutcomeUnknown = errors.New("earmark: outcome unknown")

type unknownOutcome struct{ err error }

func (u unknownOutcome) Error() string        { return u.err.Error() + " (outcome unknown)" }
func (u unknownOutcome) Unwrap() error        { return u.err }
func (u unknownOutcome) Is(target error) bool { return target == ErrOutcomeUnknown }

// Unknown marks err as one whose outcome is unknown (errors.Is(err, ErrOutcomeUnknown)).
func Unknown(err error) error {
	if err == nil {
		err = ErrOutcomeUnknown
	}
	return unknownOutcome{err}
}

// ErrHoldLost: a background Renew found the hold closed (expired or released) while the
// block ran; the block's context was cancelled and the worker must stop spending.
var ErrHoldLost = errors.New("earmark: the hold was lost while the block ran")

// holdLost is Hold's error when a renewal found the hold closed: it matches ErrHoldLost and
// wraps the renewal's *Error (so errors.Is(err, ErrHoldExpired), errors.As to *Error).
type holdLost struct{ cause error }

func (h holdLost) Error() string        { return ErrHoldLost.Error() + ": " + h.cause.Error() }
func (h holdLost) Unwrap() error        { return h.cause }
func (h holdLost) Is(target error) bool { return target == ErrHoldLost }
