package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkup/chunkup/client"
	"github.com/chunkup/chunkup/server"
)

// testPKI is a CA with one server and one client certificate, written as PEM files.
type testPKI struct {
	dir                   string
	pool                  *x509.CertPool
	serverCert, serverKey string
	client                tls.Certificate
	caFile                string
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), pool: x509.NewCertPool()}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "chunkup test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p.pool.AddCert(ca)
	p.caFile = p.write(t, "ca.pem", "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	sDER, sKey := issue("server", 2, x509.ExtKeyUsageServerAuth)
	p.serverCert = p.write(t, "server.pem", "CERTIFICATE", sDER)
	sk, _ := x509.MarshalECPrivateKey(sKey)
	p.serverKey = p.write(t, "server-key.pem", "EC PRIVATE KEY", sk)
	cDER, cKey := issue("client", 3, x509.ExtKeyUsageClientAuth)
	p.client = tls.Certificate{Certificate: [][]byte{cDER}, PrivateKey: cKey}
	return p
}

func (p *testPKI) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMutualTLS serves gRPC over TLS requiring client certificates: a client with a
// certificate from the CA uploads; one without is refused; a plaintext client gets
// nowhere.
func TestMutualTLS(t *testing.T) {
	e := newEnv(t)
	pki := newPKI(t)
	cfg := e.config()
	cfg.TLS = server.TLSConfig{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.caFile}
	a := e.start(t, cfg)

	good := e.client(t, a, client.WithTLS(&tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}))
	data := randomBytes(5000, 90)
	up, err := good.Upload(ctx(t), reader(data))
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)

	noCert := e.client(t, a, client.WithTLS(&tls.Config{RootCAs: pki.pool}), client.WithRetry(1, time.Millisecond, time.Millisecond))
	if _, err := noCert.Get(ctx(t), up.UploadId); status.Code(err) != codes.Unavailable {
		t.Fatalf("without a client certificate: %v, want the handshake refused", err)
	}
	plain := e.client(t, a, client.WithRetry(1, time.Millisecond, time.Millisecond))
	if _, err := plain.Get(ctx(t), up.UploadId); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext client: %v, want it refused", err)
	}
}
