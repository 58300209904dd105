// Package peerauth says which proxy is calling one of sluice's gRPC
// services, for the calls only a proxy of the operator's may make:
// recording hits a sidecar already admitted, reporting demand, receiving
// allowances (and every later protocol between proxies and servers). A
// caller is known by a name: the one its verified client certificate
// carries (mTLS, the names listed in Options.Names), or the one the
// operator's token file gives the bearer token it sends. Anyone else is an
// ordinary client, whatever metadata it sets.
//
// The package reads gRPC's peer and metadata and nothing of sluice's own.
package peerauth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// TokenKey is the gRPC metadata a proxy's token travels in, as
// "Bearer <token>": the standard header for bearer tokens.
const TokenKey = "authorization"

// Refusal says why a caller is not a known proxy: the label of the
// metric that counts refusals. The empty Refusal accepts. A plain value,
// safe to share between goroutines.
type Refusal string

const (
	// NotConfigured: the server is told of no proxy at all (no names, no
	// token file, not trusting any caller).
	NotConfigured Refusal = "not_configured"
	// NoCredentials: neither a certificate nor a token.
	NoCredentials Refusal = "no_credentials"
	// UnknownCertificate: a verified client certificate whose names are
	// not listed.
	UnknownCertificate Refusal = "unknown_certificate"
	// BadToken: a token the file does not hold, or not a bearer token.
	BadToken Refusal = "bad_token"
	// TokenWithoutTLS: a token sent in the clear, where the operator did
	// not allow it.
	TokenWithoutTLS Refusal = "token_without_tls"
)

// Bounds on the token file: a token file is an operator's, but a wrong
// path (a log, a dump) must not be read whole.
const (
	MaxTokenFileBytes = 64 << 10
	MaxNameBytes      = 64
	MinTokenBytes     = 16
	MaxTokenBytes     = 4096
)

// Options say which callers are proxies. With none of Names, TokenFile and
// TrustAnyCaller set, no caller is.
//
// A plain value, safe to share between goroutines; New copies it.
type Options struct {
	// Names are the names (DNS or URI SAN, or common name) a verified
	// client certificate must carry for its caller to be a proxy, known by
	// the first of them it carries.
	Names []string
	// TokenFile holds one proxy a line, "name token", blank lines and
	// lines starting with # ignored: a caller sending "Bearer token" in
	// TokenKey is the proxy name. Read by New, and by Reload.
	TokenFile string
	// PlaintextTokens accepts tokens from callers on connections without
	// TLS (where anyone on the path can read and replay them): a named
	// opt-out for a network the operator trusts.
	PlaintextTokens bool
	// TrustAnyCaller makes every caller a proxy, named "": the opt-out for
	// a network only proxies reach. Loud by name; nothing else is checked.
	TrustAnyCaller bool
	// Logger gets token file reloads. Default: discard.
	Logger *slog.Logger
}

// Authenticator tells proxies from other callers. It is safe for
// concurrent use. A nil *Authenticator knows no proxy but this process
// itself (InProcess).
type Authenticator struct {
	opts   Options
	tokens atomic.Pointer[[]token]
}

// token is one line of the token file, held as its digest: comparing
// digests of equal length in constant time leaks neither a token's bytes
// nor its length.
type token struct {
	name   string
	digest [sha256.Size]byte
}

// New reads the token file, if any, and returns an Authenticator.
func New(o Options) (*Authenticator, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.TrustAnyCaller && (len(o.Names) > 0 || o.TokenFile != "") {
		return nil, errors.New("peerauth: trusting any caller leaves nothing for names or tokens to do")
	}
	for _, n := range o.Names {
		if n == "" || len(n) > MaxNameBytes*4 {
			return nil, fmt.Errorf("peerauth: certificate name %.64q: want 1 to %d bytes", n, MaxNameBytes*4)
		}
	}
	a := &Authenticator{opts: o}
	empty := []token{}
	a.tokens.Store(&empty)
	if o.TokenFile != "" {
		if err := a.Reload(); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Enabled reports whether any caller can be a proxy.
func (a *Authenticator) Enabled() bool {
	return a != nil && (a.opts.TrustAnyCaller || len(a.opts.Names) > 0 || a.opts.TokenFile != "")
}

// Reload reads the token file again; on an error the tokens read before
// stay in force.
func (a *Authenticator) Reload() error {
	ts, err := readTokens(a.opts.TokenFile)
	if err != nil {
		return err
	}
	a.tokens.Store(&ts)
	a.opts.Logger.Info("proxy tokens loaded", "file", a.opts.TokenFile, "proxies", len(ts))
	return nil
}

func readTokens(path string) ([]token, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxTokenFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return parseTokens(path, data)
}

// parseTokens reads the token file path's contents, data.
func parseTokens(path string, data []byte) ([]token, error) {
	if len(data) > MaxTokenFileBytes {
		return nil, fmt.Errorf("token file %s: larger than %d bytes", path, MaxTokenFileBytes)
	}
	var ts []token
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, MaxTokenFileBytes+1)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		// The message names the line, never its content: it holds a secret.
		name, tok, ok := strings.Cut(text, " ")
		tok = strings.TrimSpace(tok)
		switch {
		case !ok || strings.ContainsAny(tok, " \t"):
			return nil, fmt.Errorf("%s:%d: want \"name token\"", path, line)
		case len(name) > MaxNameBytes:
			return nil, fmt.Errorf("%s:%d: a name of more than %d bytes", path, line, MaxNameBytes)
		case len(tok) < MinTokenBytes || len(tok) > MaxTokenBytes:
			return nil, fmt.Errorf("%s:%d: a token must be %d to %d bytes (e.g. openssl rand -hex 32)", path, line, MinTokenBytes, MaxTokenBytes)
		case slices.ContainsFunc(ts, func(t token) bool { return t.name == name }):
			return nil, fmt.Errorf("%s:%d: proxy %q named twice", path, line, name)
		}
		ts = append(ts, token{name: name, digest: sha256.Sum256([]byte(tok))})
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("token file %s: no tokens", path)
	}
	return ts, nil
}

// inProcessKey marks a context as a call made within this process.
type inProcessKey struct{}

// InProcess marks ctx as a call this process makes to itself (the
// server's cached mode records to its own store through the service): a
// proxy named name, whatever the options say. Nothing from the network
// can set it.
func InProcess(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, inProcessKey{}, name)
}

// Authenticate names the proxy calling with ctx, or says why the caller
// is not one.
func (a *Authenticator) Authenticate(ctx context.Context) (name string, refusal Refusal) {
	if n, ok := ctx.Value(inProcessKey{}).(string); ok {
		return n, ""
	}
	if !a.Enabled() {
		return "", NotConfigured
	}
	if a.opts.TrustAnyCaller {
		return "", ""
	}
	p, _ := peer.FromContext(ctx)
	tlsInfo, isTLS := tlsOf(p)
	if isTLS && len(a.opts.Names) > 0 && len(tlsInfo.State.VerifiedChains) > 0 && len(tlsInfo.State.VerifiedChains[0]) > 0 {
		if n, ok := certName(tlsInfo, a.opts.Names); ok {
			return n, ""
		}
		refusal = UnknownCertificate
	}
	v := metadata.ValueFromIncomingContext(ctx, TokenKey)
	switch {
	case len(v) == 0 && refusal == "":
		return "", NoCredentials
	case len(v) == 0:
		return "", refusal
	case !isTLS && !a.opts.PlaintextTokens:
		return "", TokenWithoutTLS
	}
	if n, ok := a.match(v[0]); ok {
		return n, ""
	}
	return "", BadToken
}

// match finds the proxy whose token is sent in value ("Bearer token"),
// comparing with every token held, in constant time each.
func (a *Authenticator) match(value string) (string, bool) {
	tok, ok := strings.CutPrefix(value, "Bearer ")
	if !ok || len(tok) > MaxTokenBytes {
		return "", false
	}
	d := sha256.Sum256([]byte(tok))
	found := -1
	ts := *a.tokens.Load()
	for i := range ts {
		if subtle.ConstantTimeCompare(d[:], ts[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return ts[found].name, true
}

func tlsOf(p *peer.Peer) (credentials.TLSInfo, bool) {
	if p == nil {
		return credentials.TLSInfo{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	return info, ok
}

// certName is the first of names the verified leaf certificate carries as
// its common name, a DNS name or a URI.
func certName(info credentials.TLSInfo, names []string) (string, bool) {
	leaf := info.State.VerifiedChains[0][0]
	for _, n := range names {
		if leaf.Subject.CommonName == n || slices.Contains(leaf.DNSNames, n) ||
			slices.ContainsFunc(leaf.URIs, func(u *url.URL) bool { return u.String() == n }) {
			return n, true
		}
	}
	return "", false
}
