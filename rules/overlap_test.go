package rules

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Two rules of one parent kind load together only when no object can match
// both selectors: an audit saw DoesNotExist against matchLabels of that
// label rejected.
func TestMayOverlap(t *testing.T) {
	tests := []struct {
		a, b string // spec.parent.selector, YAML; "" for none
		want bool
	}{
		{"", "", true},
		{"{matchLabels: {r: a}}", "", true},
		{"{matchLabels: {r: a}}", "{matchLabels: {r: a}}", true},
		{"{matchLabels: {r: a}}", "{matchLabels: {r: b}}", false},
		{"{matchLabels: {r: a}}", "{matchLabels: {s: b}}", true},
		{"{matchExpressions: [{key: r, operator: DoesNotExist}]}", "{matchLabels: {r: alpha}}", false},
		{"{matchLabels: {r: alpha}}", "{matchExpressions: [{key: r, operator: DoesNotExist}]}", false},
		{"{matchExpressions: [{key: r, operator: DoesNotExist}]}", "{matchExpressions: [{key: r, operator: Exists}]}", false},
		{"{matchExpressions: [{key: r, operator: DoesNotExist}]}", "{matchExpressions: [{key: r, operator: NotIn, values: [a]}]}", true},
		{"{matchExpressions: [{key: r, operator: In, values: [a, b]}]}", "{matchExpressions: [{key: r, operator: In, values: [b, c]}]}", true},
		{"{matchExpressions: [{key: r, operator: In, values: [a, b]}]}", "{matchExpressions: [{key: r, operator: In, values: [c]}]}", false},
		{"{matchExpressions: [{key: r, operator: In, values: [a, b]}]}", "{matchExpressions: [{key: r, operator: NotIn, values: [a, b]}]}", false},
		{"{matchExpressions: [{key: r, operator: In, values: [a, b]}]}", "{matchExpressions: [{key: r, operator: NotIn, values: [a]}]}", true},
		{"{matchLabels: {r: a}}", "{matchExpressions: [{key: r, operator: NotIn, values: [a]}]}", false},
		{"{matchExpressions: [{key: r, operator: NotIn, values: [a]}]}", "{matchExpressions: [{key: r, operator: NotIn, values: [b]}]}", true},
		{"{matchExpressions: [{key: r, operator: Exists}]}", "{matchLabels: {r: a}}", true},
	}
	sel := func(s string) *metav1.LabelSelector {
		if s == "" {
			return nil
		}
		var out metav1.LabelSelector
		if err := yaml.Unmarshal([]byte(s), &out); err != nil {
			t.Fatal(err)
		}
		return &out
	}
	for _, tt := range tests {
		a, b := Parent{LabelSelector: sel(tt.a)}, Parent{LabelSelector: sel(tt.b)}
		if got := mayOverlap(a, b); got != tt.want {
			t.Errorf("mayOverlap(%s, %s) = %t, want %t", tt.a, tt.b, got, tt.want)
		}
		if got := mayOverlap(b, a); got != tt.want {
			t.Errorf("mayOverlap(%s, %s) = %t, want %t", tt.b, tt.a, got, tt.want)
		}
	}
}
