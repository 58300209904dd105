// Command viewers loads admin pages the way people watching them do: n
// viewers, each loading the URLs in turn, one load every -interval (0: back
// to back, as a hostile viewer would), for -duration, each on its own
// keep-alive connection. It prints one JSON object: the loads answered
// 200, those refused 429 and those that failed. bench/viewers.sh runs it
// beside a gRPC load to measure what the admin views cost the decisions.
//
//	viewers -n 16 -interval 500ms -duration 10s http://127.0.0.1:8080/ 'http://127.0.0.1:8080/?part=main'
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	n := flag.Int("n", 16, "viewers (1..1024)")
	interval := flag.Duration("interval", 500*time.Millisecond, "time between one viewer's loads; 0: back to back")
	duration := flag.Duration("duration", 10*time.Second, "how long they view (at most 10m)")
	flag.Parse()
	urls := flag.Args()
	if len(urls) == 0 || *n < 1 || *n > 1024 || *duration <= 0 || *duration > 10*time.Minute || *interval < 0 {
		fmt.Fprintln(os.Stderr, "usage: viewers [-n 16] [-interval 500ms] [-duration 10s] URL...")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	var ok, refused, failed atomic.Int64
	var wg sync.WaitGroup
	for range *n {
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
			for i := 0; ctx.Err() == nil; i++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, urls[i%len(urls)], nil)
				resp, err := client.Do(req)
				switch {
				case err != nil:
					if ctx.Err() == nil {
						failed.Add(1)
					}
				case resp.StatusCode == http.StatusOK:
					ok.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests:
					refused.Add(1)
				default:
					failed.Add(1)
				}
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if *interval > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(*interval):
					}
				}
			}
		})
	}
	wg.Wait()
	json.NewEncoder(os.Stdout).Encode(map[string]int64{"ok": ok.Load(), "refused": refused.Load(), "failed": failed.Load()})
}
