package serve

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Main runs a daemon: run gets the process's arguments, environment and
// stderr, and a context that SIGTERM or SIGINT ends. Main exits 0 when run
// returns nil or flag.ErrHelp, else 1 after printing the error after name.
func Main(name string, run func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Registry returns the registry a daemon's /metrics serves: the Go
// runtime's and the process's collectors, and whatever the daemon adds.
func Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
