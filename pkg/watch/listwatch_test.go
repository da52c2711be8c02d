package watch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

func TestListWatch(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.String())
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/apis/apps/v1/namespaces/a/deployments" && r.URL.Query().Get("watch") == "true":
			fmt.Fprintln(w, `{"type":"ADDED","object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"a","resourceVersion":"5","managedFields":[{}]}}}`)
			fmt.Fprintln(w, `{"type":"BOOKMARK","object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"resourceVersion":"6","annotations":{"k8s.io/initial-events-end":"true"}}}}`)
			fmt.Fprintln(w, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old"}}`)
		case r.URL.Path == "/apis/apps/v1/namespaces/a/deployments":
			fmt.Fprint(w, `{"apiVersion":"apps/v1","kind":"DeploymentList","metadata":{"resourceVersion":"9","continue":"c"},
				"items":[{"metadata":{"name":"d","namespace":"a","managedFields":[{}]},"spec":{}}]}`)
		case r.URL.Path == "/api/v1/configmaps":
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"no"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	client, err := rest.UnversionedRESTClientFor(&rest.Config{Host: srv.URL,
		ContentConfig: rest.ContentConfig{NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lw := newListWatch(client, Key{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Namespace: "a", Selector: "x=y"})
	lw.inStream = false // the 410 reaches the reflector (see TestManagerRelist)

	list, err := lw.ListWithContext(ctx, metav1.ListOptions{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	l := list.(*List)
	if l.ResourceVersion != "9" || l.Continue != "c" || len(l.Items) != 1 || l.Items[0].Kind != "Deployment" || l.Items[0].Name != "d" {
		t.Errorf("list: %+v", l)
	}
	if u, err := l.Items[0].Unstructured(); err != nil || u.GetAPIVersion() != "apps/v1" || u.GetManagedFields() != nil {
		t.Errorf("list item: %v %v", u, err)
	}
	if want := "/apis/apps/v1/namespaces/a/deployments?labelSelector=x%3Dy&limit=10"; paths[0] != want {
		t.Errorf("list request %s, want %s", paths[0], want)
	}

	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "4", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	var events []apiwatch.Event
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				done = true
				break
			}
			events = append(events, e)
		case <-timeout:
			t.Fatal("the watch did not end")
		}
	}
	w.Stop()
	if len(events) != 3 {
		t.Fatalf("got %d events, want 3: %v", len(events), events)
	}
	if o, ok := events[0].Object.(*Object); !ok || events[0].Type != apiwatch.Added || o.Name != "d" || o.ResourceVersion != "5" {
		t.Errorf("first event: %+v", events[0])
	}
	if o, ok := events[1].Object.(*Object); !ok || events[1].Type != apiwatch.Bookmark || o.GetAnnotations()["k8s.io/initial-events-end"] != "true" {
		t.Errorf("bookmark: %+v", events[1])
	}
	if err := apierrors.FromObject(events[2].Object); events[2].Type != apiwatch.Error || !apierrors.IsResourceExpired(err) {
		t.Errorf("error event: %+v (%v)", events[2], err)
	}

	forbidden := newListWatch(client, Key{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}})
	if _, err := forbidden.ListWithContext(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list error: %v, want Forbidden", err)
	}
	if _, err := forbidden.WatchWithContext(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("watch error: %v, want Forbidden", err)
	}
}

// A 429 answer to a watch-list request, as a response or in the stream
// before the bookmark that ends the initial objects, and a watch-list that
// ends before that bookmark, or that the server's cache cannot serve from
// now (too large resource version, when none was asked for), become a 503 that the reflector does not retry in place, so it lists instead; a
// 429 to a plain watch, or after the bookmark, stays as the server sent
// it, and so does a 429 that is throttling, not a cache that cannot start
// (a list would cost the server more); a plain watch may end empty. The
// client never retries a 429
// itself: the reflector does, with its backoff, and reports it.
func TestListWatchTooManyRequests(t *testing.T) {
	const tooMany = `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,"message":"storage is (re)initializing"}`
	var requests int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/namespaces/answer/configmaps":
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, tooMany)
		case "/api/v1/namespaces/throttled/configmaps":
			// API Priority and Fairness: not a cache that cannot start.
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,"message":"Too many requests, please try again later."}`)
		case "/api/v1/namespaces/stream/configmaps":
			fmt.Fprintf(w, `{"type":"ERROR","object":%s}`+"\n", tooMany)
		case "/api/v1/namespaces/toolarge/configmaps":
			fmt.Fprintln(w, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Timeout: Too large resource version: 209, current: 208","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}}`)
		case "/api/v1/namespaces/empty/configmaps":
			// As the API server does while its watch cache cannot start.
		case "/api/v1/namespaces/cut/configmaps":
			fmt.Fprintln(w, `{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"cut","resourceVersion":"5"}}}`)
		case "/api/v1/namespaces/later/configmaps":
			fmt.Fprintln(w, `{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"later","resourceVersion":"5"}}}`)
			fmt.Fprintln(w, `{"type":"BOOKMARK","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"resourceVersion":"6","annotations":{"k8s.io/initial-events-end":"true"}}}}`)
			fmt.Fprintf(w, `{"type":"ERROR","object":%s}`+"\n", tooMany)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	client, err := rest.UnversionedRESTClientFor(&rest.Config{Host: srv.URL,
		ContentConfig: rest.ContentConfig{NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	// lastError returns the watch's error: from the request, or its last
	// event's.
	lastError := func(ns string, watchList bool, rv string) error {
		opts := metav1.ListOptions{AllowWatchBookmarks: true, ResourceVersion: rv}
		if watchList {
			opts.SendInitialEvents = new(true)
			opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		}
		lw := newListWatch(client, Key{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: ns})
		w, err := lw.WatchWithContext(context.Background(), opts)
		if err != nil {
			return err
		}
		defer w.Stop()
		var last error
		for e := range w.ResultChan() {
			if e.Type == apiwatch.Error {
				last = apierrors.FromObject(e.Object)
			}
		}
		return last
	}
	for _, tc := range []struct {
		ns        string
		watchList bool
		rv        string
		want      int32
	}{
		{ns: "toolarge", watchList: true, want: http.StatusServiceUnavailable},
		{ns: "toolarge", watchList: true, rv: "209", want: http.StatusGatewayTimeout},
		{ns: "answer", watchList: true, want: http.StatusServiceUnavailable},
		{ns: "throttled", watchList: true, want: http.StatusTooManyRequests},
		{ns: "stream", watchList: true, want: http.StatusServiceUnavailable},
		{ns: "empty", watchList: true, want: http.StatusServiceUnavailable},
		{ns: "cut", watchList: true, want: http.StatusServiceUnavailable},
		{ns: "later", watchList: false, want: http.StatusTooManyRequests},
		{ns: "later", watchList: true, want: http.StatusTooManyRequests},
		{ns: "stream", watchList: false, want: http.StatusTooManyRequests},
		{ns: "empty", watchList: false},
	} {
		t.Run(fmt.Sprintf("%s watchList=%t rv=%s", tc.ns, tc.watchList, tc.rv), func(t *testing.T) {
			requests = 0
			err := lastError(tc.ns, tc.watchList, tc.rv)
			var status apierrors.APIStatus
			switch {
			case tc.want == 0 && err != nil:
				t.Fatalf("error %v, want none: a plain watch may end empty", err)
			case tc.want != 0 && (!errors.As(err, &status) || status.Status().Code != tc.want):
				t.Fatalf("error %v, want code %d", err, tc.want)
			}
			if tc.want == http.StatusServiceUnavailable && (tc.ns == "stream" || tc.ns == "answer") && !strings.Contains(err.Error(), "storage is (re)initializing") {
				t.Errorf("error %q does not keep the server's message", err)
			}
			if requests != 1 {
				t.Errorf("%d requests, want 1: a 429 to a watch-list is not retried by the client", requests)
			}
		})
	}
}

// Relist ends the open watch with 410 Expired, so the reflector lists
// again (after a CRD changed, a resumed watch would not send the objects
// the new schema decodes differently), and every later watch too until a
// list, or a watch-list, that started after it.
func TestListWatchRelist(t *testing.T) {
	var lw *listWatch
	var duringList, duringWatch atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			if duringList.Load() {
				lw.Relist()
			}
			page := `{"apiVersion":"example.com/v1","kind":"AppList","metadata":{"resourceVersion":"5"},"items":[]}`
			if r.URL.Query().Get("limit") != "" && r.URL.Query().Get("continue") == "" {
				page = `{"apiVersion":"example.com/v1","kind":"AppList","metadata":{"resourceVersion":"5","continue":"next"},"items":[]}`
			}
			fmt.Fprintln(w, page)
			return
		}
		if duringWatch.Load() {
			lw.Relist() // after the watch's check for a pending relist
		}
		fmt.Fprintln(w, `{"type":"ADDED","object":{"apiVersion":"example.com/v1","kind":"App","metadata":{"name":"a","namespace":"n","resourceVersion":"5"}}}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // an open watch
	}))
	defer srv.Close()
	client, err := rest.UnversionedRESTClientFor(&rest.Config{Host: srv.URL,
		ContentConfig: rest.ContentConfig{NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	lw = newListWatch(client, Key{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "apps"}})
	// The fallback: the watch ends, and the reflector lists.
	lw.inStream, lw.delay = false, 0
	ends := func(w apiwatch.Interface) apiwatch.Event {
		t.Helper()
		var last apiwatch.Event
		timeout := time.After(10 * time.Second)
		for {
			select {
			case e, ok := <-w.ResultChan():
				if !ok {
					return last
				}
				last = e
			case <-timeout:
				w.Stop() // or the server waits for it forever
				t.Fatal("the watch did not end")
			}
		}
	}
	expired := func(what string, e apiwatch.Event) {
		t.Helper()
		if e.Type != apiwatch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(e.Object)) {
			t.Errorf("%s ended with %+v, want 410 Expired", what, e)
		}
	}
	open := func(opts metav1.ListOptions) apiwatch.Interface {
		t.Helper()
		w, err := lw.WatchWithContext(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	streams := func(what string, w apiwatch.Interface) {
		t.Helper()
		select {
		case e := <-w.ResultChan():
			if e.Type != apiwatch.Added {
				t.Fatalf("%s: first event %+v, want the object", what, e)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no event", what)
		}
	}
	listOpts := func(opts metav1.ListOptions) {
		t.Helper()
		if _, err := lw.ListWithContext(context.Background(), opts); err != nil {
			t.Fatal(err)
		}
	}
	list := func() { t.Helper(); listOpts(metav1.ListOptions{}) }

	w := open(metav1.ListOptions{ResourceVersion: "4"})
	streams("a watch", w)
	lw.Relist()
	expired("the open watch", ends(w))
	w.Stop()
	w = open(metav1.ListOptions{ResourceVersion: "5"})
	expired("a watch before a list", ends(w))
	w.Stop()

	list()
	w = open(metav1.ListOptions{ResourceVersion: "5"})
	streams("a watch after the list", w)
	w.Stop()

	// Asked for while a list runs, which may read the old schema.
	duringList.Store(true)
	list()
	duringList.Store(false)
	w = open(metav1.ListOptions{ResourceVersion: "5"})
	expired("a watch after a list that started before the relist", ends(w))
	w.Stop()

	// A list in pages serves it once its last page was read, and only
	// the relists asked for before its first.
	listOpts(metav1.ListOptions{Limit: 1})
	w = open(metav1.ListOptions{ResourceVersion: "5"})
	expired("a watch after the first page of a list", ends(w))
	w.Stop()
	duringList.Store(true)
	listOpts(metav1.ListOptions{Limit: 1, Continue: "next"}) // asked again
	duringList.Store(false)
	w = open(metav1.ListOptions{ResourceVersion: "5"})
	expired("a watch after a list whose first page came before a relist", ends(w))
	w.Stop()
	listOpts(metav1.ListOptions{Limit: 1})
	listOpts(metav1.ListOptions{Limit: 1, Continue: "next"})
	w = open(metav1.ListOptions{ResourceVersion: "5"})
	streams("a watch after a whole list in pages", w)
	w.Stop()

	// Asked for while the watch is being opened, after it checked.
	duringWatch.Store(true)
	w = open(metav1.ListOptions{ResourceVersion: "5"})
	duringWatch.Store(false)
	expired("a watch opened while a relist was asked for", ends(w))
	w.Stop()
	list()

	// A watch-list streams every object first: it serves the relist.
	w = open(metav1.ListOptions{SendInitialEvents: new(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	streams("a watch-list", w)
	w.Stop()
	w = open(metav1.ListOptions{ResourceVersion: "5"})
	streams("a watch after the watch-list", w)
	w.Stop()
}

// onListed is told of every whole list read, by a list or a watch-list,
// and of nothing else: a refused list, or a watch-list cut before its
// initial events end, says nothing.
func TestListWatchTellsListed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		watching := r.URL.Query().Get("watch") == "true"
		switch ns := strings.Split(r.URL.Path, "/")[4]; {
		case ns == "denied":
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"configmaps is forbidden"}`)
		case !watching:
			fmt.Fprint(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"c","namespace":"ok","resourceVersion":"5"}}]}`)
		case ns == "ok":
			fmt.Fprintln(w, `{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ok","resourceVersion":"5"}}}`)
			fmt.Fprintln(w, `{"type":"BOOKMARK","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"resourceVersion":"6","annotations":{"k8s.io/initial-events-end":"true"}}}}`)
		case ns == "cut":
			fmt.Fprintln(w, `{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"cut","resourceVersion":"5"}}}`)
		}
	}))
	defer srv.Close()
	client, err := rest.UnversionedRESTClientFor(&rest.Config{Host: srv.URL,
		ContentConfig: rest.ContentConfig{NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns        string
		watchList bool
		want      int
	}{
		{"ok", false, 1},
		{"denied", false, 0},
		{"ok", true, 1},
		{"cut", true, 0},
		{"denied", true, 0},
	} {
		t.Run(fmt.Sprintf("%s watchList=%t", tc.ns, tc.watchList), func(t *testing.T) {
			lw := newListWatch(client, Key{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: tc.ns})
			told := 0
			lw.onListed = func() { told++ }
			if !tc.watchList {
				_, _ = lw.ListWithContext(context.Background(), metav1.ListOptions{})
			} else {
				opts := metav1.ListOptions{AllowWatchBookmarks: true, SendInitialEvents: new(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
				if w, err := lw.WatchWithContext(context.Background(), opts); err == nil {
					for range w.ResultChan() {
					}
					w.Stop()
				}
			}
			if told != tc.want {
				t.Errorf("onListed told %d times, want %d", told, tc.want)
			}
		})
	}
}
