package check

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Config says what to check.
type Config struct {
	// Deployment is kgen's Deployment.
	Deployment types.NamespacedName
	// Lease is kgen's leader-election Lease; an empty Name checks none.
	Lease types.NamespacedName
	// Now is the clock the Lease's renewal is compared with; time.Now when
	// nil.
	Now func() time.Time
	// Wait, when positive, is how long Run checks again, every Interval,
	// while something is not fine. Right after a rolling update a check
	// can fall in a gap that closes by itself: the old leader released
	// the Lease as it stopped, and a standby takes it at its next retry
	// (2 s by default).
	Wait time.Duration
	// Interval is the time between two checks while waiting; a second
	// when zero.
	Interval time.Duration
}

// Run checks the Deployment and the Lease, and returns a line for each
// that is fine. The error lists everything that is not, as the last check
// found it: after cfg.Wait, or when ctx is done.
func Run(ctx context.Context, kube kubernetes.Interface, cfg Config) ([]string, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	ok, err := runOnce(ctx, kube, cfg)
	if err == nil || cfg.Wait <= 0 {
		return ok, err
	}
	deadline := time.NewTimer(cfg.Wait)
	defer deadline.Stop()
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ok, err
		case <-deadline.C:
			return ok, err
		case <-tick.C:
		}
		if ok, err = runOnce(ctx, kube, cfg); err == nil {
			return ok, nil
		}
	}
}

// runOnce checks the Deployment and the Lease once.
func runOnce(ctx context.Context, kube kubernetes.Interface, cfg Config) ([]string, error) {
	var ok []string
	var errs []error
	if line, err := deployment(ctx, kube, cfg.Deployment); err != nil {
		errs = append(errs, err)
	} else {
		ok = append(ok, line)
	}
	if cfg.Lease.Name != "" {
		if line, err := lease(ctx, kube, cfg.Lease, cfg.Now()); err != nil {
			errs = append(errs, err)
		} else {
			ok = append(ok, line)
		}
	}
	return ok, errors.Join(errs...)
}

func deployment(ctx context.Context, kube kubernetes.Interface, ref types.NamespacedName) (string, error) {
	d, err := kube.AppsV1().Deployments(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("deployment %s: %w", ref, err)
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if want == 0 {
		return "", fmt.Errorf("deployment %s is scaled to 0: no kgen runs", ref)
	}
	if d.Status.AvailableReplicas == 0 {
		msg := ""
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status != corev1.ConditionTrue {
				msg = ": " + c.Message
			}
		}
		return "", fmt.Errorf("deployment %s has 0 of %d replicas available%s", ref, want, msg)
	}
	return fmt.Sprintf("deployment %s has %d of %d replicas available", ref, d.Status.AvailableReplicas, want), nil
}

func lease(ctx context.Context, kube kubernetes.Interface, ref types.NamespacedName, now time.Time) (string, error) {
	l, err := kube.CoordinationV1().Leases(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("lease %s does not exist: no replica has led yet", ref)
	}
	if err != nil {
		return "", fmt.Errorf("lease %s: %w", ref, err)
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder == "" {
		return "", fmt.Errorf("lease %s is held by no replica: no kgen leads", ref)
	}
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return "", fmt.Errorf("lease %s held by %s has no renew time or duration", ref, holder)
	}
	duration := time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	ago := now.Sub(l.Spec.RenewTime.Time).Round(time.Second)
	if ago > duration {
		return "", fmt.Errorf("lease %s was last renewed by %s %s ago, longer than its duration of %s: the leader is gone", ref, holder, ago, duration)
	}
	return fmt.Sprintf("lease %s is held by %s, renewed %s ago", ref, holder, ago), nil
}
