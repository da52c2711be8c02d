package cleanup

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func kgenDeployment(name, release string, args ...string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kgen-system",
			Labels: map[string]string{"app.kubernetes.io/instance": release, "app.kubernetes.io/part-of": "kgen"}},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "kgen", Args: append([]string{"run", "--workers=8"}, args...)}}}}},
	}
}

// The Deployments of a release that must stop before an upgrade or a
// rollback: those whose writer arguments differ from the next ones, or
// whose name does; the next one as it runs now stays.
func TestStaleWriters(t *testing.T) {
	elected := []string{"--leader-elect=true", "--leader-elect-namespace=kgen-system", "--leader-elect-id=kgen"}
	sharded := []string{"--leader-elect=false", "--shards", "--leader-elect-namespace=kgen-system"}
	next := Writers{Name: "kgen", Args: elected}
	tests := []struct {
		name    string
		objects []runtime.Object
		want    []string
	}{
		{name: "nothing changes", objects: []runtime.Object{kgenDeployment("kgen", "kgen", elected...)}},
		{name: "the same flags in another order, among others", objects: []runtime.Object{kgenDeployment("kgen", "kgen", "--leader-elect-id=kgen", "--v=2", "--leader-elect-namespace=kgen-system", "--leader-elect=true")}},
		{name: "no leader election", objects: []runtime.Object{kgenDeployment("kgen", "kgen", "--leader-elect=false")}, want: []string{"kgen"}},
		{name: "another Lease", objects: []runtime.Object{kgenDeployment("kgen", "kgen", "--leader-elect=true", "--leader-elect-namespace=kgen-system", "--leader-elect-id=other")}, want: []string{"kgen"}},
		{name: "sharding", objects: []runtime.Object{kgenDeployment("kgen", "kgen", sharded...)}, want: []string{"kgen"}},
		{name: "another name", objects: []runtime.Object{kgenDeployment("kgen-old", "kgen", elected...)}, want: []string{"kgen-old"}},
		{name: "another release", objects: []runtime.Object{kgenDeployment("other", "other", "--leader-elect=false")}},
		{name: "none yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := StaleWriters(context.Background(), fake.NewClientset(tt.objects...), "kgen-system",
				"app.kubernetes.io/instance=kgen,app.kubernetes.io/part-of=kgen", next)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("StaleWriters = %q, want %q", got, tt.want)
			}
		})
	}
}
