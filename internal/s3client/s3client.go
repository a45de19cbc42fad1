// Package s3client builds the AWS S3 client chunkup uses everywhere, from a Config that
// says where S3 is. It is a leaf: the servers reach it through s3store (whose Config and
// NewClient are this package's), the test servers of internal/testenv directly, so that
// test support need not import a store package above it.
package s3client

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Config says where S3 is. The zero value uses AWS itself in us-east-1 with the SDK's
// standard credential chain.
type Config struct {
	// Endpoint is the base URL of an S3-compatible store (e.g. http://127.0.0.1:9000).
	// Empty means AWS S3. A custom endpoint implies path-style addressing.
	Endpoint string
	// PublicEndpoint is the store's base URL as clients reach it, for the URLs direct
	// uploads' clients put parts to, when it differs from Endpoint (a store behind a
	// proxy, or on a private network name). Empty means Endpoint.
	PublicEndpoint string
	// Region defaults to us-east-1.
	Region string
	// AccessKey and SecretKey, when both set, are used instead of the SDK's chain.
	AccessKey, SecretKey string
	// MaxAttempts is the SDK's per-call attempt budget for transient errors
	// (exponential backoff with jitter). Zero means 3.
	MaxAttempts int
	// NoChecksums turns off CRC32C checksums on chunks and objects (see
	// s3store.WithoutChecksums), for S3-compatible stores that refuse them. Zero:
	// checksums on.
	NoChecksums bool
	// NoConditionalWrites makes uploads with if_absent look at their key before writing
	// instead of writing with If-None-Match (see s3store.WithoutConditionalWrites), for
	// stores that ignore the header. Zero: conditional writes (a store that answers 501
	// to them is looked at from then on).
	NoConditionalWrites bool
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return errors.New("s3: set both access key and secret key, or neither")
	}
	if c.MaxAttempts < 0 {
		return errors.New("s3: max attempts must not be negative")
	}
	return nil
}

// New returns the AWS S3 client for cfg: the one client configuration chunkup uses
// everywhere, so that the server, the workers, the tests and the dev mode talk to S3
// with the same settings. The settings that matter are the checksum ones: since early
// 2025 the AWS SDK computes and sends CRC checksums on every request by default, which
// several S3-compatible stores reject or mishandle; chunkup sends the checksums it has
// itself, so it asks the SDK to add and validate checksums only where the S3 API
// requires them.
func New(ctx context.Context, cfg Config) (*s3.Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	attempts := cfg.MaxAttempts
	if attempts == 0 {
		attempts = 3
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(region),
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = attempts })
		}),
	}
	if cfg.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3: load config: %w", err)
	}
	return s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
			o.UsePathStyle = true
		}
	}), nil
}
