package e2e

import (
	"context"
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/chunkup/chunkup/client"
	"github.com/chunkup/chunkup/deploy/grafana"
	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/ocr"
)

// dashboardEngine recognizes every file as one page of fixed words, so that an OCR
// job finishes (and its series appear) without Tesseract.
type dashboardEngine struct{}

func (dashboardEngine) Name() string                 { return "dashboard" }
func (dashboardEngine) Health(context.Context) error { return nil }
func (dashboardEngine) Recognize(context.Context, []byte, ocr.FileType) (*ocr.Result, error) {
	return &ocr.Result{Engine: "dashboard", Pages: []ocr.Page{{Number: 1, Text: "INVOICE 12345 PAID", Words: 3, Confidence: 95}}}, nil
}

// TestDashboardMetrics: every series the Grafana dashboard (deploy/grafana/chunkup.json)
// queries is in a live /metrics of a process with every role, OCR on, on real Redis
// and MinIO, once it has done what creates the labelled series: a multipart upload
// and a one-chunk image (OCR'd), and a request to the HTTP door.
func TestDashboardMetrics(t *testing.T) {
	qs, err := grafana.Queries(grafana.Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	cfg := e.config()
	cfg.Upload.ChunkSize = 5 * MiB
	cfg = withOCR(cfg)
	cfg.OCR.Engine = dashboardEngine{}
	a := e.start(t, cfg)
	c := e.client(t, a)

	data := randomBytes(5*MiB+77, 27)
	up, err := c.Upload(ctx(t), reader(data), client.WithSize(int64(len(data))), client.WithName("d.bin"))
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)
	png := testdocs.PNG("INVOICE 12345")
	if _, err := c.Upload(ctx(t), reader(png), client.WithName("scan.png"), client.WithContentType("image/png")); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx(t), http.MethodOptions, "http://"+a.HTTPAddr()+"/files/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	var fams map[string]*dto.MetricFamily
	has := func(f string) (bool, bool) {
		m, ok := fams[f]
		return ok && m.GetType() == dto.MetricType_HISTOGRAM, ok
	}
	waitFor(t, "the OCR job and the door's request in /metrics", func() bool {
		fams = scrapeMetrics(t, a)
		_, jobs := fams["chunkup_ocr_jobs_total"]
		_, door := fams["chunkup_http_requests_total"]
		return jobs && door
	})
	checked := map[string]bool{}
	for _, q := range qs {
		for _, name := range grafana.MetricNames(q.Expr) {
			if _, ok := grafana.Family(name, has); !ok {
				t.Errorf("%s queries %s, which /metrics does not have", q.Where, name)
			}
			checked[name] = true
		}
	}
	if len(checked) < 20 {
		t.Errorf("checked %d series names, want the dashboard's all", len(checked))
	}
	t.Logf("%d queries, %d series names, all in /metrics", len(qs), len(checked))
}
