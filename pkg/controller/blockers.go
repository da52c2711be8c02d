package controller

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/reconcile"
)

// maxBlockerWatches bounds the watches of objects in children's way: each
// is one open watch on the API server. Past it, a parent in Conflict is
// looked at again only by its backoff.
const maxBlockerWatches = 200

// blockerWatchFor is how long one watch of an object in a child's way
// lasts: twice the conflict's longest backoff, so that a watch is kept
// across the parent's reconciles for at least one backoff (see watch)
// instead of being opened again by each.
const blockerWatchFor = 2 * conflictMax

// blockers wakes a parent in Conflict as soon as the object in its way
// goes, or stops being someone else's (its owner let it go, say): kgen's
// informers show only kgen's own objects, so without this it would notice
// only at the conflict's next look, which backs off to 10 minutes. It
// watches each such object by name, from the version the reconcile read,
// while the parent stays in Conflict; a change that leaves the object
// someone else's (its data, say) wakes no one.
type blockers struct {
	client  dynamic.Interface
	enqueue func(Key)

	mu     sync.Mutex
	active map[blockerKey]*blockerWatch
	wg     sync.WaitGroup
}

type blockerKey struct {
	parent Key
	object string // resource, namespace and name
}

type blockerWatch struct {
	marks  string    // the object's ownership marks when it started
	until  time.Time // when it ends
	cancel context.CancelFunc
}

func keyOfBlocker(parent Key, bl reconcile.Blocker) blockerKey {
	return blockerKey{parent, bl.GVR.String() + " " + bl.Namespace + "/" + bl.Name}
}

func newBlockers(client dynamic.Interface, enqueue func(Key)) *blockers {
	return &blockers{client: client, enqueue: enqueue, active: map[blockerKey]*blockerWatch{}}
}

// watch makes sure each object in the parent's way is watched until at
// least next (the conflict's next look), and stops the parent's watches of
// objects no longer in its way. A watch of the same object that still
// lasts that long is kept: it has seen every change since it started.
func (b *blockers) watch(ctx context.Context, key Key, in []reconcile.Blocker, next time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	keep := map[blockerKey]bool{}
	for _, bl := range in {
		k := keyOfBlocker(key, bl)
		if w, ok := b.active[k]; ok && w.marks == bl.Marks && w.until.After(now.Add(next)) {
			keep[k] = true
		}
	}
	for k, w := range b.active {
		if k.parent == key && !keep[k] {
			w.cancel()
			delete(b.active, k)
		}
	}
	for _, bl := range in {
		k := keyOfBlocker(key, bl)
		if _, ok := b.active[k]; ok {
			continue
		}
		if len(b.active) >= maxBlockerWatches {
			klog.FromContext(ctx).V(2).Info("Not watching the object in a child's way: too many watched already; the conflict's backoff looks again", "key", key, "object", k.object)
			return
		}
		wctx, cancel := context.WithTimeout(ctx, blockerWatchFor)
		w := &blockerWatch{marks: bl.Marks, until: now.Add(blockerWatchFor), cancel: cancel}
		b.active[k] = w
		b.wg.Go(func() {
			defer func() {
				cancel()
				b.mu.Lock()
				if b.active[k] == w {
					delete(b.active, k)
				}
				b.mu.Unlock()
			}()
			if b.follow(wctx, bl, blockerWatchFor) {
				b.enqueue(key)
			}
		})
	}
}

// follow watches one object until it goes or its ownership marks change
// (true), or until the watch ends (false).
func (b *blockers) follow(ctx context.Context, bl reconcile.Blocker, timeout time.Duration) bool {
	seconds := int64(timeout / time.Second)
	if seconds < 1 {
		seconds = 1
	}
	w, err := b.client.Resource(bl.GVR).Namespace(bl.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", bl.Name).String(),
		ResourceVersion: bl.ResourceVersion,
		TimeoutSeconds:  &seconds,
	})
	if err != nil {
		// Not even a watch (no right to watch it, say): the backoff
		// looks again.
		klog.FromContext(ctx).V(2).Info("Cannot watch the object in a child's way", "object", bl.GVR.Resource+" "+bl.Namespace+"/"+bl.Name, "err", err)
		return false
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false
			}
			obj, isObj := ev.Object.(metav1.Object)
			if isObj && obj.GetName() != bl.Name {
				continue // the field selector should have left it out
			}
			switch ev.Type {
			case apiwatch.Deleted:
				return true
			case apiwatch.Added, apiwatch.Modified:
				if isObj && reconcile.OwnershipMarks(obj) != bl.Marks {
					return true
				}
			case apiwatch.Error:
				// The version read is gone from the server's window,
				// say: the backoff looks again.
				return false
			}
		}
	}
}

// forget stops the watches for a parent that is no longer in Conflict.
func (b *blockers) forget(key Key) {
	b.forgetIf(func(k Key) bool { return k == key })
}

// forgetRule stops the watches for the parents of a rule that stopped (it
// was removed, or waits for a kind): none of its parents is reconciled
// until it runs again, and its watches would count against
// maxBlockerWatches until they time out.
func (b *blockers) forgetRule(rule string) {
	b.forgetIf(func(k Key) bool { return k.Rule == rule })
}

func (b *blockers) forgetIf(match func(Key) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, w := range b.active {
		if match(k.parent) {
			w.cancel()
			delete(b.active, k)
		}
	}
}

// stop ends every watch and waits for them.
func (b *blockers) stop() {
	b.mu.Lock()
	for k, w := range b.active {
		w.cancel()
		delete(b.active, k)
	}
	b.mu.Unlock()
	b.wg.Wait()
}
