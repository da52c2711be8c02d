package shard

import (
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DefaultTokens is how many points (virtual nodes) each shard has on a
// Ring. With 500, no shard of 5 held more than 12% above or below its fair
// share of 30,000 keys in 20 random rings (100 tokens: 28%); a ring of 10
// shards is still only 5,000 numbers.
const DefaultTokens = 500

// Ring assigns keys to shards by consistent hashing: each shard owns the
// arcs of the ring that end at its tokens, so adding or removing one of N
// shards moves only the keys of the arcs it gains or loses, about 1/N of
// them. Every replica that sees the same shards computes the same Ring. A
// Ring never changes; build a new one for other shards.
type Ring struct {
	tokens []uint64          // sorted
	owner  map[uint64]string // token → shard
}

// NewRing returns the ring of the given shards with tokens points each
// (DefaultTokens when zero or less).
func NewRing(shards []string, tokens int) *Ring {
	if tokens <= 0 {
		tokens = DefaultTokens
	}
	r := &Ring{tokens: make([]uint64, 0, len(shards)*tokens), owner: make(map[uint64]string, len(shards)*tokens)}
	sorted := slices.Clone(shards)
	slices.Sort(sorted)
	for _, s := range slices.Compact(sorted) {
		for i := range tokens {
			t := xxhash.Sum64String(s + "#" + strconv.Itoa(i))
			if _, taken := r.owner[t]; taken {
				continue // a collision: the first name in order keeps it, on every replica
			}
			r.tokens = append(r.tokens, t)
			r.owner[t] = s
		}
	}
	slices.Sort(r.tokens)
	return r
}

// Owner returns the shard a key belongs to; "" for a ring without shards.
func (r *Ring) Owner(key string) string {
	if len(r.tokens) == 0 {
		return ""
	}
	i, _ := slices.BinarySearch(r.tokens, xxhash.Sum64String(key))
	if i == len(r.tokens) {
		i = 0 // past the last token: the ring wraps around
	}
	return r.owner[r.tokens[i]]
}

// Key is the ring key of an object of a resource: its group and resource,
// namespace and name. Neither the version nor the UID is part of it, so
// every rule that watches the object, in any version, agrees where it
// goes, and so does a parent restored from a backup.
func Key(gr schema.GroupResource, namespace, name string) string {
	return gr.String() + "/" + namespace + "/" + name
}
