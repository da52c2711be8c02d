package charts

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"kgen.dev/kgen/rules"
)

// The values' schema does not admit null spec fields that kgen refuses
// (a review of dfa3c58: helm template passed them, and only the hook, on
// a cluster, caught them).
func TestSchemaRefusesNullsKgenRefuses(t *testing.T) {
	for _, field := range []string{"status", "inputs", "allowCrossNamespace", "allowBindRoles", "serviceAccount"} {
		values := filepath.Join(t.TempDir(), "values.yaml")
		text := fmt.Sprintf(`rules:
  a:
    apiVersion: kgen.dev/v1alpha1
    kind: Rule
    metadata: {name: a}
    spec:
      parent: {apiVersion: v1, kind: ConfigMap}
      children:
      - id: x
        template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${parent.metadata.name}-x"}}
      %s: null
`, field)
		if err := os.WriteFile(values, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := helm(t, "template", "kgen", "kgen", "-f", values)
		if err != nil {
			continue // the schema refuses it: fine
		}
		for _, o := range decode(t, out) {
			if o.GetKind() != "ConfigMap" || o.GetName() != "kgen-rules" {
				continue
			}
			var cm corev1.ConfigMap
			convert(t, o, &cm)
			if _, err := rules.Parse("a.yaml", []byte(cm.Data["a.yaml"]), rules.Options{}); err != nil {
				t.Errorf("spec.%s: null passes the values' schema, but kgen refuses the rendered rule: %v", field, err)
			}
		}
	}
}

// The validate hook may use as much memory as kgen: kgenctl validate needs
// more than 128Mi from about 150 rules of the WebApp example's size
// (a review of dfa3c58 measured 131 MB RSS at 150, 331 MB at 500), so a
// hook with less would OOM on rules kgen runs, and fail the upgrade with
// no log.
func TestValidateHookMemoryAtLeastKgens(t *testing.T) {
	out, err := helm(t, "template", "kgen", "kgen", "--set-file", "rules.webapp=../examples/webapp/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var job *batchv1.Job
	var kgen resource.Quantity
	for _, o := range decode(t, out) {
		switch {
		case o.GetKind() == "Job" && strings.HasSuffix(o.GetName(), "-validate"):
			job = &batchv1.Job{}
			convert(t, o, job)
		case o.GetKind() == "Deployment":
			var d appsv1.Deployment
			convert(t, o, &d)
			kgen = d.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
		}
	}
	if job == nil {
		t.Fatal("no validate Job")
	}
	got := job.Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
	if got.Cmp(kgen) < 0 {
		t.Errorf("the validate hook's memory limit is %s, kgen's %s: rules kgen loads can OOM the hook", got.String(), kgen.String())
	}
}
