package rules

import (
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// An integer beyond 2^53 in a file rule survives its Document, decoded as
// RestoreFiles does (int64, as the API server's objects have them; a
// review: encoding/json's float64 compiled another version, and the
// restore was refused).
func TestDocumentKeepsLargeIntegers(t *testing.T) {
	doc := `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  parent: {apiVersion: example.com/v1, kind: App}
  children:
  - id: a
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: x}
      data: {v: "1"}
      x: 9007199254740993
`
	rs, err := Parse("rules.yaml", []byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	var obj map[string]any
	if err := utiljson.Unmarshal(r.Document(), &obj); err != nil { // as RestoreFiles does
		t.Fatal(err)
	}
	again, err := FromObject(obj, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Version() != r.Version() {
		t.Errorf("the document compiles to version %s, want %s\n%s", again.Version(), r.Version(), r.Document())
	}
}
