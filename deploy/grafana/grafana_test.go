package grafana

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestDashboardLoads: the dashboard is valid JSON, each panel has a unique id and a
// query, uses the datasource variable, and every query names at least one chunkup
// series. (Whether each series exists in a live /metrics is test/e2e's
// TestDashboardMetrics.)
func TestDashboardLoads(t *testing.T) {
	if !json.Valid(Dashboard) {
		t.Fatal("chunkup.json is not valid JSON")
	}
	qs, err := Queries(Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 20 {
		t.Fatalf("%d queries, want the whole dashboard", len(qs))
	}
	for _, q := range qs {
		if strings.HasPrefix(q.Where, "variable ") {
			continue
		}
		if len(MetricNames(q.Expr)) == 0 && !strings.Contains(q.Expr, "$staged_bytes_budget") {
			t.Errorf("%s: %q queries no chunkup series", q.Where, q.Expr)
		}
	}
	var d struct {
		Panels []struct {
			ID         int             `json:"id"`
			Type       string          `json:"type"`
			Title      string          `json:"title"`
			Datasource json.RawMessage `json:"datasource"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(Dashboard, &d); err != nil {
		t.Fatal(err)
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type != "row" && !strings.Contains(string(p.Datasource), "${datasource}") {
			t.Errorf("panel %q does not use the datasource variable: %s", p.Title, p.Datasource)
		}
	}
}

func TestMetricNames(t *testing.T) {
	got := MetricNames(`histogram_quantile(0.99, sum by (le) (rate(chunkup_chunk_ack_duration_seconds_bucket{job=~"$job", x="chunkup_not_this"}[$__rate_interval]))) / sum(rate(grpc_server_handled_total[5m])) + chunkup_uploads_active`)
	want := []string{"chunkup_chunk_ack_duration_seconds_bucket", "chunkup_uploads_active", "grpc_server_handled_total"}
	if !slices.Equal(got, want) {
		t.Fatalf("MetricNames = %q, want %q", got, want)
	}
	families := map[string]bool{"chunkup_chunk_ack_duration_seconds": true, "chunkup_uploads_active": false, "chunkup_x_count": false}
	has := func(f string) (bool, bool) { h, ok := families[f]; return h, ok }
	for name, want := range map[string]string{
		"chunkup_chunk_ack_duration_seconds_bucket": "chunkup_chunk_ack_duration_seconds",
		"chunkup_chunk_ack_duration_seconds_count":  "chunkup_chunk_ack_duration_seconds",
		"chunkup_uploads_active":                    "chunkup_uploads_active",
		"chunkup_x_count":                           "chunkup_x_count",
		"chunkup_uploads_active_bucket":             "", // not a histogram
		"chunkup_missing":                           "",
	} {
		if got, _ := Family(name, has); got != want {
			t.Errorf("Family(%s) = %q, want %q", name, got, want)
		}
	}
}
