// Command localcp runs a local control plane (etcd, kube-apiserver,
// kube-controller-manager) until interrupted, for 'make demo' and for trying
// kgen by hand. It writes a kubeconfig for an admin user and prints its path.
//
//	go run ./hack/localcp --dir .cache/localcp
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"kgen.dev/kgen/internal/controlplane"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "localcp:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", ".cache/localcp", "working folder; the kubeconfig is written there")
	controllers := flag.String("controllers", strings.Join(controlplane.DefaultControllers, ","), "kube-controller-manager controllers to run")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	bin, err := controlplane.BinDir(root)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	// Start afresh: a previous run's etcd data would hold its objects.
	if err := os.RemoveAll(abs); err != nil {
		return err
	}
	cp, err := controlplane.Start(ctx, controlplane.Config{
		BinDir: bin, Dir: abs, ControllerManager: true,
		Controllers: strings.Split(*controllers, ","),
	})
	if err != nil {
		return err
	}
	fmt.Printf("control plane ready at %s\nexport KUBECONFIG=%s\n", cp.URL, cp.Kubeconfig)
	// Tell scripts waiting on us that we are ready.
	if err := os.WriteFile(filepath.Join(abs, "ready"), []byte(cp.Kubeconfig+"\n"), 0o644); err != nil {
		return err
	}
	<-ctx.Done()
	return cp.Stop()
}
