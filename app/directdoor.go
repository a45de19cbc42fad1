package app

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/chunkup/chunkup/directdoor"
	"github.com/chunkup/chunkup/httpdoor"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/server"
	"github.com/chunkup/chunkup/upload"
)

// DirectDoorConfig configures the direct-to-S3 door (package directdoor).
type DirectDoorConfig struct {
	// Off turns the door off (and direct uploads with it).
	Off bool
	// Prefix is where it is mounted on HTTPAddr. Zero means "/s3/".
	Prefix string
}

// Validate checks the configuration.
func (c DirectDoorConfig) Validate() error {
	if c.Off || c.Prefix == "" {
		return nil
	}
	if c.Prefix == "/" || !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/") {
		return fmt.Errorf("direct door: the prefix %q must start and end with / and not be / alone (e.g. /s3/)", c.Prefix)
	}
	return nil
}

// directS3 is S3's side of direct uploads: the store, and the presigner for the store's
// public address.
type directS3 struct {
	*s3store.Store
	*s3store.Presigner
}

var _ upload.DirectS3 = directS3{}

// setupDirectDoor mounts the direct-to-S3 door over the upload core, with the API's
// credentials and rate limit, as the HTTP door's.
func (a *App) setupDirectDoor(mux *http.ServeMux, guard server.Guard) (err error) {
	prefix := cmp.Or(a.cfg.DirectDoor.Prefix, "/s3/")
	authenticate := httpAuthenticate(guard)
	endpoint := cmp.Or(a.cfg.S3.PublicEndpoint, a.cfg.S3.Endpoint, "https://s3."+cmp.Or(a.cfg.S3.Region, "us-east-1")+".amazonaws.com")
	var whole http.Handler
	if a.doorHTTP != nil {
		// Uppy's single PUT goes through the HTTP door as a creation at its creation
		// URL; the direct door authenticated it already.
		creation := strings.TrimSuffix(cmp.Or(a.cfg.HTTPDoor.Door.Prefix, "/files/"), "/")
		whole = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r = r.WithContext(httpdoor.Authenticated(r.Context()))
			r.URL.Path = creation
			a.doorHTTP.ServeHTTP(w, r)
		})
	}
	door := directdoor.New(a.core, directdoor.Config{
		Whole:     whole,
		PublicURL: a.cfg.HTTPDoor.Door.PublicURL,
		Prefix:    prefix,
		Authenticate: func(r *http.Request) (context.Context, error) {
			ctx, err := authenticate(r)
			if err != nil {
				return nil, err
			}
			return upload.WithCorrelationID(ctx, server.CorrelationID(ctx)), nil
		},
		ObjectURL: directdoor.ObjectURL(endpoint),
		// The HTTP door's origins: a page may use both doors, or neither.
		Origins: a.cfg.HTTPDoor.Door.CORS.Policy(a.cfg.HTTPDoor.Door.PublicURL, "GET, POST, PUT, DELETE, OPTIONS",
			"Authorization, Content-Type, X-Api-Key, X-Requested-With, X-Correlation-Id", "Retry-After, X-Correlation-Id, ETag, Location"),
		Logger: a.log.With("role", "directdoor"),
	})
	defer func() {
		// ServeMux panics on a pattern that conflicts with one registered already.
		if p := recover(); p != nil {
			err = fmt.Errorf("direct door: prefix %s: %v", prefix, p)
		}
	}()
	// A completion lists the parts and may read the object for its CRC32C: bounded, as
	// every request of the door, so that a stuck store does not hold the connection.
	mux.Handle(prefix, http.TimeoutHandler(door, 5*time.Minute, `{"error":"the request took too long; retry it"}`))
	// A single PUT carries a whole file: the HTTP door's idle and minimum-rate timeouts
	// bound it, as they bound any upload through it, not a deadline for the whole.
	mux.Handle("PUT "+prefix+"put", door)
	mux.Handle("POST "+prefix+"put", door)
	return nil
}
