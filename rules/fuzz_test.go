package rules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary files to the loader: it must never panic, every
// error must have a cause, and the rules it accepts must evaluate (to values
// or errors) without panicking.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.yaml")
	more, _ := filepath.Glob("../examples/*/rules.yaml")
	for _, path := range append(seeds, more...) {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"",
		"---\n---\n",
		"a: &a [*a]\n",
		"apiVersion: kgen.dev/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec: {parent: {apiVersion: v1, kind: Pod}, children: [{id: a, template: {apiVersion: v1, kind: Pod, metadata: {name: '${'}}}]}\n",
		header + "  - id: a\n" + cm("${children.a}"),
		header + "  - id: a\n" + cm("${parent.spec.x}-${[1,2].map(x, x)}") + "      <<: {data: {a: b}}\n",
		eachRule(`[{r: "${parent.spec.list}"}, {t: "${parent.spec.map}"}]`, "x-${r}-${t.key}", "    includeWhen: ['${t.value != 0}']\n"),
		inputRule("  - {id: cfg, apiVersion: v1, kind: ConfigMap, name: '${parent.metadata.name}'}\n  - {id: all, apiVersion: v1, kind: Secret, selector: {matchLabels: {a: b}}}\n", "${inputs.cfg.data.x}${size(inputs.all)}"),
		strings.Replace(header, "kind: App}", "kind: App, schema: {image: string, n: 'integer | default=1'}}", 1) + "  - id: a\n" + cm("${parent.spec.image}"),
	} {
		f.Add([]byte(s))
	}
	parent := testParent()
	// One compiler for all inputs, as Parse would build the same one for
	// each: building the CEL environment is what takes time.
	c, err := newCompiler(Options{}.withDefaults())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, errs := c.parse("fuzz.yaml", data)
		errs = append(errs, uniqueNames(rules)...)
		if len(errs) > 0 {
			for _, e := range errs {
				if e == nil || e.Err == nil || e.Error() == "" {
					t.Fatalf("an error without a cause: %#v", e)
				}
			}
			return
		}
		vars := NewVars(parent, map[string]any{}, parent).WithInputs(map[string]any{})
		for _, r := range rules {
			for _, c := range r.Order() {
				elements, _ := c.Elements(vars)
				for _, each := range elements {
					_, _, _ = c.Template.Evaluate(vars.With(each))
				}
				_, _, _ = c.Template.Evaluate(vars)
				for _, e := range append(c.IncludeWhen, c.ReadyWhen...) {
					_, _ = e.EvalBool(vars)
				}
			}
			for _, s := range r.Status {
				_, _, _ = s.Value.Evaluate(vars)
			}
		}
	})
}
