package reconcile

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// A child counts as seen for its parent until the parent is forgotten, or
// a sweep finds the parent gone; by id, kind, namespace and name.
func TestSeenChildren(t *testing.T) {
	cm := func(name, id string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetNamespace("team")
		u.SetName(name)
		u.SetLabels(map[string]string{LabelChild: id})
		return u
	}
	s := newSeenChildren()
	s.set("a", []*unstructured.Unstructured{cm("a-config", "config")})
	s.set("b", []*unstructured.Unstructured{cm("b-config", "config")})
	for _, tt := range []struct {
		parent types.UID
		child  childRef
		want   bool
	}{
		{"a", refOf("config", cm("a-config", "config")), true},
		{"a", refOf("other", cm("a-config", "other")), false},   // another id
		{"a", refOf("config", cm("renamed", "config")), false},  // another name
		{"b", refOf("config", cm("a-config", "config")), false}, // another parent's
		{"c", refOf("config", cm("c-config", "config")), false}, // never reconciled
	} {
		if got := s.had(tt.parent, tt.child); got != tt.want {
			t.Errorf("had(%s, %+v) = %t, want %t", tt.parent, tt.child, got, tt.want)
		}
	}
	s.retain(func(uid types.UID) bool { return uid == "b" })
	if s.had("a", refOf("config", cm("a-config", "config"))) {
		t.Error("a sweep kept the children of a parent that is gone")
	}
	if !s.had("b", refOf("config", cm("b-config", "config"))) {
		t.Error("a sweep dropped the children of a parent that exists")
	}
	s.forget("b")
	if s.had("b", refOf("config", cm("b-config", "config"))) {
		t.Error("forget kept the parent's children")
	}
}
