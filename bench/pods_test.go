package main

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestPodsGoals(t *testing.T) {
	tests := []struct {
		name   string
		object string
		want   bool
	}{{
		name: "parent Ready with its pods",
		object: `{apiVersion: example.com/v1alpha1, kind: WebApp, metadata: {generation: 2},
			status: {observedGeneration: 2, availableReplicas: 3, conditions: [{type: Ready, status: "True"}]}}`,
		want: true,
	}, {
		name: "parent Ready at an older generation",
		object: `{apiVersion: example.com/v1alpha1, kind: WebApp, metadata: {generation: 2},
			status: {observedGeneration: 1, availableReplicas: 3, conditions: [{type: Ready, status: "True"}]}}`,
	}, {
		name: "parent not Ready",
		object: `{apiVersion: example.com/v1alpha1, kind: WebApp, metadata: {generation: 2},
			status: {observedGeneration: 2, availableReplicas: 3, conditions: [{type: Ready, status: "False"}]}}`,
	}, {
		name: "parent Ready with fewer pods in its status",
		object: `{apiVersion: example.com/v1alpha1, kind: WebApp, metadata: {generation: 2},
			status: {observedGeneration: 2, availableReplicas: 1, conditions: [{type: Other, status: "True"}, {type: Ready, status: "True"}]}}`,
	}, {
		name: "Deployment rolled out",
		object: `{apiVersion: apps/v1, kind: Deployment, metadata: {generation: 3}, spec: {replicas: 3},
			status: {observedGeneration: 3, replicas: 3, updatedReplicas: 3, availableReplicas: 3}}`,
		want: true,
	}, {
		name: "Deployment with an old pod left",
		object: `{apiVersion: apps/v1, kind: Deployment, metadata: {generation: 3}, spec: {replicas: 3},
			status: {observedGeneration: 3, replicas: 4, updatedReplicas: 3, availableReplicas: 3}}`,
	}, {
		name: "Deployment not yet seen by its controller",
		object: `{apiVersion: apps/v1, kind: Deployment, metadata: {generation: 3}, spec: {replicas: 3},
			status: {observedGeneration: 2, replicas: 3, updatedReplicas: 3, availableReplicas: 3}}`,
	}, {
		name: "Deployment with a pod not available",
		object: `{apiVersion: apps/v1, kind: Deployment, metadata: {generation: 3}, spec: {replicas: 3},
			status: {observedGeneration: 3, replicas: 3, updatedReplicas: 3, availableReplicas: 2}}`,
	}}
	goals := podsGoals(3)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// As the API server's objects: integers as int64.
			data, err := yaml.YAMLToJSON([]byte(tt.object))
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(data); err != nil {
				t.Fatal(err)
			}
			goal := goals[webappGVR]
			if u.GetKind() == "Deployment" {
				goal = goals[deployGVR]
			}
			if got := goal(u); got != tt.want {
				t.Errorf("goal met: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPodsReport(t *testing.T) {
	tests := []struct {
		name   string
		steady map[string]float64
		want   []string
		absent []string
	}{{
		name:   "only reads",
		steady: map[string]float64{"get": 44, "list webapps": 1},
		want:   []string{"| get 44.0, list 1.0 | 0.0 |"},
		absent: []string{"Writes in the steady window"},
	}, {
		name:   "writes named by resource",
		steady: map[string]float64{"get": 2, "patch webapps/status": 3, "patch deployments": 1.5},
		want: []string{"| get 2.0, patch 4.5 | 4.5 |",
			"Writes in the steady window, per minute: patch deployments 1.5, patch webapps/status 3.0."},
	}, {
		name: "nothing at all",
		want: []string{"| none | 0.0 |"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &report{Pods: &podsResult{N: 200, Pods: 600, Ready: time.Second, Wave: time.Second, Window: time.Minute,
				Requests: map[string]float64{"patch webapps/status": 800}, SteadyPerMinute: tt.steady,
				RolloutChanges: map[string]int{"deployments": 1200}}}
			md := rep.markdown()
			for _, w := range append(tt.want, "## Steady state with running pods", "| patch 4.00 |", "until every parent was Ready after the wave: deployments 1200; in the steady window: none.") {
				if !strings.Contains(md, w) {
					t.Errorf("report lacks %q:\n%s", w, md)
				}
			}
			for _, a := range append(tt.absent, "## Convergence and update wave") {
				if strings.Contains(md, a) {
					t.Errorf("report has %q:\n%s", a, md)
				}
			}
		})
	}
}

func TestSteadyPerMinute(t *testing.T) {
	scrape := func(text string) metrics {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		m, err := parser.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first := scrape(`# TYPE kgen_api_requests_total counter
kgen_api_requests_total{verb="patch",resource="webapps/status"} 10
kgen_api_requests_total{verb="create",resource="subjectaccessreviews"} 1
`)
	second := scrape(`# TYPE kgen_api_requests_total counter
kgen_api_requests_total{verb="patch",resource="webapps/status"} 13
kgen_api_requests_total{verb="create",resource="subjectaccessreviews"} 2
kgen_api_requests_total{verb="create",resource="tokenreviews"} 1
kgen_api_requests_total{verb="get",resource="deployments"} 1
`)
	got := steadyPerMinute(first, second, 30*time.Second)
	want := counts{"patch webapps/status": 6, "get deployments": 2}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
