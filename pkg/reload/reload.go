// Package reload keeps a descriptor config current: it loads a file or
// directory, watches it with fsnotify, and swaps a valid new config in
// atomically. An invalid one is rejected with file, line and reason in
// the log and a metric, and the last good config keeps serving. A Source
// feeds configs from elsewhere (an xDS stream) through the same Watcher.
//
// It watches the directory (the file's own, or the config directory), not
// the file: editors that save by rename and Kubernetes ConfigMap updates
// (an atomic swap of the ..data symlink) both replace the file, which a
// watch on the file itself would lose. A slow poll backs the watch up
// where events are not delivered (some network filesystems).
//
// It depends on pkg/config; nothing in it knows about gRPC or stores.
package reload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/config"
)

// Options configure a Watcher.
//
// New copies them, so changing them afterwards changes nothing; the
// Watcher is safe for concurrent use.
type Options struct {
	// Path is a YAML file or a directory of them.
	Path string
	// Debounce waits for a burst of events to end before reloading.
	// Default 100ms.
	Debounce time.Duration
	// Poll reloads this often even without events; 0 means 30s, negative
	// turns polling off.
	Poll time.Duration
	// Sizes bound the files read at each load (config.LoadWith): larger
	// ones are refused before they are read. The zero value means
	// config.DefaultMaxFileBytes per file and config.DefaultMaxTotalBytes
	// for a directory.
	Sizes  config.SizeBounds
	Logger *slog.Logger
	// Registerer, if set, gets the reload metrics.
	Registerer prometheus.Registerer
}

// Watcher holds the current config. It is safe for concurrent use.
type Watcher struct {
	opts    Options
	current atomic.Pointer[config.Config]
	mu      sync.Mutex // serialises reloads
	lastErr error      // the last attempt's; nil after a good one
	status  Status     // guarded by mu; its LastError is lastErr's

	reloads *prometheus.CounterVec
	version *prometheus.GaugeVec
	lastOK  prometheus.Gauge
}

// New loads the config at opts.Path; it fails if that config is invalid.
func New(opts Options) (*Watcher, error) {
	if opts.Debounce <= 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	if opts.Poll == 0 {
		opts.Poll = 30 * time.Second
	}
	w, err := NewEmpty(opts)
	if err != nil {
		return nil, err
	}
	cfg, err := config.LoadWith(opts.Path, opts.Sizes)
	if err != nil {
		w.reloads.WithLabelValues("error").Inc()
		return nil, err
	}
	w.swap(cfg)
	w.result("loaded", nil) // not yet shared: no lock needed
	return w, nil
}

func newWatcher(opts Options) *Watcher {
	w := &Watcher{
		opts: opts,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Config loads by result: loaded, unchanged, error (the last good config kept serving).",
		}, []string{"result"}),
		version: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_config_info",
			Help: "1 for the version of the config being served.",
		}, []string{"version"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_success_timestamp_seconds",
			Help: "When a config was last loaded successfully.",
		}),
	}
	for _, result := range []string{"loaded", "unchanged", "error"} {
		w.reloads.WithLabelValues(result) // 0 until one happens, not absent
	}
	return w
}

func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("reload: register metrics: %w", err)
		}
	}
	return nil
}

// NewEmpty returns a Watcher serving no config (Current is nil) until a
// Source applies one: a source other than files, such as an xDS stream.
// opts.Path names the source in logs.
func NewEmpty(opts Options) (*Watcher, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	w := newWatcher(opts)
	if opts.Registerer != nil {
		if err := registerAll(opts.Registerer, w.reloads, w.version, w.lastOK); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Source feeds a Watcher configs from somewhere other than its files.
// Run is called once, on its own goroutine; what it shares with others is
// its implementation's to guard.
type Source interface {
	// Run feeds w until ctx ends: each config it gets goes to w.Apply,
	// and one it cannot build to w.Reject.
	Run(ctx context.Context, w *Watcher) error
}

// Apply swaps cfg in, from a Source; from is where it came from (a
// version, a stream), for the log.
func (w *Watcher) Apply(cfg *config.Config, from string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.Current()
	if old != nil && cfg.Version() == old.Version() {
		w.result("unchanged", nil)
		return
	}
	w.swap(cfg)
	w.result("loaded", nil)
	w.opts.Logger.Info("config loaded", "source", w.opts.Path, "from", from, "version", cfg.Version(), "previous_version", old.Version(), "domains", logDomains(cfg.Domains()))
}

// Reject records a config a Source could not build: the last good one
// keeps serving.
func (w *Watcher) Reject(err error, from string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.result("error", err)
	w.opts.Logger.Error("config rejected; the last good config keeps serving",
		"source", w.opts.Path, "from", from, "error", err.Error(), "serving_version", w.Current().Version())
}

// Source is where the configs come from: the path given to New, or the
// name given to NewEmpty.
func (w *Watcher) Source() string { return w.opts.Path }

// Current is the config being served; nil only before a Source's first
// config (NewEmpty).
func (w *Watcher) Current() *config.Config { return w.current.Load() }

// LastError is the error of the last failed reload since the last good
// one, or nil.
func (w *Watcher) LastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// Status is what a Watcher has done: where its configs come from, the one
// being served and since when, and the last load attempt's result.
//
// A plain value, safe to share between goroutines.
type Status struct {
	Source string `json:"source"`
	// Version is the served config's; "" before the first.
	Version  string    `json:"version"`
	LoadedAt time.Time `json:"loaded_at"`
	// LastAttempt is the last load or reload, its LastResult loaded,
	// unchanged or error (LastError saying why: the served config is
	// then still the last good one).
	LastAttempt time.Time `json:"last_attempt"`
	LastResult  string    `json:"last_result"`
	LastError   string    `json:"last_error,omitempty"`
}

// Status reports what the Watcher has done.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.status
	st.Source, st.Version = w.opts.Path, w.Current().Version()
	if w.lastErr != nil {
		st.LastError = w.lastErr.Error()
	}
	return st
}

// result records a load attempt and its error (nil for loaded and
// unchanged); the caller holds mu.
func (w *Watcher) result(result string, err error) {
	w.reloads.WithLabelValues(result).Inc()
	w.status.LastAttempt, w.status.LastResult = time.Now(), result
	w.lastErr = err
}

// logDomains is what a log line shows of a config's domains: at most
// maxLoggedDomains, each cut to config.MaxQuotedBytes, and how many
// more there are, so that a config of many long domains cannot flood it.
func logDomains(domains []string) []string {
	out := make([]string, 0, min(len(domains), maxLoggedDomains+1))
	for i, d := range domains {
		if i == maxLoggedDomains {
			out = append(out, fmt.Sprintf("and %d more", len(domains)-i))
			break
		}
		out = append(out, config.Clip(d))
	}
	return out
}

// maxLoggedDomains bounds the domains a "config loaded" line names.
const maxLoggedDomains = 20

func (w *Watcher) swap(cfg *config.Config) {
	w.status.LoadedAt = time.Now()
	old := w.current.Swap(cfg)
	if old != nil {
		w.version.DeleteLabelValues(old.Version())
	}
	w.version.WithLabelValues(cfg.Version()).Set(1)
	w.lastOK.SetToCurrentTime()
}

// Reload loads the config again and swaps it in if it is valid and
// changed. On error the current config stays.
func (w *Watcher) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	cfg, err := config.LoadWith(w.opts.Path, w.opts.Sizes)
	if err != nil {
		if w.lastErr == nil || w.lastErr.Error() != err.Error() {
			w.opts.Logger.Error("config rejected; the last good config keeps serving",
				"path", w.opts.Path, "error", err.Error(), "serving_version", w.Current().Version())
		}
		w.result("error", err)
		return err
	}
	old := w.Current()
	if cfg.Version() == old.Version() {
		w.result("unchanged", nil)
		return nil
	}
	w.swap(cfg)
	w.result("loaded", nil)
	w.opts.Logger.Info("config loaded", "path", w.opts.Path, "version", cfg.Version(), "previous_version", old.Version(), "domains", logDomains(cfg.Domains()))
	return nil
}

// Watch starts watching: changes made after it returns are seen. The
// watch runs until ctx is done; the channel returned then yields its
// error, if any, and is closed.
func (w *Watcher) Watch(ctx context.Context) (<-chan error, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("reload: %w", err)
	}
	dir := w.opts.Path
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		dir = filepath.Dir(dir)
	}
	if err := fw.Add(dir); err != nil {
		fw.Close()
		return nil, fmt.Errorf("reload: watch %s: %w", dir, err)
	}
	done := make(chan error, 1)
	go func() {
		defer close(done)
		defer fw.Close()
		if err := w.loop(ctx, fw, dir); err != nil {
			done <- err
		}
	}()
	return done, nil
}

func (w *Watcher) loop(ctx context.Context, fw *fsnotify.Watcher, dir string) error {
	var poll <-chan time.Time
	if w.opts.Poll > 0 {
		t := time.NewTicker(w.opts.Poll)
		defer t.Stop()
		poll = t.C
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("reload: watcher closed")
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			debounce.Reset(w.opts.Debounce)
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("reload: watcher closed")
			}
			w.opts.Logger.Warn("config watch error; polling continues", "path", dir, "error", err.Error())
		case <-debounce.C:
			w.Reload()
		case <-poll:
			w.Reload()
		}
	}
}
