package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"kgen.dev/kgen/pkg/cleanup"
	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/rules"
)

type cleanupOptions struct {
	rules          []string
	ruleObjects    bool
	stopDeployment string
	stateName      string
	releaseOthers  bool
	timeout        time.Duration
}

func newCleanupCmd(out, errOut io.Writer) *cobra.Command {
	o := &cleanupOptions{}
	var kube *kubeFlags
	cmd := &cobra.Command{
		Use:   "cleanup [--rules PATH ...] [--rule-objects=false]",
		Short: "Remove kgen's finalizer from every parent of the rules, before kgen is uninstalled",
		Long: `Remove kgen's finalizer, kgen.dev/cleanup, from every object of the rules'
parent kinds (in a rule's namespaces when it is limited to some, whatever the
object's labels), so that no parent is left Terminating once kgen is gone.
Other finalizers are kept; children are not touched. A parent kind the
cluster does not serve is skipped with a note. Running it again is harmless.

The rules are those kgen ran: the rules files given with --rules and, unless
--rule-objects=false, the cluster's Rule objects (rules.kgen.dev), as
kgenctl run serves them. A Rule object with the name of a file's rule is
left out, as the file's rule ran instead; an invalid one still names its
parent kind, which is looked at all the same.

kgen's record (the ConfigMap --state-configmap, kgen-state by default)
says where rules watched their parents, also rules removed since that kgen
could not release (it was stopped, or an upgrade took its grants away with
the rule). Those places are looked at too; one that cannot be listed, or a
record that cannot be read, is a note, not an error. The record also tells
another kgen's parents (a second chart release whose rules share a parent
kind): a parent that no rule selects and whose children, where the record
says this kgen's rules made children, all name rules this kgen neither ran
nor recorded keeps its finalizer, as a running kgen leaves it too, and is
printed as left. A kgen that ran before it kept a record (chart 0.1.0), or
whose record was lost, and that lost a rule since, sees that rule's parents
so too: --release-others releases them.

A running kgen puts the finalizer back, so stop it first: --stop-deployment
scales kgen's Deployment to 0 and waits until its pods are gone. The Helm
chart runs this command as a pre-delete hook.`,
		Example: `  kgenctl cleanup --rules /etc/kgen/rules --stop-deployment kgen-system/kgen
  kgenctl cleanup --stop-deployment kgen-system/kgen     # Rule objects only
  kgenctl cleanup --rules rules/ --rule-objects=false --context prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), out, errOut, kube)
		},
	}
	kube = addKubeFlags(cmd)
	f := cmd.Flags()
	f.StringArrayVar(&o.rules, "rules", nil, "a rules file or directory (repeatable)")
	f.BoolVar(&o.ruleObjects, "rule-objects", true, "also release the parents of the cluster's Rule objects (rules.kgen.dev)")
	f.StringVar(&o.stopDeployment, "stop-deployment", "", "NAMESPACE/NAME of kgen's Deployment, to scale to 0 and wait for before the finalizers are removed")
	f.StringVar(&o.stateName, "state-configmap", controller.DefaultRecordName, "name of kgen's record ConfigMap (kgenctl run --state-configmap), in kgen's namespace (the --stop-deployment's, else -n/--namespace, else the kubeconfig context's, else the pod's): where it says rules watched their parents is looked at too; empty: not read")
	f.BoolVar(&o.releaseOthers, "release-others", false, "also release the parents that the record tells are another kgen's (their children name rules neither given nor recorded)")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the Deployment's pods to stop")
	return cmd
}

func (o *cleanupOptions) run(ctx context.Context, out, errOut io.Writer, kube *kubeFlags) error {
	var stop types.NamespacedName
	if o.stopDeployment != "" {
		var err error
		if stop, err = namespacedName("--stop-deployment", o.stopDeployment); err != nil {
			return err
		}
	}
	if len(o.rules) == 0 && !o.ruleObjects {
		return errors.New("no rules: give --rules, or release the parents of the Rule objects (--rule-objects)")
	}
	var loaded []*rules.Rule
	if len(o.rules) > 0 {
		var err error
		if loaded, err = rules.Load(o.rules, rules.Options{}); err != nil {
			return err
		}
	}
	config, err := kube.restConfig()
	if err != nil {
		return err
	}
	kubeClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	dynClient, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	if stop.Name != "" {
		stopCtx, cancel := context.WithTimeout(ctx, o.timeout)
		err := cleanup.StopDeployment(stopCtx, kubeClient, stop.Namespace, stop.Name)
		cancel()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "deployment %s is stopped\n", stop)
	}
	src := cleanup.Sources{Files: loaded, RuleObjects: o.ruleObjects, ReleaseOthers: o.releaseOthers}
	if o.stateName != "" {
		ns := stop.Namespace
		if ns == "" {
			if ns, err = kube.namespace(); err != nil {
				return err
			}
		}
		src.Record = &controller.ConfigMapRecord{Client: kubeClient.CoreV1(), Namespace: ns, Name: o.stateName}
	}
	res, err := cleanup.Release(ctx, dynClient, mapper.New(kubeClient.Discovery()), src)
	for _, note := range res.Skipped {
		fmt.Fprintln(errOut, "Note:", note)
	}
	for _, o := range res.Released {
		fmt.Fprintf(out, "released %s\n", o)
	}
	for _, o := range res.Others {
		fmt.Fprintf(out, "left %s: its children were made by another kgen's rules (--release-others releases it)\n", o)
	}
	fmt.Fprintf(out, "%d parents checked, %d released, %d left to another kgen\n", res.Checked, len(res.Released), len(res.Others))
	return err
}
