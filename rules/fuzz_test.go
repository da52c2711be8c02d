package rules

import (
	"os"
	"path/filepath"
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
		vars := NewVars(parent, map[string]any{}, parent)
		for _, r := range rules {
			for _, c := range r.Order() {
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
