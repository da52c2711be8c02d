package shard

import (
	"context"
	"encoding/json"
	"errors"
	"maps"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// leaseLock is client-go's LeaseLock that also writes the shard's label
// and, with every renewal, the annotations the shard publishes (Config.
// Publish): the other shards read them from the Lease they watch anyway,
// at no extra request.
type leaseLock struct {
	client              coordinationv1client.LeasesGetter
	namespace, name, id string
	identity            string
	publish             func() map[string]string
	lease               *coordinationv1.Lease
}

var _ resourcelock.Interface = (*leaseLock)(nil)

// Get implements resourcelock.Interface.
func (l *leaseLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	lease, err := l.client.Leases(l.namespace).Get(ctx, l.name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	l.lease = lease
	record := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	raw, err := json.Marshal(*record)
	if err != nil {
		return nil, nil, err
	}
	return record, raw, nil
}

// Create implements resourcelock.Interface.
func (l *leaseLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace, Labels: map[string]string{LabelLease: l.id}},
		Spec:       resourcelock.LeaderElectionRecordToLeaseSpec(&ler),
	}
	l.annotate(lease, ler)
	created, err := l.client.Leases(l.namespace).Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	l.lease = created
	return nil
}

// Update implements resourcelock.Interface.
func (l *leaseLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if l.lease == nil {
		return errors.New("lease not initialized, call get or create first")
	}
	lease := l.lease.DeepCopy()
	lease.Spec = resourcelock.LeaderElectionRecordToLeaseSpec(&ler)
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	lease.Labels[LabelLease] = l.id
	l.annotate(lease, ler)
	updated, err := l.client.Leases(l.namespace).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.lease = updated
	return nil
}

// annotate sets the published annotations while this process holds the
// Lease, and removes them when it releases it.
func (l *leaseLock) annotate(lease *coordinationv1.Lease, ler resourcelock.LeaderElectionRecord) {
	if l.publish == nil {
		return
	}
	published := l.publish()
	if ler.HolderIdentity != l.identity {
		for k := range published {
			delete(lease.Annotations, k)
		}
		return
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	maps.Copy(lease.Annotations, published)
}

// RecordEvent implements resourcelock.Interface; shards record no events.
func (l *leaseLock) RecordEvent(string) {}

// Identity implements resourcelock.Interface.
func (l *leaseLock) Identity() string { return l.identity }

// Describe implements resourcelock.Interface.
func (l *leaseLock) Describe() string { return l.namespace + "/" + l.name }
