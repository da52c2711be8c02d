package main

import (
	"fmt"
	"io"
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// The Helm chart passes every flag of kgenctl run it has a value for, so
// its defaults must be the binary's (contract §11): a user who installs the
// chart gets the kgen the documentation of kgenctl run describes.
func TestChartDefaultsAreRunDefaults(t *testing.T) {
	data, err := os.ReadFile("../../charts/kgen/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Controller struct {
			Workers      any    `json:"workers"`
			KubeAPIQPS   any    `json:"kubeAPIQPS"`
			KubeAPIBurst any    `json:"kubeAPIBurst"`
			Events       string `json:"events"`
		} `json:"controller"`
		LeaderElection struct {
			LeaseDuration string `json:"leaseDuration"`
		} `json:"leaderElection"`
		Sharding struct {
			Enabled       any    `json:"enabled"`
			LeaseDuration string `json:"leaseDuration"`
		} `json:"sharding"`
		RuleObjects struct {
			Enabled any `json:"enabled"`
		} `json:"ruleObjects"`
		ManageCRDs any `json:"manageCRDs"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	flags := newRunCmd(io.Discard).Flags()
	for _, tt := range []struct {
		value string
		flag  string
		chart any
	}{
		{"controller.workers", "workers", values.Controller.Workers},
		{"controller.kubeAPIQPS", "kube-api-qps", values.Controller.KubeAPIQPS},
		{"controller.kubeAPIBurst", "kube-api-burst", values.Controller.KubeAPIBurst},
		{"leaderElection.leaseDuration", "leader-elect-lease-duration", values.LeaderElection.LeaseDuration},
		{"sharding.enabled", "shards", values.Sharding.Enabled},
		{"sharding.leaseDuration", "leader-elect-lease-duration", values.Sharding.LeaseDuration},
		{"ruleObjects.enabled", "rule-objects", values.RuleObjects.Enabled},
		{"manageCRDs", "manage-crds", values.ManageCRDs},
	} {
		f := flags.Lookup(tt.flag)
		if f == nil {
			t.Errorf("kgenctl run has no --%s, which the chart's %s sets", tt.flag, tt.value)
			continue
		}
		if got := fmt.Sprint(tt.chart); got != f.DefValue {
			t.Errorf("the chart's %s is %s, kgenctl run's --%s defaults to %s", tt.value, got, tt.flag, f.DefValue)
		}
	}
	// The event policy.
	if f := flags.Lookup("events"); f == nil || values.Controller.Events != f.DefValue {
		t.Errorf("the chart's controller.events is %q, kgenctl run's --events defaults to %v", values.Controller.Events, f)
	}
}
