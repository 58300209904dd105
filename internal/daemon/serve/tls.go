package serve

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// GRPCTLS is the TLS of a daemon's gRPC listener, from the -grpc-tls-*
// flags both daemons take. The zero value serves plaintext.
type GRPCTLS struct {
	Cert, Key, ClientCA string
	// ClientSAN, when set, is a name every client certificate must carry,
	// checked at the handshake as the reference checks its
	// GRPC_CLIENT_TLS_SAN: x509 host name verification, so a DNS name (a
	// wildcard certificate matches it) or an IP address; never the common
	// name.
	ClientSAN string
}

// Register adds -grpc-tls-cert, -grpc-tls-key, -grpc-tls-client-ca and
// -grpc-tls-client-san to fs.
func (g *GRPCTLS) Register(fs *flag.FlagSet) {
	fs.StringVar(&g.Cert, "grpc-tls-cert", "", "PEM certificate for gRPC TLS on -grpc-addr (with -grpc-tls-key)")
	fs.StringVar(&g.Key, "grpc-tls-key", "", "PEM private key for gRPC TLS")
	fs.StringVar(&g.ClientCA, "grpc-tls-client-ca", "", "PEM CAs: require and verify client certificates on -grpc-addr (mTLS)")
	fs.StringVar(&g.ClientSAN, "grpc-tls-client-san", "", "with -grpc-tls-client-ca: the name (DNS or IP SAN) every client certificate must carry; others are refused at the handshake (the reference's GRPC_CLIENT_TLS_SAN)")
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
	if g.ClientSAN != "" && g.ClientCA == "" {
		// The reference ignores GRPC_CLIENT_TLS_SAN then; a name that is
		// never checked must not look as if it were.
		errs = append(errs, errors.New("-grpc-tls-client-san (GRPC_CLIENT_TLS_SAN) needs -grpc-tls-client-ca (GRPC_CLIENT_TLS_CACERT with GRPC_SERVER_USE_TLS=true): a name is checked on a client certificate"))
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
	if g.ClientSAN != "" {
		tc.VerifyConnection = clientNamed(g.ClientSAN)
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tc))}, nil
}

// clientNamed refuses, at the handshake, a client whose verified
// certificate does not carry san, as the reference's verifyClient does
// (it verifies each chain again with san as the DNS name, which adds only
// this check to the verification the handshake has done). VerifyConnection
// rather than VerifyPeerCertificate: it also runs on resumed sessions.
func clientNamed(san string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
			return errors.New("tls: no verified client certificate")
		}
		if err := cs.PeerCertificates[0].VerifyHostname(san); err != nil {
			return fmt.Errorf("tls: client certificate does not carry the name -grpc-tls-client-san asks for: %w", err)
		}
		return nil
	}
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
