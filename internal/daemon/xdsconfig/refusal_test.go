package xdsconfig

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/testkit/testpki"
	"github.com/sluicehq/sluice/internal/testkit/xdstest"
	"github.com/sluicehq/sluice/pkg/config"
	"github.com/sluicehq/sluice/pkg/reload"
)

// counter reads a counter of reg by name and one label's value.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestRefusedPushNotRebuilt is issue 21's finding 5, second half:
// go-control-plane answers a NACK by sending the same snapshot again at
// once, and each re-send was built (and refused) afresh. A refused
// response is now built once: re-sends are NACKed with the same reason,
// without a build (the watcher records one refusal), until the server's
// config changes.
func TestRefusedPushNotRebuilt(t *testing.T) {
	ca := testpki.New(t)
	cp := xdstest.Start(t, ca, "127.0.0.1:0")
	src, err := New(Options{Server: cp.Addr, NodeID: cp.NodeID, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		TLS: clientTLS(t, ca)})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w, err := reload.NewEmpty(reload.Options{Path: src.Name(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { src.Run(ctx, w) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	cp.Push("1", xdstest.LimitConfig("gateway-limits", 10))
	poll(t, 10*time.Second, "the first snapshot", func() bool { return w.Current() != nil })
	// A domain twice: cheap to build, refused.
	cp.Push("2", xdstest.LimitConfig("one", 30), xdstest.LimitConfig("two", 40))
	poll(t, 10*time.Second, "five NACKs", func() bool { return len(cp.Nacks()) >= 5 })
	nacks := cp.Nacks()
	for i, n := range nacks[1:] {
		if n != nacks[0] {
			t.Errorf("NACK %d: %q; want the first's reason, %q", i+1, n, nacks[0])
		}
	}
	if got := counter(t, reg, "sluice_config_reloads_total", "result", "error"); got != 1 {
		t.Errorf("refusals recorded after %d NACKs: %v; want 1 (the response built once)", len(nacks), got)
	}

	// A new config is built and served; the refused one, pushed again
	// after it, is built again (once).
	cp.Push("3", xdstest.LimitConfig("gateway-limits", 50))
	poll(t, 10*time.Second, "the good snapshot after the refused one", func() bool { return limitOf(w, "gateway") == 50 })
	before := len(cp.Nacks())
	cp.Push("4", xdstest.LimitConfig("one", 30), xdstest.LimitConfig("two", 40))
	poll(t, 10*time.Second, "three more NACKs", func() bool { return len(cp.Nacks()) >= before+3 })
	if got := counter(t, reg, "sluice_config_reloads_total", "result", "error"); got != 2 {
		t.Errorf("refusals recorded: %v; want 2", got)
	}
	if limitOf(w, "gateway") != 50 {
		t.Errorf("the refused push replaced the served config")
	}
}

// limitOf is the limit the served config has for domain's key client.
func limitOf(w *reload.Watcher, domain string) uint32 {
	l := w.Current().Match(domain, []config.Entry{{Key: "client", Value: "c"}})
	if l == nil {
		return 0
	}
	return l.RateLimit.RequestsPerUnit
}
