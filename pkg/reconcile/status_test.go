package reconcile

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clienttesting "k8s.io/client-go/testing"
)

// typedPatchRefusal is the API server's answer to a server-side apply of
// a status field its schema does not declare (a 500 with no reason).
func typedPatchRefusal() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 500,
		Message: "failed to create typed patch object (example.com/v1, Kind=App team/web): .status.configName: field not declared in schema"}}
}

// validationRefusal is the API server's answer to a status field of the
// wrong type (422, naming the field).
func validationRefusal() error {
	return apierrors.NewInvalid(schema.GroupKind{Group: "example.com", Kind: "App"}, "web", field.ErrorList{
		field.Invalid(field.NewPath("status", "configName"), int64(1), "status.configName in body must be of type integer: \"string\""),
	})
}

// A status write the API server refuses because the rule's status fields do
// not fit the parent's schema leaves no stale Ready on the parent: kgen
// writes its Ready condition alone, False with reason InvalidSpec, naming
// the field, and retries the whole status with backoff (an error), without
// taking the retries for a status loop. Once the server takes the status
// again, the full status is written.
func TestStatusRefused(t *testing.T) {
	tests := []struct {
		name     string
		atomic   bool  // conditions not keyed: a JSON patch
		err      error // the first refusal
		refusals int   // status writes refused, the fallback's among them
		// fallback is whether Ready is written alone; want the words of
		// its message.
		fallback bool
		want     string
	}{
		{name: "apply of an undeclared field", err: typedPatchRefusal(), refusals: 1,
			fallback: true, want: "status.configName: field not declared in schema"},
		{name: "patch of a field of another type", atomic: true, err: validationRefusal(), refusals: 1,
			fallback: true, want: "status.configName: Invalid value: 1: status.configName in body must be of type integer"},
		{name: "apply of a field of another type", err: validationRefusal(), refusals: 1,
			fallback: true, want: "status.configName: Invalid value"},
		{name: "the Ready condition alone refused too", err: typedPatchRefusal(), refusals: 2},
		{name: "another error", err: apierrors.NewInternalError(errors.New("etcd is down")), refusals: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, appRule, func(c *Config) { c.Schemas = fakeSchemas{atomicConditions: tt.atomic} })
			h.converge(appParent(nil))
			if c := h.ready(); c["status"] != "True" {
				t.Fatalf("Ready = %v after converging, want True", c)
			}
			refusals := 0
			h.api.PrependReactor("patch", "apps", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "status" || refusals == tt.refusals {
					return false, nil, nil
				}
				refusals++
				return true, nil, tt.err
			})
			p := h.setSpec(map[string]any{"image": "nginx:2"})
			res, err := h.reconcile(p)
			if err == nil || errors.Is(err, ErrTerminal) {
				t.Fatalf("Reconcile() error = %v, want one to retry", err)
			}
			if res.Ready {
				t.Error("Result.Ready = true although the parent's status could not be written")
			}
			c := h.ready()
			if !tt.fallback {
				if c["status"] != "True" || c["observedGeneration"] != int64(1) {
					t.Errorf("Ready = %v, want the one written before (no second write)", c)
				}
				// Ready cannot say so: a Warning event does.
				if got := h.drain(); !slices.ContainsFunc(got, func(e string) bool { return strings.HasPrefix(e, "Warning "+ReasonStatusFailed) }) {
					t.Errorf("events = %q, want a Warning %s", got, ReasonStatusFailed)
				}
				return
			}
			if c["status"] != "False" || c["reason"] != ReasonInvalid || !strings.Contains(c["message"].(string), tt.want) || c["observedGeneration"] != int64(2) {
				t.Errorf("Ready = %v, want False, %s, for generation 2, naming %q", c, ReasonInvalid, tt.want)
			}
			if body := string(h.api.lastBody("patch", "status")); setsConfigName(body) {
				t.Errorf("the Ready condition alone was written with the status fields: %s", body)
			}
			// Retries of the refused status are not a status loop, and
			// rewrite nothing while the parent shows the failure.
			h.api.PrependReactor("patch", "apps", func(a clienttesting.Action) (bool, runtime.Object, error) {
				return a.GetSubresource() == "status" && setsConfigName(string(a.(clienttesting.PatchAction).GetPatch())), nil, tt.err
			})
			h.api.resetRequests()
			for range 2 * loopAfter {
				h.now = h.now.Add(time.Second)
				res, err := h.reconcile(h.api.get(appGVK, "team", "web"))
				if err == nil || res.RequeueAfter > 0 {
					t.Fatalf("retry: Reconcile() = %+v, %v; want an error to retry with backoff", res, err)
				}
			}
			if w := h.api.writes(); len(w) > 0 {
				t.Errorf("retries wrote %q, want nothing while the parent shows the failure", w)
			}
			if got := h.drain(); len(got) > 0 {
				t.Errorf("events = %q, want none (a refused status is not a loop)", got)
			}
			// The schema takes the status again.
			h.api.ReactionChain = h.api.ReactionChain[1:]
			res, err = h.reconcile(h.api.get(appGVK, "team", "web"))
			if err != nil || !res.Ready {
				t.Fatalf("Reconcile() = %+v, %v once the status fits", res, err)
			}
			if c := h.ready(); c["status"] != "True" {
				t.Errorf("Ready = %v once the status fits, want True", c)
			}
		})
	}
}

// setsConfigName tells whether a status write (an applied configuration
// or a JSON patch) sets the rule's status field configName.
func setsConfigName(body string) bool {
	return strings.Contains(body, `"configName":`) || strings.Contains(body, `"/status/configName"`)
}

// Only refusals that name the status, as the API server words them, make
// kgen write Ready alone.
func TestRefusedStatus(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "undeclared field", err: typedPatchRefusal(), want: "status.configName: field not declared in schema"},
		{name: "validation", err: validationRefusal(), want: "status.configName: Invalid value: 1: status.configName in body must be of type integer: \"string\""},
		{name: "wrapped", err: errors.Join(errors.New("write"), typedPatchRefusal()), want: "status.configName: field not declared in schema"},
		{name: "a JSON patch test failed", err: apierrors.NewGenericServerResponse(422, "patch", schema.GroupResource{}, "", "testing value /metadata/resourceVersion failed: test failed", 0, false)},
		{name: "a spec field", err: apierrors.NewInvalid(schema.GroupKind{Kind: "App"}, "web", field.ErrorList{field.Required(field.NewPath("spec", "image"), "")})},
		{name: "unavailable", err: apierrors.NewServiceUnavailable("busy")},
		{name: "not from the server", err: errors.New("connection refused")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refusedStatus(tt.err); got != tt.want {
				t.Errorf("refusedStatus() = %q, want %q", got, tt.want)
			}
		})
	}
}

// A status field the rule no longer sets is removed from a parent whose
// conditions are not keyed (kgen writes them with a JSON patch), when
// kgen's entry of the parent's managed fields says kgen set it; a field
// another writer set, or changed since, stays. Once removed, nothing more
// is written. (With keyed conditions the server-side apply drops such a
// field itself.)
func TestStatusStaleFields(t *testing.T) {
	tests := []struct {
		name   string
		atomic bool
		op     string   // of kgen's entry of the status
		owned  []string // the status fields kgen's entry of the status lists
		remove []string // the fields a JSON patch removes
		apply  bool     // whether an apply without url is sent
	}{
		{name: "a field kgen set", atomic: true, op: "Update", owned: []string{"configName", "url"}, remove: []string{"url"}},
		{name: "a field another writer set", atomic: true, op: "Update", owned: []string{"configName"}},
		{name: "keyed conditions: an apply without it drops it", op: "Apply", owned: []string{"configName", "url"}, apply: true},
		{name: "keyed conditions: kgen's patch of old cannot be undone by an apply", op: "Update", owned: []string{"configName", "url"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, appRule, func(c *Config) { c.Schemas = fakeSchemas{atomicConditions: tt.atomic} })
			h.converge(appParent(nil))
			p := h.api.get(appGVK, "team", "web")
			status := p.Object["status"].(map[string]any)
			status["url"] = "http://web"
			fields := map[string]any{"f:conditions": map[string]any{}, "f:observedGeneration": map[string]any{}}
			for _, f := range tt.owned {
				fields["f:"+f] = map[string]any{}
			}
			p.Object["metadata"].(map[string]any)["managedFields"] = []any{
				map[string]any{"manager": "kgen", "operation": tt.op, "apiVersion": "example.com/v1", "subresource": "status",
					"fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:status": fields}},
			}
			p.SetResourceVersion("")
			h.api.add(p)
			h.api.resetRequests()
			if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
				t.Fatal(err)
			}
			var removed []string
			if body := h.api.lastBody("patch", "status"); body != nil {
				var ops []map[string]any
				_ = json.Unmarshal(body, &ops)
				for _, op := range ops {
					if op["op"] == "remove" {
						removed = append(removed, strings.TrimPrefix(op["path"].(string), "/status/"))
					}
				}
			}
			if !slices.Equal(removed, tt.remove) {
				t.Errorf("removed %v, want %v", removed, tt.remove)
			}
			if tt.remove != nil {
				if _, there := h.api.get(appGVK, "team", "web").Object["status"].(map[string]any)["url"]; there {
					t.Error("status.url is still there after the write")
				}
			}
			if applied := h.api.lastBody("patch", "status"); tt.remove == nil && (tt.apply != (applied != nil) || tt.apply && strings.Contains(string(applied), "url")) {
				t.Errorf("status write %s, want an apply without url: %t", applied, tt.apply)
			}
			if h.api.get(appGVK, "team", "web").Object["status"].(map[string]any)["configName"] == nil {
				t.Error("the rule's field was removed")
			}
			if tt.apply {
				// The server drops what kgen alone owned, and its entry
				// no longer lists it (the fake does neither).
				p := h.api.get(appGVK, "team", "web")
				delete(p.Object["status"].(map[string]any), "url")
				p.SetResourceVersion("")
				h.api.add(p)
			}
			h.api.resetRequests()
			if _, err := h.reconcile(h.api.get(appGVK, "team", "web")); err != nil {
				t.Fatal(err)
			}
			if w := h.api.writes(); len(w) > 0 {
				t.Errorf("converged, it wrote %q", w)
			}
		})
	}
}

// The fields the server names when it refuses a status write, and what
// kgen writes then: the fields it did not name, and Ready False keeping
// the cause it had.
func TestRefusedFallback(t *testing.T) {
	two := apierrors.NewInvalid(schema.GroupKind{Group: "example.com", Kind: "App"}, "web", field.ErrorList{
		field.Invalid(field.NewPath("status", "url"), int64(1), "must be a string"),
		field.Invalid(field.NewPath("status", "ports").Index(0).Child("port"), "x", "must be an integer"),
	})
	if got, want := refusedFields(two), []string{"url", "ports"}; !slices.Equal(got, want) {
		t.Errorf("refusedFields(422) = %v, want %v", got, want)
	}
	if got, want := refusedFields(typedPatchRefusal()), []string{"configName"}; !slices.Equal(got, want) {
		t.Errorf("refusedFields(typed patch) = %v, want %v", got, want)
	}
	if got := refusedFields(apierrors.NewServiceUnavailable("busy")); got != nil {
		t.Errorf("refusedFields(503) = %v", got)
	}

	fields := map[string]any{"configName": "web-config", "url": 1}
	tests := []struct {
		name     string
		ready    metav1.Condition
		named    []string
		kept     []string
		reason   string
		msgKeeps string
	}{
		{name: "ready, one field named", ready: metav1.Condition{Status: metav1.ConditionTrue, Reason: ReasonReady}, named: []string{"url"},
			kept: []string{"configName"}, reason: ReasonInvalid},
		{name: "a render error kept", ready: readyCondition(ReasonInvalid, "child config: no such key: imgae"), named: []string{"url"},
			kept: []string{"configName"}, reason: ReasonInvalid, msgKeeps: "child config: no such key: imgae"},
		{name: "a conflict kept", ready: readyCondition(ReasonConflict, "child config: exists"), named: []string{"url"},
			kept: []string{"configName"}, reason: ReasonConflict, msgKeeps: "child config: exists"},
		{name: "no field named: none kept", ready: metav1.Condition{Status: metav1.ConditionTrue, Reason: ReasonReady},
			reason: ReasonInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, kept := refusedFallback(tt.ready, fields, "status.url: must be a string", tt.named)
			var names []string
			for k := range kept {
				names = append(names, k)
			}
			slices.Sort(names)
			if !slices.Equal(names, tt.kept) {
				t.Errorf("kept %v, want %v", names, tt.kept)
			}
			if c.Status != metav1.ConditionFalse || c.Reason != tt.reason || !strings.Contains(c.Message, "status.url: must be a string") || !strings.Contains(c.Message, tt.msgKeeps) {
				t.Errorf("Ready = %+v, want False, %s, keeping %q and naming the refusal", c, tt.reason, tt.msgKeeps)
			}
		})
	}
}

// A Ready message longer than metav1.Condition allows is cut to it: the
// API server would otherwise refuse the whole status, and the parent keep
// a Ready condition it no longer earns.
func TestStampCutsALongMessage(t *testing.T) {
	long := strings.Repeat("é", maxConditionMessage)
	got := stamp(readyCondition(ReasonNotReady, long), nil, 1, time.Now())
	if len(got.Message) > maxConditionMessage || !strings.HasSuffix(got.Message, messageCut) || !utf8.ValidString(got.Message) {
		t.Errorf("message of %d bytes, ends %q, valid UTF-8 %t; want at most %d, ending %q", len(got.Message), got.Message[len(got.Message)-12:], utf8.ValidString(got.Message), maxConditionMessage, messageCut)
	}
	if short := stamp(readyCondition(ReasonNotReady, "short"), nil, 1, time.Now()); short.Message != "short" {
		t.Errorf("a short message became %q", short.Message)
	}
}
