package reconcile

import (
	"bytes"
	"testing"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Managed-field paths are written as Differences writes paths, so a
// difference inside a keyed list finds the writer that owns it.
func TestOwnsAny(t *testing.T) {
	set := &fieldpath.Set{}
	fields := `{"f:metadata":{"f:labels":{"f:app.kubernetes.io/name":{}}},"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{}}}}},"f:args":{}}}`
	if err := set.FromJSON(bytes.NewReader([]byte(fields))); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"spec.template.spec.containers[name=app].image", true},
		{"spec.template.spec.containers[name=app]", true},
		{"metadata.labels[app.kubernetes.io/name]", true},
		{"spec.args", true},
		{"spec.template.spec.containers[name=other].image", false},
		{"spec.replicas", false},
		{"spec.arg", false},
	} {
		if got := ownsAny(set, []string{tt.path}); got != tt.want {
			t.Errorf("ownsAny(%s) = %t, want %t", tt.path, got, tt.want)
		}
	}
}
