package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTPDoor is the series of the HTTP door (tus and the IETF resumable-upload draft on
// the HTTP address). The chunks it stages are counted in chunkup_chunks_staged_total
// with gRPC's, since they go through the same path.
type HTTPDoor struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge
}

// The protocols of the door's requests (label protocol).
const (
	ProtocolTus  = "tus"
	ProtocolIETF = "ietf"
	ProtocolNone = "none" // neither header: a HEAD or GET without one, a preflight, a refusal
)

// httpMethods are the methods the door's series name; any other is "other", so a
// client cannot grow the series without bound.
var httpMethods = map[string]bool{"POST": true, "HEAD": true, "GET": true, "PATCH": true, "DELETE": true, "OPTIONS": true}

// HTTPDoor registers the HTTP door's series in s and returns them, or nil for a nil
// Set; a process registers them once.
func (s *Set) HTTPDoor() (*HTTPDoor, error) {
	if s == nil {
		return nil, nil
	}
	d := &HTTPDoor{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "http_requests_total",
			Help: "Requests the HTTP upload door answered, by method, protocol (tus, ietf, none) and status code.",
		}, []string{"method", "protocol", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "http_request_duration_seconds",
			Help: "Time the HTTP upload door took to answer a request, by method (a PATCH lasts as long as its body takes to arrive).",
			// 1 ms to about 70 minutes, by fours: appends carry whole files.
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}, []string{"method"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "http_requests_in_flight",
			Help: "Requests the HTTP upload door is answering now.",
		}),
	}
	for _, c := range []prometheus.Collector{d.requests, d.duration, d.inFlight} {
		if err := s.reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, ErrRegistered
			}
			return nil, err
		}
	}
	return d, nil
}

// Started records a request the door began to answer; the function it returns
// records its end with the response's status code and the request's protocol.
func (d *HTTPDoor) Started(method string) (done func(protocol string, code int)) {
	if d == nil {
		return func(string, int) {}
	}
	if !httpMethods[method] {
		method = "other"
	}
	d.inFlight.Inc()
	began := time.Now()
	return func(protocol string, code int) {
		d.inFlight.Dec()
		d.duration.WithLabelValues(method).Observe(time.Since(began).Seconds())
		d.requests.WithLabelValues(method, protocol, codeLabel(code)).Inc()
	}
}

func codeLabel(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return string(rune('0'+code/100)) + string(rune('0'+code/10%10)) + string(rune('0'+code%10))
}
