package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"kgen.dev/kgen/internal/version"
)

func newVersionCmd(out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kgenctl's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			commit := version.Commit()
			if commit == "" {
				commit = "unknown"
			}
			_, err := fmt.Fprintf(out, "kgenctl %s (commit %s, %s, %s/%s)\n", version.Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
