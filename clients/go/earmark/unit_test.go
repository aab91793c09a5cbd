package earmark

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	earmarkv1 "github.com/earmark-dev/earmark/gen/go/earmark/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestBackoffIsFullJitterBelowAnExponentialCeiling(t *testing.T) {
	p := RetryPolicy{Attempts: 5, BackoffBase: 50 * time.Millisecond, BackoffMax: 2 * time.Second}
	almostOne := func() float64 { return 0.999999 }
	zero := func() float64 { return 0 }
	for attempt, want := range []time.Duration{50, 100, 200, 400, 800, 1600, 2000, 2000} {
		got := p.Backoff(attempt, almostOne)
		if got > want*time.Millisecond || got < want*time.Millisecond*99/100 {
			t.Errorf("attempt %d: want just under %d ms, got %s", attempt, want, got)
		}
		if 0 != p.Backoff(attempt, zero) {
			t.Errorf("attempt %d: a draw of 0 must wait 0", attempt)
		}
	}
	if got := p.Backoff(200, almostOne); got > p.BackoffMax {
		t.Errorf("a late attempt waits at most BackoffMax, got %s", got)
	}
}

func TestRetryPolicyBoundsAreTheOtherSDKs(t *testing.T) {
	for _, p := range []RetryPolicy{
		{Attempts: 0, BackoffBase: time.Millisecond, BackoffMax: time.Second},
		{Attempts: 101, BackoffBase: time.Millisecond, BackoffMax: time.Second},
		{Attempts: 3, BackoffBase: 2 * time.Second, BackoffMax: time.Second},
		{Attempts: 3, BackoffBase: time.Second, BackoffMax: 61 * time.Second},
	} {
		if _, err := Dial("127.0.0.1:1", Options{Retry: &p}); err == nil {
			t.Errorf("%+v: want an error", p)
		}
	}
	if _, err := Dial("127.0.0.1:1", Options{Timeout: 601 * time.Second}); err == nil {
		t.Error("a 601 s timeout: want an error")
	}
}

func statusWith(code codes.Code, reason string) error {
	s, err := status.New(code, "said by the test").WithDetails(
		&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: map[string]string{"budget_id": "b"}})
	if err != nil {
		panic(err)
	}
	return s.Err()
}

func TestErrorsMapByReasonThenByCode(t *testing.T) {
	cases := []struct {
		err     error
		is      []error
		isNot   []error
		reason  string
		retried bool
	}{
		{statusWith(codes.NotFound, "BUDGET_NOT_FOUND"), []error{ErrNotFound, ErrBudgetNotFound},
			[]error{ErrReservationNotFound}, "BUDGET_NOT_FOUND", false},
		{statusWith(codes.FailedPrecondition, "HOLD_EXPIRED"),
			[]error{ErrFailedPrecondition, ErrHoldClosed, ErrHoldExpired}, []error{ErrHoldSettled}, "HOLD_EXPIRED", false},
		{statusWith(codes.FailedPrecondition, "HOLD_IN_DOUBT"), []error{ErrHoldClosed, ErrHoldInDoubt}, nil, "HOLD_IN_DOUBT", false},
		{statusWith(codes.AlreadyExists, "KEY_REUSED"), []error{ErrAlreadyExists, ErrKeyReused}, nil, "KEY_REUSED", false},
		{statusWith(codes.Unavailable, "OVERLOADED"), []error{ErrUnavailable}, nil, "OVERLOADED", true},
		{statusWith(codes.Unavailable, "DATABASE_UNAVAILABLE"), []error{ErrUnavailable}, nil, "DATABASE_UNAVAILABLE", true},
		{statusWith(codes.Unavailable, "SOMETHING_NEW"), []error{ErrUnavailable}, nil, "SOMETHING_NEW", false},
		{status.Error(codes.Unavailable, "connection refused"), []error{ErrUnavailable}, nil, "", true},
		{statusWith(codes.InvalidArgument, "INVALID_FIELD"), []error{ErrInvalidArgument}, []error{ErrNotFound}, "INVALID_FIELD", false},
	}
	for _, c := range cases {
		e := fromError(c.err)
		if c.reason != e.Reason {
			t.Errorf("%v: want reason %q, got %q", c.err, c.reason, e.Reason)
		}
		for _, k := range c.is {
			if !errors.Is(e, k) {
				t.Errorf("%v: want errors.Is %v", c.err, k)
			}
		}
		for _, k := range c.isNot {
			if errors.Is(e, k) {
				t.Errorf("%v: want not errors.Is %v", c.err, k)
			}
		}
		if c.retried != retryable(e) {
			t.Errorf("%v: want retryable %v", c.err, c.retried)
		}
	}
	if e := fromError(statusWith(codes.NotFound, "BUDGET_NOT_FOUND")); e.Metadata["budget_id"] != "b" {
		t.Errorf("want the ErrorInfo's metadata, got %v", e.Metadata)
	}
}

// flaky answers Reserve with the errors queued, then admits; it records every key.
type flaky struct {
	earmarkv1.UnimplementedBudgetServer
	mu     sync.Mutex
	errors []error
	keys   []string
}

func (f *flaky) Reserve(_ context.Context, in *earmarkv1.ReserveRequest) (*earmarkv1.ReserveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, in.IdempotencyKey)
	if len(f.errors) > 0 {
		err := f.errors[0]
		f.errors = f.errors[1:]
		return nil, err
	}
	return &earmarkv1.ReserveResponse{Admitted: true, ReservationId: "r-" + in.IdempotencyKey}, nil
}

func serveFlaky(t *testing.T, errs ...error) (*flaky, *Client) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &flaky{errors: errs}
	server := grpc.NewServer()
	earmarkv1.RegisterBudgetServer(server, fake)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	retry := RetryPolicy{Attempts: 4, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond}
	client, err := Dial(listener.Addr().String(), Options{Retry: &retry})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return fake, client
}

func TestRetriesResendTheSameKeyOnRetryableReasonsOnly(t *testing.T) {
	fake, client := serveFlaky(t,
		statusWith(codes.Unavailable, "OVERLOADED"), statusWith(codes.Unavailable, "DATABASE_BUSY"))
	r, err := client.Reserve(context.Background(), ReserveRequest{BudgetID: "b", Amount: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(fake.keys) != 3 || fake.keys[0] != fake.keys[1] || fake.keys[1] != fake.keys[2] || fake.keys[0] == "" {
		t.Fatalf("want three attempts with one key, got %q", fake.keys)
	}
	if r.ID != "r-"+fake.keys[0] {
		t.Errorf("want the admitted reservation, got %+v", r)
	}

	fake, client = serveFlaky(t, statusWith(codes.FailedPrecondition, "UNIT_LOCKED"))
	_, err = client.Reserve(context.Background(), ReserveRequest{BudgetID: "b", Amount: 1})
	if !errors.Is(err, ErrUnitLocked) || len(fake.keys) != 1 {
		t.Fatalf("want UNIT_LOCKED after one attempt, got %v after %d", err, len(fake.keys))
	}

	errs := make([]error, 10)
	for i := range errs {
		errs[i] = statusWith(codes.Unavailable, "SHUTTING_DOWN")
	}
	fake, client = serveFlaky(t, errs...)
	_, err = client.Reserve(context.Background(), ReserveRequest{BudgetID: "b", Amount: 1, IdempotencyKey: "mine"})
	var e *Error
	if !errors.As(err, &e) || e.Reason != "SHUTTING_DOWN" || len(fake.keys) != 4 || fake.keys[3] != "mine" {
		t.Fatalf("want SHUTTING_DOWN after 4 attempts with the caller's key, got %v after %q", err, fake.keys)
	}
}

func TestUnknownMarksAnErrorAndKeepsIt(t *testing.T) {
	cause := errors.New("provider timed out")
	err := Unknown(cause)
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, cause) {
		t.Fatalf("want both the mark and the cause, got %v", err)
	}
	if errors.Is(cause, ErrOutcomeUnknown) {
		t.Fatal("an unmarked error is not unknown")
	}
}

func TestALostHoldMatchesErrHoldLostAndWrapsTheRenewalsError(t *testing.T) {
	err := error(holdLost{fromError(statusWith(codes.FailedPrecondition, "HOLD_EXPIRED"))})
	var e *Error
	if !errors.Is(err, ErrHoldLost) || !errors.Is(err, ErrHoldExpired) || !errors.As(err, &e) || e.Reason != "HOLD_EXPIRED" {
		t.Fatalf("want ErrHoldLost wrapping HOLD_EXPIRED, got %v", err)
	}
}
