package main

import (
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseParentRef(t *testing.T) {
	tests := []struct {
		args       []string
		kind, name string
	}{
		{[]string{"webapp/shop"}, "webapp", "shop"},
		{[]string{"webapps.example.com/shop"}, "webapps.example.com", "shop"},
		{[]string{"example.com/v1alpha1/WebApp/shop"}, "example.com/v1alpha1/WebApp", "shop"},
		{[]string{"v1/ConfigMap/cfg"}, "v1/ConfigMap", "cfg"},
		{[]string{"webapp", "shop"}, "webapp", "shop"},
	}
	for _, tt := range tests {
		kind, name, err := parseParentRef(tt.args)
		if err != nil || kind != tt.kind || name != tt.name {
			t.Errorf("parseParentRef(%q) = %q, %q, %v; want %q, %q", tt.args, kind, name, err, tt.kind, tt.name)
		}
	}
	for _, bad := range [][]string{{"shop"}, {"/shop"}, {"webapp/"}, {"webapp", "a/b"}} {
		if _, _, err := parseParentRef(bad); err == nil || !strings.Contains(err.Error(), "want KIND/NAME") {
			t.Errorf("parseParentRef(%q) error = %v", bad, err)
		}
	}
}

// explain checks its arguments before it connects, and reports a refusal
// in kubectl's words.
func TestExplainCommandErrors(t *testing.T) {
	noCluster(t)
	api := newFakeAPI(t)
	kubeconfig := writeKubeconfig(t, api, api.URL)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "shop"}, `Error: want KIND/NAME, such as webapp/shop or example.com/v1alpha1/WebApp/shop, not "shop"`},
		{[]string{"explain", "webapp/shop", "-o", "name"}, "Error: -o name is not for explain: use text, json, yaml or jsonpath=TEMPLATE"},
		{[]string{"explain", "webapp/shop", "-o", "wide"}, `Error: unknown output format "wide"`},
		{[]string{"explain", "webapp/shop", "--rule-objects=false"}, "Error: no rules: give --rules, or read Rule objects (--rule-objects)"},
	} {
		_, _, err := runKgenctl(t, append(tt.args, "--kubeconfig", kubeconfig)...)
		if err == nil || !strings.HasPrefix(errorMessage(err), tt.want) {
			t.Errorf("kgenctl %s: %v, want %s", strings.Join(tt.args, " "), err, tt.want)
		}
	}
	if n := len(api.seen()); n > 0 {
		t.Errorf("bad arguments sent %d requests", n)
	}

	// Refused: the server's own words.
	api.mu.Lock()
	api.refuse = &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden, Message: `forbidden: User "a" cannot get path "/api"`}
	api.mu.Unlock()
	_, _, err := runKgenctl(t, "explain", "webapp/shop", "--rules", "../../examples/webapp/rules.yaml", "--kubeconfig", kubeconfig)
	if err == nil || !strings.HasPrefix(errorMessage(err), "Error from server (Forbidden): ") {
		t.Errorf("refused: %v", err)
	}
}
