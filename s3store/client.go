package s3store

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/internal/s3client"
)

// Config says where S3 is (see s3client.Config). It is defined in internal/s3client so
// that internal/testenv can describe its MinIO without importing this package.
type Config = s3client.Config

// StoreOptions are the Store options cfg asks for.
func StoreOptions(cfg Config) []Option {
	var opts []Option
	if cfg.NoChecksums {
		opts = append(opts, WithoutChecksums())
	}
	if cfg.NoConditionalWrites {
		opts = append(opts, WithoutConditionalWrites())
	}
	return opts
}

// NewClient returns the AWS S3 client for cfg, the one client configuration chunkup
// uses everywhere (see s3client.New).
func NewClient(ctx context.Context, cfg Config) (*s3.Client, error) {
	return s3client.New(ctx, cfg)
}

// LifetimeError and NoRoleError are SigningCredentials' errors (see s3client's).
type (
	LifetimeError = s3client.LifetimeError
	NoRoleError   = s3client.NoRoleError
)

// SignSession is how long a role's session signing URLs valid for urlTTL lasts (see
// s3client.SignSession).
func SignSession(urlTTL time.Duration) time.Duration { return s3client.SignSession(urlTTL) }

// CheckSignLifetime: see s3client.CheckSignLifetime.
func CheckSignLifetime(urlTTL time.Duration) error { return s3client.CheckSignLifetime(urlTTL) }

// SigningCredentials are the credentials direct uploads' URLs are signed with (see
// s3client.SigningCredentials): nil for the client's own.
func SigningCredentials(ctx context.Context, cfg Config, bucket string, urlTTL time.Duration) (aws.CredentialsProvider, error) {
	return s3client.SigningCredentials(ctx, cfg, bucket, urlTTL)
}

// SignRoleAuto: see s3client.SignRoleAuto.
const SignRoleAuto = s3client.SignRoleAuto
