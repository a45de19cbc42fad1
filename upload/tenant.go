package upload

import "context"

type tenantKey struct{}

// WithTenant returns ctx carrying the caller's tenant: a door authenticates its
// request and says whose it is; the core keeps each tenant to its own uploads.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFrom returns the caller's tenant ("" when authentication is off).
func TenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

type correlationKey struct{}

// WithCorrelationID returns ctx carrying the correlation id of the caller's request,
// which an upload it creates records (CreateRequest.CorrelationID, when set, wins).
func WithCorrelationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationKey{}, id)
}

// CorrelationIDFrom returns the correlation id WithCorrelationID put in ctx, or "".
func CorrelationIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey{}).(string)
	return id
}
