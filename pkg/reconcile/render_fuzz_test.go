package reconcile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/rules"
)

// dataRule copies one parent field into a child in every way a template can:
// as a whole value, interpolated, inside a computed list and map, and as an
// annotation.
const dataRule = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: data}
spec:
  parent: {apiVersion: example.com/v1, kind: App}
  children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}-data
        annotations: {value: "${parent.spec.value}"}
      data:
        whole: ${parent.spec.value}
        mixed: "<${parent.spec.value}>"
        twice: ${parent.spec.value}${parent.spec.value}
        list: ${[string(parent.spec.value), "x"]}
        map: '${{"k": parent.spec.value}}'
        size: ${size(parent.spec.value)}
`

// FuzzRenderData feeds arbitrary strings as a parent field's value. Render
// must not panic, and the value must come out exactly as data wherever the
// template puts it: never parsed as YAML, never evaluated as an expression.
func FuzzRenderData(f *testing.F) {
	for _, s := range []string{
		"",
		"plain",
		"${parent.metadata.name}",
		"$${x}",
		"}",
		"\nkind: Secret\nmetadata: {name: stolen}",
		"--- \n- a\n- b",
		"{{ .Values.x }}",
		"'\"\\\x00",
		"\xff\xfe",
		"é漢字🙂",
		strings.Repeat("${", 100),
	} {
		f.Add(s)
	}
	rs, err := rules.Parse("rules.yaml", []byte(dataRule), rules.Options{})
	if err != nil {
		f.Fatal(err)
	}
	rule := rs[0]
	scope := scoper(f)
	parent := object(f, app)
	f.Fuzz(func(t *testing.T, value string) {
		p := parent.DeepCopy()
		p.Object["spec"].(map[string]any)["value"] = value
		got, err := Render(rule, p, Observed{}, scope)
		if err != nil {
			if errors.Is(err, rules.ErrLimitExceeded) && len(value) > rules.DefaultMaxOutputBytes/8 {
				return
			}
			t.Fatalf("Render() error: %v", err)
		}
		obj := got.Children[0].Object.Object
		want := map[string]any{
			"whole": value,
			"mixed": "<" + value + ">",
			"twice": value + value,
			"list":  []any{value, "x"},
			"map":   map[string]any{"k": value},
			"size":  int64(utf8.RuneCountInString(value)),
		}
		if !reflect.DeepEqual(obj["data"], want) {
			t.Fatalf("data = %#v, want %#v", obj["data"], want)
		}
		if a := got.Children[0].Object.GetAnnotations()["value"]; a != value {
			t.Fatalf("annotation = %q, want %q", a, value)
		}
		// Printed as YAML and read back, as kgenctl render's output is,
		// the value is still the same data.
		if !utf8.ValidString(value) {
			return
		}
		out, err := yaml.Marshal(obj)
		if err != nil {
			// The YAML printer refuses some control characters; refusing
			// is not corrupting.
			return
		}
		var back map[string]any
		if err := yaml.Unmarshal(out, &back); err != nil {
			t.Fatalf("the YAML output does not parse: %v\n%s", err, out)
		}
		if w := back["data"].(map[string]any)["whole"]; w != value {
			t.Fatalf("after a YAML round trip, data.whole = %q, want %q", w, value)
		}
	})
}

// eachDataRule renders one ConfigMap per element of a parent list, named by
// the element's index and holding the element, an input's value and the
// element joined with it.
const eachDataRule = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: each}
spec:
  parent: {apiVersion: example.com/v1, kind: App}
  inputs:
  - {id: shared, apiVersion: v1, kind: ConfigMap, name: shared}
  children:
  - id: cm
    forEach: [{item: "${parent.spec.items}"}, {n: "${[1, 2]}"}]
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: ${parent.metadata.name}-${string(parent.spec.items.indexOf(item))}-${string(n)}
      data:
        item: ${item}
        input: ${inputs.shared.data.value}
        both: ${item}/${inputs.shared.data.value}
`

// FuzzRenderEach feeds arbitrary strings as the elements of a forEach and as
// an input's value. Render must not panic; it renders one object per
// element of the product in element order, or refuses two elements with
// one name; and the values come out exactly as data.
func FuzzRenderEach(f *testing.F) {
	for _, s := range []struct{ a, b, input string }{
		{"a", "b", "v"},
		{"x", "x", ""},
		{"${parent.metadata.name}", "$${x}", "\nkind: Secret"},
		{"", "}", "{{ .Values.x }}"},
		{"é漢字🙂", "\xff", "'\"\\"},
	} {
		f.Add(s.a, s.b, s.input)
	}
	rs, err := rules.Parse("rules.yaml", []byte(eachDataRule), rules.Options{})
	if err != nil {
		f.Fatal(err)
	}
	rule := rs[0]
	scope := scoper(f)
	parent := object(f, app)
	f.Fuzz(func(t *testing.T, a, b, input string) {
		p := parent.DeepCopy()
		items := []any{a, b}
		p.Object["spec"].(map[string]any)["items"] = items
		shared := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "shared", "namespace": "team-a"},
			"data":     map[string]any{"value": input},
		}}
		got, err := Render(rule, p, Observed{Inputs: map[string][]*unstructured.Unstructured{"shared": {shared}}}, scope)
		if err != nil {
			if a == b && strings.Contains(err.Error(), "both render") {
				return // indexOf finds the first: two elements, one name
			}
			t.Fatalf("Render() error: %v", err)
		}
		if len(got.Children) != 4 {
			t.Fatalf("rendered %d objects, want 4", len(got.Children))
		}
		for i, c := range got.Children {
			item := items[i/2].(string)
			want := map[string]any{"item": item, "input": input, "both": item + "/" + input}
			if !reflect.DeepEqual(c.Object.Object["data"], want) || c.Index != i || c.Each["item"] != item {
				t.Fatalf("object %d: data %#v, index %d, each %v; want data %#v", i, c.Object.Object["data"], c.Index, c.Each, want)
			}
		}
		// Without the input, the child waits and nothing is rendered.
		got, err = Render(rule, p, Observed{}, scope)
		if err != nil || len(got.Children) != 0 || got.Waiting["cm"].Reason != ReasonInputMissing {
			t.Fatalf("without the input: %v, %d children, waiting %v", err, len(got.Children), got.Waiting)
		}
	})
}
