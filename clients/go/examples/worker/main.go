// Command worker is the Go SDK's example worker: it holds -amount of -budget, does its
// work (here: nothing), and settles at -used, printing one JSON line. It exits 0 when
// settled, 2 when the Reserve was refused (the refusal is printed), 1 on an error.
//
//	worker -target 127.0.0.1:50051 -budget acme/tokens -amount 500 -used 320
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/earmark-dev/earmark/gen/go/earmark"
)

func main() {
	target := flag.String("target", "", "the sidecar (default $EARMARK_TARGET, else 127.0.0.1:50051)")
	budget := flag.String("budget", "", "the budget to hold on")
	amount := flag.Int64("amount", 0, "how much to hold")
	used := flag.Int64("used", 0, "what the work used, settled")
	token := flag.String("token", os.Getenv("EARMARK_TOKEN"), "the worker token, if the sidecar needs one")
	flag.Parse()
	if *budget == "" || *amount <= 0 || *used < 0 {
		fmt.Fprintln(os.Stderr, "usage: worker -target HOST:PORT -budget ID -amount N -used M")
		os.Exit(64)
	}
	client, err := earmark.Dial(*target, earmark.Options{Token: *token})
	if err != nil {
		fail(err)
	}
	defer client.Close()

	spec := earmark.ReserveRequest{BudgetID: *budget, Amount: *amount, Job: "go-example-worker"}
	settled, err := client.Hold(context.Background(), spec, func(ctx context.Context, h *earmark.Hold) error {
		// The work goes here: charge each step before it runs (h.Charge), and wrap an
		// error after which you cannot tell whether it ran in earmark.Unknown.
		h.SetUsed(*used)
		return nil
	})
	var refused *earmark.RefusedError
	if errors.As(err, &refused) {
		r := refused.Reservation
		emit(map[string]any{"admitted": false, "budget_id": r.BudgetID,
			"reason": r.Reason.String(), "message": r.Message})
		os.Exit(2)
	}
	if err != nil {
		fail(err)
	}
	emit(map[string]any{"admitted": true, "reservation_id": settled.ReservationID,
		"state": settled.State.String(), "charged": settled.Charged, "released": settled.Released})
}

func emit(line map[string]any) {
	if err := json.NewEncoder(os.Stdout).Encode(line); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "worker:", err)
	os.Exit(1)
}
