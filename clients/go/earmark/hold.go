package earmark

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	earmarkv1 "github.com/earmark-dev/earmark/gen/go/earmark/v1"
)

// defaultLease is the sidecar's default lease, used to pace renewals when the answer
// carried no expiry.
const defaultLease = 120 * time.Second

// settleTimeout bounds a Hold's Settle, sent on a context of its own: the block's may be
// cancelled already, and the hold must still be closed.
const settleTimeout = 30 * time.Second

// Hold is an admitted reservation while Client.Hold's function runs.
type Hold struct {
	client      *Client
	reservation *Reservation
	mu          sync.Mutex
	charged     int64
	used        *int64
}

// Reservation is the admitted Reserve's answer.
func (h *Hold) Reservation() *Reservation { return h.reservation }

// ID is the reservation id.
func (h *Hold) ID() string { return h.reservation.ID }

// Charge debits one step before it runs, with a key of its own (reused on retries).
// A capped answer means the hold is spent: stop.
func (h *Hold) Charge(ctx context.Context, amount int64) (*Charged, error) {
	out, err := h.client.Charge(ctx, ChargeRequest{ReservationID: h.ID(), Amount: amount})
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.charged = out.TotalCharged
	h.mu.Unlock()
	return out, nil
}

// SetUsed says what the job used in all (absolute): the hold settles at it. Without it,
// the hold settles at what its steps were charged.
func (h *Hold) SetUsed(used int64) {
	h.mu.Lock()
	h.used = &used
	h.mu.Unlock()
}

func (h *Hold) usedSoFar() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.used != nil {
		return *h.used
	}
	return h.charged
}

// Hold reserves spec, runs fn with the hold, renewing its lease in the background at a
// third of the lease, and settles it when fn returns, whatever it returns:
//   - nil: OUTCOME_SUCCEEDED at what SetUsed said, else at what was charged;
//   - an error marked Unknown (errors.Is(err, ErrOutcomeUnknown)): OUTCOME_UNKNOWN, so
//     the hold stays in doubt until a later Settle or an operator resolves it;
//   - any other error, a panic, or ctx cancelled while fn ran: OUTCOME_FAILED.
//
// A refusal runs nothing and returns a *RefusedError holding the refusal. If a renewal
// finds the hold closed, fn's context is cancelled and Hold's error matches ErrHoldLost.
// Hold returns the settlement and fn's error (or the Settle's, if that failed).
func (c *Client) Hold(ctx context.Context, spec ReserveRequest, fn func(ctx context.Context, h *Hold) error) (*Settled, error) {
	reservation, err := c.Reserve(ctx, spec)
	if err != nil {
		return nil, err
	}
	if !reservation.Admitted {
		return nil, &RefusedError{Reservation: reservation}
	}
	h := &Hold{client: c, reservation: reservation}
	blockCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	lost := make(chan error, 1)
	stopped := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(stopped)
		h.renew(blockCtx, spec, done, lost, cancel)
	}()

	outcome := earmarkv1.Outcome_OUTCOME_FAILED
	var fnErr error
	func() {
		defer func() {
			close(done)
			<-stopped
			if p := recover(); p != nil {
				_, _ = h.settle(outcome)
				panic(p)
			}
		}()
		fnErr = fn(blockCtx, h)
	}()
	select {
	case e := <-lost:
		fnErr = holdLost{e}
	default:
		switch {
		case ctx.Err() != nil:
			if fnErr == nil {
				fnErr = ctx.Err()
			}
		case errors.Is(fnErr, ErrOutcomeUnknown):
			outcome = earmarkv1.Outcome_OUTCOME_UNKNOWN
		case fnErr == nil:
			outcome = earmarkv1.Outcome_OUTCOME_SUCCEEDED
		}
	}
	settled, err := h.settle(outcome)
	if err != nil {
		if fnErr != nil {
			return nil, fmt.Errorf("earmark: settle %s: %w (and the block failed: %v)", h.ID(), err, fnErr)
		}
		return nil, fmt.Errorf("earmark: settle %s: %w", h.ID(), err)
	}
	return settled, fnErr
}

func (h *Hold) settle(outcome earmarkv1.Outcome) (*Settled, error) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	return h.client.Settle(ctx, SettleRequest{ReservationID: h.ID(), Used: h.usedSoFar(), Outcome: outcome})
}

// renew keeps the lease until done closes: every third of the lease. A hold found closed
// is reported on lost and the block's context cancelled; other failures (the client has
// retried them already) wait for the next turn, while the lease may still hold.
func (h *Hold) renew(ctx context.Context, spec ReserveRequest, done <-chan struct{}, lost chan<- error, cancel context.CancelFunc) {
	lease := spec.Lease
	if lease == 0 {
		lease = time.Until(h.reservation.ExpiresAt)
		if lease <= 0 {
			lease = defaultLease
		}
	}
	ticker := time.NewTicker(lease / 3)
	defer ticker.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		_, err := h.client.Renew(ctx, RenewRequest{ReservationID: h.ID(), Lease: spec.Lease})
		if errors.Is(err, ErrHoldClosed) || errors.Is(err, ErrReservationNotFound) {
			lost <- err
			cancel()
			return
		}
	}
}
