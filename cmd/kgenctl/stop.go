package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"kgen.dev/kgen/pkg/cleanup"
)

type stopOptions struct {
	deployments []string
	timeout     time.Duration
}

func newStopCmd(out io.Writer) *cobra.Command {
	o := &stopOptions{}
	var kube *kubeFlags
	cmd := &cobra.Command{
		Use:   "stop --deployment NAMESPACE/NAME...",
		Short: "Scale kgen's Deployments to 0 and wait until none of their pods is left",
		Long: `Scale each Deployment to 0 replicas and wait until none of its pods is
left, so that none of them can still be writing. A Deployment that does not
exist is already stopped.

The Helm chart runs it in a pre-upgrade hook when an upgrade changes how
kgen's replicas agree on who writes (leader election on or off, the Lease's
name or namespace, sharding on or off, the Deployment's name): old and new
pods would not see each other's Lease, and a rolling update would have both
writing. The new pods then start once the old ones are gone.`,
		Example: `  kgenctl stop --deployment kgen-system/kgen --timeout 5m`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), out, kube)
		},
	}
	kube = addKubeFlags(cmd)
	f := cmd.Flags()
	f.StringArrayVar(&o.deployments, "deployment", nil, "NAMESPACE/NAME of a Deployment to stop (repeatable)")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the pods to go")
	_ = cmd.MarkFlagRequired("deployment")
	return cmd
}

func (o *stopOptions) run(ctx context.Context, out io.Writer, kube *kubeFlags) error {
	refs := make([]types.NamespacedName, 0, len(o.deployments))
	for _, d := range o.deployments {
		ref, err := namespacedName("--deployment", d)
		if err != nil {
			return err
		}
		refs = append(refs, ref)
	}
	config, err := kube.restConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	for _, ref := range refs {
		if err := cleanup.StopDeployment(ctx, client, ref.Namespace, ref.Name); err != nil {
			return err
		}
		fmt.Fprintf(out, "deployment %s is stopped\n", ref)
	}
	return nil
}
