package main

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metrics is one scrape of kgen's /metrics.
type metrics map[string]*dto.MetricFamily

func scrape(client *http.Client, base string) (metrics, error) {
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	return metrics(families), err
}

// value returns the value of a gauge or counter whose labels include want.
func (m metrics) value(name string, want map[string]string) float64 {
	f, ok := m[name]
	if !ok {
		return 0
	}
	total := 0.0
	for _, metric := range f.GetMetric() {
		if !hasLabels(metric, want) {
			continue
		}
		switch {
		case metric.Counter != nil:
			total += metric.GetCounter().GetValue()
		case metric.Gauge != nil:
			total += metric.GetGauge().GetValue()
		case metric.Untyped != nil:
			total += metric.GetUntyped().GetValue()
		}
	}
	return total
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// reconcileTotal counts kgen's reconciles, by rule and result.
const reconcileTotal = "controller_runtime_reconcile_total"

// counts are request counts by "verb resource".
type counts map[string]float64

// requests returns kgen_api_requests_total by "verb resource".
func (m metrics) requests() counts {
	out := counts{}
	f, ok := m["kgen_api_requests_total"]
	if !ok {
		return out
	}
	for _, metric := range f.GetMetric() {
		var verb, resource string
		for _, l := range metric.GetLabel() {
			switch l.GetName() {
			case "verb":
				verb = l.GetValue()
			case "resource":
				resource = l.GetValue()
			}
		}
		out[strings.TrimSpace(verb+" "+resource)] += metric.GetCounter().GetValue()
	}
	return out
}

// steadyPerMinute is kgen's requests per minute between two scrapes window
// apart, without those the scrape itself costs: kgen's metrics port checks
// the bench's credentials with a TokenReview or SubjectAccessReview when
// its cache of the answer expires (after 1 to 5 minutes), and such a check
// is not kgen's work.
func steadyPerMinute(first, second metrics, window time.Duration) counts {
	c := second.requests().minus(first.requests())
	delete(c, "create tokenreviews")
	delete(c, "create subjectaccessreviews")
	return c.scale(time.Minute.Seconds() / window.Seconds())
}

func (c counts) minus(o counts) counts {
	out := counts{}
	for k, v := range c {
		if d := v - o[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func (c counts) scale(f float64) counts {
	out := counts{}
	for k, v := range c {
		out[k] = v * f
	}
	return out
}

// byVerb sums counts per verb, leaving out the requests that match skip.
func (c counts) byVerb(skip func(key string) bool) map[string]float64 {
	out := map[string]float64{}
	for k, v := range c {
		if skip != nil && skip(k) {
			continue
		}
		verb, _, _ := strings.Cut(k, " ")
		out[verb] += v
	}
	return out
}

func (c counts) sum(match func(key string) bool) float64 {
	total := 0.0
	for k, v := range c {
		if match(k) {
			total += v
		}
	}
	return total
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
