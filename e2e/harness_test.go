//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"kgen.dev/kgen/pkg/controller"
	"kgen.dev/kgen/pkg/manager"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

var (
	webappGVR  = schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "webapps"}
	octopusGVR = schema.GroupVersionResource{Group: "zoo.example.com", Version: "v1", Resource: "octopodes"}
	cmGVR      = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deployGVR  = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	svcGVR     = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	crGVR      = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	laterGVR   = schema.GroupVersionResource{Group: "later.example.com", Version: "v1", Resource: "cuttlefish"}
	crdGVR     = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// running is kgen started in-process by startController.
type running struct {
	mgr   *manager.Manager
	ctrl  *controller.Controller
	rules []string
	stop  func() // stops it; the test's end calls it too
	// logs holds what it logged, as the test's log shows it.
	logs ktesting.Buffer
}

// startController runs kgen in-process with the rules files (relative to the
// repository root) as the given client configuration, until the test ends.
// It is wired by manager.New, as kgenctl run is, with kgenctl run's defaults
// but for fewer workers and a quicker retry of waiting rules.
func startController(t *testing.T, config *rest.Config, files ...string) *running {
	t.Helper()
	return startControllerWith(t, controllerOptions{Config: config}, files...)
}

// controllerOptions are what tests vary of an in-process kgen.
type controllerOptions struct {
	// Config is the client configuration; the admin's when nil, or User's.
	Config *rest.Config
	// User, when set, runs kgen as this user in system:masters, so the
	// audit log tells its requests apart.
	User string
	// Events is the event policy; notable when empty.
	Events reconcile.EventPolicy
	// RuleObjects serves the cluster's Rule objects too.
	RuleObjects bool
}

func startControllerWith(t *testing.T, o controllerOptions, files ...string) *running {
	t.Helper()
	var paths []string
	for _, f := range files {
		if !filepath.IsAbs(f) {
			f = filepath.Join(env.root, f)
		}
		paths = append(paths, f)
	}
	loaded, err := rules.Load(paths, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	config := o.Config
	if config == nil && o.User != "" {
		if config, err = env.cp.UserConfig(o.User, "system:masters"); err != nil {
			t.Fatal(err)
		}
	}
	if config == nil {
		config = env.config
	}
	m, err := manager.New(manager.Options{
		Config: config, RulePaths: paths, RuleObjects: o.RuleObjects, UserAgent: "kgen-e2e", Workers: 4, Events: o.Events,
		// Tests install CRDs while kgen runs; notice them quickly.
		RetryInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	var wg sync.WaitGroup
	wg.Go(func() { _ = m.Run(ctx) })
	var once sync.Once
	r := &running{mgr: m, ctrl: m.Controller(), logs: logger.GetSink().(ktesting.Underlier).GetBuffer(), stop: func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}}
	t.Cleanup(r.stop)
	for _, rule := range loaded {
		r.rules = append(r.rules, rule.Name)
	}
	return r
}

// webappRulesIn returns a copy of the WebApp test rules limited to one
// namespace, so a test's controller ignores other tests' parents.
func webappRulesIn(t *testing.T, ns string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.root, "e2e/testdata/webapp-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "    kind: WebApp\n", "    kind: WebApp\n    namespaces: ["+ns+"]\n", 1)
	return writeRules(t, text)
}

// waitReady waits until the controller runs every rule with synced caches.
func (r *running) waitReady(t *testing.T) {
	t.Helper()
	eventually(t, 30*time.Second, func() (bool, error) {
		for _, name := range r.rules {
			if s, _ := r.ctrl.State(name); !s.Synced {
				return false, fmt.Errorf("rule %s: %+v", name, s)
			}
		}
		return true, nil
	}, "the controller to run every rule with synced caches")
}

// waitRule waits until check accepts the state of a rule.
func (r *running) waitRule(t *testing.T, timeout time.Duration, rule string, check func(controller.RuleState) error) {
	t.Helper()
	eventually(t, timeout, func() (bool, error) {
		s, ok := r.ctrl.State(rule)
		if !ok {
			return false, fmt.Errorf("no rule %s", rule)
		}
		err := check(s)
		return err == nil, err
	}, "rule %s", rule)
}

// create creates an object from a map and returns it.
func create(t *testing.T, gvr schema.GroupVersionResource, obj map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	var ri dynamic.ResourceInterface = env.dynamic.Resource(gvr)
	if ns := u.GetNamespace(); ns != "" {
		ri = env.dynamic.Resource(gvr).Namespace(ns)
	}
	out, err := ri.Create(t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s %s: %v", gvr.Resource, u.GetName(), err)
	}
	return out
}

// get returns an object, or nil if it does not exist.
func get(t *testing.T, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	var ri dynamic.ResourceInterface = env.dynamic.Resource(gvr)
	if ns != "" {
		ri = env.dynamic.Resource(gvr).Namespace(ns)
	}
	out, err := ri.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return out
}

// waitFor polls until the object exists and check accepts it.
func waitFor(t *testing.T, gvr schema.GroupVersionResource, ns, name string, check func(*unstructured.Unstructured) error) *unstructured.Unstructured {
	t.Helper()
	var got *unstructured.Unstructured
	eventually(t, 30*time.Second, func() (bool, error) {
		got = get(t, gvr, ns, name)
		if got == nil {
			return false, errNotYet
		}
		if check != nil {
			if err := check(got); err != nil {
				return false, err
			}
		}
		return true, nil
	}, "%s %s/%s", gvr.Resource, ns, name)
	return got
}

// waitGone polls until the object does not exist.
func waitGone(t *testing.T, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	eventually(t, 60*time.Second, func() (bool, error) {
		return get(t, gvr, ns, name) == nil, nil
	}, "%s %s/%s to be deleted", gvr.Resource, ns, name)
}

type notYet struct{}

func (notYet) Error() string { return "does not exist yet" }

var errNotYet error = notYet{}

// readyCondition returns the parent's Ready condition, or nil.
func readyCondition(obj *unstructured.Unstructured) map[string]any {
	return conditionOf(obj, "Ready")
}

// isReady accepts a parent whose Ready condition is True, for waitFor.
func isReady(p *unstructured.Unstructured) error {
	if c := readyCondition(p); c == nil || c["status"] != "True" {
		return fmt.Errorf("Ready = %v", c)
	}
	return nil
}

// conditionOf returns the object's condition of this type, or nil.
func conditionOf(obj *unstructured.Unstructured, condType string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == condType {
			return m
		}
	}
	return nil
}

// auditEvent is the part of an audit.k8s.io Event the tests read.
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	// ImpersonatedUser is who User acted as, if anyone.
	ImpersonatedUser *struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"impersonatedUser"`
	RequestURI string `json:"requestURI"`
	ObjectRef  struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	StageTimestamp time.Time         `json:"stageTimestamp"`
	Annotations    map[string]string `json:"annotations"`
}

// deniedByRBAC reports whether the authorizer refused the request, as
// opposed to an admission plugin: the API server's own admission
// RESTMapper refreshes every 30 s, so for a while after a CRD is served,
// it refuses an ownerReference with blockOwnerDeletion to that kind with a
// 403 that no RBAC rule can prevent.
func (e auditEvent) deniedByRBAC() bool {
	return e.Annotations["authorization.k8s.io/decision"] == "forbid"
}

// auditOf returns the completed requests of a user since a time.
func auditOf(t *testing.T, user string, since time.Time) []auditEvent {
	t.Helper()
	return readAudit(t, func(e auditEvent) bool {
		return e.Stage == "ResponseComplete" && e.User.Username == user && !e.StageTimestamp.Before(since)
	})
}

// readAudit decodes every event of the control plane's audit log as an E
// and returns those keep accepts, in order.
func readAudit[E any](t *testing.T, keep func(E) bool) []E {
	t.Helper()
	f, err := os.Open(env.cp.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []E
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e E
		if json.Unmarshal(sc.Bytes(), &e) == nil && keep(e) {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
