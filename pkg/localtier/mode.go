package localtier

import "fmt"

// Mode is how the global limit is applied.
//
// Modes are plain values, safe to share between goroutines.
type Mode uint8

const (
	// Sync asks the upstream for every request that passes locally.
	Sync Mode = iota
	// Async admits from memory and records the admitted hits upstream in
	// batches.
	Async
)

// ParseMode parses sync or async.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "sync":
		return Sync, nil
	case "async":
		return Async, nil
	}
	return 0, fmt.Errorf("mode %q: want sync or async", s)
}

// Set parses s into m (flag.Value: a -mode flag parses once).
func (m *Mode) Set(s string) error {
	v, err := ParseMode(s)
	if err == nil {
		*m = v
	}
	return err
}

func (m Mode) String() string {
	if m == Async {
		return "async"
	}
	return "sync"
}
