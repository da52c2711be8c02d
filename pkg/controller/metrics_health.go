package controller

import "github.com/prometheus/client_golang/prometheus"

// registerHealth creates the metrics of what kgen backs off from: lists and
// watches that fail, parents whose status it stops writing for a while, and
// children it stops repairing for a while.
func (m *Metrics) registerHealth(reg prometheus.Registerer) {
	m.backoffs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kgen_status_backoffs_total",
		Help: "Times kgen stopped writing a parent's status for a while, by rule and reason: StatusContended (another writer keeps changing kgen's Ready condition) or StatusLoop (the status changed with nothing it is computed from).",
	}, []string{"rule", "reason"})
	m.childBackoffs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kgen_child_backoffs_total",
		Help: "Times kgen stopped repairing a child for a while, by rule: another writer kept setting back what kgen repaired (ChildContended).",
	}, []string{"rule"})
	m.childSpaced = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kgen_child_follows_spaced_total",
		Help: "Times kgen started spacing the updates of a child, by rule: it followed its inputs or other children more than 10 times in a minute with its rule and parent unchanged (ChildFollowSpaced), most often a loop between rules.",
	}, []string{"rule"})
	m.listErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kgen_watch_errors_total",
		Help: "Failed lists and watches of a rule's informers, by rule and reason (Forbidden, ListFailed); the informers retry with backoff and the rule's parents wait.",
	}, []string{"rule", "reason"})
	reg.MustRegister(m.backoffs, m.childBackoffs, m.childSpaced, m.listErrors)
}

// StatusBackoff counts a status backoff; it makes *Metrics a
// reconcile.Observer.
func (m *Metrics) StatusBackoff(rule, reason string) {
	if m != nil {
		m.backoffs.WithLabelValues(rule, reason).Inc()
	}
}

// ChildBackoff counts a backoff from repairing a contended child.
func (m *Metrics) ChildBackoff(rule string) {
	if m != nil {
		m.childBackoffs.WithLabelValues(rule).Inc()
	}
}

// ChildSpaced counts a child whose updates kgen started spacing.
func (m *Metrics) ChildSpaced(rule string) {
	if m != nil {
		m.childSpaced.WithLabelValues(rule).Inc()
	}
}

func (m *Metrics) watchFailed(rule, reason string) {
	if m != nil {
		m.listErrors.WithLabelValues(rule, reason).Inc()
	}
}

// forgetRule drops the per-rule series of a rule that was removed.
func (m *Metrics) forgetRule(rule string) {
	if m == nil {
		return
	}
	m.waiting.DeleteLabelValues(rule)
	m.backoffs.DeletePartialMatch(map[string]string{"rule": rule})
	m.childBackoffs.DeleteLabelValues(rule)
	m.childSpaced.DeleteLabelValues(rule)
	m.listErrors.DeletePartialMatch(map[string]string{"rule": rule})
}
