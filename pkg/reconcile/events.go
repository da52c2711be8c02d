package reconcile

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
)

// EventPolicy says which Events kgen records on parents.
type EventPolicy string

// The event policies of kgenctl run --events.
const (
	// EventsNotable records Warnings (failures, conflicts, backoffs) and the
	// Normal events a person wants to hear of: a drift repaired
	// (Repaired), a child deleted (Deleted) or adopted (Adopted). Creating
	// a new parent's children and following a parent's change are the
	// expected outcome, which Ready and observedGeneration show. The
	// default.
	EventsNotable EventPolicy = "notable"
	// EventsAll also records Created and Updated.
	EventsAll EventPolicy = "all"
	// EventsWarnings records only Warnings.
	EventsWarnings EventPolicy = "warnings"
	// EventsNone records nothing.
	EventsNone EventPolicy = "none"
)

// EventPolicies lists the policies, for flags and errors.
var EventPolicies = []EventPolicy{EventsNotable, EventsAll, EventsWarnings, EventsNone}

// ParseEventPolicy reads a policy's name; "" is EventsNotable.
func ParseEventPolicy(s string) (EventPolicy, error) {
	if s == "" {
		return EventsNotable, nil
	}
	for _, p := range EventPolicies {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown event policy %q: use notable, all, warnings or none", s)
}

// records tells whether the policy records a Normal event of that reason.
func (p EventPolicy) records(reason string) bool {
	return p.allows(corev1.EventTypeNormal, reason)
}

func (p EventPolicy) allows(eventType, reason string) bool {
	switch p {
	case EventsNone:
		return false
	case EventsAll:
		return true
	case EventsWarnings:
		return eventType == corev1.EventTypeWarning
	}
	// Notable, and the zero value. Letting go of an Orphan child is its
	// prune.
	return eventType == corev1.EventTypeWarning || reason == EventRepaired || reason == EventDeleted || reason == EventOrphaned || reason == EventAdopted
}

// filteredRecorder records only what its policy allows.
type filteredRecorder struct {
	record.EventRecorder
	policy EventPolicy
}

func (f filteredRecorder) Event(obj runtime.Object, eventType, reason, message string) {
	if f.policy.allows(eventType, reason) {
		f.EventRecorder.Event(obj, eventType, reason, message)
	}
}

func (f filteredRecorder) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	if f.policy.allows(eventType, reason) {
		f.EventRecorder.Eventf(obj, eventType, reason, format, args...)
	}
}

func (f filteredRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventType, reason, format string, args ...any) {
	if f.policy.allows(eventType, reason) {
		f.EventRecorder.AnnotatedEventf(obj, annotations, eventType, reason, format, args...)
	}
}
