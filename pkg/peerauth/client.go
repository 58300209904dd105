package peerauth

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// TokenCredentials are a proxy's side of the token: gRPC per-call
// credentials (grpc.WithPerRPCCredentials) that send the token held in a
// file, alone on its first line, in TokenKey. The file is read again when
// it changes (looked at no more than once a second), so a rotated token
// takes effect without a restart.
//
// Unless plaintext is set, gRPC sends them only over TLS: a call on a
// plaintext connection fails rather than show the token to the path.
//
// TokenCredentials are safe for concurrent use.
type TokenCredentials struct {
	path      string
	plaintext bool

	mu      sync.Mutex
	header  string    // "Bearer <token>"
	checked time.Time // when the file was last looked at
	mod     time.Time // its modification time then
	size    int64
}

// NewTokenCredentials reads the token in path.
func NewTokenCredentials(path string, plaintext bool) (*TokenCredentials, error) {
	c := &TokenCredentials{path: path, plaintext: plaintext}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	if err := c.read(fi); err != nil {
		return nil, err
	}
	c.checked = time.Now()
	return c, nil
}

func (c *TokenCredentials) read(fi os.FileInfo) error {
	f, err := os.Open(c.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxTokenBytes+2))
	if err != nil {
		return fmt.Errorf("token file %s: %w", c.path, err)
	}
	tok, _, _ := bytes.Cut(data, []byte("\n"))
	tok = bytes.TrimSpace(tok)
	if len(tok) < MinTokenBytes || len(tok) > MaxTokenBytes || bytes.ContainsAny(tok, " \t") {
		return fmt.Errorf("token file %s: want one token of %d to %d bytes on its first line", c.path, MinTokenBytes, MaxTokenBytes)
	}
	c.header = "Bearer " + string(tok)
	c.mod, c.size = fi.ModTime(), fi.Size()
	return nil
}

// GetRequestMetadata implements credentials.PerRPCCredentials. A token
// file that changed and no longer reads keeps the token read before.
func (c *TokenCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.checked) >= time.Second {
		c.checked = now
		if fi, err := os.Stat(c.path); err == nil && (!fi.ModTime().Equal(c.mod) || fi.Size() != c.size) {
			c.read(fi)
		}
	}
	return map[string]string{TokenKey: c.header}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (c *TokenCredentials) RequireTransportSecurity() bool { return !c.plaintext }

var _ credentials.PerRPCCredentials = (*TokenCredentials)(nil)
