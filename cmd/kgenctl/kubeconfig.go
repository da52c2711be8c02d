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
	"strings"
	"sync/atomic"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeFlags are kubectl's connection flags: --kubeconfig, --context,
// --cluster, --user, -n/--namespace, -s/--server, --token, --as,
// --as-group, --as-uid, --as-user-extra, --certificate-authority,
// --client-certificate, --client-key, --insecure-skip-tls-verify,
// --tls-server-name, --request-timeout and --disable-compression. They mean
// what they mean to kubectl: the kubeconfig is --kubeconfig, else
// $KUBECONFIG, else ~/.kube/config, else the in-cluster config, and the
// other flags override what it says.
//
// They are k8s.io/cli-runtime's genericclioptions.ConfigFlags done again
// with client-go's clientcmd, as ConfigFlags does them inside, with the
// same names, shorthands, defaults and help: ConfigFlags itself is not
// used because genericclioptions imports cli-runtime's resource package,
// hence kustomize, hence Go's plugin package, which makes the linker
// export every symbol and keep every exported method. Measured without
// it: kgenctl is 87 MB instead of 115 MB, and kgenctl run idles at 56 MiB
// RSS instead of 64 MiB (RssFile 43 MiB instead of 52 MiB).
// clientcmd.BindOverrideFlags is not used either: its help texts for --as,
// --as-uid and --tls-server-name differ from kubectl's, and it has no -s
// or --as-user-extra.
//
// --cache-dir is left out: kgenctl keeps no discovery cache on disk (its
// answers come from live discovery), so the flag would change nothing.
type kubeFlags struct {
	kubeconfig string
	// overrides holds the flags that override the kubeconfig, bound
	// directly to their fields, except --as-user-extra (userExtra).
	overrides clientcmd.ConfigOverrides
	userExtra []string
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
	return addKubeFlagsWith(cmd, true)
}

// addKubeFlagsWith adds the connection flags, with -n/--namespace only if
// namespace is true, for a command whose --namespace means something else
// (see rbac's).
func addKubeFlagsWith(cmd *cobra.Command, namespace bool) *kubeFlags {
	k := &kubeFlags{}
	o := &k.overrides
	fs := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	// The names, defaults and help are kubectl's (cli-runtime's
	// ConfigFlags.AddFlags), in the same order.
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "Path to the kubeconfig file to use for CLI requests.")
	fs.StringVar(&o.AuthInfo.ClientCertificate, "client-certificate", "", "Path to a client certificate file for TLS")
	fs.StringVar(&o.AuthInfo.ClientKey, "client-key", "", "Path to a client key file for TLS")
	fs.StringVar(&o.AuthInfo.Token, "token", "", "Bearer token for authentication to the API server")
	fs.StringVar(&o.AuthInfo.Impersonate, "as", "", "Username to impersonate for the operation. User could be a regular user or a service account in a namespace.")
	fs.StringVar(&o.AuthInfo.ImpersonateUID, "as-uid", "", "UID to impersonate for the operation.")
	fs.StringArrayVar(&o.AuthInfo.ImpersonateGroups, "as-group", []string{}, "Group to impersonate for the operation, this flag can be repeated to specify multiple groups.")
	fs.StringArrayVar(&k.userExtra, "as-user-extra", []string{}, "User extras to impersonate for the operation, this flag can be repeated to specify multiple values for the same key.")
	fs.StringVar(&o.Context.Cluster, "cluster", "", "The name of the kubeconfig cluster to use")
	fs.StringVar(&o.Context.AuthInfo, "user", "", "The name of the kubeconfig user to use")
	if namespace {
		fs.StringVarP(&o.Context.Namespace, "namespace", "n", "", "If present, the namespace scope for this CLI request")
	}
	fs.StringVar(&o.CurrentContext, "context", "", "The name of the kubeconfig context to use")
	fs.StringVarP(&o.ClusterInfo.Server, "server", "s", "", "The address and port of the Kubernetes API server")
	fs.StringVar(&o.ClusterInfo.TLSServerName, "tls-server-name", "", "Server name to use for server certificate validation. If it is not provided, the hostname used to contact the server is used")
	fs.BoolVar(&o.ClusterInfo.InsecureSkipTLSVerify, "insecure-skip-tls-verify", false, "If true, the server's certificate will not be checked for validity. This will make your HTTPS connections insecure")
	fs.StringVar(&o.ClusterInfo.CertificateAuthority, "certificate-authority", "", "Path to a cert file for the certificate authority")
	fs.StringVar(&o.Timeout, "request-timeout", "0", "The length of time to wait before giving up on a single server request. Non-zero values should contain a corresponding time unit (e.g. 1s, 2m, 3h). A value of zero means don't timeout requests.")
	fs.BoolVar(&o.ClusterInfo.DisableCompression, "disable-compression", false, "If true, opt-out of response compression for all requests to the server")
	fs.VisitAll(func(flag *pflag.Flag) { k.names = append(k.names, flag.Name) })
	cmd.Flags().AddFlagSet(fs)
	return k
}

// loader returns the kubeconfig the flags select, loaded when first asked,
// as ConfigFlags.ToRawKubeConfigLoader builds it.
func (k *kubeFlags) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.DefaultClientConfig = &clientcmd.DefaultClientConfig
	rules.ExplicitPath = k.kubeconfig
	overrides := k.overrides
	overrides.ClusterDefaults = clientcmd.ClusterDefaults
	if len(k.userExtra) > 0 {
		// KEY=VALUE; like kubectl, an entry without = is ignored.
		extra := map[string][]string{}
		for _, e := range k.userExtra {
			if key, value, ok := strings.Cut(e, "="); ok {
				extra[key] = append(extra[key], value)
			}
		}
		overrides.AuthInfo.ImpersonateUserExtra = extra
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &overrides)
}

// errEmptyConfig is kubectl's message (cli-runtime's ErrEmptyConfig) for
// clientcmd's terse one when there is no configuration.
var errEmptyConfig = clientcmd.NewEmptyConfigError(`Missing or incomplete configuration info.  Please point to an existing, complete config file:


  1. Via the command-line flag --kubeconfig
  2. Via the KUBECONFIG environment variable
  3. In your home directory as ~/.kube/config

To view or setup config directly use the 'config' command.`)

// kubectlError returns errEmptyConfig for clientcmd's empty configuration
// error, and err otherwise, as cli-runtime's ConfigFlags does.
func kubectlError(err error) error {
	if clientcmd.IsEmptyConfig(err) {
		return errEmptyConfig
	}
	return err
}

// errNoCluster is returned when nothing names a cluster. kubectl then tries
// http://localhost:8080; kgenctl says what it looked for instead.
var errNoCluster = errors.New("no cluster to connect to: no kubeconfig was found (--kubeconfig, $KUBECONFIG, ~/.kube/config), --server was not given, and kgenctl is not running in a cluster")

// restConfig returns the client configuration the flags select. Its
// clients record the Status of requests the API server refuses, for
// withServerMessage.
func (k *kubeFlags) restConfig() (*rest.Config, error) {
	if _, err := clientcmd.ParseTimeout(k.overrides.Timeout); err != nil {
		return nil, fmt.Errorf("invalid --request-timeout %q: want a duration with a unit (30s, 2m) or whole seconds; 0 means no timeout", k.overrides.Timeout)
	}
	config, err := k.loader().ClientConfig()
	if err != nil {
		return nil, kubectlError(err)
	}
	if k.overrides.ClusterInfo.Server == "" && os.Getenv("KUBERNETES_MASTER") == "" {
		raw, err := k.loader().RawConfig()
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

// WrappedRoundTripper lets client-go see the transport under it (to
// cancel a request at --request-timeout without warning that it cannot).
func (r *refusalRecorder) WrappedRoundTripper() http.RoundTripper { return r.next }

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
	ns, _, err := k.loader().Namespace()
	return ns, kubectlError(err)
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
