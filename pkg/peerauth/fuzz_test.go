package peerauth

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
)

// FuzzTokens: whatever a token file holds and whatever a caller sends
// as its token, reading the file never panics and its error never shows a
// token; a read file names each proxy once, within the bounds; and a
// caller is named only for a token of the file, sent exactly
// ("Bearer " and the token), as the proxy on the token's line.
func FuzzTokens(f *testing.F) {
	f.Add("sidecar-a 0123456789abcdef0123\n# c\nsidecar-b fedcba9876543210fedc\n", "Bearer 0123456789abcdef0123")
	f.Add("a  0123456789abcdef0123  \n", "Bearer  0123456789abcdef0123")
	f.Add("a 0123456789abcdef0123\r\n", "0123456789abcdef0123")
	f.Add("a\t0123456789abcdef0123\n", "Bearer 0123456789abcdef0123\x00")
	f.Add(strings.Repeat("x", 70)+" 0123456789abcdef0123\n", "Bearer ")
	f.Fuzz(func(t *testing.T, file, sent string) {
		ts, err := parseTokens("tokens", []byte(file))
		// The lines as the file format reads them: "name token".
		lines := map[string]string{} // token → name
		for line := range strings.SplitSeq(file, "\n") {
			text := strings.TrimSpace(line)
			if name, tok, ok := strings.Cut(text, " "); ok && !strings.HasPrefix(text, "#") {
				lines[strings.TrimSpace(tok)] = name
			}
		}
		if err != nil {
			for tok := range lines {
				if len(tok) >= MinTokenBytes && strings.Contains(err.Error(), tok) {
					t.Fatalf("the error shows a token: %v", err)
				}
			}
			return
		}
		a := &Authenticator{opts: Options{TokenFile: "tokens", PlaintextTokens: true}}
		a.tokens.Store(&ts)
		seen := map[string]bool{}
		for _, tk := range ts {
			if seen[tk.name] || len(tk.name) > MaxNameBytes {
				t.Fatalf("proxy %q named twice or past %d bytes", tk.name, MaxNameBytes)
			}
			seen[tk.name] = true
		}
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(TokenKey, sent))
		name, refusal := a.Authenticate(ctx)
		tok, bearer := strings.CutPrefix(sent, "Bearer ")
		want, known := lines[tok]
		switch {
		case refusal == "" && (!bearer || !known || name != want):
			t.Fatalf("%q named %q; want a refusal (or the proxy %q)", sent, name, want)
		case refusal != "" && bearer && known && len(tok) >= MinTokenBytes && !strings.ContainsAny(tok, " \t"):
			t.Fatalf("%q refused (%s); want proxy %q", sent, refusal, want)
		}
	})
}
