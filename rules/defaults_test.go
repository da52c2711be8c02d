package rules

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// A parent read before its CRD gained defaults is seen as the API server
// serves it now: each default set where its field is missing from an
// object that exists, not inside objects that do not; a parent that lacks
// nothing is returned as it is.
func TestWithDefaults(t *testing.T) {
	rs, err := Load([]string{"testdata/schema/rules.yaml"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rule := rs[0]
	parse := func(spec string) *unstructured.Unstructured {
		t.Helper()
		// As the API server's objects decode: integers as int64.
		j, err := yaml.YAMLToJSON([]byte("apiVersion: example.com/v1\nkind: Cache\nmetadata: {name: c, namespace: ns}\n" + spec))
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := utiljson.Unmarshal(j, &u.Object); err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"no spec", "", ""},
		{"every default missing", "spec: {image: redis}", "spec: {image: redis, replicas: 1, memory: 256Mi, mode: lru}"},
		{"a null where null is not allowed", "spec: {image: redis, replicas: null, memory: 1Gi, mode: lfu}",
			"spec: {image: redis, replicas: 1, memory: 1Gi, mode: lfu}"},
		{"a nested object that exists", "spec: {image: redis, replicas: 2, memory: 1Gi, mode: lfu, tls: {secretName: s}}",
			"spec: {image: redis, replicas: 2, memory: 1Gi, mode: lfu, tls: {secretName: s, enabled: false}}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := parse(tc.in)
			before := in.DeepCopy()
			got := rule.WithDefaults(in)
			if tc.want == "" {
				tc.want = tc.in
			}
			if want := parse(tc.want); !reflect.DeepEqual(got.Object, want.Object) {
				t.Errorf("WithDefaults = %v, want %v", got.Object, want.Object)
			}
			if !reflect.DeepEqual(in.Object, before.Object) {
				t.Errorf("the parent given was changed: %v", in.Object)
			}
		})
	}
	full := parse("spec: {image: redis, replicas: 2, memory: 1Gi, mode: lfu}")
	if got := rule.WithDefaults(full); got != full {
		t.Error("a parent that lacks no default was copied")
	}
}
