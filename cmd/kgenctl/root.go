package main

import (
	"io"

	"github.com/spf13/cobra"
)

func newRootCmd(out, errOut io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kgenctl",
		Short: "kgen keeps templated child resources in step with parent objects of any kind",
		Long: `kgen is a generic Kubernetes controller. Declarative rules name a parent kind
and templated children; kgen watches parents and children through dynamic
informers and keeps the children equal to the templates with server-side apply.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	// Commands that talk to a cluster add kubectl's connection flags
	// themselves (addKubeFlags); the offline ones have none.
	cmd.AddCommand(
		newCheckCmd(out),
		newCleanupCmd(out, errOut),
		newCRDCmd(out),
		newExplainCmd(out),
		newGVKToGVRCmd(out),
		newRBACCmd(out),
		newRenderCmd(out),
		newRunCmd(errOut),
		newStopCmd(out),
		newValidateCmd(out),
		newVersionCmd(out),
	)
	return cmd
}
