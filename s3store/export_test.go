package s3store

// SetStrayListPageSize makes AbortStrays list n multipart uploads per page, until the
// returned function restores the default.
func SetStrayListPageSize(n int32) (restore func()) {
	old := strayListPageSize
	strayListPageSize = n
	return func() { strayListPageSize = old }
}
