package rules

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var docRow = regexp.MustCompile("^\\| `(\\$\\{.+\\})` \\| `(.+)` \\|$")

// TestDocsExamples evaluates every "| `${expression}` | `result` |" row of
// docs/rules.md against the parent the page shows, so that the reference
// stays true.
func TestDocsExamples(t *testing.T) {
	data, err := os.ReadFile("../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	_, after, ok := strings.Cut(doc, "<!-- doc-test parent -->\n```yaml\n")
	if !ok {
		t.Fatal("docs/rules.md has no doc-test parent")
	}
	parentYAML, _, _ := strings.Cut(after, "```")
	j, err := yaml.YAMLToJSON([]byte(parentYAML))
	if err != nil {
		t.Fatal(err)
	}
	var parent map[string]any
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	if err := dec.Decode(&parent); err != nil {
		t.Fatal(err)
	}
	parent = jsonInts(parent).(map[string]any)
	rows := 0
	for _, line := range strings.Split(doc, "\n") {
		m := docRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rows++
		expr, want := m[1], m[2]
		t.Run(expr, func(t *testing.T) {
			quoted, err := json.Marshal(expr)
			if err != nil {
				t.Fatal(err)
			}
			got, ok, err := statusValue(t, string(quoted), parent, Options{})
			if err != nil || !ok {
				t.Fatalf("%s: %v (present: %t)", expr, err, ok)
			}
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(got); err != nil {
				t.Fatal(err)
			}
			if g := strings.TrimSpace(b.String()); g != want {
				t.Errorf("%s = %s, the docs say %s", expr, g, want)
			}
		})
	}
	if rows < 40 {
		t.Errorf("found %d example rows in docs/rules.md, expected more: has the table format changed?", rows)
	}
}

// jsonInts turns json.Numbers into int64 or float64, as the API server's
// objects have them.
func jsonInts(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = jsonInts(e)
		}
	case []any:
		for i, e := range v {
			v[i] = jsonInts(e)
		}
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	}
	return v
}
