package portal

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
)

// maxBodyBytes bounds the body of POST /apps: a request is a few hundred bytes.
const maxBodyBytes = 64 << 10

// handler serves the portal for the WebApps of one namespace.
type handler struct {
	webapps   dynamic.ResourceInterface
	namespace string
}

// NewHandler returns the portal's API and page for the WebApps in namespace,
// read and written with client. Handlers log with the logger of the
// request's context (klog.FromContext).
func NewHandler(client dynamic.Interface, namespace string) http.Handler {
	h := &handler{webapps: client.Resource(WebAppGVR).Namespace(namespace), namespace: namespace}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.page)
	mux.HandleFunc("GET /apps", h.list)
	mux.HandleFunc("POST /apps", h.apply)
	mux.HandleFunc("GET /apps/{name}", h.get)
	return mux
}

// apply creates or updates the WebApp a request describes, with one
// server-side apply, and answers 201 or 200 with the app.
//
// The apply alone does not tell created from updated (the dynamic client
// does not return the response's status code), so a Get comes first. If
// another client creates the app between the two, the apply still does the
// right thing and only the answer says 201 for what was an update.
func (h *handler) apply(w http.ResponseWriter, r *http.Request) {
	req, err := decodeRequest(w, r)
	if err != nil {
		h.respondError(w, r, err)
		return
	}
	if errs := req.validate(); len(errs) > 0 {
		h.respondError(w, r, invalidRequest(errs))
		return
	}
	ctx := r.Context()
	_, err = h.webapps.Get(ctx, req.Name, metav1.GetOptions{})
	created := apierrors.IsNotFound(err)
	if err != nil && !created {
		h.respondError(w, r, h.apiFailure(err, "get", req.Name))
		return
	}
	obj, err := h.webapps.Apply(ctx, req.Name, req.object(h.namespace), metav1.ApplyOptions{FieldManager: FieldManager})
	if err != nil {
		h.respondError(w, r, h.apiFailure(err, "apply", req.Name))
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
		w.Header().Set("Location", "/apps/"+req.Name)
	}
	klog.FromContext(ctx).Info("Applied app", "webapp", klog.KObj(obj), "created", created, "generation", obj.GetGeneration())
	respondJSON(w, code, appFrom(obj))
}

// get answers one app, or 404.
func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	obj, err := h.webapps.Get(r.Context(), name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && notFoundIsTheApp(err):
		h.respondError(w, r, &httpError{code: http.StatusNotFound,
			body: ErrorResponse{Error: fmt.Sprintf("app %q not found in namespace %s", name, h.namespace)}})
	case err != nil:
		h.respondError(w, r, h.apiFailure(err, "get", name))
	default:
		respondJSON(w, http.StatusOK, appFrom(obj))
	}
}

// List is the body of GET /apps.
type List struct {
	Items []App `json:"items"`
}

// list answers the apps: the WebApps the example rule selects.
func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	apps, err := h.apps(r.Context())
	if err != nil {
		h.respondError(w, r, err)
		return
	}
	respondJSON(w, http.StatusOK, List{Items: apps})
}

// apps returns the WebApps with the rule's label, sorted by name.
func (h *handler) apps(ctx context.Context) ([]App, error) {
	selector := labels.SelectorFromSet(labels.Set{tierLabel: tierValue}).String()
	list, err := h.webapps.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, h.apiFailure(err, "list", "")
	}
	apps := make([]App, 0, len(list.Items))
	for i := range list.Items {
		apps = append(apps, appFrom(&list.Items[i]))
	}
	slices.SortFunc(apps, func(a, b App) int { return cmp.Compare(a.Name, b.Name) })
	return apps, nil
}

// notFoundIsTheApp tells a 404 about the named WebApp from one about its
// resource (the CRD is not installed) or its namespace: only the first
// means the app does not exist.
func notFoundIsTheApp(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Name != "" && d.Kind == WebAppGVR.Resource
}

// ErrorResponse is the body of every answer that is not a success.
type ErrorResponse struct {
	// Error says what went wrong, in one sentence.
	Error string `json:"error"`
	// Causes name the fields at fault, where there are such.
	Causes []Cause `json:"causes,omitempty"`
}

// Cause is one field at fault and what is wrong with it.
type Cause struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// httpError is an error answer: a status code and its body.
type httpError struct {
	code       int
	body       ErrorResponse
	retryAfter int // seconds; 0: no Retry-After header
	err        error
}

func (e *httpError) Error() string { return e.body.Error }
func (e *httpError) Unwrap() error { return e.err }

func badRequest(field, format string, args ...any) *httpError {
	msg := fmt.Sprintf(format, args...)
	e := &httpError{code: http.StatusBadRequest, body: ErrorResponse{Error: msg}}
	if field != "" {
		e.body.Error = field + ": " + msg
		e.body.Causes = []Cause{{Field: field, Message: msg}}
	}
	return e
}

func invalidRequest(errs field.ErrorList) *httpError {
	e := &httpError{code: http.StatusBadRequest, body: ErrorResponse{Error: "invalid app: " + errs.ToAggregate().Error()}}
	for _, fe := range errs {
		e.body.Causes = append(e.body.Causes, Cause{Field: fe.Field, Message: fe.ErrorBody()})
	}
	return e
}

// decodeRequest reads the body of POST /apps: one JSON object with only the
// fields of Request, each of its type.
func decodeRequest(w http.ResponseWriter, r *http.Request) (*Request, error) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		// Also what keeps a cross-site HTML form from posting here: a
		// browser sends application/json only after a CORS preflight.
		return nil, &httpError{code: http.StatusUnsupportedMediaType,
			body: ErrorResponse{Error: fmt.Sprintf("Content-Type must be application/json, not %q", r.Header.Get("Content-Type"))}}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	req := &Request{}
	err := dec.Decode(req)
	if err == nil {
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return nil, badRequest("", "the body must hold one JSON object and nothing after it")
		}
		return req, nil
	}
	var (
		syntax   *json.SyntaxError
		typ      *json.UnmarshalTypeError
		tooLarge *http.MaxBytesError
	)
	switch {
	case errors.Is(err, io.EOF):
		return nil, badRequest("", `the body is empty; want a JSON object {"name", "image", "replicas", "port"}`)
	case errors.As(err, &syntax):
		return nil, badRequest("", "the body is not valid JSON: %v (at byte %d)", err, syntax.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, badRequest("", "the body is not valid JSON: it ends early")
	case errors.As(err, &typ) && typ.Field == "":
		return nil, badRequest("", `the body must be a JSON object {"name", "image", "replicas", "port"}, not %s`, typ.Value)
	case errors.As(err, &typ):
		return nil, badRequest(typ.Field, "must be %s, not %s", typeName(typ.Type), typ.Value)
	case errors.As(err, &tooLarge):
		return nil, &httpError{code: http.StatusRequestEntityTooLarge,
			body: ErrorResponse{Error: fmt.Sprintf("the body is larger than %d bytes", tooLarge.Limit)}}
	}
	// encoding/json reports an unknown field only in its message.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if unquoted, err := strconv.Unquote(name); err == nil {
			name = unquoted
		}
		return nil, badRequest(name, "unknown field; the fields are name, image, replicas and port")
	}
	return nil, badRequest("", "the body is not a valid app: %v", err)
}

func typeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	}
	return t.String()
}

// apiFailure turns an error of the API server, for a verb on the named
// WebApp (or on the list of them, name ""), into the portal's answer.
//
// What the caller can fix is a 4xx: a conflict with another field manager
// (409) or an app the API server finds invalid (422). What the portal's
// operator must fix (its permissions, the CRD, the namespace) or the API
// server's trouble is a 5xx, saying which.
func (h *handler) apiFailure(err error, verb, name string) *httpError {
	what := "webapps in namespace " + h.namespace
	if name != "" {
		what = fmt.Sprintf("webapp %s/%s", h.namespace, name)
	}
	e := &httpError{err: err, body: ErrorResponse{Causes: apiCauses(err)}}
	switch {
	case apierrors.IsConflict(err):
		e.code = http.StatusConflict
		e.body.Error = fmt.Sprintf("%s %s: %v", verb, what, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		e.code = http.StatusUnprocessableEntity
		e.body.Error = fmt.Sprintf("the API server rejected %s: %v", what, err)
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		e.code = http.StatusBadGateway
		e.body.Error = fmt.Sprintf("the portal may not %s %s (its ServiceAccount needs the Role of examples/portal/rbac.yaml): %v", verb, what, err)
	case apierrors.IsNotFound(err):
		e.code = http.StatusBadGateway
		e.body.Error = fmt.Sprintf("the API server does not serve %s (is the WebApp CRD installed, and the namespace there?): %v", what, err)
	case apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err):
		e.code = http.StatusServiceUnavailable
		e.body.Error = fmt.Sprintf("the API server is busy; try again later: %s %s: %v", verb, what, err)
		e.retryAfter = 1
		if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
			e.retryAfter = s
		}
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), errors.Is(err, context.DeadlineExceeded):
		e.code = http.StatusGatewayTimeout
		e.body.Error = fmt.Sprintf("the API server did not answer in time: %s %s: %v", verb, what, err)
	default:
		e.code = http.StatusBadGateway
		e.body.Error = fmt.Sprintf("%s %s: %v", verb, what, err)
	}
	return e
}

// apiCauses returns the fields an API error names, e.g. spec.replicas of
// an invalid object or .spec.image of a field manager conflict.
func apiCauses(err error) []Cause {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return nil
	}
	var out []Cause
	for _, c := range status.Status().Details.Causes {
		if c.Field != "" {
			out = append(out, Cause{Field: c.Field, Message: c.Message})
		}
	}
	return out
}

// respondError answers an error, and logs it: an *httpError as it says,
// anything else as a 500. Nothing is answered to a client that went away.
func (h *handler) respondError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		klog.FromContext(r.Context()).V(2).Info("Client went away", "method", r.Method, "path", r.URL.Path)
		return
	}
	var e *httpError
	if !errors.As(err, &e) {
		e = &httpError{code: http.StatusInternalServerError, body: ErrorResponse{Error: err.Error()}, err: err}
	}
	h.logFailure(r, e)
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	respondJSON(w, e.code, e.body)
}

// logFailure logs an error answer: those the portal's operator must act on
// (5xx) as errors, the caller's own mistakes only at verbosity 2.
func (h *handler) logFailure(r *http.Request, e *httpError) {
	logger := klog.FromContext(r.Context())
	if e.code >= 500 {
		logger.Error(e.err, "Request failed", "method", r.Method, "path", r.URL.Path, "code", e.code, "answer", e.body.Error)
		return
	}
	logger.V(2).Info("Request refused", "method", r.Method, "path", r.URL.Path, "code", e.code, "answer", e.body.Error)
}

func respondJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// Served as application/json with nosniff, never as HTML: kgen's
	// messages keep their ">=" readable instead of "\u003e=".
	enc.SetEscapeHTML(false)
	_ = enc.Encode(body) // the client may be gone; nothing to do then
}
