package reconcile

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestEventPolicyAllows(t *testing.T) {
	tests := []struct {
		policy    EventPolicy
		eventType string
		reason    string
		want      bool
	}{
		{EventsNotable, corev1.EventTypeWarning, ReasonConflict, true},
		{EventsNotable, corev1.EventTypeNormal, EventRepaired, true},
		{EventsNotable, corev1.EventTypeNormal, EventDeleted, true},
		{EventsNotable, corev1.EventTypeNormal, EventOrphaned, true},
		{EventsNotable, corev1.EventTypeNormal, EventAdopted, true},
		{EventsNotable, corev1.EventTypeNormal, EventCreated, false},
		{EventsNotable, corev1.EventTypeNormal, EventUpdated, false},
		{"", corev1.EventTypeNormal, EventOrphaned, true},
		{EventsAll, corev1.EventTypeNormal, EventCreated, true},
		{EventsWarnings, corev1.EventTypeNormal, EventOrphaned, false},
		{EventsWarnings, corev1.EventTypeWarning, ReasonInvalid, true},
		{EventsNone, corev1.EventTypeWarning, ReasonInvalid, false},
	}
	for _, tt := range tests {
		if got := tt.policy.allows(tt.eventType, tt.reason); got != tt.want {
			t.Errorf("%q.allows(%s, %s) = %v, want %v", tt.policy, tt.eventType, tt.reason, got, tt.want)
		}
	}
}
