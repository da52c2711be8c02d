package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"kgen.dev/kgen/pkg/cleanup"
)

type stopOptions struct {
	deployments   []string
	selector      string
	unlessName    string
	unlessWriters string
	timeout       time.Duration
}

func newStopCmd(out io.Writer) *cobra.Command {
	o := &stopOptions{}
	var kube *kubeFlags
	cmd := &cobra.Command{
		Use:   "stop (--deployment NAMESPACE/NAME... | -l SELECTOR --unless-name NAME --unless-writers ARGS)",
		Short: "Scale kgen's Deployments to 0 and wait until none of their pods is left",
		Long: `Scale Deployments to 0 replicas and wait until none of their pods is left,
so that none of them can still be writing. A Deployment that does not exist
is already stopped.

With --deployment it stops those. With -l it stops the Deployments of the
namespace that the selector matches, except the one named --unless-name
whose container kgen runs with the writer arguments --unless-writers: the
arguments of kgenctl run that tell how replicas agree on who writes
(--leader-elect=, --leader-elect-namespace=, --leader-elect-id=, --shards),
in any order. It prints each one it stops.

The Helm chart runs it in a pre-upgrade and pre-rollback hook with the
writer arguments of the release it installs: pods that run with other
ones (leader election turned on or off, another Lease, sharding turned on
or off) or under another Deployment name do not see the new pods' Leases,
and a rolling update would have both writing. The new pods start once
they are gone. An upgrade that changes none of them stops nothing.`,
		Example: `  kgenctl stop --deployment kgen-system/kgen --timeout 5m
  kgenctl stop -n kgen-system -l app.kubernetes.io/instance=kgen,app.kubernetes.io/part-of=kgen \
      --unless-name kgen --unless-writers "--leader-elect=true --leader-elect-namespace=kgen-system --leader-elect-id=kgen"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), out, kube)
		},
	}
	kube = addKubeFlags(cmd)
	f := cmd.Flags()
	f.StringArrayVar(&o.deployments, "deployment", nil, "NAMESPACE/NAME of a Deployment to stop (repeatable)")
	f.StringVarP(&o.selector, "selector", "l", "", "stop the Deployments of the namespace this label selector matches, but the one --unless-name and --unless-writers describe")
	f.StringVar(&o.unlessName, "unless-name", "", "with -l: the name of the Deployment that may keep running")
	f.StringVar(&o.unlessWriters, "unless-writers", "", "with -l: the writer arguments, space-separated, that it may keep running with")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the pods to go")
	return cmd
}

func (o *stopOptions) run(ctx context.Context, out io.Writer, kube *kubeFlags) error {
	if (len(o.deployments) > 0) == (o.selector != "") {
		return errors.New("give either --deployment or -l/--selector")
	}
	if o.selector != "" && (o.unlessName == "" || o.unlessWriters == "") {
		return errors.New("-l/--selector needs --unless-name and --unless-writers: the Deployment that may keep running, and how")
	}
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
	if o.selector != "" {
		ns, err := kube.namespace()
		if err != nil {
			return err
		}
		stale, err := cleanup.StaleWriters(ctx, client, ns, o.selector, cleanup.Writers{Name: o.unlessName, Args: strings.Fields(o.unlessWriters)})
		if err != nil {
			return err
		}
		if len(stale) == 0 {
			fmt.Fprintln(out, "nothing to stop: kgen runs as it will after this")
		}
		for _, name := range stale {
			refs = append(refs, types.NamespacedName{Namespace: ns, Name: name})
		}
	}
	for _, ref := range refs {
		if err := cleanup.StopDeployment(ctx, client, ref.Namespace, ref.Name); err != nil {
			return err
		}
		fmt.Fprintf(out, "deployment %s is stopped\n", ref)
	}
	return nil
}
