package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"kgen.dev/kgen/rules"
)

// A kgen from before the documents reads RULE_running as
// strings.TrimSpace(value): the key holds the version alone, the document
// is a key of its own (a review: with the document in the key, a
// rollback to the previous kgen took no rule for one that ran).
func TestRunningKeyReadableByPreviousKgen(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	r := &ConfigMapRecord{Client: client.CoreV1(), Namespace: "kgen"}
	if err := r.UpdateRunning(ctx, "web", "sha256:1", []byte(`{"kind":"Rule"}`)); err != nil {
		t.Fatal(err)
	}
	cm, err := client.CoreV1().ConfigMaps("kgen").Get(ctx, DefaultRecordName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if old := strings.TrimSpace(cm.Data["web"+RunningKeySuffix]); old != "sha256:1" { // the previous kgen's Load
		t.Errorf("the previous kgen reads the running version of web as %q, want %q", old, "sha256:1")
	}
}

// limitConfigMaps makes the fake API server refuse a ConfigMap whose data
// exceeds 1 MiB, as the real one does.
func limitConfigMaps(client *fake.Clientset) {
	tracker := client.Tracker()
	apply := clienttesting.ObjectReaction(tracker)
	client.PrependReactor("patch", "configmaps", func(action clienttesting.Action) (bool, runtime.Object, error) {
		gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
		p := action.(clienttesting.PatchAction)
		before, _ := tracker.Get(gvr, p.GetNamespace(), p.GetName())
		handled, obj, err := apply(action)
		if err != nil {
			return handled, obj, err
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			size := 0
			for k, v := range cm.Data {
				size += len(k) + len(v)
			}
			if size > corev1.MaxSecretSize {
				if before != nil {
					_ = tracker.Update(gvr, before, p.GetNamespace())
				}
				return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, p.GetName(),
					field.ErrorList{field.TooLong(field.NewPath(""), "", corev1.MaxSecretSize)})
			}
		}
		return handled, obj, err
	})
}

// The documents stay within their budget, under a ConfigMap's 1 MiB: 300
// rules of 4 KiB each have their versions recorded, the later ones
// without their documents, and the rules' scopes still fit (a review:
// the record outgrew 1 MiB, and the API server refused the versions and
// the scopes).
func TestRecordStaysUnderTheConfigMapLimit(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	limitConfigMaps(client)
	r := &ConfigMapRecord{Client: client.CoreV1(), Namespace: "kgen"}
	spec := map[string]any{"parent": map[string]any{"apiVersion": "example.com/v1", "kind": "App"},
		"children": []any{map[string]any{"id": "a", "template": map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "x"}, "data": map[string]any{"script": strings.Repeat("echo ${parent.spec.x}\n", 200)}}}}}
	var failed error
	for i := range 300 {
		name := fmt.Sprintf("tenant%03d", i)
		doc, _ := json.Marshal(map[string]any{"apiVersion": rules.APIVersion, "kind": rules.Kind, "metadata": map[string]any{"name": name}, "spec": spec})
		if err := r.UpdateRunning(ctx, name, "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", doc); err != nil {
			failed = err
			break
		}
	}
	if failed != nil {
		t.Errorf("recording the running versions of 300 rules of 4 KiB: %v", failed)
	}
	if _, err := r.Update(ctx, "another", []ChildScope{{GroupVersionKind: deployments}}, nil); err != nil {
		t.Errorf("recording a rule's scopes after that: %v", err)
	}
}

// A Rule object's rule records no document: its status keeps the version
// that runs, and a file rule of its name that does not fit must not run
// the object's spec (a review).
func TestRuleObjectRecordsNoDocument(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &memRecord{scopes: map[string][]ChildScope{}}
		obj := map[string]any{"apiVersion": "kgen.dev/v1alpha1", "kind": "Rule", "metadata": map[string]any{"name": "r"},
			"spec": map[string]any{"parent": map[string]any{"apiVersion": "example.com/v1", "kind": "Gadget", "namespaces": []any{"ns"}},
				"children": []any{map[string]any{"id": "config", "template": map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"name": "${parent.metadata.name}"}}}}}}
		rule, err := rules.FromObject(obj, rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		startRecorded(t, rec, rule)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.running["r"] != rule.Version() {
			t.Fatalf("recorded %q, want %q", rec.running["r"], rule.Version())
		}
		if doc := rec.docs["r"]; doc != nil {
			t.Errorf("a Rule object's rule recorded its document (%d bytes): %s", len(doc), doc)
		}
	})
}
