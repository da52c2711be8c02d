package shard

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// leaseView is what this replica knows of one shard's Lease.
type leaseView struct {
	lease *coordinationv1.Lease
	// observed is when this replica saw the Lease change last, by its own
	// clock: a Lease is expired when it has not changed for its duration
	// since, whatever the clocks of other machines say (as client-go's
	// leader election judges).
	observed time.Time
}

// state is what one shard is, as this replica sees it.
type state int

const (
	// unknown: no Lease of the shard was seen, and not for long enough
	// to call it dead.
	unknown state = iota
	// live: its holder renews the Lease.
	live
	// expired: its holder stopped renewing; it is taken (fenced) next.
	expired
	// dead: released by its holder, or taken from it, or without a Lease
	// for a lease duration while this replica watched: its parents may be
	// taken over.
	dead
)

// stateLocked returns the state of shard id at now. This replica itself is
// live exactly while it is a member.
func (s *Shard) stateLocked(id string, now time.Time) state {
	if id == s.cfg.ID {
		if s.member {
			return live
		}
		return unknown
	}
	v := s.leases[id]
	switch {
	case v == nil:
		since := s.synced // no Lease since this replica followed them
		if at, ok := s.vanished[id]; ok {
			since = at // no Lease since it was deleted
		}
		if !since.IsZero() && now.Sub(since) >= s.cfg.LeaseDuration {
			return dead
		}
		return unknown
	case !heldBy(v.lease, id):
		return dead
	case now.Before(v.observed.Add(leaseDuration(v.lease, s.cfg.LeaseDuration))):
		return live
	}
	return expired
}

// heldBy reports whether a shard's own process holds the Lease: its holder
// identity is the shard's id and a suffix. An empty holder is a released
// Lease; another one a Lease taken from the shard.
func heldBy(l *coordinationv1.Lease, id string) bool {
	h := l.Spec.HolderIdentity
	return h != nil && strings.HasPrefix(*h, id+"_")
}

func leaseDuration(l *coordinationv1.Lease, fallback time.Duration) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return fallback
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

// followLeases starts an informer on the shards' Leases that keeps
// s.leases, and waits until it has listed them.
func (s *Shard) followLeases(ctx context.Context, wg *sync.WaitGroup) error {
	factory := informers.NewSharedInformerFactoryWithOptions(s.cfg.Kube, 0, informers.WithNamespace(s.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelLease }))
	inf := factory.Coordination().V1().Leases().Informer()
	observe := func(obj any, deleted bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		l, ok := obj.(*coordinationv1.Lease)
		if !ok || !strings.HasPrefix(l.Name, LeasePrefix) {
			return
		}
		s.observeLease(strings.TrimPrefix(l.Name, LeasePrefix), l, deleted)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { observe(obj, false) },
		UpdateFunc: func(_, obj any) { observe(obj, false) },
		DeleteFunc: func(obj any) { observe(obj, true) },
	}); err != nil {
		return err
	}
	wg.Go(func() { inf.RunWithContext(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	s.mu.Lock()
	s.synced = s.clock.Now()
	s.mu.Unlock()
	s.kickMembership()
	return nil
}

// observeLease records a Lease as seen now.
func (s *Shard) observeLease(id string, l *coordinationv1.Lease, deleted bool) {
	s.mu.Lock()
	if deleted {
		if v := s.leases[id]; v != nil && heldBy(v.lease, id) && id != s.cfg.ID {
			// Not a dead shard's Lease that a replica deleted: its
			// holder may run, and renew it (creating it again).
			s.vanished[id] = s.clock.Now()
		}
		delete(s.leases, id)
	} else {
		delete(s.vanished, id)
		if v := s.leases[id]; v == nil || v.lease.ResourceVersion != l.ResourceVersion {
			s.leases[id] = &leaseView{lease: l, observed: s.clock.Now()}
		}
	}
	s.mu.Unlock()
	s.kickMembership()
}

// membershipLoop recomputes the ring whenever a Lease changes or expires,
// takes expired Leases from their holders, moves parents when the ring
// changed, and searches for parents of gone shards every SweepInterval.
func (s *Shard) membershipLoop(ctx context.Context) {
	sweep := s.clock.NewTicker(s.cfg.SweepInterval)
	defer sweep.Stop()
	for {
		next := s.updateMembership(ctx)
		timer := s.clock.NewTimer(next)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-s.kick:
		case <-timer.C():
		case <-sweep.C():
			s.sweep(ctx)
		}
		timer.Stop()
	}
}

// updateMembership does one round of the membership loop and returns how
// long until a Lease may expire.
func (s *Shard) updateMembership(ctx context.Context) time.Duration {
	logger := klog.FromContext(ctx)
	now := s.clock.Now()
	next := s.cfg.LeaseDuration
	s.mu.Lock()
	member := s.member
	ids := []string{s.cfg.ID}
	for id := range s.leases {
		if id != s.cfg.ID {
			ids = append(ids, id)
		}
	}
	for id, at := range s.vanished {
		switch {
		case now.Sub(at) >= s.cfg.LeaseDuration+leaseTTL:
			delete(s.vanished, id) // dead long since: as if its Lease had been deleted then
		case now.Sub(at) < s.cfg.LeaseDuration:
			next = min(next, at.Add(s.cfg.LeaseDuration).Sub(now)) // when it would be dead
			fallthrough
		default:
			ids = append(ids, id)
		}
	}
	var liveNow, holdingNow, toFence, toDelete []string
	deadNow := map[string]bool{}
	for _, id := range ids {
		st := s.stateLocked(id, now)
		if st != dead {
			holdingNow = append(holdingNow, id)
		}
		switch st {
		case live:
			liveNow = append(liveNow, id)
			if v := s.leases[id]; v != nil && id != s.cfg.ID {
				next = min(next, v.observed.Add(leaseDuration(v.lease, s.cfg.LeaseDuration)).Sub(now))
			}
		case expired:
			toFence = append(toFence, id)
		case dead:
			deadNow[id] = true
			if v := s.leases[id]; v != nil && now.Sub(v.observed) >= leaseTTL {
				toDelete = append(toDelete, id)
			}
		}
	}
	slices.Sort(liveNow)
	changed := !slices.Equal(liveNow, s.live)
	var newlyDead []string
	if member {
		// Shards that died while this replica was no member are found by
		// the sweep of each scope it is then assigned.
		for id := range deadNow {
			if !s.dead[id] {
				newlyDead = append(newlyDead, id)
			}
		}
		slices.Sort(newlyDead)
		s.dead = deadNow
	}
	if changed {
		s.live = liveNow
		s.ring = NewRing(liveNow, s.cfg.Tokens)
	}
	slices.Sort(holdingNow)
	if !slices.Equal(holdingNow, s.holding) {
		// A shard died (or came): its parents are the unassigned
		// informers' now. One that is merely late to renew is not
		// dead yet, and its parents may not be claimed: not listed.
		s.holding = holdingNow
		s.restartUnassignedLocked()
	}
	fence := map[string]*coordinationv1.Lease{}
	for _, id := range append(toFence, toDelete...) {
		fence[id] = s.leases[id].lease
	}
	var fresh []*scope
	if member {
		fresh, s.fresh = s.fresh, nil
	}
	s.mu.Unlock()
	if changed {
		s.metrics.members.Set(float64(len(liveNow)))
		logger.Info("Shards changed", "live", liveNow)
	}
	if !member {
		return max(next, 10*time.Millisecond)
	}
	for _, id := range toFence {
		s.takeLease(ctx, id, fence[id])
	}
	for _, id := range toDelete {
		l := fence[id]
		err := s.cfg.Kube.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			logger.Error(err, "Cannot delete the Lease of a dead shard", "lease", l.Name)
		}
	}
	if changed || len(newlyDead) > 0 {
		s.rebalance(ctx, newlyDead)
	}
	if len(fresh) > 0 {
		s.sweepScopes(ctx, fresh, false)
	}
	return max(next, 10*time.Millisecond)
}

// takeLease takes the expired Lease of another shard (fencing): its
// holder, if it still runs, can no longer renew it and stops, so once the
// take succeeds its parents can be taken over safely. It fails harmlessly
// if the holder renewed meanwhile, or another replica took it first.
func (s *Shard) takeLease(ctx context.Context, id string, l *coordinationv1.Lease) {
	taken := l.DeepCopy()
	holder := "taken-by-" + s.cfg.ID
	now := metav1.NewMicroTime(s.clock.Now())
	taken.Spec.HolderIdentity = &holder
	taken.Spec.AcquireTime, taken.Spec.RenewTime = &now, &now
	_, err := s.cfg.Kube.CoordinationV1().Leases(l.Namespace).Update(ctx, taken, metav1.UpdateOptions{})
	switch {
	case err == nil:
		klog.FromContext(ctx).Info("Shard stopped renewing its Lease; took it, so its parents can move", "dead", id)
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
	default:
		klog.FromContext(ctx).Error(err, "Cannot take the expired Lease of a shard", "lease", l.Name)
	}
}
