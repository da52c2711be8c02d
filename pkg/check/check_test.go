package check

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

var now = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func newDeployment(replicas, available int32, conditions ...appsv1.DeploymentCondition) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "kgen", Namespace: "kgen-system"},
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas},
		Status:     appsv1.DeploymentStatus{AvailableReplicas: available, Conditions: conditions},
	}
}

func newLease(holder string, renewedAgo time.Duration) *coordinationv1.Lease {
	duration := int32(15)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "kgen", Namespace: "kgen-system"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration,
			RenewTime: &metav1.MicroTime{Time: now.Add(-renewedAgo)}},
	}
}

func TestRun(t *testing.T) {
	ref := types.NamespacedName{Namespace: "kgen-system", Name: "kgen"}
	tests := []struct {
		name    string
		objects []runtime.Object
		noLease bool
		wantOK  []string
		wantErr []string
	}{{
		name:    "a leader that renews and available replicas",
		objects: []runtime.Object{newDeployment(2, 2), newLease("kgen-abc_1", 3*time.Second)},
		wantOK:  []string{"deployment kgen-system/kgen has 2 of 2 replicas available", "lease kgen-system/kgen is held by kgen-abc_1, renewed 3s ago"},
	}, {
		name:    "without leader election only the Deployment counts",
		objects: []runtime.Object{newDeployment(1, 1)},
		noLease: true,
		wantOK:  []string{"deployment kgen-system/kgen has 1 of 1 replicas available"},
	}, {
		name:    "scaled to 0, its Lease released",
		objects: []runtime.Object{newDeployment(0, 0), newLease("", time.Minute)},
		wantErr: []string{"deployment kgen-system/kgen is scaled to 0", "lease kgen-system/kgen is held by no replica"},
	}, {
		name: "no replica available",
		objects: []runtime.Object{newDeployment(2, 0, appsv1.DeploymentCondition{Type: appsv1.DeploymentAvailable,
			Status: corev1.ConditionFalse, Message: "Deployment does not have minimum availability."}), newLease("kgen-abc_1", time.Second)},
		wantOK:  []string{"lease kgen-system/kgen is held by kgen-abc_1, renewed 1s ago"},
		wantErr: []string{"deployment kgen-system/kgen has 0 of 2 replicas available: Deployment does not have minimum availability."},
	}, {
		name:    "a leader that stopped renewing",
		objects: []runtime.Object{newDeployment(2, 2), newLease("kgen-abc_1", 40*time.Second)},
		wantOK:  []string{"deployment kgen-system/kgen has 2 of 2 replicas available"},
		wantErr: []string{"lease kgen-system/kgen was last renewed by kgen-abc_1 40s ago, longer than its duration of 15s"},
	}, {
		name:    "nothing installed",
		wantErr: []string{`deployment kgen-system/kgen: deployments.apps "kgen" not found`, "lease kgen-system/kgen does not exist"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Deployment: ref, Lease: ref, Now: func() time.Time { return now }}
			if tt.noLease {
				cfg.Lease = types.NamespacedName{}
			}
			ok, err := Run(context.Background(), fake.NewClientset(tt.objects...), cfg)
			if !slices.Equal(ok, tt.wantOK) {
				t.Errorf("ok = %q, want %q", ok, tt.wantOK)
			}
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if len(got) != len(tt.wantErr) {
				t.Fatalf("errors %q, want %d: %q", got, len(tt.wantErr), tt.wantErr)
			}
			for i, want := range tt.wantErr {
				if !strings.Contains(got[i], want) {
					t.Errorf("error %d = %q, want one containing %q", i, got[i], want)
				}
			}
		})
	}
}
