package shard

import "github.com/prometheus/client_golang/prometheus"

// metrics are a shard's Prometheus metrics.
type metrics struct {
	members prometheus.Gauge
	moves   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kgen_shard_members",
			Help: "Live shards (replicas of kgenctl run --shards) this replica sees, itself included once it holds its Lease.",
		}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kgen_shard_moves_total",
			Help: "Parents this replica labelled: claimed for itself (action=claim: new, or of a dead shard) or handed to another shard (action=handover).",
		}, []string{"action"}),
	}
	m.moves.WithLabelValues("claim")
	m.moves.WithLabelValues("handover")
	if reg != nil {
		reg.MustRegister(m.members, m.moves)
	}
	return m
}

func (m *metrics) moved(action string) { m.moves.WithLabelValues(action).Inc() }
