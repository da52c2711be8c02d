package mapper

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
)

func partial(gvr schema.GroupVersionResource, kind, name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: gvr.GroupVersion().String(), Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
	}
}

func metadataScheme() *runtime.Scheme {
	s := metadatafake.NewTestScheme()
	metav1.AddMetaToScheme(s)
	return s
}

// discoveryReads counts the discovery requests of a fake.
func discoveryReads(fd interface{ Actions() []clienttesting.Action }) int {
	n := 0
	for _, a := range fd.Actions() {
		if a.GetVerb() == "get" {
			n++
		}
	}
	return n
}

// recorder collects the changes a Watcher announces.
type recorder struct {
	mu      sync.Mutex
	changes []Change
}

func (r *recorder) add(c Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, c)
}

func (r *recorder) take() []Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.changes
	r.changes = nil
	return out
}

func TestWatcherKeepsTheMapperTrue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		fd := newFake(cluster())
		m := New(fd)
		meta := metadatafake.NewSimpleMetadataClient(metadataScheme(),
			partial(crdGVR, "CustomResourceDefinition", "octopodes.example.com"),
			partial(apiServiceGVR, "APIService", "v1.apps"))
		w := NewWatcher(m, meta)
		var got recorder
		w.Subscribe(got.add)
		go w.Run(ctx)
		time.Sleep(time.Second) // WaitForCacheSync polls
		synctest.Wait()

		squid := schema.GroupVersionKind{Group: "later.example.com", Version: "v1", Kind: "Squid"}
		if _, err := m.ResourceFor(squid); !errors.Is(err, ErrNotFound) {
			t.Fatalf("before the CRD: err = %v, want ErrNotFound", err)
		}
		before := discoveryReads(fd)
		for range 10 {
			if _, err := m.ResourceFor(squid); !errors.Is(err, ErrNotFound) {
				t.Fatalf("before the CRD: err = %v, want ErrNotFound", err)
			}
			time.Sleep(5 * time.Second)
		}
		if n := discoveryReads(fd) - before; n != 0 {
			t.Errorf("while watched, 10 misses read discovery %d times, want 0", n)
		}
		if c := got.take(); len(c) != 0 {
			t.Errorf("the initial list announced changes: %+v", c)
		}

		// The CRD is created; discovery serves its kind.
		fd.Resources = append(fd.Resources, &metav1.APIResourceList{GroupVersion: "later.example.com/v1",
			APIResources: []metav1.APIResource{res("squids", "squid", "Squid", false)}})
		crd := partial(crdGVR, "CustomResourceDefinition", "squids.later.example.com")
		if _, err := meta.Resource(crdGVR).(metadatafake.MetadataClient).CreateFake(crd, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// It is accepted and established (status only) at once.
		crd = crd.DeepCopy()
		crd.ResourceVersion = "2"
		if _, err := meta.Resource(crdGVR).(metadatafake.MetadataClient).UpdateFake(crd, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if c := got.take(); len(c) != 0 {
			t.Errorf("announced before the changes settled: %+v", c)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if c := got.take(); !slices.Equal(c, []Change{{Group: "later.example.com", Resource: "squids", Spec: true}}) {
			t.Errorf("changes = %+v, want one spec change of later.example.com", c)
		}
		if got, err := m.ResourceFor(squid); err != nil || got.Resource != "squids" {
			t.Errorf("after the CRD: ResourceFor = %+v, %v; want squids", got, err)
		}

		// A status change of an APIService is a change, not of its spec.
		svc := partial(apiServiceGVR, "APIService", "v1.apps")
		svc.ResourceVersion = "7"
		if _, err := meta.Resource(apiServiceGVR).(metadatafake.MetadataClient).UpdateFake(svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if c := got.take(); !slices.Equal(c, []Change{{Group: "apps"}}) {
			t.Errorf("changes = %+v, want a status change of apps", c)
		}

		// A spec change of a CRD (its generation) is one; so is its removal.
		oct := partial(crdGVR, "CustomResourceDefinition", "octopodes.example.com")
		oct.Generation, oct.ResourceVersion = 2, "9"
		if _, err := meta.Resource(crdGVR).(metadatafake.MetadataClient).UpdateFake(oct, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := meta.Resource(crdGVR).Delete(ctx, "squids.later.example.com", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		c := got.take()
		slices.SortFunc(c, func(a, b Change) int {
			if a.Group < b.Group {
				return -1
			}
			return 1
		})
		if !slices.Equal(c, []Change{{Group: "example.com", Resource: "octopodes", Spec: true}, {Group: "later.example.com", Resource: "squids", Spec: true}}) {
			t.Errorf("changes = %+v, want spec changes of example.com and later.example.com, once each", c)
		}

		// A CRD deleted and created again while the watch was down comes
		// back from the relist as an update of the same generation, with
		// another UID: a change of its spec.
		oct = oct.DeepCopy()
		oct.UID, oct.ResourceVersion = "another", "11"
		if _, err := meta.Resource(crdGVR).(metadatafake.MetadataClient).UpdateFake(oct, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if c := got.take(); !slices.Equal(c, []Change{{Group: "example.com", Resource: "octopodes", Spec: true}}) {
			t.Errorf("changes = %+v, want a spec change of example.com", c)
		}
		cancel()
		synctest.Wait()
	})
}

// Without the rights to watch, the Mapper reads discovery on a miss, as
// without a Watcher, and the reflector's retries announce nothing (each
// announcement has every running rule read discovery, schemas and CRDs
// again): a change of every group is announced once a minute instead.
// Once the rights come, the first list is announced as a change of every
// group, and then only what changes.
func TestWatcherForbidden(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		fd := newFake(cluster())
		m := New(fd)
		meta := metadatafake.NewSimpleMetadataClient(metadataScheme(),
			partial(crdGVR, "CustomResourceDefinition", "octopodes.example.com"))
		var forbidden atomic.Bool
		forbidden.Store(true)
		var lists atomic.Int32
		meta.PrependReactor("list", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
			if !forbidden.Load() {
				return false, nil, nil
			}
			lists.Add(1)
			return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", errors.New("no"))
		})
		w := NewWatcher(m, meta)
		var got recorder
		w.Subscribe(got.add)
		go w.Run(ctx)
		time.Sleep(50 * time.Second)
		synctest.Wait()
		if n := lists.Load(); n < 4 {
			t.Fatalf("%d forbidden lists in 50 s, want the reflector to retry", n)
		}
		if c := got.take(); len(c) != 0 {
			t.Errorf("forbidden lists announced changes: %+v", c)
		}
		time.Sleep(25 * time.Second)
		synctest.Wait()
		if c := got.take(); !slices.Equal(c, []Change{{All: true, Spec: true}}) {
			t.Errorf("unwatched, after a minute: changes = %+v, want one change of every group", c)
		}

		squid := schema.GroupVersionKind{Group: "later.example.com", Version: "v1", Kind: "Squid"}
		if _, err := m.ResourceFor(squid); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
		fd.Resources = append(fd.Resources, &metav1.APIResourceList{GroupVersion: "later.example.com/v1",
			APIResources: []metav1.APIResource{res("squids", "squid", "Squid", false)}})
		if got, err := m.ResourceFor(squid); err != nil || got.Resource != "squids" {
			t.Errorf("unwatched, a miss did not read discovery again: %+v, %v", got, err)
		}

		forbidden.Store(false)
		time.Sleep(3 * time.Minute) // the reflector's backoff, then the settle time
		synctest.Wait()
		if !w.watching() {
			t.Fatal("allowed, the Watcher does not watch")
		}
		c := got.take()
		if len(c) == 0 || slices.ContainsFunc(c, func(c Change) bool { return c != Change{All: true, Spec: true} }) {
			t.Errorf("changes = %+v, want changes of every group (the first list's, maybe a refresh before it)", c)
		}
		time.Sleep(3 * time.Minute)
		synctest.Wait()
		if c := got.take(); len(c) != 0 {
			t.Errorf("watching, nothing changed, yet changes = %+v", c)
		}
		cancel()
		synctest.Wait()
	})
}

// A change of one group opens its misses to discovery for a while, not the
// misses of every group: a rule that waits for its own CRD does not poll
// discovery because another CRD was deleted.
func TestWatcherMissWindowIsPerGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		fd := newFake(cluster())
		m := New(fd)
		meta := metadatafake.NewSimpleMetadataClient(metadataScheme(),
			partial(crdGVR, "CustomResourceDefinition", "octopodes.example.com"))
		w := NewWatcher(m, meta)
		go w.Run(ctx)
		time.Sleep(time.Second)
		synctest.Wait()

		if err := meta.Resource(crdGVR).Delete(ctx, "octopodes.example.com", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // settled and announced
		synctest.Wait()

		squid := schema.GroupVersionKind{Group: "later.example.com", Version: "v1", Kind: "Squid"}
		nautilus := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Nautilus"}
		if _, err := m.ResourceFor(squid); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
		before := discoveryReads(fd)
		for range 5 {
			time.Sleep(2 * time.Second)
			if _, err := m.ResourceFor(squid); !errors.Is(err, ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
		}
		if n := discoveryReads(fd) - before; n != 0 {
			t.Errorf("a change of example.com had misses of later.example.com read discovery %d times, want 0", n)
		}
		before = discoveryReads(fd)
		for range 2 {
			time.Sleep(2 * time.Second)
			_, _ = m.ResourceFor(nautilus)
		}
		if n := discoveryReads(fd) - before; n == 0 {
			t.Error("shortly after a change of example.com, its misses read no discovery")
		}
		time.Sleep(recentChange)
		before = discoveryReads(fd)
		_, _ = m.ResourceFor(nautilus)
		if n := discoveryReads(fd) - before; n != 0 {
			t.Errorf("%s after the change, a miss read discovery %d times, want 0", recentChange, n)
		}
		cancel()
		synctest.Wait()
	})
}
