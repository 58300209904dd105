// Command healthcheck GETs the URL given as its only argument and exits 0 if the answer is a
// 2xx, 1 otherwise (any other status, a redirect, a connection error, or no answer within
// 2 seconds). It exists for container health checks in the distroless image, which has no shell,
// curl or wget:
//
//	healthcheck: {test: ["CMD", "/healthcheck", "http://127.0.0.1:8080/readyz"]}
//
// Exit status 1 is also used for a bad command line: Docker reserves 2, and any non-zero status
// marks the container unhealthy anyway.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// timeout bounds the whole check, connection and response included. Docker's own
// healthcheck.timeout should be longer, so that this message, not Docker's kill, is what the
// health log shows.
const timeout = 2 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run checks the single URL in args and returns the exit status, writing the reason for a
// failure to stderr.
func run(args []string, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: healthcheck URL")
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := check(ctx, args[0]); err != nil {
		fmt.Fprintln(stderr, "healthcheck:", err)
		return 1
	}
	return 0
}

// client neither follows redirects (a 3xx is not healthy) nor uses a proxy from the
// environment: the check is about this container.
var client = &http.Client{
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

// check GETs url and returns nil for a 2xx response, an error otherwise. ctx bounds the call.
func check(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
