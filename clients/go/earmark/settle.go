package earmark

import (
	"context"
	"fmt"
	"sync"
	"time"

	earmarkv1 "github.com/earmark-dev/earmark/gen/go/earmark/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// FlushTimeout is Close's wait for the Settles under way (the other SDKs'
// client_flush_seconds_max).
const FlushTimeout = 10 * time.Second

// finalCodes: a Settle refused with one of these will be refused again (the hold is not
// there, or was settled otherwise, or the request can never be taken), so its journal record
// is removed rather than sent again. PERMISSION_DENIED is not one: a record replayed under
// another worker token is still the spend of the caller that made the hold, and the recovery
// profile keeps records across authentication failures.
var finalCodes = map[codes.Code]bool{
	codes.NotFound: true, codes.FailedPrecondition: true, codes.InvalidArgument: true,
	codes.AlreadyExists: true, codes.OutOfRange: true,
}

// settleAnswerStates are the states a Settle's answer can carry. An answer in any other
// state is not a settled answer: the Settle may have landed or not, so its journal record
// stays and Recover sends it again.
var settleAnswerStates = map[earmarkv1.ReservationState]bool{
	earmarkv1.ReservationState_RESERVATION_STATE_SETTLED:  true,
	earmarkv1.ReservationState_RESERVATION_STATE_EXPIRED:  true,
	earmarkv1.ReservationState_RESERVATION_STATE_IN_DOUBT: true,
}

// settleAnswer is answer when it is what a Settle answers; else an *Error (INTERNAL, which
// is not final) saying the outcome is unknown.
func settleAnswer(request *earmarkv1.SettleRequest, answer *earmarkv1.SettleResponse) (*earmarkv1.SettleResponse, error) {
	if answer != nil && settleAnswerStates[answer.State] &&
		answer.Charged >= 0 && answer.Released >= 0 && answer.Overshoot >= 0 {
		return answer, nil
	}
	what := "no answer"
	if answer != nil {
		what = fmt.Sprintf("state %s, amounts %d, %d, %d", answer.State, answer.Charged, answer.Released, answer.Overshoot)
	}
	return nil, &Error{Code: codes.Internal, Message: fmt.Sprintf(
		"the settle of reservation %s was answered with %s: it may or may not have landed",
		request.ReservationId, what)}
}

// isFinal: a Settle refused so will be refused again.
func isFinal(err error) bool {
	return finalCodes[fromError(err).Code]
}

// sendSettle sends request as it is, with the client's retries, and checks the answer.
func (c *Client) sendSettle(ctx context.Context, request *earmarkv1.SettleRequest) (*earmarkv1.SettleResponse, error) {
	var out *earmarkv1.SettleResponse
	err := c.budgetCall(ctx, func(ctx context.Context, opts ...grpc.CallOption) (err error) {
		out, err = c.budget.Settle(ctx, request, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return settleAnswer(request, out)
}

// settle is a Settle under way (Flush waits for it), journaled when the client keeps a
// journal: on disk before it leaves, removed once answered or refused for good, left for
// Recover when the answer may yet come.
func (c *Client) settle(ctx context.Context, request *earmarkv1.SettleRequest) (*earmarkv1.SettleResponse, error) {
	c.settles.add()
	defer c.settles.done()
	if c.journal == nil {
		return c.sendSettle(ctx, request)
	}
	record, err := c.journal.Write(request)
	if err != nil {
		// The journal's own failure is the operator's to know, and it does not stop the
		// settle: sent without a record, the spend is only as safe as without a journal.
		c.logf("earmark journal: the settle of %s could not be written (%v); sending it without a record",
			request.ReservationId, err)
		return c.sendSettle(ctx, request)
	}
	out, err := c.sendSettle(ctx, request)
	if err == nil || isFinal(err) {
		c.forget(record, request)
	}
	return out, err
}

// forget removes an answered record. A removal that fails is a warning, not the settle's
// failure: the record is sent again later and answered the same.
func (c *Client) forget(record string, request *earmarkv1.SettleRequest) {
	if err := c.journal.Remove(record, request.ReservationId); err != nil {
		c.logf("earmark journal: the answered settle of %s stays on disk (%v)", request.ReservationId, err)
	}
}

// Journal is the client's settlement journal, nil without Options.JournalDir.
func (c *Client) Journal() *Journal { return c.journal }

// Recover sends again every Settle the journal holds (a client that died before its answer
// came), each exactly as it was first sent, oldest first, with the client's retries; it
// answers how many were answered or refused for good (and removed). Those that fail for now
// stay for the next Recover, each named in a warning. Without a journal, 0. Dial does not
// call it: a worker with a journal calls it when it starts.
func (c *Client) Recover(ctx context.Context) (int, error) {
	if c.journal == nil {
		return 0, nil
	}
	records, err := c.journal.Pending()
	if err != nil {
		return 0, err
	}
	done := 0
	for _, record := range records {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		c.settles.add()
		_, err := c.sendSettle(ctx, record.Request)
		c.settles.done()
		if err != nil && !isFinal(err) {
			c.logf("earmark journal: settle of %s not sent yet: %v", record.Request.ReservationId, err)
			continue
		}
		c.forget(record.Path, record.Request)
		done++
	}
	return done, nil
}

// Flush waits, until ctx is done, for the Settles under way (Settle's, Hold's, Recover's).
// True when all of them were answered (or failed); false when some were still unanswered:
// those are not cancelled, and their journal records stay on disk for the next Recover, so
// a worker shutting down may exit then.
func (c *Client) Flush(ctx context.Context) bool {
	for {
		idle := c.settles.idle()
		if idle == nil {
			return true
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return c.settles.idle() == nil
		}
	}
}

// inflight counts the Settles under way; idle is closed when none is left.
type inflight struct {
	mu      sync.Mutex
	n       int
	idleNow chan struct{}
}

func (f *inflight) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idleNow = make(chan struct{})
	}
	f.n++
}

func (f *inflight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		close(f.idleNow)
	}
}

// idle is nil when nothing is under way, else a channel closed when that is so.
func (f *inflight) idle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		return nil
	}
	return f.idleNow
}
