package reconcile

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/json"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/rules"
)

// writeStatus writes observedGeneration, the Ready condition and the rule's
// status fields under the parent's .status, through the status subresource
// with server-side apply, and only when they differ from what is there.
// A parent kind without a status subresource gets no status, and neither
// does a built-in kind: its status has a fixed schema (no Ready condition of
// kgen's) and belongs to Kubernetes' own controllers.
func (r *Reconciler) writeStatus(ctx context.Context, rule *rules.Rule, mapping mapper.Mapping, parent *unstructured.Unstructured, fields map[string]any, ready metav1.Condition) error {
	if !mapping.HasSubresource("status") {
		return nil
	}
	if _, builtin := kinds.Builtin(parent.GroupVersionKind().GroupKind()); builtin {
		return nil
	}
	current, _, _ := unstructured.NestedMap(parent.Object, "status")
	status := map[string]any{}
	for k, v := range fields {
		status[k] = v
	}
	if fields == nil {
		// The rule's fields could not be computed: keep what is there
		// rather than blank it.
		for _, f := range rule.Status {
			if v, ok := current[f.Name]; ok {
				status[f.Name] = v
			}
		}
	}
	ready.ObservedGeneration = parent.GetGeneration()
	ready.LastTransitionTime = metav1.Now()
	var conditions []any
	replaced := false
	if list, ok := current["conditions"].([]any); ok {
		for _, c := range list {
			m, ok := c.(map[string]any)
			if !ok || m["type"] != ConditionReady {
				conditions = append(conditions, c)
				continue
			}
			if m["status"] == string(ready.Status) {
				// metav1.Condition: the time changes only on a transition.
				if t, ok := m["lastTransitionTime"].(string); ok {
					if parsed, err := parseTime(t); err == nil {
						ready.LastTransitionTime = parsed
					}
				}
			}
			conditions = append(conditions, conditionMap(ready))
			replaced = true
		}
	}
	if !replaced {
		conditions = append(conditions, conditionMap(ready))
	}
	status["conditions"] = conditions
	status["observedGeneration"] = parent.GetGeneration()
	if subset(status, current, "") && len(current) > 0 {
		return nil
	}
	patch := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	patch.SetAPIVersion(parent.GetAPIVersion())
	patch.SetKind(parent.GetKind())
	patch.SetName(parent.GetName())
	patch.SetNamespace(parent.GetNamespace())
	patch.SetUID(parent.GetUID())
	updated, err := r.resource(mapping, parent.GetNamespace()).ApplyStatus(ctx, parent.GetName(), patch,
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("write status of %s: %w", describeObject(mapping, parent), err)
	}
	r.recent.remember(updated)
	return nil
}

func conditionMap(c metav1.Condition) map[string]any {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
	if err != nil { // a metav1.Condition always converts
		panic(err)
	}
	return m
}

func parseTime(s string) (metav1.Time, error) {
	var t metav1.Time
	err := json.Unmarshal([]byte(`"`+s+`"`), &t)
	return t, err
}
