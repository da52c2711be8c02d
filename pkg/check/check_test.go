package check

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
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

// Right after a rolling update the old leader has released the Lease and no
// standby has taken it yet: with Wait the check looks again and passes once
// one has; without, or when nobody takes it, it fails with what it saw last.
func TestRunWaits(t *testing.T) {
	ref := types.NamespacedName{Namespace: "kgen-system", Name: "kgen"}
	tests := []struct {
		name      string
		wait      time.Duration
		takenFrom time.Duration // when a standby takes the Lease; 0: never
		wantErr   string
		wantTime  time.Duration // how long Run took
	}{
		{name: "taken within the wait", wait: time.Minute, takenFrom: 2800 * time.Millisecond, wantTime: 3 * time.Second},
		{name: "no wait checks once", takenFrom: 3 * time.Second, wantErr: "held by no replica"},
		{name: "never taken", wait: 10 * time.Second, wantErr: "held by no replica", wantTime: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				kube := fake.NewClientset(newDeployment(2, 2))
				free := newLease("", 0)
				free.Spec.RenewTime = &metav1.MicroTime{Time: start}
				if _, err := kube.CoordinationV1().Leases(ref.Namespace).Create(context.Background(), free, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				if tt.takenFrom > 0 {
					go func() {
						time.Sleep(tt.takenFrom)
						taken := newLease("kgen-new_1", 0)
						taken.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
						if _, err := kube.CoordinationV1().Leases(ref.Namespace).Update(context.Background(), taken, metav1.UpdateOptions{}); err != nil {
							t.Error(err)
						}
					}()
				}
				ok, err := Run(context.Background(), kube, Config{Deployment: ref, Lease: ref, Wait: tt.wait})
				if took := time.Since(start); took != tt.wantTime {
					t.Errorf("Run took %s, want %s", took, tt.wantTime)
				}
				if tt.wantErr == "" {
					if err != nil {
						t.Fatalf("Run: %v", err)
					}
					if want := "lease kgen-system/kgen is held by kgen-new_1, renewed 0s ago"; !slices.Contains(ok, want) {
						t.Errorf("ok = %q, want it to hold %q", ok, want)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Run: %v, want an error containing %q", err, tt.wantErr)
				}
				synctest.Wait() // the standby's goroutine, if any, ends in the bubble
				time.Sleep(tt.takenFrom)
			})
		})
	}
}
