// Package s3client builds the AWS S3 client chunkup uses everywhere, from a Config that
// says where S3 is. It is a leaf: the servers reach it through s3store (whose Config and
// NewClient are this package's), the test servers of internal/testenv directly, so that
// test support need not import a store package above it.
package s3client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sts"
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
	// SignRole, when set, is the ARN of a role whose credentials sign direct uploads'
	// URLs, assumed through STS on the store's endpoint with a session policy that
	// allows nothing but s3:PutObject on the bucket's objects (SigningCredentials).
	// A presigned UploadPart signs neither its body nor every header, and a store that
	// honours an unsigned x-amz-copy-source on it (MinIO) would otherwise make the part
	// a copy of any object the signer may read. Empty: the URLs are signed with the
	// client's own credentials. MinIO takes any ARN (its root user's session gets the
	// policy); AWS needs a role the client's credentials may assume. SignRoleAuto tries
	// AutoSignRole and falls back to the client's credentials where the store has no
	// STS or refuses it (the caller decides, after a first Retrieve).
	SignRole string
}

// SignRoleAuto as Config.SignRole: sign with AutoSignRole where the store lets chunkup
// assume it (MinIO), else with the client's own credentials.
const SignRoleAuto = "auto"

// AutoSignRole is the role SignRoleAuto assumes: MinIO takes any ARN for its root user.
const AutoSignRole = "arn:minio:iam:::role/chunkup-direct-uploads"

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return errors.New("s3: set both access key and secret key, or neither")
	}
	if c.MaxAttempts < 0 {
		return errors.New("s3: max attempts must not be negative")
	}
	if c.SignRole != "" && c.SignRole != SignRoleAuto && !strings.HasPrefix(c.SignRole, "arn:") {
		return fmt.Errorf("s3: the role that signs direct uploads, %q, is no ARN: give the role's ARN (arn:aws:iam::ACCOUNT:role/NAME on AWS), auto, or off", c.SignRole)
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
	awsCfg, err := load(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
			o.UsePathStyle = true
		}
	}), nil
}

// SigningCredentials returns the credentials direct uploads' URLs are signed with: with
// cfg.SignRole, that role's, assumed through STS with a session policy allowing only
// s3:PutObject on bucket's objects (an UploadPart; not the s3:GetObject a copy needs),
// cached and renewed before they expire; without, nil (the client's own).
//
// A presigned URL stops working when the credentials that signed it expire, so the
// credentials sign only while they have at least urlTTL (the URLs' lifetime) left: the
// session lasts an hour (the longest AWS grants a role by default) or urlTTL and a
// quarter of an hour, at most 12 hours (the longest any role may have), and is renewed
// urlTTL before it ends. A longer urlTTL is a *LifetimeError. For SignRoleAuto the
// store is asked first (probeRole): a refusal is a *NoRoleError.
func SigningCredentials(ctx context.Context, cfg Config, bucket string, urlTTL time.Duration) (aws.CredentialsProvider, error) {
	if cfg.SignRole == "" {
		return nil, nil
	}
	if err := CheckSignLifetime(urlTTL); err != nil {
		return nil, err
	}
	session := SignSession(urlTTL)
	role := cfg.SignRole
	if role == SignRoleAuto {
		role = AutoSignRole
		if err := probeRole(ctx, cfg, bucket, role, session); err != nil {
			return nil, err
		}
	}
	p := assumer(ctx, cfg, bucket, role, session)
	return aws.NewCredentialsCache(p, func(o *aws.CredentialsCacheOptions) { o.ExpiryWindow = urlTTL }), nil
}

// probeRole asks the store once whether chunkup may assume role, without the SDK's
// retries: an answer refusing it (a store without STS answers 4xx or 5xx) is a
// *NoRoleError at once. No answer at all (the store is down, or starting alongside
// chunkup) is not a refusal: falling back then would sign with chunkup's own
// credentials for the process's whole life on a store where a role was to be had, so
// the probe is repeated, for up to probePatience, and then it is the start's error.
func probeRole(ctx context.Context, cfg Config, bucket, role string, session time.Duration) error {
	cfg.MaxAttempts = 1
	wait := 250 * time.Millisecond
	deadline := time.Now().Add(probePatience)
	for {
		_, err := assumer(ctx, cfg, bucket, role, session).Retrieve(ctx)
		var answered *awshttp.ResponseError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &answered) && answered.HTTPStatusCode() > 0:
			return &NoRoleError{Err: err}
		case time.Now().Add(wait).After(deadline):
			return fmt.Errorf("the store did not answer whether chunkup may assume a role to sign direct uploads' URLs, for %v: %w", probePatience, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 4*time.Second)
	}
}

// probePatience is how long probeRole waits for a store that does not answer.
const probePatience = 30 * time.Second

// assumer assumes role for a session of d with the write-only policy on bucket.
func assumer(ctx context.Context, cfg Config, bucket, role string, d time.Duration) aws.CredentialsProvider {
	awsCfg, err := load(ctx, cfg)
	if err != nil {
		return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return aws.Credentials{}, err })
	}
	stsClient := sts.NewFromConfig(awsCfg, func(o *sts.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	policy := fmt.Sprintf(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:PutObject"],"Resource":["arn:aws:s3:::%s/*"]}]}`, bucket)
	return stscreds.NewAssumeRoleProvider(stsClient, role, func(o *stscreds.AssumeRoleOptions) {
		o.RoleSessionName = "chunkup-direct-uploads"
		o.Policy = aws.String(policy)
		o.Duration = d
	})
}

// CheckSignLifetime is a *LifetimeError when no role's session outlasts URLs valid for
// urlTTL.
func CheckSignLifetime(urlTTL time.Duration) error {
	if SignSession(urlTTL) > MaxSignSession {
		return &LifetimeError{TTL: urlTTL}
	}
	return nil
}

// LifetimeError: signed URLs meant to live longer than a role's session can.
type LifetimeError struct{ TTL time.Duration }

func (e *LifetimeError) Error() string {
	return fmt.Sprintf("signed URLs valid for %v cannot be signed by a role: its session must outlast the URLs by 15m and lasts at most %v, so they may live at most %v: make the URLs' lifetime at most that, or sign them with chunkup's own S3 credentials", e.TTL, MaxSignSession, MaxSignSession-15*time.Minute)
}

// NoRoleError: the store let SignRoleAuto assume no role.
type NoRoleError struct{ Err error }

func (e *NoRoleError) Error() string {
	return "the store lets chunkup assume no role: " + e.Err.Error()
}
func (e *NoRoleError) Unwrap() error { return e.Err }

// SignSession is how long a role's session signing URLs valid for urlTTL lasts: an
// hour (the longest AWS grants a role by default), or urlTTL and a quarter of an hour.
func SignSession(urlTTL time.Duration) time.Duration { return max(time.Hour, urlTTL+15*time.Minute) }

// MaxSignSession is the longest a role's session may last (AWS's limit for any role).
const MaxSignSession = 12 * time.Hour

// load is the AWS configuration of cfg.
func load(ctx context.Context, cfg Config) (aws.Config, error) {
	if err := cfg.Validate(); err != nil {
		return aws.Config{}, err
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
		return aws.Config{}, fmt.Errorf("s3: load config: %w", err)
	}
	return awsCfg, nil
}
