package s3store_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
)

// TestSigningCredentialsOutlastTheURLs: a presigned URL dies with the credentials that
// signed it, so a role's credentials sign only while their session has at least the
// URLs' lifetime left (they are renewed that long before the session ends), and a
// lifetime no role's session can cover is refused.
func TestSigningCredentialsOutlastTheURLs(t *testing.T) {
	m := testenv.StartMinIO(t)
	ctx := testenv.Context(t, time.Minute)
	cfg := m.S3Config()
	cfg.SignRole = "arn:minio:iam:::role/chunkup-test"
	for _, ttl := range []time.Duration{15 * time.Minute, 50 * time.Minute, 3 * time.Hour} {
		creds, err := s3store.SigningCredentials(ctx, cfg, "bkt", ttl)
		if err != nil {
			t.Fatal(err)
		}
		c, err := creds.Retrieve(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The cache hands them out until ttl before the session ends: a URL signed at
		// the last moment still lives its whole lifetime.
		session := max(time.Hour, ttl+15*time.Minute)
		left := time.Until(c.Expires)
		if !c.CanExpire || left > session-ttl+5*time.Second || left < session-ttl-time.Minute {
			t.Fatalf("URLs valid for %v: the credentials sign for %v more, want %v (a session of %v renewed %v before its end)", ttl, left, session-ttl, session, ttl)
		}
	}
	for _, role := range []string{cfg.SignRole, s3store.SignRoleAuto} {
		cfg.SignRole = role
		_, err := s3store.SigningCredentials(ctx, cfg, "bkt", 12*time.Hour)
		var lifetime *s3store.LifetimeError
		if !errors.As(err, &lifetime) || !strings.Contains(err.Error(), "at most 11h45m0s") {
			t.Fatalf("URLs valid for 12h signed by role %s: %v, want a refusal saying how long they may live", role, err)
		}
	}
}

// TestAutoRoleWaitsForTheStore: with auto, a store that does not answer (down, or
// starting alongside chunkup) is asked again rather than taken for one without STS:
// falling back would sign with chunkup's own credentials for the process's whole life,
// and a signed part URL on MinIO could then copy another tenant's object. A store that
// answers with a refusal is a NoRoleError at once.
func TestAutoRoleWaitsForTheStore(t *testing.T) {
	m := testenv.StartMinIO(t)
	ctx := testenv.Context(t, time.Minute)
	cfg := m.S3Config()
	cfg.SignRole = s3store.SignRoleAuto
	m.Stop()
	started := make(chan struct{})
	go func() {
		defer close(started)
		time.Sleep(time.Second) // the store comes up while the probe is asking
		m.Start(t)
	}()
	creds, err := s3store.SigningCredentials(ctx, cfg, "bkt", 15*time.Minute)
	<-started
	if err != nil {
		t.Fatalf("auto against a store that came up a second later: %v, want the role", err)
	}
	if c, err := creds.Retrieve(ctx); err != nil || c.SessionToken == "" {
		t.Fatalf("the role's credentials: %v (session token %q)", err, c.SessionToken)
	}

	// An endpoint that answers every request 405, as versitygw answers AssumeRole.
	noSTS := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}))
	t.Cleanup(noSTS.Close)
	refusing := cfg
	refusing.Endpoint = noSTS.URL
	_, err = s3store.SigningCredentials(ctx, refusing, "bkt", 15*time.Minute)
	var noRole *s3store.NoRoleError
	if !errors.As(err, &noRole) {
		t.Fatalf("auto against an endpoint that answers without STS: %v, want a NoRoleError", err)
	}
}
