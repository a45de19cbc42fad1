package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
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

// TestHTTPOverTLS serves the HTTP address over TLS (--http-tls-cert): a tus upload over
// HTTPS stores the exact bytes, health answers over HTTPS, HTTP/1.1 is spoken even to a
// client that offers HTTP/2, a plain-HTTP request gets nowhere, and with a client CA a
// client without a certificate is refused.
func TestHTTPOverTLS(t *testing.T) {
	e := newEnv(t)
	pki := newPKI(t)
	cfg := e.config()
	cfg.HTTPTLS = server.TLSConfig{CertFile: pki.serverCert, KeyFile: pki.serverKey}
	a := e.start(t, cfg)
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}, ForceAttemptHTTP2: true}}
	base := "https://" + a.HTTPAddr()

	resp, err := https.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Proto != "HTTP/1.1" {
		t.Fatalf("GET /healthz over HTTPS: %s %s, want 200 over HTTP/1.1", resp.Proto, resp.Status)
	}

	data := randomBytes(3000, 91)
	req, err := http.NewRequestWithContext(ctx(t), http.MethodPost, base+"/files/", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Tus-Resumable", "1.0.0")
	req.Header.Set("Upload-Length", strconv.Itoa(len(data)))
	req.Header.Set("Content-Type", "application/offset+octet-stream")
	resp, err = https.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Upload-Offset") != strconv.Itoa(len(data)) || loc == "" {
		t.Fatalf("tus creation with upload over HTTPS: %s, Location %q, Upload-Offset %q", resp.Status, loc, resp.Header.Get("Upload-Offset"))
	}
	up, err := e.client(t, a).Wait(ctx(t), path.Base(loc))
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)

	if resp, err := http.Get("http://" + a.HTTPAddr() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("plain HTTP to the HTTPS address: %s, want it refused", resp.Status)
		}
	}

	t.Run("client certificates required", func(t *testing.T) {
		cfg := e.config("api")
		cfg.HTTPTLS = server.TLSConfig{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.caFile}
		m := e.start(t, cfg)
		with := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}}}
		resp, err := with.Get("https://" + m.HTTPAddr() + "/healthz")
		if err != nil {
			t.Fatalf("with a client certificate: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("with a client certificate: %s", resp.Status)
		}
		if resp, err := https.Get("https://" + m.HTTPAddr() + "/healthz"); err == nil {
			resp.Body.Close()
			t.Fatalf("without a client certificate: %s, want the handshake refused", resp.Status)
		}
	})
}
