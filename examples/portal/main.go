// Command portal serves an HTTP API and a web page that create, update and
// show the WebApps of examples/webapp in one namespace: the front a team
// puts before its platform API. kgen, running the example's rules, makes
// each WebApp's children and reports on its Ready condition.
//
//	go run ./examples/portal --kubeconfig K --namespace NS --listen ADDR
//
// The connection flags are kubectl's (--kubeconfig, --context, -n, --as,
// --token, ...); without a kubeconfig ($KUBECONFIG, ~/.kube/config) it uses
// the in-cluster config, and the namespace defaults to the context's (in a
// pod: its own). It runs until SIGINT or SIGTERM, then shuts down gracefully.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/examples/portal/internal/portal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

// run parses the flags, connects to the cluster and serves until ctx is done.
func run(ctx context.Context, args []string) error {
	fs := pflag.NewFlagSet("portal", pflag.ContinueOnError)
	listen := fs.String("listen", ":8080", "the address to serve the API and the page on")
	shutdownTimeout := fs.Duration("shutdown-timeout", 10*time.Second, "how long requests in flight may take to finish at shutdown")
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	fs.StringVar(&loading.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	overrides := &clientcmd.ConfigOverrides{}
	clientcmd.BindOverrideFlags(overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlag(klogFlags.Lookup("v"))
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	kubeconfig := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, overrides)
	config, err := kubeconfig.ClientConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	namespace, _, err := kubeconfig.Namespace()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	config.UserAgent = portal.FieldManager
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	logger := klog.Background().WithValues("namespace", namespace)
	logger.Info("Starting", "server", config.Host)
	return portal.Serve(klog.NewContext(ctx, logger), listener, portal.NewHandler(client, namespace), *shutdownTimeout)
}
