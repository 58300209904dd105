package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// GRPCTLS is the TLS of a daemon's gRPC listener, from the -grpc-tls-*
// flags both daemons take. The zero value serves plaintext.
type GRPCTLS struct{ Cert, Key, ClientCA string }

// Register adds -grpc-tls-cert, -grpc-tls-key and -grpc-tls-client-ca to fs.
func (g *GRPCTLS) Register(fs *flag.FlagSet) {
	fs.StringVar(&g.Cert, "grpc-tls-cert", "", "PEM certificate for gRPC TLS on -grpc-addr (with -grpc-tls-key)")
	fs.StringVar(&g.Key, "grpc-tls-key", "", "PEM private key for gRPC TLS")
	fs.StringVar(&g.ClientCA, "grpc-tls-client-ca", "", "PEM CAs: require and verify client certificates on -grpc-addr (mTLS)")
}

// Validate reports flags given without the ones they need.
func (g *GRPCTLS) Validate() error {
	var errs []error
	if (g.Cert == "") != (g.Key == "") {
		errs = append(errs, errors.New("-grpc-tls-cert and -grpc-tls-key go together"))
	}
	if g.ClientCA != "" && g.Cert == "" {
		errs = append(errs, errors.New("-grpc-tls-client-ca needs -grpc-tls-cert and -grpc-tls-key"))
	}
	return errors.Join(errs...)
}

// ServerOptions are the gRPC server options that serve g: none for
// plaintext.
func (g *GRPCTLS) ServerOptions() ([]grpc.ServerOption, error) {
	if g.Cert == "" {
		return nil, nil
	}
	tc, err := serverTLS("-grpc-tls", g.Cert, g.Key, g.ClientCA)
	if err != nil {
		return nil, err
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tc))}, nil
}

// serverTLS is the TLS of a gRPC listener: certFile and keyFile serve it;
// with clientCAFile, clients must present a certificate those CAs signed
// (mTLS). flag names the flags for errors ("-grpc-tls").
func serverTLS(flag, certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s-cert, %s-key: %w", flag, flag, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		if tc.ClientCAs, err = certPool(clientCAFile); err != nil {
			return nil, fmt.Errorf("%s-client-ca: %w", flag, err)
		}
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// ClientTLS is the TLS of a gRPC client: the server is verified against
// caFile (the system's roots when empty) under serverName (the dialled
// host when empty); with certFile and keyFile the client presents that
// certificate (mTLS). flag names the flags for errors ("-upstream-tls").
func ClientTLS(flag, caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	var err error
	if caFile != "" {
		if tc.RootCAs, err = certPool(caFile); err != nil {
			return nil, fmt.Errorf("%s-ca: %w", flag, err)
		}
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s-cert, %s-key: %w", flag, flag, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificates", file)
	}
	return pool, nil
}

// PeerNamed returns a check that a gRPC caller presented a verified client
// certificate with one of names among its DNS names, URI names (a SPIFFE
// ID, say) or common name.
func PeerNamed(names []string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		p, ok := peer.FromContext(ctx)
		if !ok {
			return false
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
			return false
		}
		leaf := info.State.VerifiedChains[0][0]
		if slices.Contains(names, leaf.Subject.CommonName) {
			return true
		}
		for _, n := range leaf.DNSNames {
			if slices.Contains(names, n) {
				return true
			}
		}
		for _, u := range leaf.URIs {
			if slices.Contains(names, u.String()) {
				return true
			}
		}
		return false
	}
}
