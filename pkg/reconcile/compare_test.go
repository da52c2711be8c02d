package reconcile

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kgen.dev/kgen/pkg/schema"
)

func obj(m map[string]any) *unstructured.Unstructured { return &unstructured.Unstructured{Object: m} }

func TestUpToDate(t *testing.T) {
	desired := withHash(obj(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "labels": map[string]any{"a": "b"},
			"ownerReferences": []any{map[string]any{"uid": "u1", "kind": "WebApp"}}},
		"data": map[string]any{"k": "v", "n": int64(3)},
		"spec": map[string]any{"list": []any{map[string]any{"name": "x"}}, "empty": map[string]any{}},
	}))
	hash := desired.GetAnnotations()[AnnotationTemplateHash]
	live := func(mutate func(m map[string]any)) *unstructured.Unstructured {
		m := desired.DeepCopy().Object
		mutate(m)
		return obj(m)
	}
	tests := []struct {
		name string
		live *unstructured.Unstructured
		want bool
	}{
		{"identical", live(func(map[string]any) {}), true},
		{"extra fields of other managers", live(func(m map[string]any) {
			m["status"] = map[string]any{"x": int64(1)}
			m["data"].(map[string]any)["other"] = "o"
			m["metadata"].(map[string]any)["labels"].(map[string]any)["team"] = "blue"
		}), true},
		{"defaults inside list elements", live(func(m map[string]any) {
			m["spec"].(map[string]any)["list"] = []any{map[string]any{"name": "x", "policy": "Always"}}
		}), true},
		{"number decoded as float", live(func(m map[string]any) { m["data"].(map[string]any)["n"] = float64(3) }), true},
		{"empty map dropped by the server", live(func(m map[string]any) { delete(m["spec"].(map[string]any), "empty") }), true},
		{"extra owner reference", live(func(m map[string]any) {
			md := m["metadata"].(map[string]any)
			md["ownerReferences"] = append(md["ownerReferences"].([]any), map[string]any{"uid": "u2"})
		}), true},
		{"changed value", live(func(m map[string]any) { m["data"].(map[string]any)["k"] = "w" }), false},
		{"missing field", live(func(m map[string]any) { delete(m["data"].(map[string]any), "k") }), false},
		{"list element added", live(func(m map[string]any) {
			m["spec"].(map[string]any)["list"] = []any{map[string]any{"name": "x"}, map[string]any{"name": "y"}}
		}), false},
		{"other template hash", live(func(m map[string]any) {
			m["metadata"].(map[string]any)["annotations"] = map[string]any{AnnotationTemplateHash: "old"}
		}), false},
		{"no owner reference", live(func(m map[string]any) { delete(m["metadata"].(map[string]any), "ownerReferences") }), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := UpToDate(desired, tt.live, nil); got != tt.want {
				t.Errorf("UpToDate = %t, want %t", got, tt.want)
			}
		})
	}
	if UpToDate(desired, nil, nil) {
		t.Error("UpToDate(nil live) = true")
	}
	if hash == "" || withHash(desired).GetAnnotations()[AnnotationTemplateHash] != hash {
		t.Error("the template hash must not depend on a previous hash annotation")
	}
}

// A Secret's stringData is stored base64-encoded in data, where it wins
// over a data key of the same name: stored so, the Secret is up to date.
func TestUpToDateSecretStringData(t *testing.T) {
	desired := withHash(obj(map[string]any{
		"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s"},
		"stringData": map[string]any{"password": "hunter2", "both": "string"},
		"data":       map[string]any{"raw": "cmF3", "both": "ZGF0YQ=="},
	}))
	stored := func(data map[string]any) *unstructured.Unstructured {
		live := obj(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s"}, "type": "Opaque", "data": data})
		live.SetAnnotations(desired.GetAnnotations())
		return live
	}
	for _, tt := range []struct {
		name string
		data map[string]any
		want bool
	}{
		{"as stored", map[string]any{"password": "aHVudGVyMg==", "raw": "cmF3", "both": "c3RyaW5n"}, true},
		{"a stringData key changed", map[string]any{"password": "b3RoZXI=", "raw": "cmF3", "both": "c3RyaW5n"}, false},
		{"a stringData key missing", map[string]any{"raw": "cmF3", "both": "c3RyaW5n"}, false},
		{"data's value where stringData wins", map[string]any{"password": "aHVudGVyMg==", "raw": "cmF3", "both": "ZGF0YQ=="}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := UpToDate(desired, stored(tt.data), nil); got != tt.want {
				t.Errorf("UpToDate = %t, want %t", got, tt.want)
			}
		})
	}
	if _, ok := desired.Object["stringData"]; !ok {
		t.Error("UpToDate changed the desired object")
	}
}

// A parent that moves to another replica relabels its children: the
// template hash leaves kgen.dev/shard out, so the relabelled child is still
// up to date, while any other label counts.
func TestTemplateHashLeavesOutShard(t *testing.T) {
	child := func(labels map[string]any) *unstructured.Unstructured {
		return withHash(obj(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "c", "labels": labels}, "data": map[string]any{"k": "v"}}))
	}
	a := child(map[string]any{"app": "x", LabelShard: "a"})
	tests := []struct {
		name  string
		other *unstructured.Unstructured
		same  bool
	}{
		{"another shard", child(map[string]any{"app": "x", LabelShard: "b"}), true},
		{"no shard", child(map[string]any{"app": "x"}), true},
		{"another label", child(map[string]any{"app": "y", LabelShard: "a"}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if same := templateHash(a) == templateHash(tt.other); same != tt.same {
				t.Errorf("hashes equal = %t, want %t", same, tt.same)
			}
		})
	}
	if a.GetLabels()[LabelShard] != "a" {
		t.Errorf("withHash dropped the shard label: %v", a.GetLabels())
	}
	relabelled := a.DeepCopy()
	relabelled.SetLabels(map[string]string{"app": "x", LabelShard: "b"})
	if !UpToDate(child(map[string]any{"app": "x", LabelShard: "b"}), relabelled, nil) {
		t.Error("a child relabelled to its parent's new shard is not up to date")
	}
}

// The schema says how the server stores a kind: keyed lists match by key,
// sets by value, quantities by value. These are the differences a server
// makes that are not changes.
func TestMatchesWithSchema(t *testing.T) {
	kind := &schema.Field{Properties: map[string]*schema.Field{
		"spec": {Properties: map[string]*schema.Field{
			"containers": {ListType: schema.ListMap, ListMapKeys: []string{"name"}, Items: &schema.Field{Properties: map[string]*schema.Field{
				"resources": {Properties: map[string]*schema.Field{
					"requests": {AdditionalProperties: &schema.Field{Quantity: true}},
					"limits":   {AdditionalProperties: &schema.Field{Quantity: true}},
				}},
				"ports": {ListType: schema.ListMap, ListMapKeys: []string{"containerPort", "protocol"}},
			}}},
			"finalizers": {ListType: schema.ListSet},
		}},
	}}
	container := func(name string, extra map[string]any) map[string]any {
		c := map[string]any{"name": name, "image": "i"}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	spec := func(containers ...any) map[string]any {
		return map[string]any{"spec": map[string]any{"containers": containers}}
	}
	tests := []struct {
		name      string
		want, got map[string]any
		match     bool
	}{
		{"quantities stored canonically", spec(container("app", map[string]any{"resources": map[string]any{
			"requests": map[string]any{"cpu": 0.5, "memory": "1Gi"}, "limits": map[string]any{"cpu": int64(1)}}})),
			spec(container("app", map[string]any{"resources": map[string]any{
				"requests": map[string]any{"cpu": "500m", "memory": "1Gi"}, "limits": map[string]any{"cpu": "1"}}})), true},
		{"a quantity changed", spec(container("app", map[string]any{"resources": map[string]any{"limits": map[string]any{"cpu": "1"}}})),
			spec(container("app", map[string]any{"resources": map[string]any{"limits": map[string]any{"cpu": "2"}}})), false},
		{"a sidecar injected into a keyed list", spec(container("app", nil)),
			spec(container("istio-proxy", nil), container("app", map[string]any{"terminationMessagePath": "/dev/termination-log"})), true},
		{"reordered keyed list", spec(container("a", nil), container("b", nil)), spec(container("b", nil), container("a", nil)), true},
		{"keyed element missing", spec(container("a", nil), container("b", nil)), spec(container("a", nil)), false},
		{"keyed element changed", spec(container("a", nil)), spec(container("a", map[string]any{"image": "j"})), false},
		{"defaulted key field", spec(container("a", map[string]any{"ports": []any{map[string]any{"containerPort": int64(80)}}})),
			spec(container("a", map[string]any{"ports": []any{map[string]any{"containerPort": float64(80), "protocol": "TCP"}}})), true},
		{"set with extra values", map[string]any{"spec": map[string]any{"finalizers": []any{"a"}}},
			map[string]any{"spec": map[string]any{"finalizers": []any{"b", "a"}}}, true},
		{"set missing a value", map[string]any{"spec": map[string]any{"finalizers": []any{"a", "c"}}},
			map[string]any{"spec": map[string]any{"finalizers": []any{"b", "a"}}}, false},
		{"a string that looks like a quantity is compared as a string", map[string]any{"data": map[string]any{"x": "0.5"}},
			map[string]any{"data": map[string]any{"x": "500m"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Matches(tt.want, tt.got, kind); got != tt.match {
				t.Errorf("Matches = %t, want %t", got, tt.match)
			}
			// Differences shares the walk: it names a difference exactly
			// when Matches finds one.
			if diffs := Differences(tt.want, tt.got, kind); (len(diffs) == 0) != tt.match {
				t.Errorf("Differences = %q, but Matches = %t", diffs, tt.match)
			}
		})
	}
	// Without a schema the same lists are atomic.
	if Matches(spec(container("app", nil)), spec(container("sidecar", nil), container("app", nil)), nil) {
		t.Error("without a schema a longer list matched")
	}
}

// Project fingerprints only what a template sets: other fields, and their
// changes, do not change it; a change of a set field does.
func TestProject(t *testing.T) {
	want := map[string]any{"spec": map[string]any{"replicas": int64(1), "list": []any{"a"}}}
	base := map[string]any{"spec": map[string]any{"replicas": int64(1), "list": []any{"a"}, "other": "x"}, "status": map[string]any{"n": int64(1)}}
	d := Project(want, base, nil)
	churn := map[string]any{"spec": map[string]any{"replicas": int64(1), "list": []any{"a"}, "other": "y"}, "status": map[string]any{"n": int64(2)}}
	if Project(want, churn, nil) != d {
		t.Error("a change of fields the template does not set changed the projection")
	}
	changed := map[string]any{"spec": map[string]any{"replicas": int64(2), "list": []any{"a"}}}
	if Project(want, changed, nil) == d {
		t.Error("a changed replicas kept the projection")
	}
	longer := map[string]any{"spec": map[string]any{"replicas": int64(1), "list": []any{"a", "b"}}}
	if Project(want, longer, nil) == d {
		t.Error("an atomic list that grew kept the projection")
	}
}

// Differences names the paths of the fields that differ, as Kubernetes
// writes field paths: keyed list elements by their keys, other lists by
// index, map keys that are not plain names in brackets.
func TestDifferences(t *testing.T) {
	kind := &schema.Field{Properties: map[string]*schema.Field{
		"spec": {Properties: map[string]*schema.Field{
			"template": {Properties: map[string]*schema.Field{"spec": {Properties: map[string]*schema.Field{
				"containers": {ListType: schema.ListMap, ListMapKeys: []string{"name"}, Items: &schema.Field{Properties: map[string]*schema.Field{
					"ports":     {ListType: schema.ListMap, ListMapKeys: []string{"containerPort", "protocol"}},
					"resources": {Properties: map[string]*schema.Field{"limits": {AdditionalProperties: &schema.Field{Quantity: true}}}},
				}}},
			}}}},
		}},
	}}
	deployment := func(replicas any, containers ...any) map[string]any {
		return map[string]any{
			"metadata": map[string]any{"name": "web", "labels": map[string]any{"app.kubernetes.io/name": "web"}},
			"spec": map[string]any{"replicas": replicas, "args": []any{"a", "b"},
				"template": map[string]any{"spec": map[string]any{"containers": containers}}},
		}
	}
	app := func(image string, extra ...map[string]any) map[string]any {
		c := map[string]any{"name": "app", "image": image}
		for _, e := range extra {
			for k, v := range e {
				c[k] = v
			}
		}
		return c
	}
	want := deployment(int64(2), app("web:1", map[string]any{
		"ports":     []any{map[string]any{"containerPort": int64(8080)}},
		"resources": map[string]any{"limits": map[string]any{"cpu": "500m"}},
	}))
	tests := []struct {
		name string
		got  map[string]any
		want []string
	}{
		{"the same, as the server stores it", deployment(float64(2), app("web:1", map[string]any{
			"ports":     []any{map[string]any{"containerPort": int64(8080), "protocol": "TCP"}},
			"resources": map[string]any{"limits": map[string]any{"cpu": 0.5}},
		})), nil},
		{"replicas and an image", deployment(int64(3), app("web:2", map[string]any{
			"ports":     []any{map[string]any{"containerPort": int64(8080)}},
			"resources": map[string]any{"limits": map[string]any{"cpu": "500m"}},
		})), []string{"spec.replicas", "spec.template.spec.containers[name=app].image"}},
		{"a keyed element missing and a quantity", deployment(int64(2), app("web:1", map[string]any{
			"ports":     []any{map[string]any{"containerPort": int64(9090)}},
			"resources": map[string]any{"limits": map[string]any{"cpu": "1"}},
		})), []string{"spec.template.spec.containers[name=app].ports[containerPort=8080]", "spec.template.spec.containers[name=app].resources.limits.cpu"}},
		{"the container missing", deployment(int64(2), map[string]any{"name": "sidecar"}),
			[]string{"spec.template.spec.containers[name=app]"}},
		{"a label and a list element", func() map[string]any {
			d := deployment(int64(2), want["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)...)
			d["metadata"].(map[string]any)["labels"] = map[string]any{"app.kubernetes.io/name": "other"}
			d["spec"].(map[string]any)["args"] = []any{"a", "c"}
			return d
		}(), []string{"metadata.labels[app.kubernetes.io/name]", "spec.args[1]"}},
		{"a list of another length", func() map[string]any {
			d := deployment(int64(2), want["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)...)
			d["spec"].(map[string]any)["args"] = []any{"a"}
			return d
		}(), []string{"spec.args"}},
		{"a value of another type", deployment("two", want["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)...),
			[]string{"spec.replicas"}},
		{"an object where a map should be", map[string]any{"metadata": "x", "spec": want["spec"]}, []string{"metadata"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Differences(want, tt.got, kind)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Differences = %q, want %q", got, tt.want)
			}
			if Matches(want, tt.got, kind) != (len(tt.want) == 0) {
				t.Errorf("Matches = %t, but Differences = %q", !(len(tt.want) == 0), got)
			}
		})
	}
}
