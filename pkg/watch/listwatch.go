package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// listWatch lists and watches one resource and decodes what it receives
// straight into *Object (see decodeObject). The dynamic client would decode
// every object into maps first, only for the informer's transform to turn
// them back into JSON: under load that was a third of kgen's CPU time.
type listWatch struct {
	client   rest.Interface
	key      Key
	segments []string // the resource's path

	mu sync.Mutex
	// wanted counts the relists asked for (Relist), and listed the ones a
	// list, or a watch-list, started after: while listed < wanted, every
	// watch ends with errRelist.
	wanted, listed uint64
	// listStart is wanted when the first page of the list being read
	// was asked for.
	listStart uint64
	current   *eventStream // the last watch opened
}

// Relist makes the reflector list the resource again: the open watch, or
// the next one, ends with 410 Expired, as one that the server finds too
// old does. After a CustomResourceDefinition changed, the API server
// decodes its objects under the new schema (defaults, pruning), but a
// watch that resumes from its resource version sends only the objects
// that change afterwards: the cache would keep the others as the old
// schema made them, and a parent kgen found invalid would stay so.
func (lw *listWatch) Relist() {
	lw.mu.Lock()
	lw.wanted++
	s := lw.current
	lw.mu.Unlock()
	if s != nil {
		s.body.Close() // it ends, and run finds the relist pending
	}
}

// relistPending reports whether a relist was asked for that no list has
// started after.
func (lw *listWatch) relistPending() bool {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.listed < lw.wanted
}

// listing notes that a list starts: it serves the relists asked for so far.
// It returns a func that records them as served once the list succeeded.
func (lw *listWatch) listing() func() {
	lw.mu.Lock()
	n := lw.wanted
	lw.mu.Unlock()
	return func() {
		lw.mu.Lock()
		lw.listed = max(lw.listed, n)
		lw.mu.Unlock()
	}
}

// listingPages is listing for a list read in pages: the relists asked for
// before its first page are served once its last page was read.
func (lw *listWatch) listingPages(opts metav1.ListOptions) func(last bool) {
	lw.mu.Lock()
	if opts.Continue == "" {
		lw.listStart = lw.wanted
	}
	n := lw.listStart
	lw.mu.Unlock()
	return func(last bool) {
		if !last {
			return
		}
		lw.mu.Lock()
		lw.listed = max(lw.listed, n)
		lw.mu.Unlock()
	}
}

// errRelist is the 410 that makes the reflector list again (see Relist).
var errRelist = apierrors.NewResourceExpired("kgen lists the resource again: its definition changed")

func newListWatch(client rest.Interface, key Key) *listWatch {
	gv := key.GVR.GroupVersion()
	segments := []string{"/api", gv.Version}
	if gv.Group != "" {
		segments = []string{"/apis", gv.Group, gv.Version}
	}
	if key.Namespace != "" {
		segments = append(segments, "namespaces", key.Namespace)
	}
	return &listWatch{client: client, key: key, segments: append(segments, key.GVR.Resource)}
}

// request returns a list or watch request. The client does not retry it
// (it would retry a 429 ten times, a second apart): the reflector retries
// every failed list or watch with its own backoff, and tells the watch
// error handler, so kgen reports each failure.
func (lw *listWatch) request(opts metav1.ListOptions) *rest.Request {
	opts.LabelSelector = lw.key.Selector
	return lw.client.Get().AbsPath(lw.segments...).
		SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).
		MaxRetries(0)
}

// List implements cache.ListerWatcher.
func (lw *listWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

// Watch implements cache.ListerWatcher.
func (lw *listWatch) Watch(opts metav1.ListOptions) (apiwatch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// ListWithContext implements cache.ListerWatcherWithContext.
func (lw *listWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	listed := lw.listingPages(opts)
	res := lw.request(opts).Do(ctx)
	data, err := res.Raw()
	if err != nil {
		// Error decodes the server's Status ("secrets is forbidden: User
		// ... cannot list ..."); Raw's error has only the HTTP status.
		return nil, res.Error()
	}
	list, err := decodeList(data)
	if err == nil {
		listed(list.Continue == "")
	}
	return list, err
}

// WatchWithContext implements cache.ListerWatcherWithContext.
//
// A watch-list request (sendInitialEvents: the watch first streams every
// object) that the server answers with 429, or that ends before its
// initial objects did, fails with a 503 instead (see notStreamable), so the reflector
// lists instead of retrying it in place.
func (lw *listWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (apiwatch.Interface, error) {
	opts.Watch = true
	watchList := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	var listed func()
	switch {
	case watchList:
		// It streams every object first: a list.
		listed = lw.listing()
	case lw.relistPending():
		ch := make(chan apiwatch.Event, 1)
		ch <- apiwatch.Event{Type: apiwatch.Error, Object: &errRelist.ErrStatus}
		close(ch)
		return apiwatch.NewProxyWatcher(ch), nil
	}
	body, err := lw.request(opts).Stream(ctx)
	if err != nil {
		if watchList && apierrors.IsTooManyRequests(err) && cacheNotReady(err.Error()) {
			status := metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
			if api := apierrors.APIStatus(nil); errors.As(err, &api) {
				status = api.Status()
			}
			return nil, &apierrors.StatusError{ErrStatus: notStreamable(status)}
		}
		return nil, err
	}
	if listed != nil {
		listed()
	}
	s := &eventStream{body: body, result: make(chan apiwatch.Event), done: make(chan struct{}), watchList: watchList, fromNow: opts.ResourceVersion == "",
		relist: lw.relistPending}
	lw.mu.Lock()
	lw.current = s
	lw.mu.Unlock()
	if s.relist() {
		s.body.Close() // asked for while the watch was being opened
	}
	go s.run()
	return s, nil
}

// cacheNotReady reports whether a 429's message is the API server's
// "storage is (re)initializing": its watch cache of the resource cannot
// start, and a watch-list will not stream until it does. Any other 429 (API
// Priority and Fairness throttling) is retried in place by the reflector,
// as it should be: a list instead would cost the server more when it is
// already overloaded.
func cacheNotReady(message string) bool {
	return strings.Contains(message, "storage is (re)initializing")
}

// tooLargeResourceVersion reports whether a status is the API server's
// "Too large resource version": its watch cache is behind the version asked
// for.
func tooLargeResourceVersion(status *metav1.Status) bool {
	if status.Details == nil {
		return false
	}
	for _, c := range status.Details.Causes {
		if c.Type == metav1.CauseTypeResourceVersionTooLarge {
			return true
		}
	}
	return false
}

// notStreamable turns the server's 429 answer to a watch-list request into
// a 503 that names it. client-go's reflector retries a watch-list that
// fails with 429, or that ends before its initial objects, in place,
// forever, and never tells its watch error handler; the API server does
// both, or answers 504 "Too large resource version" (which the reflector
// retries in place too), for as long as its watch cache of the resource
// cannot start, e.g. while the conversion webhook of a CRD's version is
// down. kgen would then never report the
// failure (log, metric, Rule status). With a 503 the reflector falls back
// to a list, whose error names the cause ("failed to list ...: conversion
// webhook ... failed") and is reported and retried with the reflector's
// backoff like any failing list.
func notStreamable(status metav1.Status) metav1.Status {
	status.Code = http.StatusServiceUnavailable
	status.Reason = metav1.StatusReasonServiceUnavailable
	status.Message = "the server cannot stream the initial objects of a watch (" + status.Message + "); listing them instead"
	return status
}

// List is a list of *Object, as listWatch returns it.
type List struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []*Object
}

// DeepCopyObject copies the list; the items' JSON is shared, as it is never
// modified.
func (l *List) DeepCopyObject() runtime.Object {
	out := &List{TypeMeta: l.TypeMeta, ListMeta: *l.ListMeta.DeepCopy(), Items: make([]*Object, len(l.Items))}
	for i, o := range l.Items {
		out.Items[i] = o.DeepCopyObject().(*Object)
	}
	return out
}

// decodeList decodes a list response. Its items do not name their kind, so
// they get the list's kind without "List".
func decodeList(data []byte) (*List, error) {
	var in struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ListMeta   `json:"metadata"`
		Items      []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("decode list: %w", err)
	}
	gvk := schema.FromAPIVersionAndKind(in.APIVersion, strings.TrimSuffix(in.Kind, "List"))
	out := &List{TypeMeta: metav1.TypeMeta{APIVersion: in.APIVersion, Kind: in.Kind}, ListMeta: in.Metadata,
		Items: make([]*Object, 0, len(in.Items))}
	for i, item := range in.Items {
		o, err := decodeObject(item, gvk)
		if err != nil {
			return nil, fmt.Errorf("decode list item %d: %w", i, err)
		}
		out.Items = append(out.Items, o)
	}
	return out, nil
}

// eventStream is a watch.Interface over a JSON watch stream.
type eventStream struct {
	body   io.ReadCloser
	result chan apiwatch.Event
	done   chan struct{}
	once   sync.Once
	// watchList is set for a watch-list request (sendInitialEvents): a
	// 429, or the end of the stream, before the bookmark that ends its
	// initial objects is turned into a 503 by notStreamable; so is a
	// "too large resource version" when fromNow (the watch asked for no
	// resource version, so the server's cache is what lags).
	watchList, fromNow bool
	// relist reports whether a relist is pending (listWatch.Relist): the
	// stream then ends with errRelist, however it ended.
	relist func() bool
}

// ResultChan implements watch.Interface.
func (s *eventStream) ResultChan() <-chan apiwatch.Event { return s.result }

// Stop implements watch.Interface.
func (s *eventStream) Stop() {
	s.once.Do(func() {
		close(s.done)
		s.body.Close()
	})
}

func (s *eventStream) run() {
	defer close(s.result)
	defer s.Stop()
	dec := json.NewDecoder(s.body)
	// initial is set, for a watch-list, until the bookmark that ends the
	// initial objects.
	initial := s.watchList
	for {
		var event struct {
			Type   apiwatch.EventType `json:"type"`
			Object json.RawMessage    `json:"object"`
		}
		if err := dec.Decode(&event); err != nil {
			if s.relist != nil && s.relist() {
				s.fail(errRelist)
				return
			}
			if initial && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
				// A watch-list streams the initial objects, then a
				// bookmark; ending before it, it failed.
				s.fail(&apierrors.StatusError{ErrStatus: notStreamable(metav1.Status{Status: metav1.StatusFailure,
					Message: "the watch ended before its initial objects did"})})
				return
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return // the server ended the watch: the reflector starts another
			}
			s.fail(fmt.Errorf("unable to decode an event from the watch stream: %w", err))
			return
		}
		var obj runtime.Object
		switch event.Type {
		case apiwatch.Error:
			status := &metav1.Status{}
			if err := json.Unmarshal(event.Object, status); err != nil {
				s.fail(fmt.Errorf("unable to decode a watch error: %w", err))
				return
			}
			if initial && (status.Code == http.StatusTooManyRequests && cacheNotReady(status.Message) || s.fromNow && tooLargeResourceVersion(status)) {
				*status = notStreamable(*status)
			}
			initial = false // reported: the end of the stream is no second failure

			obj = status
		case apiwatch.Added, apiwatch.Modified, apiwatch.Deleted, apiwatch.Bookmark:
			o, err := decodeObject(event.Object, schema.GroupVersionKind{})
			if err != nil {
				s.fail(fmt.Errorf("unable to decode a %s event: %w", event.Type, err))
				return
			}
			if event.Type == apiwatch.Bookmark && o.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				initial = false
			}
			obj = o
		default:
			s.fail(fmt.Errorf("unknown watch event type %q", event.Type))
			return
		}
		if !s.send(apiwatch.Event{Type: event.Type, Object: obj}) {
			return
		}
	}
}

// fail reports err as an Error event unless the watch was stopped (then the
// error is only the closed body): an API status as it is, anything else as
// an internal error.
func (s *eventStream) fail(err error) {
	select {
	case <-s.done:
		return
	default:
	}
	status := &apierrors.NewInternalError(err).ErrStatus
	if api := apierrors.APIStatus(nil); errors.As(err, &api) {
		status = new(api.Status())
	}
	s.send(apiwatch.Event{Type: apiwatch.Error, Object: status})
}

func (s *eventStream) send(e apiwatch.Event) bool {
	select {
	case s.result <- e:
		return true
	case <-s.done:
		return false
	}
}

// NewRESTClient returns a client for Config.REST: config's server,
// credentials and limits, speaking JSON.
func NewRESTClient(config *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(config)
	c.ContentType, c.AcceptContentTypes = "application/json", "application/json"
	c.GroupVersion, c.APIPath = nil, ""
	// For error responses only: bodies are decoded by listWatch.
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return rest.UnversionedRESTClientFor(c)
}
