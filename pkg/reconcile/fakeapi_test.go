package reconcile

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/pkg/mapper"
	kschema "kgen.dev/kgen/pkg/schema"
)

// fakeAPI is a dynamic client over an in-memory store that answers the
// requests kgen makes as the API server does, as far as kgen relies on it:
//
//   - a server-side apply carrying createOnlyResourceVersion creates an
//     object that does not exist and fails with a conflict for one that
//     does; one carrying a UID fails for a missing object (conflict) or one
//     with another UID (invalid);
//   - an apply replaces what the applied configuration sets (kgen is the
//     only field manager in these tests), keeps status, and merges
//     finalizers by field manager;
//   - a JSON patch is applied as RFC 6902 says; deletes honour a UID
//     precondition.
//
// Every request is recorded. Reactors prepended to the client (errors to
// inject) run first.
type fakeAPI struct {
	*dynamicfake.FakeDynamicClient
	t *testing.T

	mu       sync.Mutex
	objects  map[objKey]*unstructured.Unstructured
	rv       int
	requests []request
}

type objKey struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

// request is one request kgen made.
type request struct {
	verb, resource, subresource, namespace, name string
	patchType                                    types.PatchType
	body                                         []byte
}

func (r request) String() string {
	s := r.verb + " " + r.resource
	if r.subresource != "" {
		s += "/" + r.subresource
	}
	name := r.name
	if r.namespace != "" {
		name = r.namespace + "/" + name
	}
	return s + " " + name
}

func newFakeAPI(t *testing.T) *fakeAPI {
	scheme := runtime.NewScheme()
	api := &fakeAPI{FakeDynamicClient: dynamicfake.NewSimpleDynamicClient(scheme), t: t, objects: map[objKey]*unstructured.Unstructured{}, rv: 100}
	api.PrependReactor("*", "*", api.react)
	return api
}

// add stores objects as they exist before a test; it assigns UIDs,
// resource versions and creation times where they are missing.
func (a *fakeAPI) add(objs ...*unstructured.Unstructured) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range objs {
		o = o.DeepCopy()
		if o.GetUID() == "" {
			o.SetUID(types.UID(fmt.Sprintf("uid-%s-%s", strings.ToLower(o.GetKind()), o.GetName())))
		}
		if o.GetResourceVersion() == "" {
			o.SetResourceVersion(a.nextRV())
		}
		if ts := o.GetCreationTimestamp(); ts.IsZero() {
			o.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
		}
		a.objects[objKey{gvrOf(o.GroupVersionKind()), o.GetNamespace(), o.GetName()}] = o
	}
}

func (a *fakeAPI) nextRV() string {
	a.rv++
	return strconv.Itoa(a.rv)
}

// get returns a stored object, or nil.
func (a *fakeAPI) get(gvk schema.GroupVersionKind, namespace, name string) *unstructured.Unstructured {
	a.mu.Lock()
	defer a.mu.Unlock()
	if o, ok := a.objects[objKey{gvrOf(gvk), namespace, name}]; ok {
		return o.DeepCopy()
	}
	return nil
}

// all returns every stored object.
func (a *fakeAPI) all() []*unstructured.Unstructured {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*unstructured.Unstructured
	for _, o := range a.objects {
		out = append(out, o.DeepCopy())
	}
	return out
}

// writes returns the requests that changed something, as strings.
func (a *fakeAPI) writes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, r := range a.requests {
		if r.verb != "get" && r.verb != "list" && r.verb != "watch" {
			out = append(out, r.String())
		}
	}
	return out
}

// all requests, as strings.
func (a *fakeAPI) calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, r := range a.requests {
		out = append(out, r.String())
	}
	return out
}

func (a *fakeAPI) lastBody(verb, subresource string) []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.requests) - 1; i >= 0; i-- {
		if r := a.requests[i]; r.verb == verb && r.subresource == subresource {
			return r.body
		}
	}
	return nil
}

func (a *fakeAPI) resetRequests() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests = nil
}

func (a *fakeAPI) react(action clienttesting.Action) (bool, runtime.Object, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	gvr := action.GetResource()
	req := request{verb: action.GetVerb(), resource: gvr.Resource, subresource: action.GetSubresource(), namespace: action.GetNamespace()}
	switch act := action.(type) {
	case clienttesting.PatchAction:
		req.name, req.patchType, req.body = act.GetName(), act.GetPatchType(), act.GetPatch()
		a.requests = append(a.requests, req)
		k := objKey{gvr, act.GetNamespace(), act.GetName()}
		if act.GetPatchType() == types.ApplyPatchType {
			return a.apply(k, act)
		}
		return a.jsonPatch(k, act)
	case clienttesting.DeleteAction:
		req.name = act.GetName()
		a.requests = append(a.requests, req)
		k := objKey{gvr, act.GetNamespace(), act.GetName()}
		o, ok := a.objects[k]
		if !ok {
			return true, nil, apierrors.NewNotFound(gvr.GroupResource(), act.GetName())
		}
		if pre := act.GetDeleteOptions().Preconditions; pre != nil && pre.UID != nil && *pre.UID != o.GetUID() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), act.GetName(), fmt.Errorf("precondition failed: UID"))
		}
		delete(a.objects, k)
		return true, nil, nil
	case clienttesting.GetAction:
		// Patches and deletes name an object too: they are matched first.
		req.name = act.GetName()
		a.requests = append(a.requests, req)
		o, ok := a.objects[objKey{gvr, act.GetNamespace(), act.GetName()}]
		if !ok {
			return true, nil, apierrors.NewNotFound(gvr.GroupResource(), act.GetName())
		}
		return true, o.DeepCopy(), nil
	default:
		a.requests = append(a.requests, req)
		return true, nil, fmt.Errorf("fakeAPI: %s is not expected of kgen", action.GetVerb())
	}
}

func (a *fakeAPI) apply(k objKey, act clienttesting.PatchAction) (bool, runtime.Object, error) {
	applied := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(act.GetPatch(), &applied.Object); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	// JSON numbers as the API server returns them.
	b, _ := json.Marshal(applied.Object)
	_ = applied.UnmarshalJSON(b)
	gr := k.gvr.GroupResource()
	live, exists := a.objects[k]
	if act.GetSubresource() == "status" {
		if !exists {
			return true, nil, apierrors.NewNotFound(gr, k.name)
		}
		out := live.DeepCopy()
		status, _ := out.Object["status"].(map[string]any)
		if status == nil {
			status = map[string]any{}
		}
		for f, v := range applied.Object["status"].(map[string]any) {
			if f != "conditions" {
				status[f] = v
				continue
			}
			// conditions: a list keyed by type.
			list, _ := status["conditions"].([]any)
			for _, c := range v.([]any) {
				i := slices.IndexFunc(list, func(x any) bool { return x.(map[string]any)["type"] == c.(map[string]any)["type"] })
				if i >= 0 {
					list[i] = c
				} else {
					list = append(list, c)
				}
			}
			status["conditions"] = list
		}
		out.Object["status"] = status
		out.SetResourceVersion(a.nextRV())
		a.objects[k] = out
		return true, out.DeepCopy(), nil
	}
	switch {
	case applied.GetResourceVersion() == createOnlyResourceVersion:
		if exists {
			return true, nil, apierrors.NewConflict(gr, k.name, fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
		}
		out := applied.DeepCopy()
		out.SetUID(types.UID("uid-new-" + k.name))
		out.SetResourceVersion(a.nextRV())
		out.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)))
		a.objects[k] = out
		return true, out.DeepCopy(), nil
	case applied.GetUID() != "" && !exists:
		return true, nil, apierrors.NewConflict(gr, k.name, fmt.Errorf("uid mismatch: the provided object specified uid %s, and no existing object was found", applied.GetUID()))
	case applied.GetUID() != "" && applied.GetUID() != live.GetUID():
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: k.gvr.Group, Kind: live.GetKind()}, k.name,
			field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), applied.GetUID(), "field is immutable")})
	case !exists:
		a.t.Errorf("kgen applied %s %s/%s with neither a UID nor the create-only resourceVersion: it could take over an object", k.gvr.Resource, k.namespace, k.name)
		return true, nil, apierrors.NewNotFound(gr, k.name)
	}
	out := live.DeepCopy()
	if act.GetPatchType() == types.ApplyPatchType && strings.HasSuffix(fieldManager(act), "-finalizer") {
		// Only finalizers: kgen's own is added or removed, others stay.
		fins := slices.DeleteFunc(out.GetFinalizers(), func(f string) bool { return f == Finalizer })
		out.SetFinalizers(append(fins, applied.GetFinalizers()...))
	} else {
		for f, v := range applied.Object {
			if f != "metadata" && f != "status" {
				out.Object[f] = v
			}
		}
		for f := range out.Object {
			if _, ok := applied.Object[f]; !ok && f != "metadata" && f != "status" && f != "apiVersion" && f != "kind" {
				delete(out.Object, f)
			}
		}
		out.SetLabels(applied.GetLabels())
		out.SetAnnotations(applied.GetAnnotations())
		out.SetOwnerReferences(applied.GetOwnerReferences())
		out.SetManagedFields(nil)
	}
	if !equalJSON(out.Object, live.Object) {
		out.SetResourceVersion(a.nextRV())
	}
	a.objects[k] = out
	return true, out.DeepCopy(), nil
}

func fieldManager(act clienttesting.PatchAction) string {
	if p, ok := act.(clienttesting.PatchActionImpl); ok {
		return p.PatchOptions.FieldManager
	}
	return ""
}

// jsonPatch carries out a JSON patch, or a JSON merge patch.
func (a *fakeAPI) jsonPatch(k objKey, act clienttesting.PatchAction) (bool, runtime.Object, error) {
	live, ok := a.objects[k]
	if !ok {
		return true, nil, apierrors.NewNotFound(k.gvr.GroupResource(), k.name)
	}
	before, _ := json.Marshal(live.Object)
	var after []byte
	var err error
	if act.GetPatchType() == types.MergePatchType {
		// A UID in the patch is a precondition, as the API server takes it.
		var meta struct {
			Metadata struct{ UID types.UID } `json:"metadata"`
		}
		_ = json.Unmarshal(act.GetPatch(), &meta)
		if meta.Metadata.UID != "" && meta.Metadata.UID != live.GetUID() {
			return true, nil, apierrors.NewConflict(k.gvr.GroupResource(), k.name, fmt.Errorf("precondition failed: UID"))
		}
		after, err = jsonpatch.MergePatch(before, act.GetPatch())
	} else {
		patch, decodeErr := jsonpatch.DecodePatch(act.GetPatch())
		if decodeErr != nil {
			return true, nil, apierrors.NewBadRequest(decodeErr.Error())
		}
		after, err = patch.Apply(before)
	}
	if err != nil {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: live.GetKind()}, k.name, field.ErrorList{field.Invalid(field.NewPath(""), "", err.Error())})
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(after); err != nil {
		return true, nil, err
	}
	if act.GetSubresource() == "status" {
		kept := live.DeepCopy()
		kept.Object["status"] = out.Object["status"]
		out = kept
	}
	if out.GetResourceVersion() != live.GetResourceVersion() {
		return true, nil, apierrors.NewConflict(k.gvr.GroupResource(), k.name, fmt.Errorf("the object has been modified"))
	}
	out.SetResourceVersion(a.nextRV())
	a.objects[k] = out
	return true, out.DeepCopy(), nil
}

func equalJSON(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// The kinds of these tests.
var (
	appGVK    = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "App"}
	cmGVK     = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	deployGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	nsGVK     = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	crGVK     = schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}
	secretGVK = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
)

var fakeMappings = map[schema.GroupVersionKind]mapper.Mapping{
	appGVK:    {Group: "example.com", Version: "v1", Kind: "App", Resource: "apps", Namespaced: true, Subresources: []string{"status"}},
	cmGVK:     {Version: "v1", Kind: "ConfigMap", Resource: "configmaps", Namespaced: true},
	deployGVK: {Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments", Namespaced: true, Subresources: []string{"status", "scale"}},
	nsGVK:     {Version: "v1", Kind: "Namespace", Resource: "namespaces", Subresources: []string{"status"}},
	crGVK:     {Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Resource: "clusterroles"},
	secretGVK: {Version: "v1", Kind: "Secret", Resource: "secrets", Namespaced: true},
}

func gvrOf(gvk schema.GroupVersionKind) schema.GroupVersionResource {
	m, ok := fakeMappings[gvk]
	if !ok {
		panic("no mapping for " + gvk.String())
	}
	return m.GroupVersionResource()
}

// fakeResources maps the kinds of these tests.
type fakeResources struct{}

func (fakeResources) ResourceFor(gvk schema.GroupVersionKind) (mapper.Mapping, error) {
	if m, ok := fakeMappings[gvk]; ok {
		return m, nil
	}
	return mapper.Mapping{}, fmt.Errorf("no kind %s", gvk)
}

// fakeSchemas knows a Deployment's containers are keyed by name with
// quantity resources, and an App's conditions are keyed by type unless
// atomic is set.
type fakeSchemas struct{ atomicConditions bool }

func (s fakeSchemas) Kind(gvk schema.GroupVersionKind) (*kschema.Field, error) {
	switch gvk {
	case deployGVK:
		quantities := &kschema.Field{AdditionalProperties: &kschema.Field{Quantity: true}}
		return &kschema.Field{Properties: map[string]*kschema.Field{"spec": {Properties: map[string]*kschema.Field{
			"template": {Properties: map[string]*kschema.Field{"spec": {Properties: map[string]*kschema.Field{
				"containers": {ListType: kschema.ListMap, ListMapKeys: []string{"name"}, Items: &kschema.Field{Properties: map[string]*kschema.Field{
					"resources": {Properties: map[string]*kschema.Field{"requests": quantities, "limits": quantities}},
				}}},
			}}}},
		}}}}, nil
	case appGVK:
		if s.atomicConditions {
			return nil, nil
		}
		return &kschema.Field{Properties: map[string]*kschema.Field{"status": {Properties: map[string]*kschema.Field{
			"conditions": {ListType: kschema.ListMap, ListMapKeys: []string{"type"}},
		}}}}, nil
	}
	return nil, nil
}

// storeLister lists a parent's children from the fake API's store, as a
// synced cache would hold them.
type storeLister struct{ api *fakeAPI }

func (l storeLister) Children(_ string, parent types.UID) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range l.api.all() {
		if o.GetLabels()[LabelManagedBy] == ManagedBy && o.GetLabels()[LabelParentUID] == string(parent) {
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}
