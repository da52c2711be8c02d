// Command kgenctl runs and inspects kgen, the generic Kubernetes controller.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, errorMessage(err))
		os.Exit(1)
	}
}

// errorMessage is what kgenctl prints for an error: an error from the API
// server in kubectl's words, so that "Error from server (Forbidden)" reads
// the same in both, and "Error: " and the error otherwise.
func errorMessage(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return "Error: " + err.Error()
	}
	switch s := status.Status(); {
	case s.Reason == metav1.StatusReasonUnauthorized:
		return fmt.Sprintf("error: You must be logged in to the server (%s)", err)
	case s.Reason != "":
		return fmt.Sprintf("Error from server (%s): %s", s.Reason, err)
	default:
		return "Error from server: " + err.Error()
	}
}
