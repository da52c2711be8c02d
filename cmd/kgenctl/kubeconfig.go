package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync/atomic"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeFlags are kubectl's connection flags, from k8s.io/cli-runtime:
// --kubeconfig, --context, --cluster, --user, -n/--namespace, -s/--server,
// --token, --as, --as-group, --as-uid, --as-user-extra,
// --certificate-authority, --client-certificate, --client-key,
// --insecure-skip-tls-verify, --tls-server-name, --request-timeout and
// --disable-compression. They mean what they mean to kubectl: the
// kubeconfig is --kubeconfig, else $KUBECONFIG, else ~/.kube/config, else
// the in-cluster config, and the other flags override what it says.
//
// --cache-dir is left out: kgenctl keeps no discovery cache on disk (its
// answers come from live discovery), so the flag would change nothing.
type kubeFlags struct {
	*genericclioptions.ConfigFlags
	// names are the flags added to the command, to tell which were set.
	names []string
	// refused is the Status of the last request the API server refused
	// (401 or 403), as it sent it (see withServerMessage).
	refused atomic.Pointer[metav1.Status]
}

// addKubeFlags gives cmd kubectl's connection flags and returns them. Every
// command that talks to a cluster calls it in its constructor, in one line:
//
//	kube := addKubeFlags(cmd)
//
// and gets its client configuration with kube.restConfig() when it runs. A
// command that works offline does not call it, so that --kubeconfig there
// is an unknown flag rather than silently ignored.
func addKubeFlags(cmd *cobra.Command) *kubeFlags {
	return addKubeFlagsWith(cmd, genericclioptions.NewConfigFlags(false))
}

// addKubeFlagsWith adds the connection flags of f that are not nil, for a
// command that leaves some out (see rbac's --namespace).
func addKubeFlagsWith(cmd *cobra.Command, f *genericclioptions.ConfigFlags) *kubeFlags {
	f.CacheDir = nil
	k := &kubeFlags{ConfigFlags: f}
	fs := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	f.AddFlags(fs)
	fs.VisitAll(func(flag *pflag.Flag) { k.names = append(k.names, flag.Name) })
	cmd.Flags().AddFlagSet(fs)
	return k
}

// errNoCluster is returned when nothing names a cluster. kubectl then tries
// http://localhost:8080; kgenctl says what it looked for instead.
var errNoCluster = errors.New("no cluster to connect to: no kubeconfig was found (--kubeconfig, $KUBECONFIG, ~/.kube/config), --server was not given, and kgenctl is not running in a cluster")

// restConfig returns the client configuration the flags select. Its
// clients record the Status of requests the API server refuses, for
// withServerMessage.
func (k *kubeFlags) restConfig() (*rest.Config, error) {
	if _, err := clientcmd.ParseTimeout(*k.Timeout); err != nil {
		return nil, fmt.Errorf("invalid --request-timeout %q: want a duration with a unit (30s, 2m) or whole seconds; 0 means no timeout", *k.Timeout)
	}
	config, err := k.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	if *k.APIServer == "" && os.Getenv("KUBERNETES_MASTER") == "" {
		raw, err := k.ToRawKubeConfigLoader().RawConfig()
		if err == nil && len(raw.Clusters) == 0 {
			if _, err := rest.InClusterConfig(); err != nil {
				return nil, errNoCluster
			}
		}
	}
	config.Wrap(func(next http.RoundTripper) http.RoundTripper { return &refusalRecorder{next: next, last: &k.refused} })
	return config, nil
}

// withServerMessage returns err with the API server's own message if err is
// a refusal whose message client-go lost. client-go's discovery client
// cannot decode the Status the server sends with a 403 and says "unknown"
// (so does kubectl: "Error from server (Forbidden): unknown"), where the
// server said, for example, which impersonation it refused.
func (k *kubeFlags) withServerMessage(err error) error {
	var lost *apierrors.StatusError
	if !errors.As(err, &lost) || lost.ErrStatus.Message != "unknown" {
		return err
	}
	if s := k.refused.Load(); s != nil && s.Code == lost.ErrStatus.Code {
		return &apierrors.StatusError{ErrStatus: *s}
	}
	return err
}

// refusalRecorder records the Status of each response that refuses a
// request, leaving the response as it was.
type refusalRecorder struct {
	next http.RoundTripper
	last *atomic.Pointer[metav1.Status]
}

func (r *refusalRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		return resp, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return resp, nil // the client reads what there is, and fails as it would
	}
	var s metav1.Status
	if json.Unmarshal(body, &s) == nil && s.Kind == "Status" && s.Message != "" {
		r.last.Store(&s)
	}
	return resp, nil
}

// namespace returns the namespace kubectl would work in: -n/--namespace,
// else the kubeconfig context's, else the pod's in a cluster, else
// "default".
func (k *kubeFlags) namespace() (string, error) {
	ns, _, err := k.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// changed returns the connection flags given on the command line.
func (k *kubeFlags) changed(cmd *cobra.Command) []string {
	var out []string
	for _, name := range k.names {
		if cmd.Flags().Changed(name) {
			out = append(out, "--"+name)
		}
	}
	slices.Sort(out)
	return out
}
