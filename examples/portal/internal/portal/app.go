package portal

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// WebAppGVR is the resource of examples/webapp/crd.yaml: the portal serves
// this one kind, and knows its plural as any client of an API knows its URLs.
var WebAppGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "webapps"}

const (
	webAppAPIVersion = "example.com/v1alpha1"
	webAppKind       = "WebApp"

	// FieldManager is the field manager of the portal's server-side applies.
	FieldManager = "kgen-portal"

	// tierLabel and tierValue are the label that examples/webapp/rules.yaml
	// selects its parents by; the portal sets it on every WebApp it writes.
	tierLabel = "tier"
	tierValue = "web"

	// conditionReady is the condition kgen writes on every parent.
	conditionReady = "Ready"

	// ReasonPending is the reason of an app kgen has not reported on yet,
	// or not for its current generation.
	ReasonPending = "Pending"
	// ReasonNotSelected is the reason of a WebApp without the label the
	// rule selects, which kgen therefore leaves alone.
	ReasonNotSelected = "NotSelected"
)

// Request is the body of POST /apps.
type Request struct {
	// Name is the WebApp's name: a DNS-1123 label.
	Name string `json:"name"`
	// Image is the container image to run.
	Image string `json:"image"`
	// Replicas is the number of pods, 0 or more. When it is absent the
	// portal does not set it, and the CRD's default (1) applies.
	Replicas *int64 `json:"replicas,omitempty"`
	// Port is the port the image listens on, 1 to 65535.
	Port *int64 `json:"port"`
}

// validate checks the request as the CRD's schema will, and more (the name),
// so that a bad request is answered with the field at fault before any call
// to the API server.
func (r *Request) validate() field.ErrorList {
	var errs field.ErrorList
	if p := field.NewPath("name"); r.Name == "" {
		errs = append(errs, field.Required(p, "the app's name"))
	} else {
		for _, msg := range validation.IsDNS1123Label(r.Name) {
			errs = append(errs, field.Invalid(p, r.Name, msg))
		}
	}
	if p := field.NewPath("image"); r.Image == "" {
		errs = append(errs, field.Required(p, "the container image to run"))
	} else if strings.ContainsFunc(r.Image, isSpace) {
		errs = append(errs, field.Invalid(p, r.Image, "must not contain whitespace"))
	}
	if r.Replicas != nil && *r.Replicas < 0 {
		errs = append(errs, field.Invalid(field.NewPath("replicas"), *r.Replicas, "must be greater than or equal to 0"))
	}
	if p := field.NewPath("port"); r.Port == nil {
		errs = append(errs, field.Required(p, "the port the image listens on"))
	} else if *r.Port < 1 || *r.Port > 65535 {
		errs = append(errs, field.Invalid(p, *r.Port, validation.InclusiveRangeError(1, 65535)))
	}
	return errs
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

// object is the apply configuration of the WebApp the request describes:
// exactly the fields the portal owns.
func (r *Request) object(namespace string) *unstructured.Unstructured {
	spec := map[string]any{"image": r.Image, "port": *r.Port}
	if r.Replicas != nil {
		spec["replicas"] = *r.Replicas
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": webAppAPIVersion,
		"kind":       webAppKind,
		"metadata": map[string]any{
			"name":      r.Name,
			"namespace": namespace,
			"labels":    map[string]any{tierLabel: tierValue},
		},
		"spec": spec,
	}}
}

// App is what the portal answers about one WebApp.
type App struct {
	Name string `json:"name"`
	// Ready is true when kgen reports the WebApp's current generation
	// Ready: every child applied and ready.
	Ready bool `json:"ready"`
	// Reason and Message are the Ready condition's, or say why there is
	// none to go by (ReasonPending, ReasonNotSelected).
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// ObservedGeneration is the generation kgen last reported on;
	// Generation is the WebApp's own.
	ObservedGeneration int64 `json:"observedGeneration"`
	Generation         int64 `json:"generation"`
	// Spec and Status are the WebApp's whole .spec and .status.
	Spec   map[string]any `json:"spec"`
	Status map[string]any `json:"status"`
}

// appFrom reads an App from a WebApp.
func appFrom(obj *unstructured.Unstructured) App {
	spec, _, _ := unstructured.NestedMap(obj.Object, "spec")
	status, _, _ := unstructured.NestedMap(obj.Object, "status")
	if spec == nil {
		spec = map[string]any{}
	}
	if status == nil {
		status = map[string]any{}
	}
	observed, _, _ := unstructured.NestedInt64(obj.Object, "status", "observedGeneration")
	app := App{
		Name:               obj.GetName(),
		ObservedGeneration: observed,
		Generation:         obj.GetGeneration(),
		Spec:               spec,
		Status:             status,
	}
	cond := readyCondition(status)
	switch {
	case obj.GetLabels()[tierLabel] != tierValue:
		app.Reason = ReasonNotSelected
		app.Message = fmt.Sprintf("the WebApp has no label %s=%s, so kgen's rule does not select it; POST it to /apps to add the label", tierLabel, tierValue)
	case cond == nil:
		app.Reason = ReasonPending
		app.Message = "kgen has not reported on this app yet"
	case observed < app.Generation:
		// The condition is about an older spec: the change is not
		// rolled out until kgen has seen it.
		app.Reason = ReasonPending
		app.Message = fmt.Sprintf("kgen has not reported on generation %d yet; on generation %d it said Ready=%s (%s)",
			app.Generation, observed, cond["status"], cond["reason"])
	default:
		app.Ready = cond["status"] == "True"
		app.Reason = cond["reason"]
		app.Message = cond["message"]
	}
	return app
}

// readyCondition returns the string fields of the Ready condition in a
// status, or nil.
func readyCondition(status map[string]any) map[string]string {
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != conditionReady {
			continue
		}
		out := map[string]string{}
		for _, k := range []string{"status", "reason", "message"} {
			out[k], _ = m[k].(string)
		}
		return out
	}
	return nil
}
