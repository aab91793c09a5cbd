package earmark

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	earmarkv1 "github.com/earmark-dev/earmark/gen/go/earmark/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// Records the Python SDK wrote (earmark.client.journal.encode_record), byte for byte, with
// their names (record_name) and first-format names (legacy_record_name).
var pythonRecords = []struct {
	id, name, legacy string
	data             []byte
}{
	{"3f2c8a4e-1b7d-4c55-9a0e-6d2f1e8b9c01",
		"v2-34e3e2f2a978f20c592a420e3247902902423c22822e1576960615836d04c38d.json",
		"34e3e2f2a978f20c592a420e32479029.settle",
		[]byte(`{"version":2,"reservation_id":"3f2c8a4e-1b7d-4c55-9a0e-6d2f1e8b9c01","settle":"CiQzZjJjOGE0ZS0xYjdkLTRjNTUtOWEwZS02ZDJmMWU4YjljMDEQwAIYAQ=="}`)},
	{"réservé-\"x\"\n\t<&>\u2028é",
		"v2-deeb175ab3444dcf82163f761cfb9905889aa911b8e1b6195568d0b416fd33aa.json",
		"deeb175ab3444dcf82163f761cfb9905.settle",
		[]byte("{\"version\":2,\"reservation_id\":\"r\xc3\xa9serv\xc3\xa9-\\\"x\\\"\\n\\t<&>\xe2\x80\xa8\xc3\xa9\"," +
			"\"settle\":\"Chdyw6lzZXJ2w6ktIngiCgk8Jj7igKjDqRDAAhgB\"}")},
}

func settleOf(id string, used int64) *earmarkv1.SettleRequest {
	return &earmarkv1.SettleRequest{ReservationId: id, Used: used, Outcome: earmarkv1.Outcome_OUTCOME_SUCCEEDED}
}

// openJournal is a journal in a fresh private folder, its warnings kept in the buffer.
func openJournal(t *testing.T) (*Journal, *bytes.Buffer) {
	t.Helper()
	var warnings bytes.Buffer
	j, err := OpenJournal(filepath.Join(t.TempDir(), "journal"), log.New(&warnings, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	return j, &warnings
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		found = append(found, e.Name())
	}
	sort.Strings(found)
	return found
}

func TestJournalNameIsTheSHA256OfTheIDsExactBytes(t *testing.T) {
	for _, ids := range [][2]string{{"Reservation-A", "reservation-a"}, {"caf\u00e9", "cafe\u0301"}} {
		if JournalRecordName(ids[0]) == JournalRecordName(ids[1]) {
			t.Errorf("%q and %q share a record name", ids[0], ids[1])
		}
		sum := sha256.Sum256([]byte(ids[0]))
		if want := "v2-" + hex.EncodeToString(sum[:]) + ".json"; JournalRecordName(ids[0]) != want {
			t.Errorf("want %s, got %s", want, JournalRecordName(ids[0]))
		}
	}
	for _, r := range pythonRecords {
		if JournalRecordName(r.id) != r.name || legacyJournalRecordName(r.id) != r.legacy {
			t.Errorf("%q: want the Python SDK's names %s and %s, got %s and %s", r.id, r.name, r.legacy,
				JournalRecordName(r.id), legacyJournalRecordName(r.id))
		}
	}
}

func TestJournalWritesThePythonSDKsBytesAndReadsItsRecords(t *testing.T) {
	j, _ := openJournal(t)
	for _, r := range pythonRecords {
		data, err := EncodeJournalRecord(settleOf(r.id, 320))
		if err != nil || !bytes.Equal(data, r.data) {
			t.Fatalf("want the Python SDK's bytes\n%s\ngot\n%s (%v)", r.data, data, err)
		}
		if err := os.WriteFile(filepath.Join(j.Dir(), r.name), r.data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	records, err := j.Pending()
	if err != nil || len(records) != len(pythonRecords) || j.Quarantined() != 0 {
		t.Fatalf("want both records, got %v (%v), %d quarantined", records, err, j.Quarantined())
	}
	for _, record := range records {
		want := settleOf(record.Request.ReservationId, 320)
		if !proto.Equal(want, record.Request) || filepath.Base(record.Path) != JournalRecordName(want.ReservationId) {
			t.Errorf("want %v at its standard name, got %v at %s", want, record.Request, record.Path)
		}
	}
}

func TestJournalWriteIsPrivateAndLeavesNoTemporaryFile(t *testing.T) {
	j, _ := openJournal(t)
	if info, err := os.Stat(j.Dir()); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("want the folder made 0700, got %v (%v)", info.Mode(), err)
	}
	path, err := j.Write(settleOf("r-1", 5))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Lstat(path); err != nil || info.Mode() != 0o600 {
		t.Fatalf("want a regular file of mode 0600, got %v (%v)", info.Mode(), err)
	}
	if got := names(t, j.Dir()); len(got) != 1 || got[0] != JournalRecordName("r-1") {
		t.Fatalf("want the record alone, got %v", got)
	}
	if err := j.Remove(path, "r-1"); err != nil || len(names(t, j.Dir())) != 0 {
		t.Fatalf("want it removed, got %v (%v)", names(t, j.Dir()), err)
	}
	if err := j.Remove(path, "r-1"); err != nil {
		t.Fatalf("a record already gone is no error, got %v", err)
	}
}

func TestJournalQuarantinesWhatIsNoRecordAndKeepsTheValidOne(t *testing.T) {
	j, warnings := openJournal(t)
	dir := j.Dir()
	valid, err := j.Write(settleOf("valid", 7))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	v3 := strings.Replace(string(pythonRecords[0].data), `"version":2`, `"version":3`, 1)
	write(JournalRecordName("corrupt"), `{"version":2,"reservation_id":"corrupt","settle":`)
	write(JournalRecordName(pythonRecords[0].id), v3)
	write("notes.json", string(pythonRecords[0].data))                 // a name this SDK never writes
	write(JournalRecordName("another"), string(pythonRecords[0].data)) // named for another reservation
	if err := os.Symlink(valid, filepath.Join(dir, JournalRecordName("link"))); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, JournalRecordName("fifo")), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var records []JournalRecord
	go func() {
		defer close(done)
		records, err = j.Pending()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Pending blocked (on the FIFO?)")
	}
	if err != nil || len(records) != 1 || records[0].Path != valid || records[0].Request.ReservationId != "valid" {
		t.Fatalf("want the valid record alone, got %v (%v)", records, err)
	}
	if j.Quarantined() != 6 {
		t.Errorf("want 6 quarantined, got %d: %s", j.Quarantined(), warnings)
	}
	if got := names(t, filepath.Join(dir, JournalQuarantine)); len(got) != 6 {
		t.Errorf("want 6 files in quarantine/, got %v", got)
	}
	for _, why := range []string{"a symlink", "not a regular file", "unsupported record version 3",
		"not a record name", "named for another reservation", "notes.json"} {
		if !strings.Contains(warnings.String(), why) {
			t.Errorf("want a warning saying %q, got:\n%s", why, warnings)
		}
	}
	if again, err := j.Pending(); err != nil || len(again) != 1 || j.Quarantined() != 6 {
		t.Errorf("want the valid record again and nothing more quarantined, got %v (%v)", again, err)
	}
	// A second file of a quarantined name keeps the first.
	write("notes.json", "again")
	if _, err := j.Pending(); err != nil || len(names(t, filepath.Join(dir, JournalQuarantine))) != 7 {
		t.Errorf("want both notes.json kept in quarantine/ (%v)", err)
	}
}

func TestJournalDecodesStrictly(t *testing.T) {
	good := string(pythonRecords[0].data)
	for _, bad := range []string{
		`[]`, `null`, `"x"`, `{}`, good + `x`,
		strings.Replace(good, `"version":2`, `"version":"2"`, 1),
		strings.Replace(good, `"version":2`, `"version":2.0`, 1),
		strings.Replace(good, `"version":2`, `"version":true`, 1),
		strings.Replace(good, `"version":2`, `"version":null`, 1),
		`{"version":2,"reservation_id":"","settle":""}`,
		`{"version":2,"reservation_id":7,"settle":""}`,
		`{"version":2,"reservation_id":null,"settle":""}`,
		`{"version":2,"reservation_id":"x","settle":null}`,
		`{"version":2,"reservation_id":"x","settle":"not base64!"}`,
		`{"version":2,"reservation_id":"x","settle":"CgF4EA"}`,
		`{"version":2,"reservation_id":"x","settle":"/w=="}`,
		"\xef\xbb\xbf" + good, strings.Replace(good, "3f2c", "\xff", 1),
	} {
		if r, err := DecodeJournalRecord([]byte(bad)); err == nil {
			t.Errorf("%q: want an error, got %v", bad, r)
		}
	}
	// "CgF4" is a request for "x".
	if r, err := DecodeJournalRecord([]byte(`{"version":2,"reservation_id":"x","settle":"CgF4"}`)); err != nil || r.ReservationId != "x" {
		t.Errorf("want x's request, got %v (%v)", r, err)
	}
	if _, err := DecodeJournalRecord([]byte(`{"version":2,"reservation_id":"y","settle":"CgF4"}`)); err == nil ||
		!strings.Contains(err.Error(), "another reservation") {
		t.Errorf("want a request for another reservation refused, got %v", err)
	}
}

func TestJournalRefusesADirectoryOthersCanWrite(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o770); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(open, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{open, link, file} {
		_, err := OpenJournal(dir, nil)
		var unsafe *UnsafeJournalError
		if !errors.As(err, &unsafe) || unsafe.Dir != dir || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s: want an UnsafeJournalError naming it, got %v", dir, err)
		}
		if _, err := Dial("127.0.0.1:1", Options{JournalDir: dir}); !errors.As(err, &unsafe) {
			t.Errorf("%s: want Dial refused, got %v", dir, err)
		}
	}
	// A symlink to a private folder is followed, and the journal keeps the folder itself.
	private := filepath.Join(base, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(private, filepath.Join(base, "to-private")); err != nil {
		t.Fatal(err)
	}
	j, err := OpenJournal(filepath.Join(base, "to-private"), nil)
	if resolved, _ := filepath.EvalSymlinks(private); err != nil || j.Dir() != resolved {
		t.Errorf("want the journal in %s, got %v", private, err)
	}
}

func writeLegacy(t *testing.T, j *Journal, name string, request *earmarkv1.SettleRequest, mtime time.Time) string {
	t.Helper()
	data, err := proto.Marshal(request)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(j.Dir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestJournalMigratesFirstFormatRecords(t *testing.T) {
	j, _ := openJournal(t)
	old := time.Unix(1_700_000_000, 123_456_789)
	// One under its own name, one whose standard record is there already (kept as is), and
	// one that is no request.
	writeLegacy(t, j, legacyJournalRecordName("a"), settleOf("a", 11), old)
	writeLegacy(t, j, legacyJournalRecordName("b"), settleOf("b", 1), old)
	if _, err := j.Write(settleOf("b", 22)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(j.Dir(), legacyJournalRecordName("c")), []byte{0xff, 0xff}, 0o600); err != nil {
		t.Fatal(err)
	}
	records, err := j.Pending()
	if err != nil || len(records) != 2 {
		t.Fatalf("want a and b, got %v (%v)", records, err)
	}
	if records[0].Request.ReservationId != "a" || records[0].Request.Used != 11 ||
		records[1].Request.ReservationId != "b" || records[1].Request.Used != 22 {
		t.Errorf("want a (migrated, oldest first) at 11, then b at 22, got %v", records)
	}
	if info, err := os.Stat(j.PathOf("a")); err != nil || !info.ModTime().Equal(old) {
		t.Errorf("want a's record dated as its first-format file, got %v (%v)", info.ModTime(), err)
	}
	if got := names(t, j.Dir()); len(got) != 3 || got[0] != JournalQuarantine {
		t.Errorf("want the two records and quarantine/ alone, got %v", got)
	}
	if j.Quarantined() != 1 {
		t.Errorf("want c quarantined, got %d", j.Quarantined())
	}
}

func TestJournalRemoveLeavesAFirstFormatFileOfAnotherID(t *testing.T) {
	j, _ := openJournal(t)
	path, err := j.Write(settleOf("a", 1))
	if err != nil {
		t.Fatal(err)
	}
	// A first-format file under a's name holding b's request (a name two ids shared).
	foreign := writeLegacy(t, j, legacyJournalRecordName("a"), settleOf("b", 2), time.Now())
	if err := j.Remove(path, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("want b's first-format file kept, got %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("want a's record gone, got %v", err)
	}
	// One holding a's own request goes with a's record.
	path, _ = j.Write(settleOf("a", 1))
	own := writeLegacy(t, j, legacyJournalRecordName("a"), settleOf("a", 1), time.Now())
	if err := j.Remove(path, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(own); !os.IsNotExist(err) {
		t.Fatalf("want a's first-format file gone, got %v", err)
	}
}

// settling answers Settle with the queued answers and errors, one a call, and counts them.
type settling struct {
	earmarkv1.UnimplementedBudgetServer
	mu      sync.Mutex
	answers []*earmarkv1.SettleResponse
	errs    []error
	calls   int
}

func (s *settling) Settle(_ context.Context, in *earmarkv1.SettleRequest) (*earmarkv1.SettleResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if len(s.errs) > 0 {
		err := s.errs[0]
		s.errs = s.errs[1:]
		if err != nil {
			return nil, err
		}
	}
	answer := s.answers[0]
	s.answers = s.answers[1:]
	return answer, nil
}

func TestJournaledSettleKeepsItsRecordUntilASettledAnswerOrAFinalRefusal(t *testing.T) {
	settled := &earmarkv1.SettleResponse{Charged: 5, Released: 5, State: earmarkv1.ReservationState_RESERVATION_STATE_SETTLED}
	held := &earmarkv1.SettleResponse{State: earmarkv1.ReservationState_RESERVATION_STATE_HELD}
	negative := &earmarkv1.SettleResponse{Charged: -1, State: earmarkv1.ReservationState_RESERVATION_STATE_SETTLED}
	cases := []struct {
		name  string
		err   error
		reply *earmarkv1.SettleResponse
		kept  bool
		code  codes.Code
	}{
		{"settled", nil, settled, false, codes.OK},
		{"not found", statusWith(codes.NotFound, "RESERVATION_NOT_FOUND"), nil, false, codes.NotFound},
		{"hold settled", statusWith(codes.FailedPrecondition, "HOLD_SETTLED"), nil, false, codes.FailedPrecondition},
		{"out of range", statusWith(codes.OutOfRange, "X"), nil, false, codes.OutOfRange},
		{"unavailable", statusWith(codes.Unavailable, "SHUTTING_DOWN"), nil, true, codes.Unavailable},
		{"exhausted", statusWith(codes.ResourceExhausted, "X"), nil, true, codes.ResourceExhausted},
		{"denied", statusWith(codes.PermissionDenied, "X"), nil, true, codes.PermissionDenied},
		{"unauthenticated", statusWith(codes.Unauthenticated, "X"), nil, true, codes.Unauthenticated},
		{"internal", statusWith(codes.Internal, "X"), nil, true, codes.Internal},
		{"held", nil, held, true, codes.Internal},
		{"negative", nil, negative, true, codes.Internal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fake := &settling{}
			for i := 0; i < 4; i++ { // every attempt of a retried one
				fake.errs = append(fake.errs, c.err)
				fake.answers = append(fake.answers, c.reply)
			}
			client, dir := serveSettling(t, fake)
			_, err := client.Settle(context.Background(), SettleRequest{ReservationID: "r-" + c.name, Used: 5})
			if got := fromErrorOrOK(err); got != c.code {
				t.Fatalf("want %s, got %v", c.code, err)
			}
			_, statErr := os.Stat(filepath.Join(dir, JournalRecordName("r-"+c.name)))
			if kept := statErr == nil; kept != c.kept {
				t.Fatalf("want the record kept %v, got %v", c.kept, kept)
			}
		})
	}
}

func fromErrorOrOK(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	return fromError(err).Code
}

func serveSettling(t *testing.T, fake *settling) (*Client, string) {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	earmarkv1.RegisterBudgetServer(server, fake)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	retry := RetryPolicy{Attempts: 4, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond}
	dir := filepath.Join(t.TempDir(), "journal")
	client, err := Dial(listener.Addr().String(), Options{Retry: &retry, JournalDir: dir, Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client, dir
}

func TestRecoverSendsEachRecordAsItIsAndFlushWaits(t *testing.T) {
	settled := &earmarkv1.SettleResponse{Charged: 3, State: earmarkv1.ReservationState_RESERVATION_STATE_SETTLED}
	fake := &settling{errs: []error{nil, statusWith(codes.Unavailable, "SHUTTING_DOWN"),
		statusWith(codes.Unavailable, "SHUTTING_DOWN"), statusWith(codes.Unavailable, "SHUTTING_DOWN"),
		statusWith(codes.Unavailable, "SHUTTING_DOWN")}, answers: []*earmarkv1.SettleResponse{settled, settled}}
	client, _ := serveSettling(t, fake)
	j := client.Journal()
	first := settleOf("first", 3)
	first.Usage = &earmarkv1.TokenUsage{InputTokens: 1}
	for _, r := range []*earmarkv1.SettleRequest{first, settleOf("second", 4)} {
		path, err := j.Write(r)
		if err != nil {
			t.Fatal(err)
		}
		date := time.Now().Add(time.Duration(len(r.ReservationId)) * time.Second) // first is older
		_ = os.Chtimes(path, date, date)
	}
	if n, err := client.Recover(context.Background()); err != nil || n != 1 || fake.calls != 5 {
		t.Fatalf("want the first settled and the second left after its 4 attempts, got %d (%v), %d calls", n, err, fake.calls)
	}
	if left, _ := j.Pending(); len(left) != 1 || left[0].Request.ReservationId != "second" {
		t.Fatalf("want the second left, got %v", left)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if !client.Flush(ctx) {
		t.Fatal("want nothing under way")
	}
}
