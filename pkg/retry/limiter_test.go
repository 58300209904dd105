package retry

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lstep is one call in a scripted sequence against one Limiter.
type lstep struct {
	at         time.Duration // since t0
	n          int
	want       bool
	wantTokens float64 // TokensAt(at) after the call
}

func TestLimiterAllowAt(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tests := []struct {
		name  string
		rate  float64
		burst int
		steps []lstep
	}{
		{"refill", 10, 5, []lstep{
			{0, 5, true, 0},
			{0, 1, false, 0},
			{ms(100), 1, true, 0}, // exactly one token in 100ms
			{ms(100), 1, false, 0},
			{ms(350), 2, true, 0.5},
			{ms(400), 1, true, 0.5 + 0.5 - 1},
			{ms(450), 1, false, 0.5},
		}},
		{"burst caps the refill", 10, 5, []lstep{
			{0, 5, true, 0},
			{time.Hour, 6, false, 5},
			{time.Hour, 5, true, 0},
		}},
		{"n above burst never passes", 1000, 3, []lstep{
			{time.Hour, 4, false, 3},
			{time.Hour, 3, true, 0},
		}},
		{"clock going backwards refills nothing", 1, 1, []lstep{
			{0, 1, true, 0},
			{time.Second, 1, true, 0},
			{ms(500), 1, false, 0},
			{ms(1500), 1, false, 0.5}, // counted from 1s, not from 500ms
			{2 * time.Second, 1, true, 0},
		}},
		{"tokens in hand go to a late reading of the clock", 1, 2, []lstep{
			{time.Second, 1, true, 1},
			{0, 1, true, 0},
			{ms(500), 1, false, 0},
		}},
		{"n <= 0 always passes and spends nothing", 1, 1, []lstep{
			{0, 1, true, 0},
			{0, 0, true, 0},
			{0, -3, true, 0},
		}},
		{"rate 0: the burst, once", 0, 2, []lstep{
			{0, 2, true, 0},
			{time.Hour, 1, false, 0},
		}},
		{"negative rate is rate 0", -5, 1, []lstep{
			{0, 1, true, 0},
			{time.Hour, 1, false, 0},
		}},
		{"NaN rate is rate 0", math.NaN(), 1, []lstep{
			{0, 1, true, 0},
			{time.Hour, 1, false, 0},
		}},
		{"infinite rate allows everything", math.Inf(1), 1, []lstep{
			{0, 1000, true, 1},
			{0, 1000, true, 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLimiter(tt.rate, tt.burst)
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				if got := l.AllowAt(now, s.n); got != s.want {
					t.Fatalf("step %d: AllowAt(t0+%v, %d) = %v; want %v", i, s.at, s.n, got, s.want)
				}
				if got := l.TokensAt(now); math.Abs(got-s.wantTokens) > 1e-9 {
					t.Fatalf("step %d: TokensAt(t0+%v) = %v; want %v", i, s.at, got, s.wantTokens)
				}
			}
		})
	}
}

func TestZeroLimiter(t *testing.T) {
	var l Limiter
	if l.AllowAt(t0, 1) {
		t.Error("zero Limiter: AllowAt(t0, 1) = true; want false")
	}
	if !l.AllowAt(t0, 0) {
		t.Error("zero Limiter: AllowAt(t0, 0) = false; want true")
	}
	if err := l.Wait(context.Background()); err == nil {
		t.Error("zero Limiter: Wait = nil; want an error")
	}
}

func TestLimiterReserveAt(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	l := NewLimiter(10, 2)
	steps := []struct {
		n        int
		maxWait  time.Duration
		wantWait time.Duration
		wantOK   bool
	}{
		{2, 0, 0, true},
		{1, ms(50), ms(100), false}, // refused: nothing spent
		{1, ms(100), ms(100), true},
		{1, time.Hour, ms(200), true},
		{3, time.Hour, never, false},
	}
	for i, s := range steps {
		if wait, ok := l.ReserveAt(t0, s.n, s.maxWait); wait != s.wantWait || ok != s.wantOK {
			t.Errorf("step %d: ReserveAt(t0, %d, %v) = %v, %v; want %v, %v",
				i, s.n, s.maxWait, wait, ok, s.wantWait, s.wantOK)
		}
	}
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{{0, -2}, {ms(100), -1}, {ms(200), 0}, {ms(300), 1}} {
		if got := l.TokensAt(t0.Add(c.at)); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("TokensAt(t0+%v) = %v; want %v", c.at, got, c.want)
		}
	}
}

func TestLimiterUnreserve(t *testing.T) {
	l := NewLimiter(1, 1)
	l.AllowAt(t0, 1)
	act1, _, _ := l.reserve(t0, 1, time.Hour) // acts at t0+1s
	act2, _, _ := l.reserve(t0, 1, time.Hour) // acts at t0+2s, counting on act1's token
	half := t0.Add(500 * time.Millisecond)
	steps := []struct {
		name string
		act  time.Time
		want float64 // TokensAt(half) afterwards
	}{
		{"first of two gives back nothing", act1, -1.5},
		{"last gives back its token", act2, -0.5},
		{"first, now last, gives back its token", act1, 0.5},
	}
	for _, s := range steps {
		l.unreserve(half, 1, s.act)
		if got := l.TokensAt(half); math.Abs(got-s.want) > 1e-9 {
			t.Errorf("%s: TokensAt = %v; want %v", s.name, got, s.want)
		}
	}
}

func TestLimiterWait(t *testing.T) {
	l := NewLimiter(1.0/3600, 1) // one an hour
	if err := l.Wait(context.Background()); err != nil {
		t.Fatalf("Wait on a full bucket = %v; want nil", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := l.Wait(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Errorf("Wait with a 1m deadline for a 1h wait = %v (ctx.Err %v); want DeadlineExceeded at once", err, ctx.Err())
	}
	if got := l.TokensAt(time.Now()); got < 0 {
		t.Errorf("TokensAt = %v after a refused Wait; want ≥ 0 (nothing spent)", got)
	}
	if err := l.WaitN(context.Background(), 2); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitN(2) with burst 1 = %v; want a never-available error", err)
	}
	cancel()
	if err := l.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait(cancelled ctx) = %v; want context.Canceled", err)
	}
}

func TestLimiterWaitCancelled(t *testing.T) {
	l := NewLimiter(1.0/3600, 1)
	l.Allow()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	// Poll, with a deadline, until Wait has reserved its token.
	for deadline := time.Now().Add(10 * time.Second); l.TokensAt(time.Now()) > -0.5; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("Wait never reserved a token")
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Wait = %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still blocked 10s after its context was cancelled")
	}
	if got := l.TokensAt(time.Now()); got < 0 {
		t.Errorf("TokensAt = %v after a cancelled Wait; want ≥ 0 (token given back)", got)
	}
}

// TestLimiterConcurrentAllowAt has callers whose clock readings reach the
// lock out of order; the total still never exceeds burst + rate·elapsed.
func TestLimiterConcurrentAllowAt(t *testing.T) {
	const rate, burst, workers, calls = 100.0, 10, 8, 2000
	l := NewLimiter(rate, burst)
	var tick, allowed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range calls {
				if l.AllowAt(t0.Add(time.Duration(tick.Add(1))*time.Millisecond), 1) {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Duration(tick.Load()) * time.Millisecond
	if limit := int64(burst + rate*elapsed.Seconds()); allowed.Load() > limit || allowed.Load() < burst {
		t.Errorf("%d allowed over %v; want between %d and %d", allowed.Load(), elapsed, burst, limit)
	}
}

func TestLimiterConcurrentAllow(t *testing.T) {
	const rate, burst, workers, calls = 1000.0, 5, 8, 5000
	l := NewLimiter(rate, burst)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for range calls {
				if l.Allow() {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if limit := int64(burst + rate*elapsed.Seconds()); allowed.Load() > limit || allowed.Load() < burst {
		t.Errorf("%d allowed over %v; want between %d and %d", allowed.Load(), elapsed, burst, limit)
	}
}

func BenchmarkLimiterAllowAt(b *testing.B) {
	l := NewLimiter(1e9, 1<<30)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.AllowAt(t0, 1)
		}
	})
}

// TestLimiterConcurrentReserveInOrder has many callers reserve at once:
// together they are promised one token every 1/rate after the burst, none
// sooner and none later.
func TestLimiterConcurrentReserveInOrder(t *testing.T) {
	const rate, burst, callers = 10.0, 3, 64
	l := NewLimiter(rate, burst)
	waits := make([]time.Duration, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			w, ok := l.ReserveAt(t0, 1, time.Hour)
			if !ok {
				t.Errorf("ReserveAt(t0, 1, 1h) = %v, false; want true", w)
			}
			waits[i] = w
		})
	}
	wg.Wait()
	slices.Sort(waits)
	for k, w := range waits {
		want := time.Duration(max(0, k-burst+1)) * 100 * time.Millisecond
		if w != want {
			t.Errorf("the %d-th shortest wait = %v; want %v", k, w, want)
		}
	}
}

// TestLimiterWaitSleeps drives Wait through a fake clock: it sleeps
// exactly until its token is due, never longer.
func TestLimiterWaitSleeps(t *testing.T) {
	l := NewLimiter(4, 2) // a token every 250ms
	clock := newFakeClock()
	for range 5 {
		if err := l.wait(context.Background(), 1, clock); err != nil {
			t.Fatalf("wait = %v; want nil", err)
		}
	}
	want := []time.Duration{250 * time.Millisecond, 250 * time.Millisecond, 250 * time.Millisecond}
	if got := clock.Waits(); !slices.Equal(got, want) {
		t.Errorf("sleeps = %v; want %v", got, want)
	}
	// After a pause the burst is back: two at once, then the pace.
	clock.now = clock.now.Add(time.Hour)
	for range 3 {
		if err := l.wait(context.Background(), 1, clock); err != nil {
			t.Fatalf("wait = %v; want nil", err)
		}
	}
	want = append(want, 250*time.Millisecond)
	if got := clock.Waits(); !slices.Equal(got, want) {
		t.Errorf("sleeps = %v; want %v", got, want)
	}
}

func TestLimiterWaitCancelledGivesBack(t *testing.T) {
	l := NewLimiter(1, 1)
	clock := &blockingClock{fakeClock: fakeClock{now: t0}, sleeping: make(chan struct{}, 1)}
	if !l.AllowAt(t0, 1) {
		t.Fatal("AllowAt(t0, 1) on a full bucket = false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.wait(ctx, 1, clock) }()
	<-clock.sleeping
	if got := l.TokensAt(t0); got != -1 {
		t.Errorf("TokensAt(t0) while waiting = %v; want -1", got)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("wait = %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait still blocked 10s after its context was cancelled")
	}
	if got := l.TokensAt(t0); got != 0 {
		t.Errorf("TokensAt(t0) after the cancelled wait = %v; want 0 (its token given back)", got)
	}
}
