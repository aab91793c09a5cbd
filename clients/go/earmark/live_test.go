package earmark

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	earmarkv1 "github.com/earmark-dev/earmark/gen/go/earmark/v1"
)

// live is a client of the sidecar at $EARMARK_TARGET (Admin at $EARMARK_ADMIN_TARGET),
// with a fresh budget of limit tokens; tests/clients/test_go.py starts one.
func live(t *testing.T, limit int64) (*Client, string) {
	t.Helper()
	if os.Getenv(TargetEnv) == "" || os.Getenv(AdminTargetEnv) == "" {
		t.Skip("no sidecar: set EARMARK_TARGET and EARMARK_ADMIN_TARGET")
	}
	client, err := Dial("", Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	budget := fmt.Sprintf("go-%s-%d", t.Name(), time.Now().UnixNano())
	if _, err := client.PutBudget(context.Background(), PutBudgetRequest{BudgetID: budget, Limit: &limit, Unit: "tokens"}); err != nil {
		t.Fatal(err)
	}
	return client, budget
}

func budgetState(t *testing.T, c *Client, budget string) *earmarkv1.BudgetState {
	t.Helper()
	state, err := c.GetBudget(context.Background(), GetBudgetRequest{BudgetID: budget})
	if err != nil {
		t.Fatal(err)
	}
	return state
}

func TestLiveHoldRenewsChargesAndSettles(t *testing.T) {
	c, budget := live(t, 1000)
	ctx := context.Background()
	spec := ReserveRequest{BudgetID: budget, Amount: 500, Lease: time.Second}
	settled, err := c.Hold(ctx, spec, func(ctx context.Context, h *Hold) error {
		if _, err := h.Charge(ctx, 100); err != nil {
			return err
		}
		// Past the lease it was reserved with: only the background renewals keep it.
		time.Sleep(1500 * time.Millisecond)
		_, err := h.Charge(ctx, 150)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if settled.State != earmarkv1.ReservationState_RESERVATION_STATE_SETTLED || settled.Charged != 250 || settled.Released != 250 {
		t.Fatalf("want settled at 250 with 250 released, got %+v", settled)
	}
	if s := budgetState(t, c, budget); s.Used != 250 || s.Held != 0 {
		t.Fatalf("want used 250 and nothing held, got %v", s)
	}
}

func TestLiveRefusalIsAnAnswer(t *testing.T) {
	c, budget := live(t, 100)
	r, err := c.Reserve(context.Background(), ReserveRequest{BudgetID: budget, Amount: 500})
	if err != nil || r.Admitted || r.Reason != earmarkv1.RefusalReason_REFUSAL_REASON_INSUFFICIENT_BUDGET || r.Message == "" {
		t.Fatalf("want a refusal for want of budget, got %+v, %v", r, err)
	}
	ran := false
	_, err = c.Hold(context.Background(), ReserveRequest{BudgetID: budget, Amount: 500},
		func(context.Context, *Hold) error { ran = true; return nil })
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Reservation.Admitted || ran {
		t.Fatalf("want Hold's RefusedError without running the block, got %v (ran %v)", err, ran)
	}
}

func TestLiveTheSameKeyIsTheSameReservation(t *testing.T) {
	c, budget := live(t, 1000)
	ctx := context.Background()
	req := ReserveRequest{BudgetID: budget, Amount: 300, IdempotencyKey: NewKey()}
	first, err := c.Reserve(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Reserve(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Admitted || first.ID != again.ID {
		t.Fatalf("want one reservation, got %+v and %+v", first, again)
	}
	charge := ChargeRequest{ReservationID: first.ID, Amount: 40, IdempotencyKey: NewKey()}
	for i := 0; i < 2; i++ {
		if _, err := c.Charge(ctx, charge); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Renew(ctx, RenewRequest{ReservationID: first.ID}); err != nil {
		t.Fatal(err)
	}
	settled, err := c.Settle(ctx, SettleRequest{ReservationID: first.ID, Used: 40})
	if err != nil || settled.Charged != 40 {
		t.Fatalf("want settled at 40 (one charge), got %+v, %v", settled, err)
	}
	if _, err := c.Charge(ctx, ChargeRequest{ReservationID: first.ID, Amount: 1}); !errors.Is(err, ErrHoldSettled) || !errors.Is(err, ErrHoldClosed) {
		t.Fatalf("want HOLD_SETTLED, got %v", err)
	}
	if s := budgetState(t, c, budget); s.Used != 40 || s.Held != 0 || s.OpenReservations != 0 {
		t.Fatalf("want used 40, nothing held, got %v", s)
	}
}

func TestLiveErrorsByReason(t *testing.T) {
	c, _ := live(t, 1)
	ctx := context.Background()
	if _, err := c.GetBudget(ctx, GetBudgetRequest{BudgetID: "go-no-such-budget"}); !errors.Is(err, ErrBudgetNotFound) {
		t.Fatalf("want BUDGET_NOT_FOUND, got %v", err)
	}
	_, err := c.Charge(ctx, ChargeRequest{ReservationID: "00000000-0000-4000-8000-000000000000", Amount: 1})
	var e *Error
	if !errors.Is(err, ErrReservationNotFound) || !errors.As(err, &e) || e.Reason != "RESERVATION_NOT_FOUND" {
		t.Fatalf("want RESERVATION_NOT_FOUND, got %v", err)
	}
}

func TestLiveCancelledContextMidHoldSettlesFailed(t *testing.T) {
	c, budget := live(t, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	settled, err := c.Hold(ctx, ReserveRequest{BudgetID: budget, Amount: 500}, func(ctx context.Context, h *Hold) error {
		if _, err := h.Charge(ctx, 60); err != nil {
			return err
		}
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) || settled == nil || settled.Charged != 60 {
		t.Fatalf("want the block's cancellation and a settlement at what was charged, got %+v, %v", settled, err)
	}
	if s := budgetState(t, c, budget); s.Used != 60 || s.Held != 0 {
		t.Fatalf("want used 60 and nothing held, got %v", s)
	}
}

func TestLiveUnknownOutcomeLeavesTheHoldInDoubt(t *testing.T) {
	c, budget := live(t, 1000)
	ctx := context.Background()
	settled, err := c.Hold(ctx, ReserveRequest{BudgetID: budget, Amount: 500}, func(ctx context.Context, h *Hold) error {
		if _, err := h.Charge(ctx, 70); err != nil {
			return err
		}
		return Unknown(errors.New("the provider's answer was lost"))
	})
	if !errors.Is(err, ErrOutcomeUnknown) || settled.State != earmarkv1.ReservationState_RESERVATION_STATE_IN_DOUBT {
		t.Fatalf("want the hold in doubt, got %+v, %v", settled, err)
	}
	if s := budgetState(t, c, budget); s.Held != 430 || s.Used != 70 {
		t.Fatalf("want 70 used and the rest still held, got %v", s)
	}
	// A later Settle with the truth closes it.
	closed, err := c.Settle(ctx, SettleRequest{ReservationID: settled.ReservationID, Used: 70})
	if err != nil || closed.State != earmarkv1.ReservationState_RESERVATION_STATE_SETTLED {
		t.Fatalf("want the late Settle to close it, got %+v, %v", closed, err)
	}
}

func TestLiveTheJournalSettlesARecordOnceAfterARestart(t *testing.T) {
	c, budget := live(t, 1000)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "journal")
	// A worker with a journal: its Hold's record goes once the Settle is answered.
	worker, err := Dial("", Options{JournalDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Hold(ctx, ReserveRequest{BudgetID: budget, Amount: 100}, func(_ context.Context, h *Hold) error {
		h.SetUsed(10)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if left, err := worker.Journal().Pending(); err != nil || len(left) != 0 {
		t.Fatalf("want no record left after a settled Hold, got %v (%v)", left, err)
	}
	// One that dies after writing its record, before its Settle went.
	r, err := worker.Reserve(ctx, ReserveRequest{BudgetID: budget, Amount: 500})
	if err != nil || !r.Admitted {
		t.Fatalf("want a hold, got %+v, %v", r, err)
	}
	request := &earmarkv1.SettleRequest{ReservationId: r.ID, Used: 120, Outcome: earmarkv1.Outcome_OUTCOME_SUCCEEDED}
	if _, err := worker.Journal().Write(request); err != nil {
		t.Fatal(err)
	}
	_ = worker.Close()
	if s := budgetState(t, c, budget); s.Held != 500 || s.Used != 10 {
		t.Fatalf("want the hold still held, got %v", s)
	}

	next, err := Dial("", Options{JournalDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if n, err := next.Recover(ctx); err != nil || n != 1 {
		t.Fatalf("want one record settled, got %d, %v", n, err)
	}
	if _, err := os.Stat(next.Journal().PathOf(r.ID)); !os.IsNotExist(err) {
		t.Fatalf("want the record gone, got %v", err)
	}
	if s := budgetState(t, c, budget); s.Held != 0 || s.Used != 130 || s.OpenReservations != 0 {
		t.Fatalf("want it settled at 120 once, got %v", s)
	}
	if n, err := next.Recover(ctx); err != nil || n != 0 {
		t.Fatalf("want nothing sent again, got %d, %v", n, err)
	}
	if s := budgetState(t, c, budget); s.Used != 130 {
		t.Fatalf("want it settled once, got %v", s)
	}
}

// helperHoldEnv, set, makes the test binary a worker that holds on the budget it names with
// a 1 s lease, prints the reservation id and waits to be killed (TestLiveAKilledWorkersHold...).
const helperHoldEnv = "EARMARK_GO_TEST_HOLD_BUDGET"

func TestLiveAKilledWorkersHoldExpires(t *testing.T) {
	if budget := os.Getenv(helperHoldEnv); budget != "" {
		holdUntilKilled(budget)
		return
	}
	c, budget := live(t, 1000)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLiveAKilledWorkersHoldExpires$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperHoldEnv+"="+budget)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "reserved ") {
		t.Fatalf("want the worker's reservation id, got %q, %v", line, err)
	}
	if s := budgetState(t, c, budget); s.Held != 400 {
		t.Fatalf("want the worker's hold, got %v", s)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := budgetState(t, c, budget)
		if s.Held == 0 && s.OpenReservations == 0 {
			if s.Used != 0 {
				t.Fatalf("want nothing charged by an expired hold that charged nothing, got %v", s)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("want the killed worker's hold expired within 15 s, got %v", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holdUntilKilled holds 400 on budget, renewing a 1 s lease, until the process is killed.
func holdUntilKilled(budget string) {
	client, err := Dial("", Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_, err = client.Hold(context.Background(), ReserveRequest{BudgetID: budget, Amount: 400, Lease: time.Second},
		func(ctx context.Context, h *Hold) error {
			fmt.Printf("reserved %s\n", h.ID())
			select {} // until SIGKILL
		})
	fmt.Fprintln(os.Stderr, "the hold ended:", err)
	os.Exit(1)
}
