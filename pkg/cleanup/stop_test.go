package cleanup

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// fakeScale makes the fake clientset serve deployments/scale from the
// tracked Deployment, as the API server does.
func fakeScale(client *fake.Clientset, updates *[]int32) {
	client.PrependReactor("get", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "scale" {
			return false, nil, nil
		}
		obj, err := client.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("deployments"), a.GetNamespace(), a.(clienttesting.GetAction).GetName())
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment)
		return true, &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace},
			Spec:       autoscalingv1.ScaleSpec{Replicas: *d.Spec.Replicas},
			Status:     autoscalingv1.ScaleStatus{Replicas: d.Status.Replicas, Selector: metav1.FormatLabelSelector(d.Spec.Selector)},
		}, nil
	})
	client.PrependReactor("update", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "scale" {
			return false, nil, nil
		}
		scale := a.(clienttesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
		*updates = append(*updates, scale.Spec.Replicas)
		return true, scale, nil
	})
}

func deployment(replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "kgen", Namespace: "kgen-system"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kgen"}},
		},
	}
}

func pod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kgen-system", Labels: labels}}
}

func TestStopDeployment(t *testing.T) {
	tests := []struct {
		name        string
		objects     []runtime.Object
		wantUpdates []int32
		// podsGoneAfter is when the test deletes the Deployment's pods.
		podsGoneAfter time.Duration
		timeout       time.Duration
		wantErr       string
	}{{
		name:          "scales to zero and waits for the pods",
		objects:       []runtime.Object{deployment(2), pod("kgen-1", map[string]string{"app": "kgen"}), pod("other", map[string]string{"app": "other"})},
		wantUpdates:   []int32{0},
		podsGoneAfter: 10 * time.Second,
		timeout:       time.Minute,
	}, {
		name:        "already at zero with no pods",
		objects:     []runtime.Object{deployment(0)},
		timeout:     time.Minute,
		wantUpdates: nil,
	}, {
		name:    "no Deployment",
		timeout: time.Minute,
	}, {
		name:        "pods that do not stop",
		objects:     []runtime.Object{deployment(1), pod("kgen-1", map[string]string{"app": "kgen"})},
		wantUpdates: []int32{0},
		timeout:     30 * time.Second,
		wantErr:     "wait for the pods of deployment kgen-system/kgen to stop (1 left)",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				client := fake.NewClientset(tt.objects...)
				var updates []int32
				fakeScale(client, &updates)
				start := time.Now()
				if tt.podsGoneAfter > 0 {
					go func() {
						time.Sleep(tt.podsGoneAfter)
						_ = client.CoreV1().Pods("kgen-system").Delete(context.Background(), "kgen-1", metav1.DeleteOptions{})
					}()
				}
				ctx, cancel := context.WithTimeout(t.Context(), tt.timeout)
				defer cancel()
				err := StopDeployment(ctx, client, "kgen-system", "kgen")
				if tt.wantErr == "" && err != nil {
					t.Fatalf("StopDeployment: %v", err)
				}
				if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
					t.Fatalf("StopDeployment error = %v, want one containing %q", err, tt.wantErr)
				}
				if len(updates) != len(tt.wantUpdates) || (len(updates) > 0 && updates[0] != tt.wantUpdates[0]) {
					t.Errorf("scale updates %v, want %v", updates, tt.wantUpdates)
				}
				if took := time.Since(start); err == nil && took < tt.podsGoneAfter {
					t.Errorf("returned after %s, before the pods were gone at %s", took, tt.podsGoneAfter)
				}
			})
		})
	}
}
