package watch

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// appServer serves apps of group example.com in namespace n, as the API
// server does after their CRD changed: every object is sent with the
// current schema's defaults (port) and keeps its resource version. Lists
// and watch-lists wait while gate is closed; watches stream what add
// sends.
type appServer struct {
	t         *testing.T
	watchList bool // the server streams watch-lists
	mu        sync.Mutex
	port      int            // the default of spec.port; 0: none
	objects   map[string]int // name: resource version
	rv        int
	gate      chan struct{} // nil: lists go through
	events    chan string
	lists     atomic.Int32
	// refuseLists and refuseWatches are how many lists and watches to
	// answer 429, as the API server does while it rebuilds a CRD's
	// storage.
	refuseLists, refuseWatches atomic.Int32
	// reflectorLists counts the lists that name a resource version, as
	// the reflector's do (a relist in the stream names none); aborted
	// the lists whose client went away while gate held them.
	reflectorLists, aborted, waiting atomic.Int32
	// status, when set, answers lists (not watch-lists) with that
	// status instead of the 429 of refuseLists.
	status int
	// throttle makes the 429s of refuseWatches API Priority and
	// Fairness's, not a storage's that is starting.
	throttle bool
	watches  atomic.Int32
	// unselected are the objects a label selector leaves out of lists.
	unselected map[string]bool
}

func refuse(w http.ResponseWriter) {
	w.WriteHeader(http.StatusTooManyRequests)
	fmt.Fprintln(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"TooManyRequests","code":429,"message":"storage is (re)initializing"}`)
}

func newAppServer(t *testing.T, watchList bool) *appServer {
	return &appServer{t: t, watchList: watchList, objects: map[string]int{"p": 5}, rv: 5, events: make(chan string, 10)}
}

// client serves s for the test, and returns a REST client of it.
func (s *appServer) client() rest.Interface {
	hs := httptest.NewServer(s)
	s.t.Cleanup(hs.Close)
	client, err := rest.UnversionedRESTClientFor(&rest.Config{Host: hs.URL,
		ContentConfig: rest.ContentConfig{NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
	if err != nil {
		s.t.Fatal(err)
	}
	return client
}

func (s *appServer) objectLocked(name string) string {
	spec := `{}`
	if s.port != 0 {
		spec = fmt.Sprintf(`{"port":%d}`, s.port)
	}
	return fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"App","metadata":{"name":%q,"namespace":"n","uid":"u-%s-%d","resourceVersion":"%d"},"spec":%s}`,
		name, name, s.objects[name], s.objects[name], spec)
}

func (s *appServer) itemsLocked() []string {
	names := make([]string, 0, len(s.objects))
	for name := range s.objects {
		names = append(names, name)
	}
	sort.Strings(names)
	items := make([]string, 0, len(names))
	for _, name := range names {
		items = append(items, s.objectLocked(name))
	}
	return items
}

// setDefault changes the schema's default of spec.port.
func (s *appServer) setDefault(port int) {
	s.mu.Lock()
	s.port = port
	s.mu.Unlock()
}

// remove deletes an object and sends no event: as if the watch had been
// down when it went.
func (s *appServer) remove(name string) {
	s.mu.Lock()
	delete(s.objects, name)
	s.rv++
	s.mu.Unlock()
}

// add creates an object and sends its event to the open plain watch.
func (s *appServer) add(name string) {
	s.mu.Lock()
	s.rv++
	s.objects[name] = s.rv
	e := `{"type":"ADDED","object":` + s.objectLocked(name) + `}`
	s.mu.Unlock()
	s.events <- e
}

func (s *appServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	q := r.URL.Query()
	initial := q.Get("sendInitialEvents") == "true"
	if q.Get("watch") != "true" || initial && s.watchList {
		s.mu.Lock()
		gate := s.gate
		s.mu.Unlock()
		if gate != nil {
			s.waiting.Add(1)
			select {
			case <-gate:
			case <-r.Context().Done():
				s.aborted.Add(1)
				return
			}
		}
		s.lists.Add(1)
		if !initial && q.Get("resourceVersion") != "" {
			s.reflectorLists.Add(1)
		}
		if !initial && s.refuseLists.Add(-1) >= 0 {
			s.mu.Lock()
			code := s.status
			s.mu.Unlock()
			if code != 0 {
				w.WriteHeader(code)
				fmt.Fprintf(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","code":%d,"message":"refused"}`+"\n", code)
				return
			}
			refuse(w)
			return
		}
		s.mu.Lock()
		items, rv := s.itemsLocked(), s.rv
		if q.Get("labelSelector") != "" {
			items = items[:0]
			for _, name := range slices.Sorted(maps.Keys(s.objects)) {
				if !s.unselected[name] {
					items = append(items, s.objectLocked(name))
				}
			}
		}
		s.mu.Unlock()
		if !initial {
			// Pages of limit items, the continue token the index of
			// the next one; every page has the first one's version.
			cont := ""
			if limit, _ := strconv.Atoi(q.Get("limit")); limit > 0 {
				from := 0
				if c := q.Get("continue"); c != "" {
					if _, err := fmt.Sscanf(c, "%d/%d", &from, &rv); err != nil {
						s.t.Errorf("continue %q: %v", c, err)
					}
				}
				to := min(from+limit, len(items))
				if to < len(items) {
					cont = fmt.Sprintf("%d/%d", to, rv)
				}
				items = items[from:to]
			}
			fmt.Fprintf(w, `{"apiVersion":"example.com/v1","kind":"AppList","metadata":{"resourceVersion":"%d","continue":%q},"items":[%s]}`+"\n", rv, cont, strings.Join(items, ","))
			return
		}
		for _, item := range items {
			fmt.Fprintln(w, `{"type":"ADDED","object":`+item+`}`)
		}
		fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"apiVersion":"example.com/v1","kind":"App","metadata":{"resourceVersion":"%d","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", rv)
	} else if initial {
		w.WriteHeader(http.StatusBadRequest) // no watch-list: the reflector lists
		fmt.Fprintln(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"BadRequest","code":400}`)
		return
	} else if s.watches.Add(1); s.refuseWatches.Add(-1) >= 0 {
		s.mu.Lock()
		throttle := s.throttle
		s.mu.Unlock()
		if throttle {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintln(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"TooManyRequests","code":429,"message":"Too many requests, please try again later."}`)
			return
		}
		refuse(w)
		return
	}
	w.(http.Flusher).Flush()
	for {
		select {
		case e := <-s.events:
			fmt.Fprintln(w, e)
			w.(http.Flusher).Flush()
		case <-r.Context().Done():
			return
		}
	}
}

// seen records the spec of each object a handler was told of, and which
// it was told are gone.
type seen struct {
	mu      sync.Mutex
	last    map[string]string
	deleted map[string]bool
	told    map[string]int
	deletes map[string]int
}

func (s *seen) deletesOf(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deletes[name]
}

func (s *seen) times(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.told[name]
}

func (s *seen) isDeleted(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deleted[name]
}

func (s *seen) handler(t *testing.T) Handler {
	return func(o metav1.Object, deleted bool) {
		u, err := Decode(o)
		if err != nil {
			t.Error(err)
			return
		}
		s.mu.Lock()
		s.last[u.GetName()] = fmt.Sprint(u.Object["spec"])
		s.deleted[u.GetName()] = deleted
		if deleted {
			s.deletes[u.GetName()]++
		}
		s.told[u.GetName()]++
		s.mu.Unlock()
	}
}

func (s *seen) get(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[name]
}

// Relist reaches the informer's cache and its handlers, in both ways a
// reflector lists: the server sends the object again with the same
// resource version and a field its new schema defaults, as after a CRD
// changed. Only the informers of the group list again; relists in a row
// each take one list in the open watch, not the reflector's growing
// backoff; an object gone meanwhile is deleted; and the watch goes on
// until the relist starts.
func TestManagerRelist(t *testing.T) {
	for _, watchList := range []bool{true, false} {
		t.Run(fmt.Sprintf("watch-list %v", watchList), func(t *testing.T) {
			srv := newAppServer(t, watchList)
			client := srv.client()
			m := New(Config{REST: client})
			m.relistDelay = 200 * time.Millisecond
			defer m.Shutdown()
			key := Key{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "apps"}}
			got := &seen{last: map[string]string{}, deleted: map[string]bool{}, told: map[string]int{}, deletes: map[string]int{}}
			reg, err := m.Acquire(key, got.handler(t))
			if err != nil {
				t.Fatal(err)
			}
			defer reg.Release()
			waitUntil(t, "the informer to sync", reg.HasSynced)
			cached := func(name string) string {
				u, err := reg.Informer().Get("n", name)
				if err != nil || u == nil {
					return fmt.Sprint(u, err)
				}
				return fmt.Sprint(u.Object["spec"])
			}

			lists := srv.lists.Load()
			m.RelistResource("other.example.com", "")
			m.RelistResource("example.com", "widgets")
			time.Sleep(500 * time.Millisecond)
			if n := srv.lists.Load(); n != lists {
				t.Errorf("a relist of another group, or of another resource of the group, made %d lists", n-lists)
			}

			// Two relists asked for at once make one list; the watch
			// goes on until it starts.
			srv.setDefault(8080)
			m.RelistResource("example.com", "")
			m.RelistResource("example.com", "")
			srv.add("q")
			waitUntil(t, "the handler to get q from the watch", func() bool { return got.get("q") != "" })
			waitUntil(t, "the handler to get the default", func() bool { return got.get("p") == "map[port:8080]" })
			if n := srv.lists.Load() - lists; n != 1 {
				t.Errorf("two relists at once made %d lists", n)
			}

			// Five CRD changes in a row: each reaches the cache and the
			// handler with one list. A reflector that lists again waits
			// its backoff first, 0.8 s doubling: 25 s or more for five.
			lists = srv.lists.Load()
			start := time.Now()
			for port := 8081; port <= 8085; port++ {
				srv.setDefault(port)
				m.RelistResource("example.com", "")
				want := fmt.Sprintf("map[port:%d]", port)
				waitUntil(t, "the handler to get "+want, func() bool { return got.get("p") == want })
				if c := cached("p"); c != want {
					t.Fatalf("the handler got %s while the cache holds %s", want, c)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("five relists took %v", d)
			}
			if n := srv.lists.Load() - lists; n != 5 {
				t.Errorf("five relists made %d lists", n)
			}

			// An object that went while no event told of it is deleted
			// by the relist, and its handler told.
			srv.remove("q")
			m.RelistResource("example.com", "")
			waitUntil(t, "the handler to be told q is gone", func() bool { return got.isDeleted("q") })
			if u, _ := reg.Informer().Get("n", "q"); u != nil {
				t.Errorf("the cache still holds q: %v", u)
			}

			// And the watch goes on from the relist.
			srv.add("r")
			waitUntil(t, "the handler to get r from the watch after the relist", func() bool { return got.get("r") != "" })

			// While the server rebuilds the storage, the stream tries
			// the list and the watch again itself; the reflector does
			// not list.
			lists = srv.lists.Load()
			srv.refuseLists.Store(1)
			srv.refuseWatches.Store(2)
			srv.setDefault(9090)
			m.RelistResource("example.com", "")
			waitUntil(t, "the handler to get the default after refusals", func() bool { return got.get("p") == "map[port:9090]" })
			srv.add("s")
			waitUntil(t, "the handler to get s from the watch after refusals", func() bool { return got.get("s") != "" })
			if n := srv.lists.Load() - lists; n != 2 {
				t.Errorf("a relist with one refused list made %d lists, want 2", n)
			}

			// A watch the server finds too old (410, as it says to every
			// watch of a CRD whose storage it rebuilt) is listed again
			// in the stream too, without the reflector's backoff; only
			// what changed is sent.
			lists = srv.lists.Load()
			told := got.times("p")
			srv.remove("s")
			srv.events <- `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old resource version"}}`
			waitUntil(t, "the handler to be told s is gone", func() bool { return got.isDeleted("s") })
			if n := srv.lists.Load() - lists; n != 1 {
				t.Errorf("a 410 made %d lists, want 1", n)
			}
			if n := got.times("p") - told; n != 0 {
				t.Errorf("the handler was told of the unchanged p %d times", n)
			}
			srv.add("u")
			waitUntil(t, "the handler to get u from the watch after the 410", func() bool { return got.get("u") != "" })

			// An object deleted and made again under its name while no
			// event told of it: the handler is told of the old one's
			// delete, then of the new one.
			uid := func() string {
				o, _ := reg.Informer().Get("n", "u")
				if o == nil {
					return ""
				}
				return string(o.GetUID())
			}
			before := uid()
			srv.remove("u")
			srv.mu.Lock()
			srv.rv++
			srv.objects["u"] = srv.rv
			srv.mu.Unlock()
			m.RelistResource("example.com", "")
			waitUntil(t, "the cache to hold the new u", func() bool { return uid() != before && uid() != "" })
			waitUntil(t, "the handler to be told of the new u", func() bool { return got.times("u") >= 3 })
			if got.deletesOf("u") != 1 || got.isDeleted("u") {
				t.Errorf("the handler was told of %d deletes of u, last deleted %t: want the old one's delete, then the new one", got.deletesOf("u"), got.isDeleted("u"))
			}
		})
	}
}

// A plain watch the API server refuses while it rebuilds a CRD's storage
// (429 "storage is (re)initializing") is tried again by the listWatch, not
// left to the reflector's backoff.
func TestWatchWaitsForTheStorage(t *testing.T) {
	srv := newAppServer(t, false)
	client := srv.client()
	lw := newListWatch(client, Key{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "apps"}})
	srv.refuseWatches.Store(3)
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "5"})
	if err != nil {
		t.Fatalf("the watch failed: %v", err)
	}
	defer w.Stop()
	srv.add("q")
	select {
	case e := <-w.ResultChan():
		if e.Type != apiwatch.Added {
			t.Errorf("event %+v, want q added", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
}

// The delete a relist sends is a copy: the informer's transform runs on
// it again and sets its fields, while handlers and workers read the cached
// object (go test -race finds the write otherwise).
func TestRelistDeleteIsACopy(t *testing.T) {
	srv := newAppServer(t, false)
	m := New(Config{REST: srv.client(), Transform: CompactKeeping(func(k string) bool { return k == "keep" })})
	m.relistDelay = 0
	defer m.Shutdown()
	got := &seen{last: map[string]string{}, deleted: map[string]bool{}, told: map[string]int{}, deletes: map[string]int{}}
	reg, err := m.Acquire(Key{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "apps"}}, got.handler(t))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Release()
	waitUntil(t, "the informer to sync", reg.HasSynced)
	cached := reg.Informer().Indexer().List()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, o := range cached {
				_ = o.(*Object).Label("keep")
			}
		}
	}()
	srv.remove("p")
	m.RelistResource("example.com", "")
	waitUntil(t, "the handler to be told p is gone", func() bool { return got.isDeleted("p") })
	close(stop)
	<-done
}

var appKey = Key{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "apps"}}

// untilBookmark returns the events of w up to its next bookmark, as "TYPE
// name" (a bookmark as "BOOKMARK version", an error as "ERROR code").
func untilBookmark(t *testing.T, w apiwatch.Interface) []string {
	t.Helper()
	var got []string
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %v", got)
			}
			switch o := e.Object.(type) {
			case *Object:
				if e.Type == apiwatch.Bookmark {
					return append(got, "BOOKMARK "+o.ResourceVersion)
				}
				got = append(got, string(e.Type)+" "+o.Name)
			case *metav1.Status:
				got = append(got, fmt.Sprintf("%s %d", e.Type, o.Code))
			}
		case <-timeout:
			t.Fatalf("no bookmark after %v", got)
		}
	}
}

// What the reflector listed, page after page as its pager reads them, is
// what a relist in the stream compares the new list with: an object of
// the first page that went while no event told of it is deleted, and the
// others are modified, not added.
func TestRelistKnowsTheListedPages(t *testing.T) {
	srv := newAppServer(t, false)
	srv.objects = map[string]int{"p": 5, "q": 5, "r": 5}
	lw := newListWatch(srv.client(), appKey)
	lw.delay = 0
	ctx := context.Background()
	opts := metav1.ListOptions{ResourceVersion: "0", Limit: 1}
	pages := 0
	for {
		l, err := lw.ListWithContext(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if l.(*List).Continue == "" {
			break
		}
		opts.Continue = l.(*List).Continue
	}
	if pages != 3 {
		t.Fatalf("the list came in %d pages, want 3", pages)
	}
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "5", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	srv.remove("p")
	lw.Relist()
	got := strings.Join(untilBookmark(t, w), ", ")
	if want := "MODIFIED q, MODIFIED r, DELETED p, BOOKMARK 6"; got != want {
		t.Errorf("the relist sent %s, want %s", got, want)
	}
}

// A relist whose list the server refuses three times is left to the
// reflector, which lists; the informer misses nothing, the watch goes on,
// and the next relist in the stream knows what the reflector listed.
func TestRelistFallsBackToTheReflector(t *testing.T) {
	srv := newAppServer(t, false)
	srv.objects = map[string]int{"p": 5, "q": 5, "r": 5}
	m := New(Config{REST: srv.client()})
	m.relistDelay = 0
	defer m.Shutdown()
	got := &seen{last: map[string]string{}, deleted: map[string]bool{}, told: map[string]int{}, deletes: map[string]int{}}
	reg, err := m.Acquire(appKey, got.handler(t))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Release()
	waitUntil(t, "the informer to sync", reg.HasSynced)
	before := srv.reflectorLists.Load()
	srv.remove("p")
	srv.setDefault(8080)
	srv.refuseLists.Store(3)
	m.RelistResource("example.com", "")
	waitUntil(t, "the handler to be told p is gone", func() bool { return got.isDeleted("p") })
	waitUntil(t, "the handler to get the default", func() bool { return got.get("q") == "map[port:8080]" && got.get("r") == "map[port:8080]" })
	if srv.reflectorLists.Load() == before {
		t.Errorf("the reflector did not list")
	}
	if n := srv.refuseLists.Load(); n >= 0 {
		t.Errorf("%d refusals left", n+1)
	}
	srv.add("s")
	waitUntil(t, "the handler to get s from the watch", func() bool { return got.get("s") != "" })

	before = srv.reflectorLists.Load()
	srv.remove("q")
	m.RelistResource("example.com", "")
	waitUntil(t, "the handler to be told q is gone", func() bool { return got.isDeleted("q") })
	if n := srv.reflectorLists.Load() - before; n != 0 {
		t.Errorf("the reflector listed %d times, want the relist in the stream", n)
	}
}

// A watch stopped, or whose context is cancelled, while a relist waits for
// its list ends at once: its result channel closes and the list's request
// is abandoned.
func TestStopDuringRelist(t *testing.T) {
	for _, how := range []string{"stop", "cancel"} {
		t.Run(how, func(t *testing.T) {
			srv := newAppServer(t, false)
			lw := newListWatch(srv.client(), appKey)
			lw.delay = 0
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "5"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			gate := make(chan struct{})
			defer close(gate)
			srv.mu.Lock()
			srv.gate = gate
			srv.mu.Unlock()
			lw.Relist()
			waitUntil(t, "the relist to list", func() bool { return srv.waiting.Load() == 1 })
			start := time.Now()
			if how == "stop" {
				w.Stop()
			} else {
				cancel()
			}
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				for range w.ResultChan() { // the reflector reads until the end
				}
			}()
			select {
			case <-ended:
				if d := time.Since(start); d > 500*time.Millisecond {
					t.Errorf("the watch ended %v after the %s", d, how)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the watch did not end within 5 s of the %s", how)
			}
			waitUntil(t, "the list to be abandoned", func() bool { return srv.aborted.Load() == 1 })
		})
	}
}

// blockingBody is a watch body whose Close waits for release, as an HTTP/2
// body's waits for its stream's reset to be written.
type blockingBody struct{ closing, release chan struct{} }

func (b *blockingBody) Read([]byte) (int, error) {
	<-b.release
	return 0, io.EOF
}

func (b *blockingBody) Close() error {
	select {
	case b.closing <- struct{}{}:
	default:
	}
	<-b.release
	return nil
}

// Relist closes the open watch's body without the listWatch's lock held:
// the events the reflector takes, and Manager.Relist, wait on it.
func TestRelistClosesTheBodyUnlocked(t *testing.T) {
	lw := newListWatch(nil, appKey)
	lw.delay = 0
	body := &blockingBody{closing: make(chan struct{}, 1), release: make(chan struct{})}
	defer close(body.release)
	lw.current = &eventStream{lw: lw, body: body}
	go lw.Relist()
	select {
	case <-body.closing:
	case <-time.After(5 * time.Second):
		t.Fatal("the body was not closed")
	}
	pending := make(chan bool)
	go func() { pending <- lw.relistPending() }()
	select {
	case p := <-pending:
		if !p {
			t.Error("no relist pending")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the listWatch's lock is held while the body closes")
	}
}

// The watch a relist opens is tried again only while the server says its
// storage is starting; a 429 of API Priority and Fairness goes to the
// reflector at once, which backs off, and watches again from the relist's
// bookmark.
func TestRelistWatchLeavesThrottlingToTheReflector(t *testing.T) {
	srv := newAppServer(t, false)
	lw := newListWatch(srv.client(), appKey)
	lw.delay = 0
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "5"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	srv.mu.Lock()
	srv.throttle = true
	srv.mu.Unlock()
	srv.refuseWatches.Store(5)
	watches := srv.watches.Load()
	lw.Relist()
	untilBookmark(t, w)
	select {
	case e := <-w.ResultChan():
		if s, ok := e.Object.(*metav1.Status); e.Type != apiwatch.Error || !ok || s.Code != http.StatusTooManyRequests {
			t.Errorf("event %+v, want the 429", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event after the bookmark")
	}
	if n := srv.watches.Load() - watches; n != 1 {
		t.Errorf("the relist tried the watch %d times, want 1", n)
	}
}

// A relist's list that the server refuses for good (403, 404) is left to
// the reflector at once, which reports it; a 429 or a 5xx is tried again.
func TestRelistListFailures(t *testing.T) {
	for _, tc := range []struct {
		code, lists int
		fallback    bool
	}{
		{http.StatusForbidden, 1, true},
		{http.StatusNotFound, 1, true},
		{http.StatusServiceUnavailable, 2, false},
		{http.StatusTooManyRequests, 2, false},
	} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			srv := newAppServer(t, false)
			srv.status = tc.code
			lw := newListWatch(srv.client(), appKey)
			lw.delay = 0
			w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "5"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			srv.refuseLists.Store(1)
			lw.Relist()
			select {
			case e := <-w.ResultChan():
				s, ok := e.Object.(*metav1.Status)
				if fallback := e.Type == apiwatch.Error && ok && s.Reason == metav1.StatusReasonExpired; fallback != tc.fallback {
					t.Errorf("first event %s %T, want the fallback (410) %t", e.Type, e.Object, tc.fallback)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no event")
			}
			if n := srv.lists.Load(); int(n) != tc.lists {
				t.Errorf("%d lists, want %d", n, tc.lists)
			}
		})
	}
}

// A relist lists with the informer's label selector: an object whose
// labels no longer match, while no event told of it, is deleted, not sent
// again.
func TestRelistKeepsTheSelector(t *testing.T) {
	srv := newAppServer(t, false)
	srv.objects = map[string]int{"p": 5, "q": 5}
	srv.unselected = map[string]bool{}
	key := appKey
	key.Selector = "app=x"
	lw := newListWatch(srv.client(), key)
	lw.delay = 0
	if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "5"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	srv.mu.Lock()
	srv.unselected["q"] = true
	srv.mu.Unlock()
	lw.Relist()
	got := strings.Join(untilBookmark(t, w), ", ")
	if want := "MODIFIED p, DELETED q, BOOKMARK 5"; got != want {
		t.Errorf("the relist sent %s, want %s", got, want)
	}
}
