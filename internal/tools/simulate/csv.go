package simulate

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/limiter"
)

// maxLineErrors is how many bad lines ReadCSV reports before it stops: a
// file in the wrong format would otherwise bury the first, telling error.
const maxLineErrors = 20

// LineError is a bad line of a trace file. It formats as "file:line:
// reason", like config errors.
type LineError struct {
	File   string
	Line   int
	Reason string
}

func (e *LineError) Error() string {
	return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Reason
}

// ReadCSV reads a trace in CSV: one request per line, with the columns
//
//	time,entries,cost,duration,refund
//
// time is seconds as a decimal (12.345; digits past microseconds are
// dropped) or an RFC 3339 timestamp (2026-01-02T15:04:05.123Z). entries are
// key=value pairs separated by ';' (remote_address=10.0.0.1;path=/x); a
// value may contain '=' or be empty, as the server accepts, but a key may
// not. cost is a positive integer and may be left out (1); duration is
// how long the request ran, in seconds, and may be left out (instant);
// refund is the units it gives back when it ends (a reservation's unused
// part), at most its cost, and may be left out (none). A
// first line whose time column reads "time" is a
// header; lines starting with '#' are comments; fields may be quoted as
// CSV allows, for values holding commas.
//
// name is what errors call the file. Every bad line is reported, up to 20,
// as a *LineError, joined with errors.Join.
func ReadCSV(name string, r io.Reader) ([]Request, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // two or three: checked here, with a better message
	cr.Comment = '#'
	cr.ReuseRecord = true
	var (
		trace []Request
		errs  []error
	)
	for first := true; len(errs) < maxLineErrors; first = false {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if pe := (*csv.ParseError)(nil); errors.As(err, &pe) {
			errs = append(errs, &LineError{File: name, Line: pe.Line, Reason: pe.Err.Error()})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		if first && len(rec) > 0 && strings.EqualFold(strings.TrimSpace(rec[0]), "time") {
			continue
		}
		req, err := parseRecord(rec)
		if err != nil {
			errs = append(errs, &LineError{File: name, Line: line, Reason: err.Error()})
			continue
		}
		trace = append(trace, req)
	}
	if len(errs) == maxLineErrors {
		errs = append(errs, fmt.Errorf("%s: reporting the first %d bad lines only", name, maxLineErrors))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return trace, nil
}

func parseRecord(rec []string) (Request, error) {
	var req Request
	if len(rec) < 2 || len(rec) > 5 {
		return req, fmt.Errorf("%d columns; want time,entries[,cost[,duration[,refund]]]", len(rec))
	}
	var err error
	if req.Time, err = parseTime(strings.TrimSpace(rec[0])); err != nil {
		return req, err
	}
	if req.Entries, err = parseEntries(strings.TrimSpace(rec[1])); err != nil {
		return req, err
	}
	req.Cost = 1
	if len(rec) >= 3 {
		if c := strings.TrimSpace(rec[2]); c != "" {
			n, err := strconv.ParseInt(c, 10, 64)
			if err != nil || n < 1 || n > limiter.MaxCost {
				return req, fmt.Errorf("cost %q: want an integer from 1 to %d, or nothing for 1", c, int64(limiter.MaxCost))
			}
			req.Cost = n
		}
	}
	if len(rec) >= 4 {
		if d := strings.TrimSpace(rec[3]); d != "" {
			secs, err := strconv.ParseFloat(d, 64)
			if err != nil || !(secs >= 0 && secs <= maxDuration) {
				return req, fmt.Errorf("duration %q: want seconds from 0 to %d, or nothing", d, int64(maxDuration))
			}
			req.Duration = int64(secs * 1e6)
		}
	}
	if len(rec) == 5 {
		if r := strings.TrimSpace(rec[4]); r != "" {
			n, err := strconv.ParseInt(r, 10, 64)
			if err != nil || n < 0 || n > req.Cost {
				return req, fmt.Errorf("refund %q: want an integer from 0 to the cost (%d), or nothing", r, req.Cost)
			}
			req.Refund = n
		}
	}
	return req, nil
}

// maxDuration bounds a request's duration in a trace, in seconds: a day.
const maxDuration = 24 * 3600

// parseTime reads decimal seconds exactly, digit by digit (a float64 would
// round 1767225600.000001 to another microsecond), else RFC 3339.
func parseTime(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("time is empty")
	}
	if us, ok := parseSeconds(s); ok {
		return us, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("time %q: want seconds (12.345) or RFC 3339 (2026-01-02T15:04:05Z)", s)
	}
	return t.UnixMicro(), nil
}

// maxSeconds keeps a time in microseconds inside an int64 with room for a
// window after it.
const maxSeconds = 1 << 42

func parseSeconds(s string) (int64, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || !digits(whole) || !digits(frac) {
		return 0, false
	}
	var sec int64
	if whole != "" {
		n, err := strconv.ParseInt(whole, 10, 64)
		if err != nil || n > maxSeconds {
			return 0, false
		}
		sec = n
	}
	var us int64
	for i := 0; i < 6; i++ {
		us *= 10
		if i < len(frac) {
			us += int64(frac[i] - '0')
		}
	}
	return sec*1_000_000 + us, true
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseEntries reads key=value pairs separated by ';'.
func parseEntries(s string) ([]config.Entry, error) {
	if s == "" {
		return nil, errors.New("entries are empty: want key=value pairs separated by ';'")
	}
	pairs := strings.Split(s, ";")
	if len(pairs) > limiter.MaxEntries {
		return nil, fmt.Errorf("%d entries; the server refuses more than %d", len(pairs), limiter.MaxEntries)
	}
	entries := make([]config.Entry, 0, len(pairs))
	for i, p := range pairs {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("entry %d %q: want key=value", i+1, p)
		case k == "":
			return nil, fmt.Errorf("entry %d %q: empty key", i+1, p)
		case len(k) > limiter.MaxKeyLen:
			// The server refuses these; a trace of them would simulate
			// answers it never gives.
			return nil, fmt.Errorf("entry %d: key too long (at most %d bytes)", i+1, limiter.MaxKeyLen)
		}
		// Matched as it is and counted as the server counts it (a long
		// value by its digest: see appendStateKey).
		entries = append(entries, config.Entry{Key: k, Value: v})
	}
	return entries, nil
}
