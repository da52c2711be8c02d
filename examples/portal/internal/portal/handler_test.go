package portal

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

const testNamespace = "team-a"

// newClient returns a fake dynamic client holding objs, whose writes go
// through a field-managed object tracker: server-side apply creates,
// updates, owns fields and reports conflicts there as the API server does
// (the plain fake client's tracker cannot create with an apply).
func newClient(t *testing.T, objs ...*unstructured.Unstructured) *fake.FakeDynamicClient {
	t.Helper()
	gv := WebAppGVR.GroupVersion()
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(gv.WithKind(webAppKind), &unstructured.Unstructured{})
	scheme.AddKnownTypeWithName(gv.WithKind(webAppKind+"List"), &unstructured.UnstructuredList{})
	client := fake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{WebAppGVR: webAppKind + "List"})
	tracker := clienttesting.NewFieldManagedObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder(), managedfields.NewDeducedTypeConverter())
	for _, obj := range objs {
		if err := tracker.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	client.PrependReactor("*", "*", clienttesting.ObjectReaction(tracker))
	return client
}

// webapp returns a WebApp as kgen's rule selects it, changed by the options.
func webapp(name string, options ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": webAppAPIVersion, "kind": webAppKind,
		"metadata": map[string]any{"name": name, "namespace": testNamespace, "generation": int64(1),
			"labels": map[string]any{tierLabel: tierValue}},
		"spec": map[string]any{"image": "nginx:1.27", "port": int64(8080), "replicas": int64(2)},
	}}
	for _, o := range options {
		o(obj)
	}
	return obj
}

// withReady gives the WebApp kgen's status for a generation.
func withReady(observed int64, status, reason, message string) func(*unstructured.Unstructured) {
	return func(obj *unstructured.Unstructured) {
		obj.Object["status"] = map[string]any{
			"observedGeneration": observed,
			"configName":         obj.GetName() + "-config",
			"conditions": []any{
				map[string]any{"type": "Progressing", "status": "True", "reason": "Other", "message": "another controller's"},
				map[string]any{"type": conditionReady, "status": status, "reason": reason, "message": message,
					"lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": observed},
			},
		}
	}
}

func withGeneration(g int64) func(*unstructured.Unstructured) {
	return func(obj *unstructured.Unstructured) { obj.SetGeneration(g) }
}

// serve sends one request to the handler and returns the recorded answer.
func serve(t *testing.T, h http.Handler, method, path, contentType, body string) *httptest.ResponseRecorder {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var out T
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json; body:\n%s", ct, rec.Body)
	}
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("decode the answer as %T: %v", out, err)
	}
	return out
}

func causeFields(causes []Cause) []string {
	var out []string
	for _, c := range causes {
		out = append(out, c.Field)
	}
	return out
}

// POST /apps creates with 201, updates with 200, with one server-side apply
// of exactly the fields the portal owns, and refuses to take over a field
// another manager owns.
func TestApply(t *testing.T) {
	theirs := webapp("shop")
	theirs.SetManagedFields([]metav1.ManagedFieldsEntry{{
		Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: webAppAPIVersion,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:image":{}}}`)},
	}})
	tests := []struct {
		name     string
		existing []*unstructured.Unstructured
		before   string // a body posted first
		body     string
		wantCode int
		wantSpec map[string]any // of the stored WebApp
		wantErr  string
		// wantCauses are the fields an error names.
		wantCauses []string
	}{
		{
			name:     "created",
			body:     `{"name": "shop", "image": "nginx:1.27", "replicas": 2, "port": 8080}`,
			wantCode: http.StatusCreated,
			wantSpec: map[string]any{"image": "nginx:1.27", "replicas": int64(2), "port": int64(8080)},
		},
		{
			name:     "created without replicas, which the CRD defaults",
			body:     `{"name": "shop", "image": "nginx:1.27", "port": 8080}`,
			wantCode: http.StatusCreated,
			wantSpec: map[string]any{"image": "nginx:1.27", "port": int64(8080)},
		},
		{
			name:     "replicas 0 is kept, not dropped as empty",
			body:     `{"name": "shop", "image": "nginx:1.27", "replicas": 0, "port": 8080}`,
			wantCode: http.StatusCreated,
			wantSpec: map[string]any{"image": "nginx:1.27", "replicas": int64(0), "port": int64(8080)},
		},
		{
			name:     "updated",
			before:   `{"name": "shop", "image": "nginx:1.27", "replicas": 2, "port": 8080}`,
			body:     `{"name": "shop", "image": "nginx:1.28", "replicas": 3, "port": 9090}`,
			wantCode: http.StatusOK,
			wantSpec: map[string]any{"image": "nginx:1.28", "replicas": int64(3), "port": int64(9090)},
		},
		{
			name:       "a field of another manager is a conflict, not taken over",
			existing:   []*unstructured.Unstructured{theirs},
			body:       `{"name": "shop", "image": "nginx:1.28", "replicas": 2, "port": 8080}`,
			wantCode:   http.StatusConflict,
			wantSpec:   map[string]any{"image": "nginx:1.27", "replicas": int64(2), "port": int64(8080)},
			wantErr:    `apply webapp team-a/shop: Apply failed with 1 conflict: conflict with "kubectl-edit"`,
			wantCauses: []string{".spec.image"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newClient(t, tt.existing...)
			h := NewHandler(client, testNamespace)
			if tt.before != "" {
				if rec := serve(t, h, http.MethodPost, "/apps", "application/json", tt.before); rec.Code != http.StatusCreated {
					t.Fatalf("first POST: code = %d:\n%s", rec.Code, rec.Body)
				}
				client.ClearActions()
			}
			rec := serve(t, h, http.MethodPost, "/apps", "application/json", tt.body)
			requests := actionVerbs(client)
			if rec.Code != tt.wantCode {
				t.Fatalf("code = %d, want %d; body:\n%s", rec.Code, tt.wantCode, rec.Body)
			}
			stored, err := client.Resource(WebAppGVR).Namespace(testNamespace).Get(t.Context(), "shop", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if spec, _, _ := unstructured.NestedMap(stored.Object, "spec"); fmt.Sprint(spec) != fmt.Sprint(tt.wantSpec) {
				t.Errorf("stored spec = %v, want %v", spec, tt.wantSpec)
			}
			if tt.wantErr != "" {
				got := decode[ErrorResponse](t, rec)
				if !strings.HasPrefix(got.Error, tt.wantErr) {
					t.Errorf("error = %q, want it to start with %q", got.Error, tt.wantErr)
				}
				if f := causeFields(got.Causes); !slices.Equal(f, tt.wantCauses) {
					t.Errorf("causes = %v, want %v", f, tt.wantCauses)
				}
				return
			}
			app := decode[App](t, rec)
			if app.Name != "shop" || fmt.Sprint(app.Spec) != fmt.Sprint(tt.wantSpec) {
				t.Errorf("answer = %+v, want app shop with spec %v", app, tt.wantSpec)
			}
			wantLocation := ""
			if tt.wantCode == http.StatusCreated {
				wantLocation = "/apps/shop"
			}
			if got := rec.Header().Get("Location"); got != wantLocation {
				t.Errorf("Location = %q, want %q", got, wantLocation)
			}
			if got := stored.GetLabels(); got[tierLabel] != tierValue {
				t.Errorf("labels = %v, want %s=%s, which the rule selects", got, tierLabel, tierValue)
			}
			var applies []string
			for _, m := range stored.GetManagedFields() {
				if m.Manager == FieldManager {
					applies = append(applies, string(m.Operation))
				}
			}
			if !slices.Equal(applies, []string{"Apply"}) {
				t.Errorf("%s's managedFields operations = %v, want one Apply", FieldManager, applies)
			}
			if !slices.Equal(requests, []string{"get", "patch"}) {
				t.Errorf("requests = %v, want a get, then the apply (a patch)", requests)
			}
		})
	}
}

// An update without replicas gives the field up, so the CRD's default
// applies again: the request is the whole desired state.
func TestApplyReleasesFieldsNoLongerSent(t *testing.T) {
	client := newClient(t)
	h := NewHandler(client, testNamespace)
	for _, body := range []string{
		`{"name": "shop", "image": "nginx:1.27", "replicas": 3, "port": 8080}`,
		`{"name": "shop", "image": "nginx:1.27", "port": 8080}`,
	} {
		if rec := serve(t, h, http.MethodPost, "/apps", "application/json", body); rec.Code >= 300 {
			t.Fatalf("POST %s = %d:\n%s", body, rec.Code, rec.Body)
		}
	}
	stored, err := client.Resource(WebAppGVR).Namespace(testNamespace).Get(t.Context(), "shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, found, _ := unstructured.NestedFieldNoCopy(stored.Object, "spec", "replicas"); found {
		t.Errorf("spec.replicas = %v, want it gone once the portal no longer sends it", r)
	}
}

func actionVerbs(client *fake.FakeDynamicClient) []string {
	var out []string
	for _, a := range client.Actions() {
		out = append(out, a.GetVerb())
	}
	return out
}

// A bad body is answered 400 (415, 413) with the fields at fault, before
// any request to the API server.
func TestApplyBadBodies(t *testing.T) {
	const valid = `"name": "shop", "image": "nginx:1.27", "replicas": 2, "port": 8080`
	tests := []struct {
		name        string
		contentType string // default application/json
		body        string
		wantCode    int      // default 400
		wantCauses  []string // the fields named
		wantErr     string   // in the error
	}{
		{name: "empty body", body: "", wantErr: "the body is empty"},
		{name: "not JSON", body: "name=shop", wantErr: "the body is not valid JSON: invalid character 'a'"},
		{name: "cut short", body: `{"name": "shop"`, wantErr: "the body is not valid JSON: it ends early"},
		{name: "not an object", body: `["shop"]`, wantErr: "the body must be a JSON object"},
		{name: "two objects", body: `{` + valid + `} {}`, wantErr: "one JSON object and nothing after it"},
		{name: "unknown field", body: `{` + valid + `, "replica": 3}`, wantCauses: []string{"replica"}, wantErr: "replica: unknown field"},
		{name: "name not a string", body: `{"name": 7, "image": "nginx", "port": 80}`, wantCauses: []string{"name"}, wantErr: "name: must be a string, not number"},
		{name: "replicas a string", body: `{"name": "shop", "image": "nginx", "replicas": "2", "port": 80}`, wantCauses: []string{"replicas"}, wantErr: "replicas: must be an integer, not string"},
		{name: "replicas a fraction", body: `{"name": "shop", "image": "nginx", "replicas": 1.5, "port": 80}`, wantCauses: []string{"replicas"}, wantErr: "replicas: must be an integer, not number 1.5"},
		{name: "port a bool", body: `{"name": "shop", "image": "nginx", "port": true}`, wantCauses: []string{"port"}, wantErr: "port: must be an integer, not bool"},
		{name: "name missing", body: `{"image": "nginx", "port": 80}`, wantCauses: []string{"name"}, wantErr: "name: Required value"},
		{name: "name not a DNS label", body: `{"name": "Shop_1", "image": "nginx", "port": 80}`, wantCauses: []string{"name"}, wantErr: `name: Invalid value: "Shop_1": a lowercase RFC 1123 label`},
		{name: "name too long", body: `{"name": "` + strings.Repeat("a", 64) + `", "image": "nginx", "port": 80}`, wantCauses: []string{"name"}, wantErr: "must be no more than 63 characters"},
		{name: "name with a dot", body: `{"name": "shop.v2", "image": "nginx", "port": 80}`, wantCauses: []string{"name"}, wantErr: `name: Invalid value: "shop.v2"`},
		{name: "image missing", body: `{"name": "shop", "port": 80}`, wantCauses: []string{"image"}, wantErr: "image: Required value"},
		{name: "image null", body: `{"name": "shop", "image": null, "port": 80}`, wantCauses: []string{"image"}, wantErr: "image: Required value"},
		{name: "image with a space", body: `{"name": "shop", "image": "nginx 1.27", "port": 80}`, wantCauses: []string{"image"}, wantErr: "must not contain whitespace"},
		{name: "replicas negative", body: `{"name": "shop", "image": "nginx", "replicas": -1, "port": 80}`, wantCauses: []string{"replicas"}, wantErr: "replicas: Invalid value: -1: must be greater than or equal to 0"},
		{name: "port missing", body: `{"name": "shop", "image": "nginx"}`, wantCauses: []string{"port"}, wantErr: "port: Required value"},
		{name: "port 0", body: `{"name": "shop", "image": "nginx", "port": 0}`, wantCauses: []string{"port"}, wantErr: "port: Invalid value: 0: must be between 1 and 65535, inclusive"},
		{name: "port too high", body: `{"name": "shop", "image": "nginx", "port": 65536}`, wantCauses: []string{"port"}, wantErr: "port: Invalid value: 65536"},
		{name: "every field wrong at once", body: `{"name": "", "image": "", "replicas": -2, "port": 70000}`, wantCauses: []string{"name", "image", "replicas", "port"}, wantErr: "invalid app: ["},
		{name: "a form post", contentType: "application/x-www-form-urlencoded", body: "name=shop", wantCode: http.StatusUnsupportedMediaType, wantErr: "Content-Type must be application/json"},
		{name: "no content type", contentType: "-", body: `{` + valid + `}`, wantCode: http.StatusUnsupportedMediaType, wantErr: "Content-Type must be application/json"},
		{name: "too large", body: `{"name": "shop", "image": "` + strings.Repeat("x", maxBodyBytes) + `"}`, wantCode: http.StatusRequestEntityTooLarge, wantErr: "larger than 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			contentType := tt.contentType
			switch contentType {
			case "":
				contentType = "application/json"
			case "-":
				contentType = ""
			}
			wantCode := tt.wantCode
			if wantCode == 0 {
				wantCode = http.StatusBadRequest
			}
			client := newClient(t)
			rec := serve(t, NewHandler(client, testNamespace), http.MethodPost, "/apps", contentType, tt.body)
			if rec.Code != wantCode {
				t.Fatalf("code = %d, want %d; body:\n%s", rec.Code, wantCode, rec.Body)
			}
			got := decode[ErrorResponse](t, rec)
			if !strings.Contains(got.Error, tt.wantErr) {
				t.Errorf("error = %q, want it to say %q", got.Error, tt.wantErr)
			}
			if f := causeFields(got.Causes); !slices.Equal(f, tt.wantCauses) {
				t.Errorf("causes = %v, want %v", f, tt.wantCauses)
			}
			for _, c := range got.Causes {
				if c.Message == "" {
					t.Errorf("cause %q has no message", c.Field)
				}
			}
			if a := client.Actions(); len(a) > 0 {
				t.Errorf("a bad body reached the API server: %v", a)
			}
		})
	}
	// The valid body these rows vary is valid.
	rec := serve(t, NewHandler(newClient(t), testNamespace), http.MethodPost, "/apps", "application/json; charset=utf-8", `{`+valid+`}`)
	if rec.Code != http.StatusCreated {
		t.Errorf("the valid body: code = %d:\n%s", rec.Code, rec.Body)
	}
}

// Errors of the API server become answers that say whose problem it is.
func TestAPIErrors(t *testing.T) {
	webapps := WebAppGVR.GroupResource()
	notServed := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound,
		Reason: metav1.StatusReasonNotFound, Message: "the server could not find the requested resource"}}
	post := `{"name": "shop", "image": "nginx:1.27", "replicas": 2, "port": 8080}`
	tests := []struct {
		name           string
		verb           string // the request that fails
		err            error
		method, path   string
		wantCode       int
		wantErr        string
		wantCauses     []string
		wantRetryAfter string
	}{
		{
			name: "get forbidden", verb: "get", method: http.MethodPost, path: "/apps",
			err:      apierrors.NewForbidden(webapps, "shop", fmt.Errorf("RBAC: no")),
			wantCode: http.StatusBadGateway,
			wantErr:  "the portal may not get webapp team-a/shop (its ServiceAccount needs the Role of examples/portal/rbac.yaml): ",
		},
		{
			name: "apply forbidden", verb: "patch", method: http.MethodPost, path: "/apps",
			err:      apierrors.NewForbidden(webapps, "shop", fmt.Errorf("RBAC: no")),
			wantCode: http.StatusBadGateway,
			wantErr:  "the portal may not apply webapp team-a/shop",
		},
		{
			name: "apply unauthorized", verb: "patch", method: http.MethodPost, path: "/apps",
			err:      apierrors.NewUnauthorized("token expired"),
			wantCode: http.StatusBadGateway,
			wantErr:  "the portal may not apply webapp team-a/shop",
		},
		{
			name: "apply conflict", verb: "patch", method: http.MethodPost, path: "/apps",
			err: apierrors.NewApplyConflict([]metav1.StatusCause{{Type: metav1.CauseTypeFieldManagerConflict,
				Message: `conflict with "argocd-controller": .spec.image`, Field: ".spec.image"}},
				`Apply failed with 1 conflict: conflict with "argocd-controller": .spec.image`),
			wantCode:   http.StatusConflict,
			wantErr:    `apply webapp team-a/shop: Apply failed with 1 conflict: conflict with "argocd-controller": .spec.image`,
			wantCauses: []string{".spec.image"},
		},
		{
			name: "apply invalid", verb: "patch", method: http.MethodPost, path: "/apps",
			err: apierrors.NewInvalid(schema.GroupKind{Group: "example.com", Kind: webAppKind}, "shop", field.ErrorList{
				field.Invalid(field.NewPath("spec", "replicas"), 2, "must be at most 1 in this namespace")}),
			wantCode:   http.StatusUnprocessableEntity,
			wantErr:    `the API server rejected webapp team-a/shop: WebApp.example.com "shop" is invalid: spec.replicas`,
			wantCauses: []string{"spec.replicas"},
		},
		{
			name: "apply refused by a webhook", verb: "patch", method: http.MethodPost, path: "/apps",
			err:      apierrors.NewBadRequest(`admission webhook "images.example.com" denied the request: image not allowed`),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  `the API server rejected webapp team-a/shop: admission webhook "images.example.com" denied the request`,
		},
		{
			name: "namespace missing", verb: "patch", method: http.MethodPost, path: "/apps",
			err:      apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, testNamespace),
			wantCode: http.StatusBadGateway,
			wantErr:  "the API server does not serve webapp team-a/shop (is the WebApp CRD installed, and the namespace there?)",
		},
		{
			name: "API server busy", verb: "patch", method: http.MethodPost, path: "/apps",
			err:            apierrors.NewTooManyRequests("slow down", 3),
			wantCode:       http.StatusServiceUnavailable,
			wantErr:        "the API server is busy; try again later",
			wantRetryAfter: "3",
		},
		{
			name: "API server timeout", verb: "patch", method: http.MethodPost, path: "/apps",
			err:      apierrors.NewTimeoutError("etcd is slow", 0),
			wantCode: http.StatusGatewayTimeout,
			wantErr:  "the API server did not answer in time: apply webapp team-a/shop",
		},
		{
			name: "API server failure", verb: "patch", method: http.MethodPost, path: "/apps",
			err:      apierrors.NewInternalError(fmt.Errorf("etcd is gone")),
			wantCode: http.StatusBadGateway,
			wantErr:  "apply webapp team-a/shop: Internal error occurred: etcd is gone",
		},
		{
			name: "get of an app that does not exist", verb: "get", method: http.MethodGet, path: "/apps/shop",
			err:      apierrors.NewNotFound(webapps, "shop"),
			wantCode: http.StatusNotFound,
			wantErr:  `app "shop" not found in namespace team-a`,
		},
		{
			name: "get of an app whose CRD is not installed", verb: "get", method: http.MethodGet, path: "/apps/shop",
			err:      notServed,
			wantCode: http.StatusBadGateway,
			wantErr:  "the API server does not serve webapp team-a/shop (is the WebApp CRD installed",
		},
		{
			name: "get forbidden", verb: "get", method: http.MethodGet, path: "/apps/shop",
			err:      apierrors.NewForbidden(webapps, "shop", fmt.Errorf("RBAC: no")),
			wantCode: http.StatusBadGateway,
			wantErr:  "the portal may not get webapp team-a/shop",
		},
		{
			name: "list forbidden", verb: "list", method: http.MethodGet, path: "/apps",
			err:      apierrors.NewForbidden(webapps, "", fmt.Errorf("RBAC: no")),
			wantCode: http.StatusBadGateway,
			wantErr:  "the portal may not list webapps in namespace team-a",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newClient(t)
			client.PrependReactor(tt.verb, WebAppGVR.Resource, func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			body, contentType := "", ""
			if tt.method == http.MethodPost {
				body, contentType = post, "application/json"
			}
			rec := serve(t, NewHandler(client, testNamespace), tt.method, tt.path, contentType, body)
			if rec.Code != tt.wantCode {
				t.Fatalf("code = %d, want %d; body:\n%s", rec.Code, tt.wantCode, rec.Body)
			}
			got := decode[ErrorResponse](t, rec)
			if !strings.HasPrefix(got.Error, tt.wantErr) {
				t.Errorf("error = %q, want it to start with %q", got.Error, tt.wantErr)
			}
			if f := causeFields(got.Causes); !slices.Equal(f, tt.wantCauses) {
				t.Errorf("causes = %v, want %v", f, tt.wantCauses)
			}
			if got := rec.Header().Get("Retry-After"); got != tt.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetryAfter)
			}
		})
	}
}

// GET /apps/{name} reads readiness from kgen's Ready condition, for the
// WebApp's current generation only.
func TestGet(t *testing.T) {
	tests := []struct {
		name        string
		obj         *unstructured.Unstructured
		wantReady   bool
		wantReason  string
		wantMessage string // in the message
		wantGen     [2]int64
	}{
		{
			name:        "not reported on yet",
			obj:         webapp("shop"),
			wantReason:  ReasonPending,
			wantMessage: "kgen has not reported on this app yet",
			wantGen:     [2]int64{0, 1},
		},
		{
			name:        "a child not ready",
			obj:         webapp("shop", withReady(1, "False", "ChildNotReady", "child deployment: readyWhen ${self.status.availableReplicas >= parent.spec.replicas}: not yet")),
			wantReason:  "ChildNotReady",
			wantMessage: "child deployment: readyWhen ${self.status.availableReplicas >= parent.spec.replicas}: not yet",
			wantGen:     [2]int64{1, 1},
		},
		{
			name:      "ready",
			obj:       webapp("shop", withGeneration(2), withReady(2, "True", "Ready", "")),
			wantReady: true, wantReason: "Ready",
			wantGen: [2]int64{2, 2},
		},
		{
			name:        "ready for an older generation",
			obj:         webapp("shop", withGeneration(3), withReady(2, "True", "Ready", "")),
			wantReason:  ReasonPending,
			wantMessage: "kgen has not reported on generation 3 yet; on generation 2 it said Ready=True (Ready)",
			wantGen:     [2]int64{2, 3},
		},
		{
			name: "not selected by the rule",
			obj: webapp("shop", withReady(1, "True", "Ready", ""), func(u *unstructured.Unstructured) {
				u.SetLabels(map[string]string{"tier": "db"})
			}),
			wantReason:  ReasonNotSelected,
			wantMessage: "the WebApp has no label tier=web",
			wantGen:     [2]int64{1, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(t, NewHandler(newClient(t, tt.obj), testNamespace), http.MethodGet, "/apps/shop", "", "")
			if rec.Code != http.StatusOK {
				t.Fatalf("code = %d:\n%s", rec.Code, rec.Body)
			}
			// Readable as it is, not only once decoded.
			if !strings.Contains(rec.Body.String(), tt.wantMessage) {
				t.Errorf("the answer does not say %q as such:\n%s", tt.wantMessage, rec.Body)
			}
			app := decode[App](t, rec)
			if app.Name != "shop" || app.Ready != tt.wantReady || app.Reason != tt.wantReason || !strings.Contains(app.Message, tt.wantMessage) {
				t.Errorf("got ready=%t reason=%q message=%q, want %t %q %q", app.Ready, app.Reason, app.Message, tt.wantReady, tt.wantReason, tt.wantMessage)
			}
			if got := [2]int64{app.ObservedGeneration, app.Generation}; got != tt.wantGen {
				t.Errorf("observedGeneration, generation = %v, want %v", got, tt.wantGen)
			}
			// The whole status and spec, as JSON has them.
			wantStatus := map[string]any{}
			if s, ok := tt.obj.Object["status"].(map[string]any); ok {
				wantStatus = s
			}
			if fmt.Sprint(app.Status) != fmt.Sprint(jsonRoundTrip(t, wantStatus)) {
				t.Errorf("status = %v, want %v", app.Status, wantStatus)
			}
			if app.Spec["image"] != "nginx:1.27" {
				t.Errorf("spec = %v", app.Spec)
			}
		})
	}
	rec := serve(t, NewHandler(newClient(t), testNamespace), http.MethodGet, "/apps/nope", "", "")
	if got := decode[ErrorResponse](t, rec); rec.Code != http.StatusNotFound || got.Error != `app "nope" not found in namespace team-a` {
		t.Errorf("an unknown app: %d %+v, want 404 saying it is not found", rec.Code, got)
	}
}

func jsonRoundTrip(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// GET /apps lists the WebApps the rule selects, by name, as GET /apps/{name}
// shows each.
func TestList(t *testing.T) {
	other := webapp("legacy")
	other.SetLabels(nil)
	elsewhere := webapp("far")
	elsewhere.SetNamespace("team-b")
	client := newClient(t, webapp("web", withReady(1, "True", "Ready", "")), webapp("api"), other, elsewhere)
	rec := serve(t, NewHandler(client, testNamespace), http.MethodGet, "/apps", "", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("code = %d:\n%s", rec.Code, rec.Body)
	}
	list := decode[List](t, rec)
	var got []string
	for _, a := range list.Items {
		got = append(got, fmt.Sprintf("%s ready=%t %s", a.Name, a.Ready, a.Reason))
	}
	want := []string{"api ready=false Pending", "web ready=true Ready"}
	if !slices.Equal(got, want) {
		t.Errorf("items = %q, want %q", got, want)
	}

	rec = serve(t, NewHandler(newClient(t), testNamespace), http.MethodGet, "/apps", "", "")
	if body := strings.Join(strings.Fields(rec.Body.String()), ""); body != `{"items":[]}` {
		t.Errorf("no apps: %s, want an empty list", body)
	}
}

// GET / serves the form and the apps, with every value escaped.
func TestPage(t *testing.T) {
	tests := []struct {
		name     string
		objs     []*unstructured.Unstructured
		listErr  error
		wantCode int
		want     []string
		notWant  []string
		// wantNoApps: the table says there are none.
		wantNoApps bool
	}{
		{
			name:     "apps",
			objs:     []*unstructured.Unstructured{webapp("shop", withReady(1, "False", "ChildNotReady", `<script>alert("x")</script>`))},
			wantCode: http.StatusOK,
			want: []string{`<form id="app-form">`, `name="image"`, `name="replicas"`, `name="port"`, "WebApps in team-a",
				"<td>shop</td><td>nginx:1.27</td><td>2</td><td>8080</td>", `<td class="ready-false">false</td><td>ChildNotReady</td>`,
				"&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"},
			notWant: []string{`<script>alert`},
		},
		{
			name:       "no apps",
			wantCode:   http.StatusOK,
			want:       []string{`<form id="app-form">`},
			wantNoApps: true,
		},
		{
			name:     "apps cannot be listed",
			listErr:  apierrors.NewForbidden(WebAppGVR.GroupResource(), "", fmt.Errorf("RBAC: no")),
			wantCode: http.StatusBadGateway,
			want:     []string{`<form id="app-form">`, `<p class="error">the portal may not list webapps in namespace team-a`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newClient(t, tt.objs...)
			if tt.listErr != nil {
				client.PrependReactor("list", WebAppGVR.Resource, func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, tt.listErr
				})
			}
			rec := serve(t, NewHandler(client, testNamespace), http.MethodGet, "/", "", "")
			if rec.Code != tt.wantCode {
				t.Errorf("code = %d, want %d", rec.Code, tt.wantCode)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
				t.Errorf("Content-Type = %q", ct)
			}
			page := rec.Body.String()
			for _, w := range tt.want {
				if !strings.Contains(page, w) {
					t.Errorf("the page has no %q:\n%s", w, page)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(page, w) {
					t.Errorf("the page has %q:\n%s", w, page)
				}
			}
			_, table, _ := strings.Cut(page, `<tbody id="apps">`)
			table, _, _ = strings.Cut(table, "</tbody>")
			if got := strings.Contains(table, "No apps yet."); got != tt.wantNoApps {
				t.Errorf("the table says there are no apps: %t, want %t:\n%s", got, tt.wantNoApps, table)
			}
		})
	}
}

// Paths and methods outside the API are refused by the router.
func TestRoutes(t *testing.T) {
	h := NewHandler(newClient(t), testNamespace)
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/elsewhere", http.StatusNotFound},
		{http.MethodDelete, "/apps/shop", http.StatusMethodNotAllowed},
		{http.MethodPut, "/apps", http.StatusMethodNotAllowed},
		{http.MethodPost, "/", http.StatusMethodNotAllowed},
	} {
		if rec := serve(t, h, tt.method, tt.path, "", ""); rec.Code != tt.want {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, rec.Code, tt.want)
		}
	}
}
