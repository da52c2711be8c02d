package reconcile

import (
	"os"
	"testing"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/rules"
)

// BenchmarkRenderWebApp renders the webapp example's children and status for
// one parent, as the controller does on every reconcile of a WebApp.
func BenchmarkRenderWebApp(b *testing.B) {
	rs, err := rules.Load([]string{"../../examples/webapp/rules.yaml"}, rules.Options{})
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile("../../examples/webapp/parent.yaml")
	if err != nil {
		b.Fatal(err)
	}
	parent := object(b, string(data))
	parent.SetUID("6a1f1b8e-0d3c-4c55-9a53-3c7f1c7b2a10")
	crdData, err := os.ReadFile("../../examples/webapp/crd.yaml")
	if err != nil {
		b.Fatal(err)
	}
	scope := kinds.NewStatic()
	if err := scope.AddCRD(object(b, string(crdData))); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r, err := Render(rs[0], parent, Observed{}, scope)
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Children) != 3 {
			b.Fatalf("rendered %d children, want 3", len(r.Children))
		}
	}
}
