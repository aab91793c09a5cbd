// Command conformance is the Go SDK's adapter for the conformance kit (docs/conformance.md,
// "The adapter protocol"): it reads one JSON command a line on stdin, drives one
// earmark.Client as a worker drives it (Client.Hold, Client.Recover, its journal, its worker
// token) and writes JSON lines on stdout, each written at once. It exits 0 at the end of its
// input or after `quit`.
//
//	make go && clients/go/bin/conformance
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/earmark-dev/earmark/gen/go/earmark"
	"google.golang.org/grpc/codes"
)

// command is any command's fields; each op reads its own.
type command struct {
	Op         string  `json:"op"`
	Target     string  `json:"target"`
	JournalDir *string `json:"journal_dir"`
	Token      *string `json:"token"`
	BudgetID   string  `json:"budget_id"`
	Amount     int64   `json:"amount"`
	LeaseMS    *int64  `json:"lease_ms"`
	Charges    []int64 `json:"charges"`
	Used       *int64  `json:"used"`
	WorkMS     int64   `json:"work_ms"`
	Pause      bool    `json:"pause"`
	End        string  `json:"end"`
}

type line map[string]any

// codeNames are the gRPC status codes' proto names (codes.Code.String() says "Unavailable").
var codeNames = []string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

func codeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("CODE_%d", c)
}

// errBlockFailed is the block's own failure (`end: failed` or `unknown`): not the SDK's.
var errBlockFailed = errors.New("the work failed")

type adapter struct {
	in     *bufio.Reader
	client *earmark.Client
}

func main() {
	a := &adapter{in: bufio.NewReaderSize(os.Stdin, 1<<20)}
	for {
		c, err := a.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			say(line{"done": true, "ok": false, "code": "INVALID_ARGUMENT", "reason": "not a JSON command: " + err.Error()})
			continue
		}
		if c.Op == "quit" {
			break
		}
		say(a.run(c))
	}
	if a.client != nil {
		_ = a.client.Close() // its bounded flush included
	}
	say(line{"done": true, "ok": true})
}

// next is the next line of stdin as a command; io.EOF at its end.
func (a *adapter) next() (*command, error) {
	text, err := a.in.ReadString('\n')
	if err == io.EOF && strings.TrimSpace(text) != "" {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(text) == "" {
		return a.next()
	}
	var c command
	if err := json.Unmarshal([]byte(text), &c); err != nil {
		return nil, err
	}
	return &c, nil
}

func (a *adapter) run(c *command) line {
	switch {
	case c.Op == "open":
		return a.open(c)
	case c.Op == "hold" && a.client != nil:
		return a.hold(c)
	case c.Op == "recover" && a.client != nil:
		if _, err := a.client.Recover(context.Background()); err != nil {
			return failure(err, "")
		}
		return line{"done": true, "ok": true}
	}
	return line{"done": true, "ok": false, "code": "UNIMPLEMENTED", "reason": "unknown op"}
}

func (a *adapter) open(c *command) line {
	if a.client != nil {
		_ = a.client.Close()
		a.client = nil
	}
	opts := earmark.Options{}
	if c.JournalDir != nil {
		opts.JournalDir = *c.JournalDir
	}
	if c.Token != nil {
		opts.Token = *c.Token
	}
	client, err := earmark.Dial(c.Target, opts)
	if err != nil {
		return failure(err, "")
	}
	a.client = client
	return line{"done": true, "ok": true}
}

// hold runs one Client.Hold as the command says.
func (a *adapter) hold(c *command) line {
	spec := earmark.ReserveRequest{BudgetID: c.BudgetID, Amount: c.Amount}
	if c.LeaseMS != nil {
		spec.Lease = time.Duration(*c.LeaseMS) * time.Millisecond
	}
	reservationID := ""
	settled, err := a.client.Hold(context.Background(), spec, func(ctx context.Context, h *earmark.Hold) error {
		reservationID = h.ID()
		say(line{"event": "reserved", "reservation_id": reservationID})
		for _, amount := range c.Charges {
			if _, err := h.Charge(ctx, amount); err != nil {
				return err
			}
		}
		if c.Pause {
			say(line{"event": "paused", "reservation_id": reservationID})
			resume, err := a.next()
			if err != nil || resume.Op != "resume" {
				return fmt.Errorf("want {\"op\": \"resume\"}, got %+v (%v)", resume, err)
			}
		}
		if c.WorkMS > 0 {
			select {
			case <-time.After(time.Duration(c.WorkMS) * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if c.Used != nil {
			h.SetUsed(*c.Used)
		}
		switch c.End {
		case "unknown":
			return earmark.Unknown(errBlockFailed)
		case "failed":
			return errBlockFailed
		}
		return nil
	})
	var refused *earmark.RefusedError
	if errors.As(err, &refused) {
		return line{"done": true, "ok": true, "admitted": false,
			"reason": strings.TrimPrefix(refused.Reservation.Reason.String(), "REFUSAL_REASON_")}
	}
	if settled != nil && (err == nil || errors.Is(err, errBlockFailed)) {
		return line{"done": true, "ok": true, "admitted": true, "reservation_id": reservationID,
			"state": strings.TrimPrefix(settled.State.String(), "RESERVATION_STATE_")}
	}
	return failure(err, reservationID)
}

// failure is an error of the SDK's: its gRPC code's name and its ErrorInfo reason.
func failure(err error, reservationID string) line {
	answer := line{"done": true, "ok": false, "code": "UNKNOWN", "reason": "", "message": err.Error()}
	var e *earmark.Error
	var unsafe *earmark.UnsafeJournalError
	switch {
	case errors.As(err, &e):
		answer["code"], answer["reason"] = codeName(e.Code), e.Reason
	case errors.As(err, &unsafe):
		answer["code"] = "FAILED_PRECONDITION"
	case errors.Is(err, context.Canceled):
		answer["code"] = "CANCELLED"
	case errors.Is(err, context.DeadlineExceeded):
		answer["code"] = "DEADLINE_EXCEEDED"
	}
	if reservationID != "" {
		answer["reservation_id"] = reservationID
	}
	return answer
}

// say writes one line, unbuffered: the runner reads each at once.
func say(l line) {
	data, err := json.Marshal(l)
	if err != nil {
		panic(err)
	}
	if _, err := os.Stdout.Write(append(data, '\n')); err != nil {
		os.Exit(1)
	}
}
