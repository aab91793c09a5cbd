package earmark

// A durable settlement journal: the Settle a worker is about to send, on disk first, so that
// a worker that dies after the provider answered and before the Settle landed loses no
// usage. The next client with the same journal directory sends it again (Client.Recover).
//
// A record holds the Settle request itself, its protobuf bytes, base64 in a small JSON object
// that also names its reservation and the record's version; its file is named
// `v2-<SHA-256 of the reservation id's exact UTF-8 bytes, lower-case hex>.json`, the standard
// name of the Cycles SDK Recovery Conformance Profile (docs/recovery-conformance.md), so that
// distinct ids never share a file. The format, names and bytes are the Python SDK's
// (src/earmark/client/journal.py) and the TypeScript SDK's (clients/typescript/src/journal.ts),
// so that each SDK replays the others' records. A replay sends exactly what the first attempt
// sent, and the sidecar answers a repeated Settle of the same usage with the same answer,
// changing nothing, so a record replayed twice is charged once. A record is written
// atomically (a temporary file, fsynced, renamed, the directory fsynced) with mode 0600
// before the request leaves, and removed only on a settled answer or a final refusal; a
// record that cannot be read, or of a version this SDK does not know, is moved to
// quarantine/, named in a warning, never replayed.
//
// The directory must be private: OpenJournal refuses one that, after any symlink to it is
// followed, is not owned by the process's user or is writable by its group or by others,
// with an *UnsafeJournalError naming it, because any record found there is replayed, and
// another user's record would settle a hold that is not theirs. Each record is opened without
// following a symlink and without blocking (a FIFO named as a record must not hold the client
// forever), checked on its descriptor to be a regular file owned by the user and read to
// journalRecordBytesMax and no further; anything else is quarantined unread.
//
// Records of the first format (the bare protobuf bytes, named by the first 32 hex digits of
// the digest with `.settle` after them) are still read: Pending moves each to the standard
// name of the reservation it holds, so an upgrade loses none.

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	earmarkv1 "github.com/earmark-dev/earmark/gen/go/earmark/v1"
	"google.golang.org/protobuf/proto"
)

// The record format this SDK writes and reads, in the record and in its file's name.
const (
	JournalRecordVersion = 2
	journalPrefix        = "v2-"
	journalSuffix        = ".json"
	// The first format's records: read, moved to the standard name, never written.
	journalLegacySuffix = ".settle"
	// JournalQuarantine is the folder, inside the journal's, of the files set aside.
	JournalQuarantine = "quarantine"
)

// The bounds of earmark.limits (journal_replay_records_max, journal_record_bytes_max):
// Pending returns at most journalReplayRecordsMax records a call, and a record larger than
// journalRecordBytesMax holds no Settle request (one is far smaller).
const (
	journalReplayRecordsMax = 10_000
	journalRecordBytesMax   = 1 << 16
)

var journalStandardName = regexp.MustCompile(`^v2-[0-9a-f]{64}\.json$`)

func journalDigest(reservationID string) string {
	sum := sha256.Sum256([]byte(reservationID))
	return hex.EncodeToString(sum[:])
}

// JournalRecordName is a record's file name: the digest of the id's exact UTF-8 bytes,
// because the id comes from outside and must not name a file itself.
func JournalRecordName(reservationID string) string {
	return journalPrefix + journalDigest(reservationID) + journalSuffix
}

// legacyJournalRecordName is the name the first format gave the id's record.
func legacyJournalRecordName(reservationID string) string {
	return journalDigest(reservationID)[:32] + journalLegacySuffix
}

// EncodeJournalRecord is a record's bytes: compact JSON, UTF-8, the bytes the Python SDK
// (json.dumps with separators (",", ":") and ensure_ascii=False) and the TypeScript SDK
// write. The request is serialized deterministically.
func EncodeJournalRecord(request *earmarkv1.SettleRequest) ([]byte, error) {
	settle, err := proto.MarshalOptions{Deterministic: true}.Marshal(request)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`{"version":2,"reservation_id":`)
	writeJSONString(&b, request.GetReservationId())
	b.WriteString(`,"settle":"`)
	b.WriteString(base64.StdEncoding.EncodeToString(settle))
	b.WriteString(`"}`)
	return b.Bytes(), nil
}

// writeJSONString writes s as Python's json.dumps(ensure_ascii=False) does: `"` and `\`
// escaped, \b \f \n \r \t as such, other control characters as \u00xx, the rest as is.
// (encoding/json escapes <, >, &, U+2028 and U+2029, which the other SDKs do not.)
func writeJSONString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// DecodeJournalRecord is the request a record holds, or an error saying why it holds none:
// a JSON object whose version is exactly the integer 2, whose reservation_id is a string
// that is not empty and whose settle is the base64 (standard, padded) of a SettleRequest of
// that reservation.
func DecodeJournalRecord(data []byte) (*earmarkv1.SettleRequest, error) {
	if len(data) > journalRecordBytesMax {
		return nil, errors.New("larger than a Settle record can be")
	}
	if !utf8.Valid(data) {
		return nil, errors.New("not UTF-8")
	}
	var record map[string]json.RawMessage
	if err := json.Unmarshal(data, &record); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, errors.New("not a JSON object")
		}
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if record == nil {
		return nil, errors.New("not a JSON object") // null
	}
	if version := bytes.TrimSpace(record["version"]); string(version) != "2" {
		if version == nil {
			version = []byte("none")
		}
		return nil, fmt.Errorf("unsupported record version %s", version)
	}
	var reservationID, settle string
	if err := json.Unmarshal(record["reservation_id"], &reservationID); err != nil || reservationID == "" ||
		isNull(record["reservation_id"]) {
		return nil, errors.New("names no reservation")
	}
	if err := json.Unmarshal(record["settle"], &settle); err != nil || isNull(record["settle"]) {
		return nil, errors.New("holds no settle request")
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(settle)
	if err != nil {
		return nil, fmt.Errorf("holds no settle request: %v", err)
	}
	request := &earmarkv1.SettleRequest{}
	if err := proto.Unmarshal(raw, request); err != nil {
		return nil, fmt.Errorf("holds no settle request: %v", err)
	}
	if request.ReservationId != reservationID {
		return nil, errors.New("its settle request is for another reservation")
	}
	return request, nil
}

// isNull: a missing field (nil) or a JSON null, which json.Unmarshal takes as a string's
// zero value without an error.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return t == nil || string(t) == "null"
}

func decodeLegacy(data []byte) (*earmarkv1.SettleRequest, error) {
	if len(data) > journalRecordBytesMax {
		return nil, errors.New("larger than a Settle request can be")
	}
	request := &earmarkv1.SettleRequest{}
	if err := proto.Unmarshal(data, request); err != nil {
		return nil, err
	}
	if request.ReservationId == "" {
		return nil, errors.New("names no reservation")
	}
	return request, nil
}

// UnsafeJournalError is a journal directory another user could write (or no directory),
// refused at start.
type UnsafeJournalError struct {
	Dir    string
	Reason string
}

func (e *UnsafeJournalError) Error() string {
	return fmt.Sprintf("earmark journal: %s %s", e.Dir, e.Reason)
}

const journalPrivate = "; a journal directory must be private (mode 0700, owned by its worker's user)"

// checkJournalDir returns an *UnsafeJournalError unless dir (its symlinks followed) is a
// directory of this process's user that neither its group nor others can write.
func checkJournalDir(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return &UnsafeJournalError{Dir: dir, Reason: "is not a directory"}
	}
	uid := os.Geteuid()
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid {
		return &UnsafeJournalError{Dir: dir, Reason: fmt.Sprintf(
			"is owned by uid %d, not this process's %d%s", st.Uid, uid, journalPrivate)}
	}
	if info.Mode().Perm()&0o022 != 0 {
		return &UnsafeJournalError{Dir: dir, Reason: fmt.Sprintf(
			"has mode %04o, writable by others%s", info.Mode().Perm(), journalPrivate)}
	}
	return nil
}

// notARecord is why a file is quarantined rather than read.
type notARecord struct{ why string }

func (e notARecord) Error() string { return e.why }

// readJournalFile is the bytes of the record at path, if it is a regular file of this
// process's user no larger than a record can be; else an error saying why it is none.
func readJournalFile(path string) ([]byte, error) {
	// O_NOFOLLOW: a symlink is never followed to a file it names; O_NONBLOCK: opening a FIFO
	// returns at once instead of waiting for a writer.
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.ELOOP {
		return nil, notARecord{"a symlink, not a record"}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	// Checked on the descriptor, not the name: the file read is the file checked.
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, notARecord{"not a regular file"}
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return nil, notARecord{fmt.Sprintf("owned by uid %d, not this process's %d", st.Uid, uid)}
	}
	if st.Size > journalRecordBytesMax {
		return nil, notARecord{"larger than a Settle record can be"}
	}
	// One byte past the bound tells a file that grew since fstat from one that did not.
	buf := make([]byte, journalRecordBytesMax+1)
	filled := 0
	for filled < len(buf) {
		n, err := syscall.Read(fd, buf[filled:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		filled += n
	}
	return buf[:filled], nil
}

// JournalRecord is a record found on disk: where it is, and the request it holds.
type JournalRecord struct {
	Path    string
	Request *earmarkv1.SettleRequest
}

// Journal is the Settle requests not yet answered, one file each, in a directory. It is
// safe for concurrent use; a Client with Options.JournalDir keeps one.
type Journal struct {
	dir         string
	logf        func(format string, args ...any)
	quarantined atomic.Int64
	temporaries atomic.Int64
}

// OpenJournal creates dir (mode 0700) if it is not there and refuses one another user could
// write (*UnsafeJournalError); the journal keeps the directory checked, its symlinks
// resolved, not a symlink that could be pointed elsewhere later. Warnings go to logger
// (nil: the standard logger).
func OpenJournal(dir string, logger *log.Logger) (*Journal, error) {
	if dir == "" {
		return nil, errors.New("earmark journal: no directory given")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		if info, e := os.Stat(dir); e == nil && !info.IsDir() {
			return nil, &UnsafeJournalError{Dir: dir, Reason: "is not a directory"}
		}
		return nil, err
	}
	if err := checkJournalDir(dir); err != nil {
		return nil, err
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	if resolved, err = filepath.Abs(resolved); err != nil {
		return nil, err
	}
	j := &Journal{dir: resolved, logf: log.Printf}
	if logger != nil {
		j.logf = logger.Printf
	}
	return j, nil
}

// Dir is the journal's directory, its symlinks resolved.
func (j *Journal) Dir() string { return j.dir }

// Quarantined counts the files this journal set aside (unreadable, foreign, not regular,
// too large), each named in a warning.
func (j *Journal) Quarantined() int { return int(j.quarantined.Load()) }

// PathOf is where the record of reservationID is.
func (j *Journal) PathOf(reservationID string) string {
	return filepath.Join(j.dir, JournalRecordName(reservationID))
}

// Write writes request durably before it is sent, and answers the record's path.
func (j *Journal) Write(request *earmarkv1.SettleRequest) (string, error) {
	return j.write(request, time.Time{})
}

// write dates the record mtime when it is not zero (a migrated one keeps its first date, so
// that replay stays oldest first).
func (j *Journal) write(request *earmarkv1.SettleRequest, mtime time.Time) (string, error) {
	if request.GetReservationId() == "" {
		return "", errors.New("earmark journal: a Settle request names no reservation")
	}
	data, err := EncodeJournalRecord(request)
	if err != nil {
		return "", err
	}
	path := j.PathOf(request.ReservationId)
	// A name of this process's (and this write's) own, so that two writers never share a
	// temporary file; it does not end in .json, so Pending never reads it half written.
	temporary := fmt.Sprintf("%s.%d.%d.tmp", strings.TrimSuffix(path, journalSuffix), os.Getpid(),
		j.temporaries.Add(1))
	file, err := os.OpenFile(temporary,
		os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return "", err
	}
	_, err = file.Write(data)
	if err == nil {
		err = file.Sync()
	}
	if e := file.Close(); err == nil {
		err = e
	}
	if err == nil && !mtime.IsZero() {
		err = os.Chtimes(temporary, mtime, mtime)
	}
	if err == nil {
		err = os.Rename(temporary, path)
	}
	if err != nil {
		_ = os.Remove(temporary)
		return "", err
	}
	return path, j.syncDir()
}

// Remove removes the record of reservationID at path (one already gone is no error: another
// client may have sent it), and a first-format record of the same id if one is left; never
// a first-format file that holds another id (a name two ids shared).
func (j *Journal) Remove(path, reservationID string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	legacy := filepath.Join(j.dir, legacyJournalRecordName(reservationID))
	if data, err := readJournalFile(legacy); err == nil {
		if request, err := decodeLegacy(data); err == nil && request.ReservationId == reservationID {
			if err := os.Remove(legacy); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return j.syncDir()
}

// Pending is every record, oldest first (by modification time), at most 10,000 a call,
// after moving first-format records to their standard names; those that cannot be read are
// quarantined.
func (j *Journal) Pending() ([]JournalRecord, error) {
	if err := j.migrate(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, err
	}
	type dated struct {
		mtime int64
		path  string
	}
	var records []dated
	for _, entry := range entries {
		if !strings.HasSuffix(entry.Name(), journalSuffix) {
			continue
		}
		path := filepath.Join(j.dir, entry.Name())
		// Lstat: a symlink is dated itself, and quarantined below, never followed.
		info, err := os.Lstat(path)
		if err != nil {
			continue // removed since it was listed (another client answered it)
		}
		records = append(records, dated{info.ModTime().UnixNano(), path})
	}
	sort.Slice(records, func(a, b int) bool {
		if records[a].mtime != records[b].mtime {
			return records[a].mtime < records[b].mtime
		}
		return records[a].path < records[b].path
	})
	if len(records) > journalReplayRecordsMax {
		records = records[:journalReplayRecordsMax]
	}
	var found []JournalRecord
	for _, record := range records {
		request, err := j.readRecord(record.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			if err := j.quarantine(record.path, err); err != nil {
				return found, err
			}
			continue
		}
		found = append(found, JournalRecord{Path: record.path, Request: request})
	}
	return found, nil
}

func (j *Journal) readRecord(path string) (*earmarkv1.SettleRequest, error) {
	name := filepath.Base(path)
	if !journalStandardName.MatchString(name) {
		return nil, notARecord{"not a record name this SDK writes"}
	}
	data, err := readJournalFile(path)
	if err != nil {
		return nil, err
	}
	request, err := DecodeJournalRecord(data)
	if err != nil {
		return nil, err
	}
	if name != JournalRecordName(request.ReservationId) {
		return nil, notARecord{"named for another reservation"}
	}
	return request, nil
}

// migrate moves each first-format record to the standard name of the reservation it holds
// (keeping a standard record already there: it is as new or newer), then removes it; one
// that cannot be read is quarantined.
func (j *Journal) migrate() error {
	entries, err := os.ReadDir(j.dir) // sorted by name
	if err != nil {
		return err
	}
	for _, entry := range entries {
		if !strings.HasSuffix(entry.Name(), journalLegacySuffix) {
			continue
		}
		legacy := filepath.Join(j.dir, entry.Name())
		info, err := os.Lstat(legacy)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var request *earmarkv1.SettleRequest
		var data []byte
		if err == nil {
			data, err = readJournalFile(legacy)
		}
		if err == nil {
			request, err = decodeLegacy(data)
		}
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			if err := j.quarantine(legacy, err); err != nil {
				return err
			}
			continue
		}
		if _, err := os.Stat(j.PathOf(request.ReservationId)); errors.Is(err, fs.ErrNotExist) {
			if _, err := j.write(request, info.ModTime()); err != nil {
				return err
			}
		}
		// The file's own record is now under its standard name: removing it removes nothing
		// of another reservation.
		if err := os.Remove(legacy); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := j.syncDir(); err != nil {
			return err
		}
	}
	return nil
}

func (j *Journal) quarantine(path string, why error) error {
	folder := filepath.Join(j.dir, JournalQuarantine)
	if err := os.Mkdir(folder, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	target := filepath.Join(folder, filepath.Base(path))
	if _, err := os.Lstat(target); err == nil {
		// An earlier file of the same name stays: both are evidence.
		target = fmt.Sprintf("%s.%d", target, time.Now().UnixNano())
	}
	if err := os.Rename(path, target); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // another client moved it first
		}
		return err
	}
	n := j.quarantined.Add(1)
	j.logf("earmark journal: %s cannot be read (%v); moved to %s (%d quarantined by this client)",
		path, why, folder, n)
	return j.syncDir()
}

// syncDir makes a rename or a removal durable: it lives in the directory's own entries.
func (j *Journal) syncDir() error {
	dir, err := os.Open(j.dir)
	if err != nil {
		return err
	}
	err = dir.Sync()
	if e := dir.Close(); err == nil {
		err = e
	}
	return err
}
