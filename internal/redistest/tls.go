package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// WithTLS makes every server that holds data listen for TLS only: the
// harness makes a test CA and a certificate for 127.0.0.1 signed by it,
// and starts redis-server with --port 0 and --tls-port, on the port Addr
// names, without asking clients for certificates (--tls-auth-clients no).
// Cluster nodes also talk to each other and replicate over TLS
// (--tls-cluster yes, --tls-replication yes). Clients connect with
// [Server.TLSConfig] or [ClusterServer.TLSConfig]; [Server.Do] and the
// harness's own checks use TLS too. [Sentinel] refuses this option.
func WithTLS() Option {
	return optionFunc(func(c *config) { c.tls = true })
}

// TLSConfig returns a new client configuration trusting the test CA of a
// server started WithTLS, nil without it. Its ServerName is empty, so that
// crypto/tls checks the certificate against the address dialed, 127.0.0.1.
func (s *Server) TLSConfig() *tls.Config {
	if s.tlsConfig == nil {
		return nil
	}
	return s.tlsConfig.Clone()
}

// TLSConfig returns a new client configuration trusting the test CA of a
// cluster started WithTLS, nil without it; every node's certificate is
// signed by that CA.
func (c *ClusterServer) TLSConfig() *tls.Config {
	if c.tlsConfig == nil {
		return nil
	}
	return c.tlsConfig.Clone()
}

// The files a TLS server reads, in its directory.
const (
	tlsCAFile   = "ca.crt"
	tlsCertFile = "redis.crt"
	tlsKeyFile  = "redis.key"
)

// certs are the PEM files of one start's test CA and server certificate,
// shared by all its servers, and the client configuration trusting the CA.
type certs struct {
	ca, cert, key []byte
	client        *tls.Config
}

// certLifetime is how long the test certificates are valid, from an hour
// before they are made, so that a clock a little behind does not reject
// them.
const certLifetime = 24 * time.Hour

// newCerts makes a CA and a certificate for 127.0.0.1, both ECDSA P-256.
// The certificate serves both ends of a TLS connection: cluster nodes
// present it to each other as clients too.
func newCerts() (*certs, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("redistest: WithTLS: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("redistest: WithTLS: CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("redistest: WithTLS: CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("redistest: WithTLS: server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("redistest: WithTLS: server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("redistest: WithTLS: server key: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	return &certs{
		ca:     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		cert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		client: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	}, nil
}

// write puts the files into dir, the key readable by its owner only.
func (c *certs) write(dir string) error {
	for _, f := range []struct {
		name string
		data []byte
		perm os.FileMode
	}{
		{tlsCAFile, c.ca, 0o644},
		{tlsCertFile, c.cert, 0o644},
		{tlsKeyFile, c.key, 0o600},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, f.perm); err != nil {
			return fmt.Errorf("redistest: WithTLS: %w", err)
		}
	}
	return nil
}

// tlsArgs is the command line that moves a server listening on port to
// TLS, with the files write put into dir.
func tlsArgs(port int, dir string) []string {
	return []string{
		"--port", "0",
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, tlsCertFile),
		"--tls-key-file", filepath.Join(dir, tlsKeyFile),
		"--tls-ca-cert-file", filepath.Join(dir, tlsCAFile),
		"--tls-auth-clients", "no",
	}
}
