package rules

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/openapi/openapitest"

	"kgen.dev/kgen/pkg/kinds"
	kschema "kgen.dev/kgen/pkg/schema"
)

// published answers Options.Types from the OpenAPI v3 documents of a real
// API server (core/v1, apps/v1, batch/v1) that client-go embeds for tests.
var published = sync.OnceValue(func() func(schema.GroupVersionKind) (*kschema.Type, bool) {
	src := kschema.New(openapitest.NewEmbeddedFileClient())
	return func(gvk schema.GroupVersionKind) (*kschema.Type, bool) {
		t, err := src.Type(gvk)
		return t, err == nil && t != nil
	}
})

// deployment is a child template of a Deployment whose spec is given, at
// the indentation of spec's fields.
func deployment(spec string) string {
	return "  - id: d\n    template:\n      apiVersion: apps/v1\n      kind: Deployment\n      metadata: {name: x}\n      spec:\n" + spec
}

func TestChildSchemas(t *testing.T) {
	const containers = "        template:\n          spec:\n            containers:\n"
	tests := []struct {
		name  string
		child string // the child entry
		want  string // the error; "" for none
	}{
		// Accepted.
		{name: "an integer", child: deployment("        replicas: ${parent.spec.replicas}\n")},
		{name: "an optional integer", child: deployment("        replicas: ${parent.spec.?replicas}\n")},
		{name: "a number is dyn", child: deployment("        replicas: ${parent.spec.ratio}\n")},
		{name: "dyn below preserved fields", child: deployment("        replicas: ${parent.spec.values.n}\n")},
		{name: "a double into an integer", child: deployment("        replicas: ${double(parent.spec.replicas) * 2.0}\n")},
		{name: "a boolean", child: deployment("        paused: ${parent.status.ready}\n")},
		{name: "int-or-string from an int", child: deployment("        strategy: {rollingUpdate: {maxSurge: \"${parent.spec.replicas}\"}}\n")},
		{name: "int-or-string from text", child: deployment("        strategy: {rollingUpdate: {maxSurge: \"${parent.spec.replicas}%\"}}\n")},
		{name: "int-or-string from dyn", child: deployment("        strategy: {rollingUpdate: {maxSurge: \"${parent.spec.port}\"}}\n")},
		{name: "quantities", child: deployment(containers + "            - name: a\n              resources: {limits: {cpu: \"${parent.spec.replicas}\", memory: \"${parent.spec.image}Mi\"}}\n")},
		{name: "a map of strings", child: deployment("        selector: {matchLabels: \"${parent.spec.env}\"}\n")},
		{name: "labels", child: deployment("        template: {metadata: {labels: \"${parent.metadata.labels}\"}}\n")},
		{name: "a list of strings", child: deployment(containers + "            - {name: a, args: \"${parent.spec.tags}\"}\n")},
		{name: "a list built in CEL", child: deployment(containers + "            - {name: a, args: \"${[parent.spec.image, 'x']}\"}\n")},
		{name: "an object from the parent", child: deployment("        template: \"${parent.spec.values}\"\n")},
		{name: "a string", child: deployment(containers + "            - {name: a, image: \"${parent.spec.image}\"}\n")},
		{name: "a timestamp renders as a string", child: "  - id: c\n" + cm("x") + "      data: {t: \"${timestamp('2024-01-01T00:00:00Z')}\"}\n"},
		{name: "null", child: deployment("        replicas: ${null}\n")},
		{name: "a kind whose schema is not known", child: "  - id: c\n    template:\n      apiVersion: example.com/v1\n      kind: Other\n      metadata: {name: x}\n      spec: {replcas: \"${parent.spec.image}\"}\n"},
		{name: "a forEach element is dyn", child: "  - id: d\n    forEach: [{n: \"${parent.spec.tags}\"}]\n    template:\n      apiVersion: apps/v1\n      kind: Deployment\n      metadata: {name: \"${n}\"}\n      spec: {replicas: \"${n}\"}\n"},
		{name: "metadata as kgen writes it", child: "  - id: c\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: x, labels: {a: b}, annotations: \"${parent.spec.env}\", finalizers: [x]}\n"},
		{name: "a RawExtension takes anything", child: "  - id: c\n    template:\n      apiVersion: apps/v1\n      kind: ControllerRevision\n      metadata: {name: x}\n      revision: 1\n      data: {any: {thing: 1}}\n"},

		// Rejected, naming the field.
		{name: "a typo", child: deployment("        replcas: 2\n"),
			want: `rules.yaml:13:9: rule "r": child "d": template.spec.replcas: the schema of apps/v1 Deployment has no field "replcas" here: did you mean "replicas"? (its fields: minReadySeconds, paused, progressDeadlineSeconds, replicas, revisionHistoryLimit, selector, strategy, template)`},
		{name: "a typo deep down", child: deployment(containers + "            - {name: a, imagee: x}\n"),
			want: `template.spec.template.spec.containers[0].imagee: the schema of apps/v1 Deployment has no field "imagee" here: did you mean "image"?`},
		{name: "a typo in metadata", child: "  - id: c\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: x, lables: {a: b}}\n",
			want: `template.metadata.lables: the schema of v1 ConfigMap has no field "lables" here: did you mean "labels"?`},
		{name: "a string into an integer", child: deployment("        replicas: ${parent.spec.image}\n"),
			want: `rules.yaml:13:19: rule "r": child "d": template.spec.replicas: ${parent.spec.image}: the schema of apps/v1 Deployment wants an integer here, but the expression's type is string`},
		{name: "text into an integer", child: deployment("        replicas: \"x-${parent.spec.image}\"\n"),
			want: `template.spec.replicas: the schema of apps/v1 Deployment wants an integer here, but text with ${...} in it is a string`},
		{name: "a map into an integer", child: deployment("        replicas: ${parent.spec.env}\n"),
			want: "wants an integer here, but the expression's type is map(string, string)"},
		{name: "a map into a string", child: deployment("        selector: {matchLabels: {app: \"${parent.spec.env}\"}}\n"),
			want: `template.spec.selector.matchLabels.app: ${parent.spec.env}: the schema of apps/v1 Deployment wants a string here, but the expression's type is map(string, string)`},
		{name: "a list into a string", child: deployment(containers + "            - {name: \"${parent.spec.tags}\"}\n"),
			want: "template.spec.template.spec.containers[0].name: ${parent.spec.tags}: the schema of apps/v1 Deployment wants a string here, but the expression's type is list(string)"},
		{name: "a map into a list", child: deployment(containers + "            - {name: a, args: \"${parent.spec.env}\"}\n"),
			want: "wants a list here, but the expression's type is map(string, string)"},
		{name: "a list of the wrong elements", child: deployment(containers + "            - {name: a, args: \"${[parent.spec.replicas]}\"}\n"),
			want: "wants a list here, but the expression's type is list(int)"},
		{name: "an integer into a string", child: "  - id: c\n" + cm("x") + "      data: {port: \"${parent.spec.replicas}\"}\n",
			want: `template.data.port: ${parent.spec.replicas}: the schema of v1 ConfigMap wants a string here, but the expression's type is int`},
		{name: "a boolean into a quantity", child: deployment(containers + "            - {name: a, resources: {limits: {cpu: \"${parent.status.ready}\"}}}\n"),
			want: "wants a string or a number here, but the expression's type is bool"},
		{name: "a boolean into int-or-string", child: deployment("        strategy: {rollingUpdate: {maxSurge: \"${parent.status.ready}\"}}\n"),
			want: "wants an integer or a string here, but the expression's type is bool"},
		{name: "a mapping into a list", child: deployment("        template: {spec: {containers: {name: a}}}\n"),
			want: "template.spec.template.spec.containers: the schema of apps/v1 Deployment wants a list here, not a mapping"},
		{name: "a list into a string field", child: deployment(containers + "            - {name: [a]}\n"),
			want: "template.spec.template.spec.containers[0].name: the schema of apps/v1 Deployment wants a string here, not a list"},
		{name: "status of a forEach child", child: "  - id: d\n    forEach: [{n: \"${parent.spec.tags}\"}]\n    template:\n      apiVersion: apps/v1\n      kind: Deployment\n      metadata: {name: \"${n}\"}\n      spec: {replicas: \"${parent.spec.image}\"}\n",
			want: "template.spec.replicas: ${parent.spec.image}: the schema of apps/v1 Deployment wants an integer here"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := header + tt.child
			_, err := Parse("rules.yaml", []byte(doc), Options{Schemas: schemas(t), Types: published()})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Parse() error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Parse() error:\n%v\nwant one containing:\n%s", err, tt.want)
			}
			// Without the children's schemas, every rule loads.
			if _, err := Parse("rules.yaml", []byte(doc), Options{Schemas: schemas(t)}); err != nil {
				t.Errorf("Parse() without Types: %v", err)
			}
		})
	}
}

// An untyped parent's fields are dyn: they fit any field.
func TestChildSchemasUntypedParent(t *testing.T) {
	doc := header + deployment("        replicas: ${parent.spec.anything}\n        selector: {matchLabels: {app: \"${parent.spec.labels}\"}}\n")
	if _, err := Parse("rules.yaml", []byte(doc), Options{Types: published()}); err != nil {
		t.Errorf("Parse() error: %v", err)
	}
}

// A child kind with a CustomResourceDefinition's schema (kgenctl validate
// --crd) is checked as a published one, and fields the schema keeps
// unknown take anything.
func TestChildSchemasFromCRD(t *testing.T) {
	child := func(spec string) string {
		return "  - id: a\n    template:\n      apiVersion: example.com/v1\n      kind: App\n      metadata: {name: x}\n      spec: " + spec + "\n"
	}
	tests := []struct{ spec, want string }{
		{spec: "{image: x, values: {any: {thing: 1}}, port: \"${parent.spec.image}\"}"},
		{spec: "{imagee: x}", want: `template.spec.imagee: the schema of example.com/v1 App has no field "imagee" here: did you mean "image"?`},
		{spec: "{replicas: \"${parent.spec.image}\"}", want: "template.spec.replicas: ${parent.spec.image}: the schema of example.com/v1 App wants an integer here, but the expression's type is string"},
		{spec: "{env: {a: \"${parent.spec.replicas}\"}}", want: "template.spec.env.a: ${parent.spec.replicas}: the schema of example.com/v1 App wants a string here"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(header+child(tt.spec)), Options{Schemas: schemas(t)})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Parse() error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Parse() error:\n%v\nwant one containing:\n%s", err, tt.want)
			}
		})
	}
}

// A built-in parent kind's expressions are type-checked against its
// published schema, as a CRD parent's are against the CRD.
func TestBuiltinParentTypes(t *testing.T) {
	tests := []struct{ expr, want string }{
		{expr: "parent.metadata.name + parent.spec.finalizers.join(',') + parent.status.phase"},
		{expr: "string(parent.metadata.?labels.orValue({}).size())"},
		{expr: "parent.spec.finalizerz.join(',')", want: `parent.spec has no field "finalizerz" in the schema of v1 Namespace: did you mean "finalizers"?`},
		{expr: "parent.status.phase + 1", want: "found no matching overload for '_+_' applied to '(string, int)'"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			doc := strings.Replace(header, "apiVersion: example.com/v1, kind: App", "apiVersion: v1, kind: Namespace", 1) +
				"  - id: a\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: x, namespace: y}\n      data: {v: \"${" + tt.expr + "}\"}\n"
			rs, err := Parse("rules.yaml", []byte(doc), Options{Types: published()})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Parse() error: %v", err)
			case tt.want == "" && !rs[0].Parent.TypeChecked:
				t.Error("the rule was not type-checked")
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Parse() error:\n%v\nwant one containing:\n%s", err, tt.want)
			}
		})
	}
}

// Every example loads with its CRD and the published schemas of the kinds
// client-go embeds: the checks reject none of them.
func TestExamplesFitTheirSchemas(t *testing.T) {
	files, _ := filepath.Glob("../examples/*/rules.yaml")
	if len(files) == 0 {
		t.Fatal("no examples found")
	}
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(f)), func(t *testing.T) {
			static := kinds.NewStatic()
			crdFile := filepath.Join(filepath.Dir(f), "crd.yaml")
			if data, err := os.ReadFile(crdFile); err == nil {
				for _, crd := range splitCRDs(t, data) {
					if err := static.AddCRD(crd); err != nil {
						t.Fatal(err)
					}
				}
			}
			rs, err := Load([]string{f}, Options{Schemas: static.Schema, Types: published()})
			if err != nil {
				t.Fatalf("Load() error: %v", err)
			}
			if len(rs) == 0 {
				t.Fatal("no rules")
			}
		})
	}
}

// splitCRDs decodes the objects of a YAML stream.
func splitCRDs(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := map[string]any{}
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

// BenchmarkLoadExamples loads every example's rules with its CRD: without
// the children's schemas (as before they were checked), with them known
// (a rule reload), and with them read from the documents each time (the
// first check after kgen starts or a CRD changes).
func BenchmarkLoadExamples(b *testing.B) {
	files, _ := filepath.Glob("../examples/*/rules.yaml")
	static := kinds.NewStatic()
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(filepath.Dir(f), "crd.yaml"))
		if err != nil {
			continue
		}
		for _, crd := range splitCRDs(&testing.T{}, data) {
			_ = static.AddCRD(crd)
		}
	}
	load := func(b *testing.B, types func(schema.GroupVersionKind) (*kschema.Type, bool)) {
		for _, f := range files {
			if _, err := Load([]string{f}, Options{Schemas: static.Schema, Types: types}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("without children's schemas", func(b *testing.B) {
		for b.Loop() {
			load(b, nil)
		}
	})
	b.Run("with children's schemas known", func(b *testing.B) {
		types := published()
		for b.Loop() {
			load(b, types)
		}
	})
	b.Run("reading the documents", func(b *testing.B) {
		for b.Loop() {
			src := kschema.New(openapitest.NewEmbeddedFileClient())
			load(b, func(gvk schema.GroupVersionKind) (*kschema.Type, bool) {
				t, err := src.Type(gvk)
				return t, err == nil && t != nil
			})
		}
	})
}
