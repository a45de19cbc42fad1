// Package grafana holds chunkup's Grafana dashboard (chunkup.json, over the metrics
// that docs/observability.md lists) and reads the metric names its queries use, so
// that a test can check each against a live /metrics (test/e2e, TestDashboardMetrics).
package grafana

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Dashboard is deploy/grafana/chunkup.json, as imported into Grafana.
//
//go:embed chunkup.json
var Dashboard []byte

// Query is one PromQL expression of the dashboard and where it is.
type Query struct {
	Where string // panel title and refId, or the template variable's name
	Expr  string
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// Queries returns every PromQL expression of the dashboard (panels' targets, and the
// query variables' definitions). A panel other than a row without a query is an error.
func Queries(dash []byte) ([]Query, error) {
	var d dashboard
	if err := json.Unmarshal(dash, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	if d.UID == "" || d.Title == "" {
		return nil, fmt.Errorf("dashboard: no uid or title")
	}
	var qs []Query
	var walk func([]panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			if p.Type == "row" {
				if err := walk(p.Panels); err != nil {
					return err
				}
				continue
			}
			if len(p.Targets) == 0 {
				return fmt.Errorf("dashboard: panel %q has no query", p.Title)
			}
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					return fmt.Errorf("dashboard: panel %q, query %s is empty", p.Title, t.RefID)
				}
				qs = append(qs, Query{Where: p.Title + " (" + t.RefID + ")", Expr: t.Expr})
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			qs = append(qs, Query{Where: "variable " + v.Name, Expr: v.Definition})
		}
	}
	return qs, nil
}

// metricName matches the names of series chunkup exports (its own, and the gRPC
// server's) in a PromQL expression; label names, functions and keywords never start so.
var metricName = regexp.MustCompile(`\b(?:chunkup|grpc_server)_[a-zA-Z0-9_]*[a-zA-Z0-9]`)

// histogramSuffixes name a histogram's series; its family has the name without them.
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// MetricNames returns the series names expr queries, sorted and without repeats, as
// written (a histogram's _bucket, _sum or _count included: see Family).
func MetricNames(expr string) []string {
	names := metricName.FindAllString(stripStrings(expr), -1)
	slices.Sort(names)
	return slices.Compact(names)
}

// Family is the metric family that series name belongs to given the families exported
// (has): the name itself, or for a histogram's _bucket, _sum or _count series the
// histogram's name when has says it is a histogram. ok is false when none is exported.
func Family(name string, has func(family string) (isHistogram, ok bool)) (string, bool) {
	if _, ok := has(name); ok {
		return name, true
	}
	for _, s := range histogramSuffixes {
		if base, cut := strings.CutSuffix(name, s); cut {
			if hist, ok := has(base); ok && hist {
				return base, true
			}
		}
	}
	return "", false
}

// stripStrings blanks the quoted strings of expr (label values, legend-like text), so
// a label value that looks like a metric name is not taken for one.
func stripStrings(expr string) string {
	var b strings.Builder
	var quote rune
	escaped := false
	for _, r := range expr {
		switch {
		case quote != 0 && escaped:
			escaped = false
			r = ' '
		case quote != 0 && r == '\\':
			escaped = true
			r = ' '
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			r = ' '
		case r == '"' || r == '\'' || r == '`':
			quote = r
		}
		b.WriteRune(r)
	}
	return b.String()
}
