package peerauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

const (
	tokenA = "0123456789abcdef-sidecar-a"
	tokenB = "fedcba9876543210-sidecar-b"
)

func writeTokens(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// call is the context of a gRPC call: over TLS with the verified leaf
// cert (nil: plaintext), with the token (empty: none).
func call(cert *x509.Certificate, tls bool, tok string) context.Context {
	ctx := context.Background()
	p := &peer.Peer{}
	if tls || cert != nil {
		info := credentials.TLSInfo{}
		if cert != nil {
			info.State.VerifiedChains = [][]*x509.Certificate{{cert}}
		}
		p.AuthInfo = info
	}
	ctx = peer.NewContext(ctx, p)
	if tok != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(TokenKey, "Bearer "+tok))
	}
	return ctx
}

func cert(cn string, dns ...string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: dns}
}

func TestAuthenticate(t *testing.T) {
	tokens := writeTokens(t, "# proxies\nsidecar-a "+tokenA+"\n\nsidecar-b   "+tokenB+"\n")
	spiffe := cert("x")
	spiffe.URIs = []*url.URL{{Scheme: "spiffe", Host: "example.org", Path: "/sidecar"}}
	cases := []struct {
		name    string
		opts    Options
		ctx     context.Context
		want    string
		refusal Refusal
	}{
		{"nothing configured: no caller is a proxy", Options{}, call(nil, true, tokenA), "", NotConfigured},
		{"nothing sent", Options{TokenFile: tokens}, call(nil, true, ""), "", NoCredentials},
		{"a token over TLS", Options{TokenFile: tokens}, call(nil, true, tokenB), "sidecar-b", ""},
		{"a wrong token", Options{TokenFile: tokens}, call(nil, true, tokenA+"x"), "", BadToken},
		{"a prefix of a token", Options{TokenFile: tokens}, call(nil, true, tokenA[:16]), "", BadToken},
		{"a token in the clear", Options{TokenFile: tokens}, call(nil, false, tokenA), "", TokenWithoutTLS},
		{"a token in the clear, allowed by name", Options{TokenFile: tokens, PlaintextTokens: true}, call(nil, false, tokenA), "sidecar-a", ""},
		{"a listed certificate by DNS name", Options{Names: []string{"sidecar-a", "sidecar-b"}}, call(cert("x", "sidecar-b"), true, ""), "sidecar-b", ""},
		{"a listed certificate by common name", Options{Names: []string{"sidecar-a"}}, call(cert("sidecar-a"), true, ""), "sidecar-a", ""},
		{"a listed certificate by URI", Options{Names: []string{"spiffe://example.org/sidecar"}}, call(spiffe, true, ""), "spiffe://example.org/sidecar", ""},
		{"an unlisted certificate", Options{Names: []string{"sidecar-a"}}, call(cert("intruder", "intruder"), true, ""), "", UnknownCertificate},
		{"an unlisted certificate with a good token", Options{Names: []string{"sidecar-a"}, TokenFile: tokens}, call(cert("intruder"), true, tokenA), "sidecar-a", ""},
		{"a certificate and names, but plaintext", Options{Names: []string{"sidecar-a"}}, call(nil, false, ""), "", NoCredentials},
		{"any caller, by name", Options{TrustAnyCaller: true}, call(nil, false, ""), "", ""},
		{"in process", Options{}, InProcess(context.Background(), "cached"), "cached", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := New(c.opts)
			if err != nil {
				t.Fatal(err)
			}
			name, refusal := a.Authenticate(c.ctx)
			if name != c.want || refusal != c.refusal {
				t.Errorf("Authenticate = %q, %q; want %q, %q", name, refusal, c.want, c.refusal)
			}
		})
	}
}

func TestBadTokenFiles(t *testing.T) {
	cases := map[string]string{
		"no tokens":     "# nothing\n",
		"no token":      "sidecar-a\n",
		"short token":   "sidecar-a short\n",
		"three fields":  "sidecar-a " + tokenA + " extra\n",
		"name twice":    "a " + tokenA + "\na " + tokenB + "\n",
		"name too long": strings.Repeat("n", MaxNameBytes+1) + " " + tokenA + "\n",
		"file too big":  strings.Repeat("# padding\n", MaxTokenFileBytes/10+1) + "a " + tokenA + "\n",
	}
	for name, text := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := New(Options{TokenFile: writeTokens(t, text)})
			if err == nil {
				t.Fatal("New: no error")
			}
			if strings.Contains(err.Error(), tokenA) || strings.Contains(err.Error(), tokenB) {
				t.Errorf("the error shows a token: %v", err)
			}
		})
	}
	if _, err := New(Options{TrustAnyCaller: true, Names: []string{"a"}}); err == nil {
		t.Error("TrustAnyCaller with Names: no error")
	}
}

// TestWatchReloads: a changed token file takes effect without a restart;
// a broken one leaves the tokens read before in force.
func TestWatchReloads(t *testing.T) {
	path := writeTokens(t, "sidecar-a "+tokenA+"\n")
	a, err := New(Options{TokenFile: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.Watch(ctx); err != nil {
		t.Fatal(err)
	}
	replace := func(text string) {
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not seen within 10s: %s", what)
			}
		}
	}
	replace("sidecar-b " + tokenB + "\n")
	waitFor("token b accepted after the file changed", func() bool {
		n, _ := a.Authenticate(call(nil, true, tokenB))
		return n == "sidecar-b"
	})
	if n, _ := a.Authenticate(call(nil, true, tokenA)); n != "" {
		t.Errorf("token a, removed from the file, still names %q", n)
	}
	replace("broken\n")
	// The broken file is refused: b stays. (Wait for a reload to have
	// happened by replacing once more with a file naming both.)
	replace("sidecar-b " + tokenB + "\nsidecar-c " + tokenA + "\n")
	waitFor("token a accepted again as sidecar-c", func() bool {
		n, _ := a.Authenticate(call(nil, true, tokenA))
		return n == "sidecar-c"
	})
}

// The verified chain is what counts: a TLS connection whose client
// presented no certificate is plaintext as far as names go.
func TestNoVerifiedChain(t *testing.T) {
	a, _ := New(Options{Names: []string{"sidecar-a"}})
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{}}})
	if n, r := a.Authenticate(ctx); n != "" || r != NoCredentials {
		t.Errorf("Authenticate = %q, %q; want no credentials", n, r)
	}
}

func TestNilKnowsOnlyThisProcess(t *testing.T) {
	var a *Authenticator
	if n, r := a.Authenticate(call(nil, true, tokenA)); n != "" || r != NotConfigured {
		t.Errorf("nil: Authenticate = %q, %q; want not configured", n, r)
	}
	if n, r := a.Authenticate(InProcess(context.Background(), "me")); n != "me" || r != "" {
		t.Errorf("nil, in process: Authenticate = %q, %q; want me", n, r)
	}
}
