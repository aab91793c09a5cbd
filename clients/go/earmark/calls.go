package earmark

import (
	"context"
	"time"

	earmarkv1 "github.com/earmark-dev/earmark/gen/go/earmark/v1"
	"google.golang.org/grpc"
)

// ReserveRequest asks to check and hold Amount of BudgetID.
type ReserveRequest struct {
	BudgetID string
	Amount   int64
	// IdempotencyKey is made (NewKey) when empty; the same key on the same budget
	// returns the same reservation.
	IdempotencyKey string
	// Lease defaults to the sidecar's (120 s).
	Lease         time.Duration
	Labels        map[string]string
	Job           string
	AlsoBudgetIDs []string
	// Final reserves in PHASE_FINAL (it may reach the budget's output escrow).
	Final bool
}

// Reservation is Reserve's answer: a hold (Admitted), or a refusal with its Reason and
// Message. A refusal is an answer, not an error, and is not retried.
type Reservation struct {
	Admitted        bool
	ID              string
	BudgetID        string
	Amount          int64
	Remaining       *int64 // nil for an unlimited budget
	ExpiresAt       time.Time
	Reason          earmarkv1.RefusalReason
	Message         string
	RefusedBudgetID string
	RetryAfter      time.Duration // with REFUSAL_REASON_RATE_LIMITED
}

func (r *Reservation) refusedBy() string {
	if r.RefusedBudgetID != "" {
		return r.RefusedBudgetID
	}
	return r.BudgetID
}

// Reserve checks and holds part of a budget.
func (c *Client) Reserve(ctx context.Context, req ReserveRequest) (*Reservation, error) {
	phase := earmarkv1.Phase_PHASE_WORK
	if req.Final {
		phase = earmarkv1.Phase_PHASE_FINAL
	}
	in := &earmarkv1.ReserveRequest{
		BudgetId: req.BudgetID, Amount: req.Amount, IdempotencyKey: first(req.IdempotencyKey, NewKey()),
		Lease: duration(req.Lease), Labels: req.Labels, Job: req.Job,
		AlsoBudgetIds: req.AlsoBudgetIDs, Phase: phase,
	}
	var out *earmarkv1.ReserveResponse
	err := c.budgetCall(ctx, func(ctx context.Context, opts ...grpc.CallOption) (err error) {
		out, err = c.budget.Reserve(ctx, in, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Reservation{
		Admitted: out.Admitted, ID: out.ReservationId, BudgetID: first(out.BudgetId, req.BudgetID),
		Amount: out.Amount, Remaining: out.Remaining, ExpiresAt: out.ExpiresAt.AsTime(),
		Reason: out.Reason, Message: out.Message, RefusedBudgetID: out.RefusedBudgetId,
		RetryAfter: out.RetryAfter.AsDuration(),
	}, nil
}

// ChargeRequest debits one step against a hold before the step runs.
type ChargeRequest struct {
	ReservationID string
	Amount        int64
	// IdempotencyKey is made when empty: a retried Charge with the same key charges once.
	IdempotencyKey string
}

// Charged is Charge's answer. Capped: less than asked was left, the worker must stop.
type Charged struct {
	Charged, TotalCharged, HoldRemaining int64
	Capped                               bool
	ExpiresAt                            time.Time
}

// Charge debits a step, capped at what is left of the hold.
func (c *Client) Charge(ctx context.Context, req ChargeRequest) (*Charged, error) {
	in := &earmarkv1.ChargeRequest{
		ReservationId: req.ReservationID, Amount: req.Amount,
		IdempotencyKey: first(req.IdempotencyKey, NewKey()),
	}
	var out *earmarkv1.ChargeResponse
	err := c.budgetCall(ctx, func(ctx context.Context, opts ...grpc.CallOption) (err error) {
		out, err = c.budget.Charge(ctx, in, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &Charged{
		Charged: out.Charged, TotalCharged: out.TotalCharged, HoldRemaining: out.HoldRemaining,
		Capped: out.Capped, ExpiresAt: out.ExpiresAt.AsTime(),
	}, nil
}

// RenewRequest extends a hold's lease (Lease 0: the sidecar's default) and may add labels.
type RenewRequest struct {
	ReservationID string
	Lease         time.Duration
	Labels        map[string]string
}

// Renew extends the lease; it answers when the hold now expires.
func (c *Client) Renew(ctx context.Context, req RenewRequest) (time.Time, error) {
	in := &earmarkv1.RenewRequest{ReservationId: req.ReservationID, Lease: duration(req.Lease), Labels: req.Labels}
	var out *earmarkv1.RenewResponse
	err := c.budgetCall(ctx, func(ctx context.Context, opts ...grpc.CallOption) (err error) {
		out, err = c.budget.Renew(ctx, in, opts...)
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	return out.ExpiresAt.AsTime(), nil
}

// SettleRequest charges what the job used (absolute, not a delta) and returns the rest.
// Outcome defaults to OUTCOME_SUCCEEDED; OUTCOME_UNKNOWN leaves the hold in doubt.
type SettleRequest struct {
	ReservationID string
	Used          int64
	Outcome       earmarkv1.Outcome
}

// Settled is Settle's answer.
type Settled struct {
	ReservationID                string
	Charged, Released, Overshoot int64
	State                        earmarkv1.ReservationState
}

// Settle closes a hold, exactly once: a retry answers the same. With a journal
// (Options.JournalDir) the request is on disk before it leaves and removed once answered or
// refused for good (see Recover). An OK answer that is no settled one (a state other than
// SETTLED, EXPIRED or IN_DOUBT, or a negative amount) is an *Error with code INTERNAL: the
// Settle may or may not have landed.
func (c *Client) Settle(ctx context.Context, req SettleRequest) (*Settled, error) {
	outcome := req.Outcome
	if outcome == earmarkv1.Outcome_OUTCOME_UNSPECIFIED {
		outcome = earmarkv1.Outcome_OUTCOME_SUCCEEDED
	}
	in := &earmarkv1.SettleRequest{ReservationId: req.ReservationID, Used: req.Used, Outcome: outcome}
	out, err := c.settle(ctx, in)
	if err != nil {
		return nil, err
	}
	return &Settled{
		ReservationID: req.ReservationID, Charged: out.Charged, Released: out.Released,
		Overshoot: out.Overshoot, State: out.State,
	}, nil
}

// GetBudgetRequest names a budget.
type GetBudgetRequest struct{ BudgetID string }

// GetBudget reads a budget's limit, use and holds (Admin, on the admin listener).
func (c *Client) GetBudget(ctx context.Context, req GetBudgetRequest) (*earmarkv1.BudgetState, error) {
	var out *earmarkv1.BudgetState
	err := c.adminCall(ctx, func(ctx context.Context, admin earmarkv1.AdminClient, opts ...grpc.CallOption) (err error) {
		out, err = admin.GetBudget(ctx, &earmarkv1.GetBudgetRequest{BudgetId: req.BudgetID}, opts...)
		return err
	})
	return out, err
}

// PutBudgetRequest creates or updates a budget (Limit nil: unlimited).
type PutBudgetRequest struct {
	BudgetID string
	Limit    *int64
	Unit     string
}

// PutBudget creates or updates a budget (Admin).
func (c *Client) PutBudget(ctx context.Context, req PutBudgetRequest) (*earmarkv1.BudgetState, error) {
	in := &earmarkv1.PutBudgetRequest{BudgetId: req.BudgetID, Limit: req.Limit, Unit: req.Unit}
	var out *earmarkv1.BudgetState
	err := c.adminCall(ctx, func(ctx context.Context, admin earmarkv1.AdminClient, opts ...grpc.CallOption) (err error) {
		out, err = admin.PutBudget(ctx, in, opts...)
		return err
	})
	return out, err
}
