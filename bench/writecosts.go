package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/pkg/reconcile"
)

// writeCost is what one kind of write costs the API server.
type writeCost struct {
	Name string `json:"name"`
	// Writes is how many were made, by the loader's goroutines.
	Writes int `json:"writes"`
	// Wall is how long they took.
	Wall time.Duration `json:"wallNs"`
	// APIServerCPU and EtcdCPU are the CPU seconds the processes used.
	APIServerCPU float64 `json:"apiServerCPUSeconds"`
	EtcdCPU      float64 `json:"etcdCPUSeconds"`
}

// measureWriteCosts makes n writes of each kind kgen could make, each kind
// on a fresh control plane, and reports what each cost the API server: the
// candidates for a child's create, a Deployment's update and a parent's
// status write. The decision between them is kgen's; this says what it
// costs (bench -write-costs N).
func (b *bench) measureWriteCosts(ctx context.Context, n int) ([]writeCost, error) {
	type kind struct {
		name string
		// setup makes what the writes need (parents, children) in ns,
		// uncounted; write makes write i.
		setup func(ctx context.Context, ns string, i int) error
		write func(ctx context.Context, ns string, i int) error
	}
	// What setup prepares for write i, so the writes measured make no read.
	parents := make([]*unstructured.Unstructured, n)
	children := make([]map[string]*unstructured.Unstructured, n)
	rendered := func(_ context.Context, _ string, i int, kindName string) (*unstructured.Unstructured, error) {
		if c := children[i][kindName]; c != nil {
			return c.DeepCopy(), nil
		}
		return nil, fmt.Errorf("no %s", kindName)
	}
	render := func(i int, p *unstructured.Unstructured) error {
		parents[i] = p
		r, err := reconcile.Render(b.rule, p, reconcile.Observed{}, b.scope)
		if err != nil {
			return err
		}
		children[i] = map[string]*unstructured.Unstructured{}
		for _, c := range r.Children {
			children[i][c.Object.GetKind()] = c.Object
		}
		return nil
	}
	parentOnly := func(ctx context.Context, ns string, i int) error {
		p, err := b.create(ctx, webappGVR, ns, parent(ns, i, false))
		if err != nil {
			return err
		}
		// Another controller's condition, which a status write must keep.
		status := []byte(`{"status":{"conditions":[{"type":"Synced","status":"True","reason":"Other","message":"another controller's","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)
		if p, err = b.dyn.Resource(webappGVR).Namespace(ns).Patch(ctx, p.GetName(), types.MergePatchType, status, metav1.PatchOptions{FieldManager: "other"}, "status"); err != nil {
			return err
		}
		return render(i, p)
	}
	withDeployment := func(ctx context.Context, ns string, i int) error {
		if err := parentOnly(ctx, ns, i); err != nil {
			return err
		}
		d, err := rendered(ctx, ns, i, "Deployment")
		if err != nil {
			return err
		}
		d.SetResourceVersion("18446744073709551615")
		_, err = b.dyn.Resource(deployGVR).Namespace(ns).Apply(ctx, d.GetName(), d, metav1.ApplyOptions{FieldManager: reconcile.FieldManager, Force: true})
		return err
	}
	ready := func(gen int64) map[string]any {
		return map[string]any{"type": "Ready", "status": "False", "reason": reconcile.ReasonNotReady, "observedGeneration": gen,
			"message":            "child deployment: status.availableReplicas >= parent.spec.replicas is false",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}
	}
	fields := map[string]any{"configName": "x-config", "availableReplicas": int64(0), "url": "http://x.ns.svc:8080"}
	kinds := []kind{{
		name:  "child create: POST",
		setup: parentOnly,
		write: func(ctx context.Context, ns string, i int) error {
			c, err := rendered(ctx, ns, i, "ConfigMap")
			if err != nil {
				return err
			}
			_, err = b.create(ctx, cmGVR, ns, c)
			return err
		},
	}, {
		name:  "child create: server-side apply that cannot take over (kgen)",
		setup: parentOnly,
		write: func(ctx context.Context, ns string, i int) error {
			c, err := rendered(ctx, ns, i, "ConfigMap")
			if err != nil {
				return err
			}
			c.SetResourceVersion("18446744073709551615")
			_, err = b.dyn.Resource(cmGVR).Namespace(ns).Apply(ctx, c.GetName(), c, metav1.ApplyOptions{FieldManager: reconcile.FieldManager, Force: true})
			return err
		},
	}, {
		name:  "Deployment update: merge patch of spec.replicas (raw)",
		setup: withDeployment,
		write: func(ctx context.Context, ns string, i int) error {
			return b.patchReplicas(ctx, deployGVR, ns, parentName(i))
		},
	}, {
		name:  "Deployment update: server-side apply of the template (kgen)",
		setup: withDeployment,
		write: func(ctx context.Context, ns string, i int) error {
			d, err := rendered(ctx, ns, i, "Deployment")
			if err != nil {
				return err
			}
			_ = unstructured.SetNestedField(d.Object, newReplicas, "spec", "replicas")
			_, err = b.dyn.Resource(deployGVR).Namespace(ns).Apply(ctx, d.GetName(), d, metav1.ApplyOptions{FieldManager: reconcile.FieldManager, Force: true})
			return err
		},
	}, {
		name:  "Deployment update: server-side apply of the template, sent as block YAML",
		setup: withDeployment,
		write: func(ctx context.Context, ns string, i int) error {
			d, err := rendered(ctx, ns, i, "Deployment")
			if err != nil {
				return err
			}
			_ = unstructured.SetNestedField(d.Object, newReplicas, "spec", "replicas")
			body, err := yaml.Marshal(d.Object)
			if err != nil {
				return err
			}
			return b.kube.AppsV1().RESTClient().Patch(types.ApplyPatchType).Namespace(ns).Resource("deployments").Name(d.GetName()).
				Param("fieldManager", reconcile.FieldManager).Param("force", "true").Body(body).Do(ctx).Error()
		},
	}, {
		name:  "status: server-side apply of only kgen's Ready, observedGeneration and fields",
		setup: parentOnly,
		write: func(ctx context.Context, ns string, i int) error {
			status := map[string]any{"observedGeneration": int64(1), "conditions": []any{ready(1)}}
			for k, v := range fields {
				status[k] = v
			}
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1alpha1", "kind": "WebApp",
				"metadata": map[string]any{"name": parentName(i), "namespace": ns}, "status": status}}
			_, err := b.dyn.Resource(webappGVR).Namespace(ns).ApplyStatus(ctx, parentName(i), u, metav1.ApplyOptions{FieldManager: reconcile.FieldManager, Force: true})
			return err
		},
	}, {
		name:  "status: JSON patch of Ready, observedGeneration and fields, testing the resourceVersion",
		setup: parentOnly,
		write: func(ctx context.Context, ns string, i int) error {
			p := parents[i]
			ops := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": p.GetResourceVersion()},
				{"op": "add", "path": "/status/conditions/-", "value": ready(1)},
				{"op": "add", "path": "/status/observedGeneration", "value": 1}}
			for k, v := range fields {
				ops = append(ops, map[string]any{"op": "add", "path": "/status/" + k, "value": v})
			}
			body, _ := json.Marshal(ops)
			_, err := b.dyn.Resource(webappGVR).Namespace(ns).Patch(ctx, parentName(i), types.JSONPatchType, body, metav1.PatchOptions{FieldManager: reconcile.FieldManager}, "status")
			return err
		},
	}, {
		name:  "status: merge patch under a resourceVersion precondition (all conditions)",
		setup: parentOnly,
		write: func(ctx context.Context, ns string, i int) error {
			p := parents[i]
			conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
			status := map[string]any{"observedGeneration": int64(1), "conditions": append(conds, ready(1))}
			for k, v := range fields {
				status[k] = v
			}
			body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": p.GetResourceVersion()}, "status": status})
			_, err := b.dyn.Resource(webappGVR).Namespace(ns).Patch(ctx, parentName(i), types.MergePatchType, body, metav1.PatchOptions{FieldManager: reconcile.FieldManager}, "status")
			return err
		},
	}}
	var out []writeCost
	for _, k := range kinds {
		if err := b.freshControlPlane(ctx, false); err != nil {
			return nil, err
		}
		ns := "costs"
		if err := b.namespace(ctx, ns); err != nil {
			return nil, err
		}
		if err := b.load(ctx, n, func(ctx context.Context, i int) error { return k.setup(ctx, ns, i) }); err != nil {
			return nil, fmt.Errorf("%s: setup: %w", k.name, err)
		}
		cpu := b.cpuMeter(nil)
		start := time.Now()
		if err := b.load(ctx, n, func(ctx context.Context, i int) error { return k.write(ctx, ns, i) }); err != nil {
			return nil, fmt.Errorf("%s: %w", k.name, err)
		}
		used := cpu.used()
		c := writeCost{Name: k.name, Writes: n, Wall: time.Since(start), APIServerCPU: used["kube-apiserver"], EtcdCPU: used["etcd"]}
		logf("%s: %d in %s, API server %.1f ms of CPU each", c.Name, n, c.Wall.Round(time.Millisecond), 1000*c.APIServerCPU/float64(n))
		out = append(out, c)
	}
	return out, nil
}

// writeCostsReport writes the costs as a Markdown table to dir/write-costs.md.
func writeCostsReport(dir string, costs []writeCost, machine map[string]string) error {
	var s strings.Builder
	s.WriteString("# What kgen's writes cost the API server\n\n")
	s.WriteString("Made with `go run ./bench -write-costs N`: N writes of each kind, by the bench's 16 loader goroutines, each kind on a fresh control plane. ")
	s.WriteString("Everything a write needs (the rendered child, the parent's resourceVersion) is prepared before the writes are timed: the figures are of the writes alone.\n\n")
	for _, k := range []string{"commit", "date", "cpus", "kube-apiserver"} {
		if v, ok := machine[k]; ok {
			fmt.Fprintf(&s, "- %s: %s\n", k, v)
		}
	}
	s.WriteString("\n| write | N | wall | API server CPU per write | etcd CPU per write |\n|---|---:|---:|---:|---:|\n")
	for _, c := range costs {
		fmt.Fprintf(&s, "| %s | %d | %.1f s | %.2f ms | %.2f ms |\n", c.Name, c.Writes, c.Wall.Seconds(),
			1000*c.APIServerCPU/float64(c.Writes), 1000*c.EtcdCPU/float64(c.Writes))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "write-costs.md"), []byte(s.String()), 0o644)
}
