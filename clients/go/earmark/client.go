// Package earmark is the Go SDK of Earmark, the budget sidecar: Reserve (check and hold),
// Charge, Renew, Settle, the Admin calls a worker needs, and Hold, which does all four
// around a function. Every call has a deadline; UNAVAILABLE (and DEADLINE_EXCEEDED) is
// retried with full-jitter exponential backoff, sending the same request again, so the
// same idempotency key. A refusal is an answer (Reservation.Admitted false), not an error.
package earmark

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log"
	mathrand "math/rand"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	earmarkv1 "github.com/earmark-dev/earmark/gen/go/earmark/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The defaults and environment variables of every Earmark SDK.
const (
	DefaultTarget      = "127.0.0.1:50051"
	DefaultAdminTarget = "unix:.earmark/admin.sock"
	TargetEnv          = "EARMARK_TARGET"
	AdminTargetEnv     = "EARMARK_ADMIN_TARGET"
)

// The bounds of earmark.limits (client_*): larger values are mistakes.
const (
	timeoutMax  = 600 * time.Second
	attemptsMax = 100
	backoffMax  = 60 * time.Second
)

// RetryPolicy: at most Attempts calls in all, with full-jitter exponential backoff
// between BackoffBase and BackoffMax (as the Python and TypeScript SDKs).
type RetryPolicy struct {
	Attempts    int
	BackoffBase time.Duration
	BackoffMax  time.Duration
}

// DefaultRetry is the policy of the other SDKs: 5 attempts, 50 ms doubling up to 2 s.
var DefaultRetry = RetryPolicy{Attempts: 5, BackoffBase: 50 * time.Millisecond, BackoffMax: 2 * time.Second}

func (p RetryPolicy) check() error {
	switch {
	case p.Attempts < 1 || p.Attempts > attemptsMax:
		return fmt.Errorf("earmark: Attempts must be from 1 to %d, not %d", attemptsMax, p.Attempts)
	case p.BackoffBase <= 0 || p.BackoffBase > p.BackoffMax:
		return fmt.Errorf("earmark: BackoffBase must be over 0 and at most BackoffMax, not %s", p.BackoffBase)
	case p.BackoffMax > backoffMax:
		return fmt.Errorf("earmark: BackoffMax must be at most %s, not %s", backoffMax, p.BackoffMax)
	}
	return nil
}

// Backoff is the wait before attempt+1 (attempt counts from 0): uniform in
// [0, min(BackoffMax, BackoffBase * 2^attempt)); uniform draws from [0, 1).
func (p RetryPolicy) Backoff(attempt int, uniform func() float64) time.Duration {
	ceiling := p.BackoffMax
	if attempt < 32 {
		if d := p.BackoffBase << uint(attempt); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return time.Duration(uniform() * float64(ceiling))
}

// Options of Dial; the zero value is the defaults.
type Options struct {
	// AdminTarget is the sidecar's admin listener (default $EARMARK_ADMIN_TARGET, else
	// DefaultAdminTarget); "unix:PATH" is a Unix socket.
	AdminTarget string
	// Token and AdminToken are sent as `authorization: Bearer ...` when set.
	Token, AdminToken string
	// Timeout is each attempt's deadline (default 5 s, at most 600 s).
	Timeout time.Duration
	// Retry defaults to DefaultRetry.
	Retry *RetryPolicy
	// DialOptions replace the default (plaintext: the sidecar is on localhost); give
	// grpc.WithTransportCredentials for TLS.
	DialOptions []grpc.DialOption
	// JournalDir, when set, is a settlement journal's directory (see OpenJournal): every
	// Settle is written there before it is sent and removed once answered or refused for
	// good, and Recover sends what a client that died left there. Dial does not replay it:
	// call Recover when the worker starts. The directory is created (0700) if missing and
	// refused (*UnsafeJournalError) when another user could write it.
	JournalDir string
	// Logger takes the journal's warnings (a record quarantined, a record not written);
	// nil is the standard logger.
	Logger *log.Logger
}

// Client talks to one Earmark sidecar; it is safe for concurrent use. Close it when done.
type Client struct {
	conn, adminConn     *grpc.ClientConn
	budget              earmarkv1.BudgetClient
	admin               earmarkv1.AdminClient
	target, adminTarget string
	token, adminToken   string
	timeout             time.Duration
	retry               RetryPolicy
	dialOptions         []grpc.DialOption
	adminOnce           sync.Once
	adminErr            error
	rngMu               sync.Mutex
	rng                 *mathrand.Rand
	journal             *Journal
	logf                func(format string, args ...any)
	settles             inflight
}

// Dial opens a client to target (default $EARMARK_TARGET, else DefaultTarget); the admin
// channel is opened on the first Admin call. Nothing is sent yet: calls wait for the
// sidecar within their deadline.
func Dial(target string, opts Options) (*Client, error) {
	c, err := newClient(target, opts)
	if err != nil {
		return nil, err
	}
	c.conn, err = dial(c.target, c.dialOptions)
	if err != nil {
		return nil, err
	}
	c.budget = earmarkv1.NewBudgetClient(c.conn)
	return c, nil
}

// NewClient makes a client on channels the caller opened (and closes): conn for Budget,
// adminConn for Admin (nil: Admin calls fail).
func NewClient(conn, adminConn *grpc.ClientConn, opts Options) (*Client, error) {
	c, err := newClient(conn.Target(), opts)
	if err != nil {
		return nil, err
	}
	c.budget = earmarkv1.NewBudgetClient(conn)
	c.adminOnce.Do(func() {
		if adminConn == nil {
			c.adminErr = errors.New("earmark: NewClient was given no admin channel")
			return
		}
		c.admin = earmarkv1.NewAdminClient(adminConn)
	})
	return c, nil
}

func newClient(target string, opts Options) (*Client, error) {
	c := &Client{
		target:      first(target, os.Getenv(TargetEnv), DefaultTarget),
		adminTarget: first(opts.AdminTarget, os.Getenv(AdminTargetEnv), DefaultAdminTarget),
		token:       opts.Token, adminToken: opts.AdminToken,
		timeout: opts.Timeout, retry: DefaultRetry, dialOptions: opts.DialOptions,
		rng: mathrand.New(mathrand.NewSource(time.Now().UnixNano())),
	}
	if c.timeout == 0 {
		c.timeout = 5 * time.Second
	}
	if c.timeout < 0 || c.timeout > timeoutMax {
		return nil, fmt.Errorf("earmark: Timeout must be over 0 and at most %s, not %s", timeoutMax, c.timeout)
	}
	if opts.Retry != nil {
		c.retry = *opts.Retry
	}
	if err := c.retry.check(); err != nil {
		return nil, err
	}
	if c.dialOptions == nil {
		c.dialOptions = []grpc.DialOption{grpc.WithInsecure()}
	}
	c.logf = log.Printf
	if opts.Logger != nil {
		c.logf = opts.Logger.Printf
	}
	// The journal before any channel: a directory it refuses leaves nothing open.
	if opts.JournalDir != "" {
		journal, err := OpenJournal(opts.JournalDir, opts.Logger)
		if err != nil {
			return nil, err
		}
		c.journal = journal
	}
	return c, nil
}

func first(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// dial opens a channel; "unix:PATH" dials the socket (grpc-go 1.33 has no unix resolver).
func dial(target string, options []grpc.DialOption) (*grpc.ClientConn, error) {
	if path := strings.TrimPrefix(target, "unix:"); path != target {
		path = strings.TrimPrefix(path, "//")
		dialer := func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		options = append(append([]grpc.DialOption{}, options...), grpc.WithContextDialer(dialer))
		target = "passthrough:///" + path
	}
	return grpc.Dial(target, options...)
}

// Close waits, at most FlushTimeout, for the Settles under way (Flush), then closes the
// channels Dial opened. A Settle still unanswered then fails, and its journal record stays
// for Recover.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), FlushTimeout)
	c.Flush(ctx)
	cancel()
	var err error
	if c.conn != nil {
		err = c.conn.Close()
	}
	if c.adminConn != nil {
		if e := c.adminConn.Close(); err == nil {
			err = e
		}
	}
	return err
}

func (c *Client) adminClient() (earmarkv1.AdminClient, error) {
	c.adminOnce.Do(func() {
		c.adminConn, c.adminErr = dial(c.adminTarget, c.dialOptions)
		if c.adminErr == nil {
			c.admin = earmarkv1.NewAdminClient(c.adminConn)
		}
	})
	return c.admin, c.adminErr
}

// invoke runs one call with the retry policy: each attempt within its own deadline,
// waiting for the channel to be ready; a final failure is an *Error. A deadline passed
// while the channel never connected means no sidecar listens there: that is UNAVAILABLE
// at once, naming the target, since another attempt would wait for the same nobody.
func (c *Client) invoke(ctx context.Context, conn *grpc.ClientConn, target, token string,
	call func(ctx context.Context, opts ...grpc.CallOption) error) error {
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	for attempt := 0; ; attempt++ {
		attemptCtx, cancel := context.WithTimeout(ctx, c.timeout)
		err := call(attemptCtx, grpc.WaitForReady(true))
		cancel()
		if err == nil {
			return nil
		}
		e := fromError(err)
		if ctx.Err() != nil {
			return e // the caller's own deadline or cancellation: not retried
		}
		if e.Reason == "" && (e.Code == codes.Unavailable || e.Code == codes.DeadlineExceeded) {
			if e.Code == codes.DeadlineExceeded && conn != nil && conn.GetState() != connectivity.Ready {
				return &Error{Code: codes.Unavailable, Message: fmt.Sprintf(
					"no Earmark sidecar answered at %s within the call's deadline of %s", target, c.timeout)}
			}
			e.Message += " (target " + target + ")"
		}
		if !retryable(e) || attempt+1 >= c.retry.Attempts {
			return e
		}
		c.rngMu.Lock()
		wait := c.retry.Backoff(attempt, c.rng.Float64)
		c.rngMu.Unlock()
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return e
		}
	}
}

func (c *Client) budgetCall(ctx context.Context, call func(ctx context.Context, opts ...grpc.CallOption) error) error {
	return c.invoke(ctx, c.conn, c.target, c.token, call)
}

func (c *Client) adminCall(ctx context.Context, call func(ctx context.Context, admin earmarkv1.AdminClient, opts ...grpc.CallOption) error) error {
	admin, err := c.adminClient()
	if err != nil {
		return err
	}
	return c.invoke(ctx, c.adminConn, c.adminTarget, c.adminToken,
		func(ctx context.Context, opts ...grpc.CallOption) error { return call(ctx, admin, opts...) })
}

// NewKey is a fresh idempotency key (a random UUID): one per logical call, reused on
// its retries.
func NewKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func duration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}
