// Package testpki makes a throwaway certificate authority and certificates
// for tests of sluice's TLS and mTLS: the files the daemons' -*-tls-* flags
// take, written to a test's temporary directory. It is for tests only.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority whose files live in Dir: ca.pem, and a
// NAME.pem and NAME-key.pem pair per certificate issued. It is not safe
// for concurrent use.
type CA struct {
	Dir    string
	Pool   *x509.CertPool // holds the CA, for clients that verify against it
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

// New makes a CA in a temporary directory of t.
func New(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Dir: t.TempDir(), Pool: x509.NewCertPool(), cert: cert, key: key, serial: 1}
	ca.Pool.AddCert(cert)
	ca.write(t, "ca.pem", "CERTIFICATE", der)
	return ca
}

// Path is the path of one of the CA's files.
func (ca *CA) Path(name string) string { return filepath.Join(ca.Dir, name) }

// Issue writes NAME.pem and NAME-key.pem: a certificate for 127.0.0.1 and
// the DNS names given (the first is also its common name), good for both
// server and client authentication.
func (ca *CA) Issue(t testing.TB, name string, dnsNames ...string) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: dnsNames,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if len(dnsNames) > 0 {
		leaf.Subject.CommonName = dnsNames[0]
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ca.write(t, name+".pem", "CERTIFICATE", der)
	ca.write(t, name+"-key.pem", "EC PRIVATE KEY", keyDER)
	return ca.Path(name + ".pem"), ca.Path(name + "-key.pem")
}

func (ca *CA) write(t testing.TB, name, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(ca.Path(name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
