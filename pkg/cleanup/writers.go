package cleanup

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// WriterFlags are the prefixes of the arguments of kgenctl run that tell
// how its replicas agree on who writes: leader election and its Lease, or
// sharding. Replicas whose writer arguments differ do not see each other's
// Leases, so they must never run together.
var WriterFlags = []string{"--leader-elect=", "--leader-elect-namespace=", "--leader-elect-id=", "--shards"}

// WriterArgs returns the arguments that WriterFlags match, sorted.
func WriterArgs(args []string) []string {
	var out []string
	for _, arg := range args {
		for _, flag := range WriterFlags {
			if strings.HasPrefix(arg, flag) {
				out = append(out, arg)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// Writers says how kgen is to run next: as the Deployment Name, whose
// container kgen runs with the writer arguments Args (see WriterArgs).
type Writers struct {
	Name string
	Args []string
}

// StaleWriters returns the names of the Deployments in namespace that
// selector matches and that must stop before kgen runs as next says:
// every one of another name (Helm removes it only after it made the new
// one), and the one of next's name when its container kgen (or its only
// container) runs with other writer arguments. A rolling update between
// those would have old and new pods writing together.
func StaleWriters(ctx context.Context, kube kubernetes.Interface, namespace, selector string, next Writers) ([]string, error) {
	list, err := kube.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list the deployments %q in %s: %w", selector, namespace, err)
	}
	want := WriterArgs(next.Args)
	var stale []string
	for i := range list.Items {
		d := &list.Items[i]
		if d.Name != next.Name || !slices.Equal(WriterArgs(kgenArgs(d)), want) {
			stale = append(stale, d.Name)
		}
	}
	slices.Sort(stale)
	return stale, nil
}

// kgenArgs returns the arguments of a Deployment's container kgen, or of
// its only container.
func kgenArgs(d *appsv1.Deployment) []string {
	containers := d.Spec.Template.Spec.Containers
	for _, c := range containers {
		if c.Name == "kgen" {
			return c.Args
		}
	}
	if len(containers) == 1 {
		return containers[0].Args
	}
	return nil
}
