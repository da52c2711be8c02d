package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"kgen.dev/kgen/pkg/reconcile"
)

// Names kgen's shards use in the cluster.
const (
	// Label is the label that assigns a parent, and its children, to a
	// shard: its value is the shard's id.
	Label = reconcile.LabelShard
	// LeasePrefix starts the name of every shard's Lease:
	// kgen-shard-<id>.
	LeasePrefix = "kgen-shard-"
	// LabelLease marks a shard's Lease; its value is the shard's id.
	LabelLease = "kgen.dev/shard-lease"
	// FieldManager writes the shard label, on parents and children.
	FieldManager = "kgen-shard"
)

// Defaults of Config.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultWorkers       = 8
)

// leaseTTL is how long the Lease of a dead shard stays before a live one
// deletes it: long enough for every replica to see it dead.
const leaseTTL = time.Minute

// Config configures a Shard. ID, Namespace, Kube and Metadata are
// required.
type Config struct {
	// ID names the shard: the value of Label on its objects, and its Lease
	// kgen-shard-<ID>. ValidateID says what it may be.
	ID string
	// Namespace holds the shards' Leases.
	Namespace string
	// LeaseDuration is how long a Lease lasts without renewal;
	// DefaultLeaseDuration when zero. A dead shard's parents are moved
	// about one lease duration after it stopped renewing.
	LeaseDuration time.Duration
	// Kube reads and writes the Leases.
	Kube kubernetes.Interface
	// Metadata lists and watches parents' metadata and writes their
	// Label.
	Metadata metadata.Interface
	// Workers is how many parents are moved at once; DefaultWorkers when
	// zero.
	Workers int
	// Tokens is each shard's number of points on the Ring; DefaultTokens
	// when zero.
	Tokens int
	// SweepInterval is how often every parent scope is searched for
	// parents of shards that are gone; ten lease durations when zero.
	SweepInterval time.Duration
	// Publish, when set, returns annotations to write on the shard's Lease
	// with every renewal, for the other shards to read (Published).
	Publish func() map[string]string
	// Registerer receives the shard's metrics; none when nil.
	Registerer prometheus.Registerer
	// Clock is time.Now and timers; the real clock when nil.
	Clock clock.WithTicker
}

// ValidateID checks a shard id: it must be a valid label value (it is
// the value of Label) and make a valid Lease name.
func ValidateID(id string) error {
	if id == "" {
		return errors.New("the shard id is empty")
	}
	if msgs := validation.IsValidLabelValue(id); len(msgs) > 0 {
		return fmt.Errorf("shard id %q is not a valid label value: %s", id, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(LeasePrefix + id); len(msgs) > 0 {
		return fmt.Errorf("shard id %q does not make a valid Lease name %s: %s", id, LeasePrefix+id, strings.Join(msgs, "; "))
	}
	return nil
}

// Shard is one replica of a sharded kgen. It holds its Lease, follows the
// other shards' Leases, assigns parents to shards, and tells the
// controller which parents it may reconcile (Begin). Create it with New
// and start it with Run.
type Shard struct {
	cfg      Config
	identity string // in the Lease: the id and a random suffix, so two processes with one id never share it
	clock    clock.WithTicker
	queue    workqueue.TypedRateLimitingInterface[ref]
	metrics  *metrics
	// kick wakes the membership loop after a Lease changed.
	kick chan struct{}

	mu sync.Mutex
	// member is set while this replica holds its Lease and may work.
	member bool
	// leases are the shards' Leases as last seen, by shard id; synced is
	// when they were first all listed (zero before).
	leases map[string]*leaseView
	synced time.Time
	// vanished are the shards whose Lease was deleted while their own
	// process held it (a user's kubectl delete, say), by when: not dead
	// until they have had no Lease for a lease duration, as the holder, if
	// it runs, creates it again at its next renewal.
	vanished map[string]time.Time
	// live are the shards of the ring, sorted; dead are the shards whose
	// Lease was released or taken from them.
	live []string
	ring *Ring
	dead map[string]bool
	// holding are the shards with a Lease that are not dead (live, or
	// expired, or not known yet) and this one, sorted: a parent labelled
	// with none of them is one the scopes' unassigned informers watch.
	holding []string
	// scopes are the parents the controller watches, by scope; fresh are
	// those not searched yet for parents of gone shards.
	scopes map[scopeKey]*scope
	fresh  []*scope
	// parents hold the parents being reconciled or handed over, and those
	// recently handed over; snaps the newest metadata seen of parents
	// waiting in the queue.
	parents map[ref]*parentState
	snaps   map[ref]snapshot
}

// New returns a Shard; it sends no request until Run.
func New(cfg Config) (*Shard, error) {
	if err := ValidateID(cfg.ID); err != nil {
		return nil, err
	}
	if cfg.Namespace == "" || cfg.Kube == nil || cfg.Metadata == nil {
		return nil, errors.New("shard: Namespace, Kube and Metadata are required")
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 10 * cfg.LeaseDuration
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	s := &Shard{
		cfg:      cfg,
		identity: cfg.ID + "_" + uuid.NewString(),
		clock:    cfg.Clock,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[ref](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[ref]{Name: "kgen-shard"}),
		metrics: newMetrics(cfg.Registerer),
		kick:    make(chan struct{}, 1),
		leases:  map[string]*leaseView{}, vanished: map[string]time.Time{},
		ring:    NewRing(nil, cfg.Tokens),
		dead:    map[string]bool{},
		scopes:  map[scopeKey]*scope{},
		parents: map[ref]*parentState{},
		snaps:   map[ref]snapshot{},
	}
	return s, nil
}

// ID returns the shard's id.
func (s *Shard) ID() string { return s.cfg.ID }

// Owner returns the live shard that the ring gives a key (see Key); ""
// while this replica knows of none.
func (s *Shard) Owner(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ring.Owner(key)
}

// Published returns, by shard, an annotation of the Leases of the other
// live shards (see Config.Publish), as last renewed.
func (s *Shard) Published(annotation string) map[string]string {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for id, v := range s.leases {
		if id == s.cfg.ID || s.stateLocked(id, now) != live {
			continue
		}
		if a, ok := v.lease.Annotations[annotation]; ok {
			out[id] = a
		}
	}
	return out
}

// Members returns the live shards, sorted.
func (s *Shard) Members() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.live)
}

// ErrLeaseLost is returned by Run when the shard could not renew its
// Lease: other shards may already be taking its parents over.
var ErrLeaseLost = errors.New("lost the shard lease")

// Run takes the shard's Lease, runs work while it holds it, and moves
// parents between shards as shards come and go, until ctx is done. When
// ctx is done, work finishes first (it gets a context of its own that ends
// with ctx), then the shard stops moving parents and releases its Lease,
// so the other shards take its parents over at once. It returns
// ErrLeaseLost if the Lease could not be renewed: the caller should exit,
// as a replica that lost its Lease must not write.
func (s *Shard) Run(ctx context.Context, work func(context.Context)) error {
	logger := klog.FromContext(ctx).WithValues("shard", s.cfg.ID)
	ctx = klog.NewContext(ctx, logger)
	d := s.cfg.LeaseDuration
	// The Lease outlives ctx: it is released only once work has stopped.
	leCtx, cancelLE := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelLE()

	// Follow every shard's Lease and move parents, until the Lease is
	// released.
	var background sync.WaitGroup
	defer background.Wait()
	followCtx, stopFollowing := context.WithCancel(leCtx)
	defer stopFollowing()
	if err := s.followLeases(followCtx, &background); err != nil {
		return err
	}
	for range s.cfg.Workers {
		background.Go(func() {
			for s.processNext(followCtx) {
			}
		})
	}
	background.Go(func() { s.membershipLoop(followCtx) })
	defer s.queue.ShutDown()
	defer s.stopScopes()

	// A Lease that exists already may have been released or lost by an
	// earlier process with this id, whose parents other shards may still
	// be taking over: wait one lease duration before working, as they
	// may act on what they saw before this process took the Lease.
	_, err := s.cfg.Kube.CoordinationV1().Leases(s.cfg.Namespace).Get(ctx, LeasePrefix+s.cfg.ID, metav1.GetOptions{})
	existed := !apierrors.IsNotFound(err)

	lock := &leaseLock{client: s.cfg.Kube.CoordinationV1(), namespace: s.cfg.Namespace, name: LeasePrefix + s.cfg.ID,
		id: s.cfg.ID, identity: s.identity, publish: s.cfg.Publish}
	var started atomic.Bool
	ran := make(chan struct{})
	go func() {
		<-ctx.Done()
		if started.Load() {
			<-ran
		}
		cancelLE()
	}()
	lost := false
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   d,
		RenewDeadline:   d * 2 / 3,
		RetryPeriod:     d / 7,
		ReleaseOnCancel: true,
		Name:            LeasePrefix + s.cfg.ID,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leading context.Context) {
				started.Store(true)
				defer close(ran)
				logger.Info("Holding the shard lease", "lease", s.cfg.Namespace+"/"+LeasePrefix+s.cfg.ID, "identity", s.identity)
				runCtx, stop := context.WithCancel(leading) // a lost Lease stops the work
				defer stop()
				defer context.AfterFunc(ctx, stop)() // so does ctx
				if existed {
					logger.Info("The shard's Lease existed; waiting one lease duration before working", "leaseDuration", d)
					select {
					case <-runCtx.Done():
						return
					case <-s.clock.After(d):
					}
				}
				s.setMember(true)
				work(runCtx)
				// No new reconcile starts now; work has finished those in
				// flight. No parent is moved any more either.
				s.setMember(false)
				s.queue.ShutDownWithDrain()
			},
			OnStoppedLeading: func() {
				s.setMember(false)
				if ctx.Err() == nil {
					lost = true
				}
			},
		},
	})
	if err != nil {
		return err
	}
	le.Run(leCtx)
	if lost {
		return ErrLeaseLost
	}
	logger.Info("Released the shard lease")
	return nil
}

// setMember records whether the replica holds its Lease and may work, and
// has the membership loop recompute the ring.
func (s *Shard) setMember(member bool) {
	s.mu.Lock()
	s.member = member
	s.mu.Unlock()
	s.kickMembership()
}

func (s *Shard) kickMembership() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
