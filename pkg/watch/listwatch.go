package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

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
	// known is what the reflector's store holds, as the lists and the
	// events it was handed made it: a relist in the stream deletes what
	// the fresh list lacks. paging collects the pages of a list.
	known, paging map[objectKey]*Object
	// delay, timer: a relist asked for starts after delay (relistDelay),
	// and one asked for meanwhile starts it over.
	delay time.Duration
	timer *time.Timer
	// inStream makes a relist in the open watch (eventStream.relist)
	// rather than end it with errRelist; tests of that fallback turn it
	// off.
	inStream bool
	// onListed, when set, is told whenever a whole list was read (a
	// list's last page, a watch-list's initial events, a relist in the
	// stream): the resource can be listed and watched again.
	onListed func()
}

// listedAll tells onListed that a whole list was read.
func (lw *listWatch) listedAll() {
	if lw.onListed != nil {
		lw.onListed()
	}
}

// objectKey names an object in a listWatch's known set.
type objectKey struct{ namespace, name string }

func keyOf(o *Object) objectKey { return objectKey{o.Namespace, o.Name} }

// relistDelay is how long a relist waits before it lists. The API server
// rebuilds a CRD's storage when its own informer sees the change, and
// kgen's event of it can come first: a list at once could still be
// served under the old schema. The watch goes on meanwhile.
const relistDelay = time.Second

// Relist has the resource listed again, after relistDelay. After a
// CustomResourceDefinition changed, the API server
// decodes its objects under the new schema (defaults, pruning), but a
// watch that resumes from its resource version sends only the objects
// that change afterwards: the cache would keep the others as the old
// schema made them, and a parent kgen found invalid would stay so.
//
// The relist is made in the open watch when it can be (eventStream.relist):
// the stream lists, sends what changed as events, and watches on from the
// list. Ending the watch instead makes client-go's reflector list only
// after its backoff, which shared informers do not let kgen set (client-go
// TODO #136943): it doubles with every relist within two minutes, from
// 0.8-1.6 s up to 30-60 s, with the watch down meanwhile, so after a few
// CRD changes in a row parent edits were followed up to half a minute
// late. The reflector still lists when the stream cannot (a watch-list
// still sending its initial objects, or a list that keeps failing): the
// open watch, or the next one, then ends with 410 Expired, as one that
// the server finds too old does.
func (lw *listWatch) Relist() {
	lw.mu.Lock()
	if lw.timer != nil {
		lw.timer.Stop()
	}
	if lw.delay > 0 {
		lw.timer = time.AfterFunc(lw.delay, lw.relistNow)
		lw.mu.Unlock()
		return
	}
	lw.mu.Unlock()
	lw.relistNow()
}

// relistNow asks for a relist and interrupts the open watch: it ends, and
// run finds the relist pending. The watch's body is closed without lw.mu
// held (closing an HTTP/2 body waits for the stream's reset to be
// written, and Manager.Relist and every event observed wait on lw.mu). A
// watch opened or reopened by a relist meanwhile is interrupted all the
// same: both check relistPending after they replace the body, and wanted
// has grown before the open watch is read here.
func (lw *listWatch) relistNow() {
	lw.mu.Lock()
	lw.wanted++
	s := lw.current
	lw.mu.Unlock()
	if s != nil {
		s.interrupt()
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
	return &listWatch{client: client, key: key, segments: append(segments, key.GVR.Resource), delay: relistDelay, inStream: true}
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
		lw.listedPage(opts.Continue == "", list)
		if list.Continue == "" {
			lw.listedAll()
		}
	}
	return list, err
}

// listedPage records a page of a list handed to the reflector: once the
// last page is read, the list is what its store holds.
func (lw *listWatch) listedPage(first bool, list *List) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if first || lw.paging == nil {
		lw.paging = make(map[objectKey]*Object, len(list.Items))
	}
	for _, o := range list.Items {
		lw.paging[keyOf(o)] = o
	}
	if list.Continue == "" {
		lw.known, lw.paging = lw.paging, nil
	}
}

// observe records an event the reflector took from stream s, if s is the
// watch open now.
func (lw *listWatch) observe(s *eventStream, t apiwatch.EventType, o *Object) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.current != s {
		return
	}
	if lw.known == nil {
		lw.known = map[objectKey]*Object{}
	}
	switch t {
	case apiwatch.Added, apiwatch.Modified:
		lw.known[keyOf(o)] = o
	case apiwatch.Deleted:
		delete(lw.known, keyOf(o))
	}
}

// replaceKnown records that the reflector's store holds objects, after
// the initial objects of a watch-list or a relist in stream s.
func (lw *listWatch) replaceKnown(s *eventStream, objects map[objectKey]*Object) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.current == s {
		lw.known = objects
	}
}

// knownNow returns a copy of what the reflector's store holds.
func (lw *listWatch) knownNow() map[objectKey]*Object {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return maps.Clone(lw.known)
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
	// The API server ends the watches of a CRD whose storage it rebuilds
	// (its spec changed), and answers 429 "storage is (re)initializing"
	// until the new storage's cache has started, usually within a second
	// or two. The reflector would retry after its backoff, which grows
	// with every such change within two minutes; the watch is tried
	// again here, every quarter second for up to ten seconds.
	for try := 0; err != nil && !watchList && try < 40 && apierrors.IsTooManyRequests(err) && cacheNotReady(err.Error()); try++ {
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(250 * time.Millisecond):
		}
		body, err = lw.request(opts).Stream(ctx)
	}
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
	s := &eventStream{body: body, result: make(chan apiwatch.Event), watchList: watchList, fromNow: opts.ResourceVersion == "",
		lw: lw, timeoutSeconds: opts.TimeoutSeconds}
	s.ctx, s.cancel = context.WithCancel(ctx)
	lw.mu.Lock()
	lw.current = s
	lw.mu.Unlock()
	if lw.relistPending() {
		s.interrupt() // asked for while the watch was being opened
	}
	go s.run()
	return s, nil
}

// listAll lists every object, page after page if the server answers in
// pages.
func (lw *listWatch) listAll(ctx context.Context) (*List, error) {
	var all *List
	opts := metav1.ListOptions{}
	for {
		res := lw.request(opts).Do(ctx)
		data, err := res.Raw()
		if err != nil {
			return nil, res.Error()
		}
		page, err := decodeList(data)
		if err != nil {
			return nil, err
		}
		if all == nil {
			all = page
		} else {
			all.Items = append(all.Items, page.Items...)
			all.ResourceVersion = page.ResourceVersion
		}
		if page.Continue == "" {
			all.Continue = ""
			return all, nil
		}
		opts.Continue = page.Continue
	}
}

// mayPass reports whether a relist's failed list may succeed when tried
// again soon: the server was busy (429), failed (5xx), or did not answer.
func mayPass(err error) bool {
	var api apierrors.APIStatus
	if !errors.As(err, &api) {
		return true
	}
	code := api.Status().Code
	return code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
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
	lw *listWatch
	// ctx is the watch's, ended by Stop too: a relist's list and watch
	// requests are abandoned when the reflector stops the watch.
	ctx    context.Context
	cancel context.CancelFunc
	// timeoutSeconds is the watch's, for the watch a relist opens.
	timeoutSeconds *int64

	mu     sync.Mutex
	body   io.ReadCloser // guarded by mu: a relist replaces it
	closed bool          // Stop was called

	result chan apiwatch.Event
	once   sync.Once
	// watchList is set for a watch-list request (sendInitialEvents): a
	// 429, or the end of the stream, before the bookmark that ends its
	// initial objects is turned into a 503 by notStreamable; so is a
	// "too large resource version" when fromNow (the watch asked for no
	// resource version, so the server's cache is what lags).
	watchList, fromNow bool
}

// interrupt ends the read of the body; run then finds a relist pending.
// The body is closed without s.mu held (see listWatch.relistNow).
func (s *eventStream) interrupt() {
	s.mu.Lock()
	body := s.body
	s.mu.Unlock()
	body.Close()
}

// ResultChan implements watch.Interface.
func (s *eventStream) ResultChan() <-chan apiwatch.Event { return s.result }

// Stop implements watch.Interface.
func (s *eventStream) Stop() {
	s.once.Do(func() {
		s.cancel()
		s.mu.Lock()
		s.closed = true
		body := s.body
		s.mu.Unlock()
		body.Close() // a body a relist opens later is closed by it
	})
}

func (s *eventStream) run() {
	defer close(s.result)
	defer s.Stop()
	s.mu.Lock()
	dec := json.NewDecoder(s.body)
	s.mu.Unlock()
	// initial is set, for a watch-list, until the bookmark that ends the
	// initial objects, which are collected in initialObjects.
	initial := s.watchList
	var initialObjects map[objectKey]*Object
	if initial {
		initialObjects = map[objectKey]*Object{}
	}
	// expired counts the relists of this stream for a 410: a server that
	// keeps answering so is left to the reflector.
	expired := 0
	for {
		var event struct {
			Type   apiwatch.EventType `json:"type"`
			Object json.RawMessage    `json:"object"`
		}
		if err := dec.Decode(&event); err != nil {
			if s.lw.relistPending() {
				if initial || !s.lw.inStream {
					s.fail(errRelist)
					return
				}
				body, ok := s.relist(true)
				if !ok {
					return
				}
				dec = json.NewDecoder(body)
				continue
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
			if !initial && s.lw.inStream && expired < 3 && (status.Reason == metav1.StatusReasonExpired || status.Reason == metav1.StatusReasonGone) {
				expired++
				// The watch is too old for the server: the reflector
				// would list after its backoff, with no watch meanwhile.
				// The API server says so to every watch of a CRD whose
				// storage it rebuilt. Listed here instead.
				body, ok := s.relist(false)
				if !ok {
					return
				}
				dec = json.NewDecoder(body)
				continue
			}
			initial = false // reported: the end of the stream is no second failure

			obj = status
		case apiwatch.Added, apiwatch.Modified, apiwatch.Deleted, apiwatch.Bookmark:
			o, err := decodeObject(event.Object, schema.GroupVersionKind{})
			if err != nil {
				s.fail(fmt.Errorf("unable to decode a %s event: %w", event.Type, err))
				return
			}
			obj = o
		default:
			s.fail(fmt.Errorf("unknown watch event type %q", event.Type))
			return
		}
		if !s.send(apiwatch.Event{Type: event.Type, Object: obj}) {
			return
		}
		if o, ok := obj.(*Object); ok {
			switch {
			case initial && event.Type == apiwatch.Bookmark && o.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true":
				initial = false
				s.lw.replaceKnown(s, initialObjects)
				s.lw.listedAll()
			case initial && event.Type == apiwatch.Added:
				initialObjects[keyOf(o)] = o
			case !initial:
				s.lw.observe(s, event.Type, o)
			}
		}
	}
}

// relist lists the resource again within the open watch (see
// listWatch.Relist), or when the server finds the watch too old: it lists
// it from the server, sends each object as added or modified (with all
// unset, only those whose resource version changed: a relist kgen asked
// for sends every one, as a changed schema changes objects but not their
// versions), and each one the reflector's store holds that the list lacks
// as deleted, then a bookmark of the list's resource version,
// and returns the body of a watch from there. A list that fails for a
// reason that may pass (429: the API server may answer so while it
// rebuilds a changed CRD's storage; 5xx; no answer) is tried again twice,
// a second apart or after the server's Retry-After if longer; then, or at
// once for any other failure (403, 404: trying again soon does not help),
// it reports errRelist, and the reflector lists, reports the failure and
// retries with its backoff. ok is false when the stream ends.
func (s *eventStream) relist(all bool) (body io.ReadCloser, ok bool) {
	lw := s.lw
	if s.ctx.Err() != nil {
		return nil, false // stopped, not interrupted
	}
	all = all || lw.relistPending()
	s.interrupt() // the watch being replaced, if the server has not ended it
	served := lw.listing()
	var list *List
	for try := 0; ; try++ {
		var err error
		if list, err = lw.listAll(s.ctx); err == nil {
			break
		}
		if try == 2 || !mayPass(err) {
			s.fail(errRelist)
			return nil, false
		}
		wait := time.Second
		if d, ok := apierrors.SuggestsClientDelay(err); ok && time.Duration(d)*time.Second > wait {
			wait = min(time.Duration(d)*time.Second, 10*time.Second)
		}
		select {
		case <-s.ctx.Done():
			return nil, false
		case <-time.After(wait):
		}
	}
	// The events carry each object's own resource version, older than
	// the list's and than the last the watch sent, and the reflector
	// takes each as the version to watch again from: it steps back until
	// the bookmark below. That is safe: the stream ends before the
	// bookmark only when the reflector stopped it (its context ended, or a
	// resync failed; an error is never sent meanwhile), and a reflector
	// that watches again from an older version is sent the changes since
	// then once more (the store ends as the server has it) or a 410, and
	// lists. Sending the bookmark first would not help: the events after
	// it would step back all the same.
	//
	// Each event is recorded once the reflector took it, so what kgen
	// knows of its store stays true if the stream ends midway.
	send := func(t apiwatch.EventType, o *Object) bool {
		if !s.send(apiwatch.Event{Type: t, Object: o}) {
			return false
		}
		lw.observe(s, t, o)
		return true
	}
	// A delete carries a copy of the cached object: the informer's
	// transform runs on it again and sets its fields, while others read
	// the cached one. (Its JSON and label slices are shared: compact
	// only replaces them.)
	gone := func(o *Object) *Object { return o.DeepCopyObject().(*Object) }
	known := lw.knownNow()
	listed := make(map[objectKey]bool, len(list.Items))
	for _, o := range list.Items {
		k := keyOf(o)
		listed[k] = true
		t := apiwatch.Added
		if was, ok := known[k]; ok {
			switch {
			case was.UID != o.UID:
				// Deleted and made again under its name: the handlers
				// are told of both.
				if !send(apiwatch.Deleted, gone(was)) {
					return nil, false
				}
			case !all && was.ResourceVersion == o.ResourceVersion:
				continue // unchanged
			default:
				t = apiwatch.Modified
			}
		}
		if !send(t, o) {
			return nil, false
		}
	}
	for k, o := range known {
		if !listed[k] && !send(apiwatch.Deleted, gone(o)) {
			return nil, false
		}
	}
	bookmark := &Object{}
	bookmark.APIVersion, bookmark.Kind, bookmark.ResourceVersion = list.APIVersion, strings.TrimSuffix(list.Kind, "List"), list.ResourceVersion
	if !s.send(apiwatch.Event{Type: apiwatch.Bookmark, Object: bookmark}) {
		return nil, false
	}
	served()
	lw.listedAll()
	// The watch of a CRD's new storage is answered 429 "storage is
	// (re)initializing" until its cache has started: tried again here, or
	// the reflector would, after its growing backoff. Any other 429 (API
	// Priority and Fairness throttling) goes to the reflector at once, as
	// does any other error: it backs off before it watches again.
	var err error
	for try := 0; ; try++ {
		body, err = lw.request(metav1.ListOptions{Watch: true, ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true,
			TimeoutSeconds: s.timeoutSeconds}).Stream(s.ctx)
		if err == nil || !apierrors.IsTooManyRequests(err) || !cacheNotReady(err.Error()) || try == 9 {
			break
		}
		select {
		case <-s.ctx.Done():
			return nil, false
		case <-time.After(500 * time.Millisecond):
		}
	}
	if err != nil {
		s.fail(err) // the reflector watches again from the bookmark
		return nil, false
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		body.Close()
		return nil, false
	}
	s.body = body
	s.mu.Unlock()
	if lw.relistPending() {
		s.interrupt() // asked for again while this one ran
	}
	return body, true
}

// fail reports err as an Error event unless the watch was stopped or its
// context ended (then the error is only the closed body): an API status as it is, anything else as
// an internal error.
func (s *eventStream) fail(err error) {
	if s.ctx.Err() != nil {
		return
	}
	status := &apierrors.NewInternalError(err).ErrStatus
	if api := apierrors.APIStatus(nil); errors.As(err, &api) {
		status = new(api.Status())
	}
	s.send(apiwatch.Event{Type: apiwatch.Error, Object: status})
}

// send hands e to the reader, unless the watch is stopped or its context
// ended first.
func (s *eventStream) send(e apiwatch.Event) bool {
	select {
	case s.result <- e:
		return true
	case <-s.ctx.Done():
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
