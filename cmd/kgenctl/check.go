package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"kgen.dev/kgen/pkg/check"
)

type checkOptions struct {
	deployment string
	lease      string
	wait       time.Duration
}

func newCheckCmd(out io.Writer) *cobra.Command {
	o := &checkOptions{}
	var kube *kubeFlags
	cmd := &cobra.Command{
		Use:   "check --deployment NAMESPACE/NAME [--lease NAMESPACE/NAME]",
		Short: "Check that an installed kgen runs: an available replica, and a leader that renews its Lease",
		Long: `Check an installed kgen from the API: its Deployment has an available
replica and, with --lease, a replica holds the leader-election Lease and has
renewed it within the Lease's duration. Prints what is fine; exits non-zero
listing what is not. With --wait it checks again every second, for up to
that long, while something is not fine (right after a rolling update the
Lease can be free for a moment, until a standby takes it). The Helm chart's
'helm test' runs it with --wait=60s.`,
		Example: `  kgenctl check --deployment kgen-system/kgen --lease kgen-system/kgen`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), out, kube)
		},
	}
	kube = addKubeFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.deployment, "deployment", "", "NAMESPACE/NAME of kgen's Deployment")
	f.StringVar(&o.lease, "lease", "", "NAMESPACE/NAME of kgen's leader-election Lease; none without leader election")
	f.DurationVar(&o.wait, "wait", 0, "how long to check again while something is not fine; 0 checks once")
	_ = cmd.MarkFlagRequired("deployment")
	return cmd
}

func (o *checkOptions) run(ctx context.Context, out io.Writer, kube *kubeFlags) error {
	cfg := check.Config{Wait: o.wait}
	var err error
	if cfg.Deployment, err = namespacedName("--deployment", o.deployment); err != nil {
		return err
	}
	if o.lease != "" {
		if cfg.Lease, err = namespacedName("--lease", o.lease); err != nil {
			return err
		}
	}
	config, err := kube.restConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ok, err := check.Run(ctx, client, cfg)
	for _, line := range ok {
		fmt.Fprintln(out, "ok:", line)
	}
	return err
}

// namespacedName parses a flag's NAMESPACE/NAME value.
func namespacedName(flag, value string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(value, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("%s %q: want NAMESPACE/NAME", flag, value)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}
