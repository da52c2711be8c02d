package shard

import (
	"fmt"
	"testing"
)

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("webapps.example.com/team-%d/app-%05d", i%7, i)
	}
	return out
}

// Each shard gets close to its share of the keys.
func TestRingBalance(t *testing.T) {
	const n = 30000
	for _, shards := range [][]string{
		{"kgen-0", "kgen-1"},
		{"kgen-0", "kgen-1", "kgen-2"},
		{"kgen-7d9f6c-x2k4q", "kgen-7d9f6c-8hz2m", "kgen-7d9f6c-p5tvw", "kgen-7d9f6c-c9wbn", "kgen-7d9f6c-lq7rs"},
	} {
		t.Run(fmt.Sprint(len(shards)), func(t *testing.T) {
			r := NewRing(shards, 0)
			counts := map[string]int{}
			for _, k := range keys(n) {
				counts[r.Owner(k)]++
			}
			fair := float64(n) / float64(len(shards))
			for _, s := range shards {
				if dev := float64(counts[s])/fair - 1; dev > 0.2 || dev < -0.2 {
					t.Errorf("%s has %d keys, %+.0f%% of its fair share %.0f", s, counts[s], dev*100, fair)
				}
			}
			if len(counts) != len(shards) {
				t.Errorf("keys went to %d owners, want %d: %v", len(counts), len(shards), counts)
			}
		})
	}
}

// Adding a shard moves only keys to it, about 1/N of them; removing one
// moves only its own keys. The order shards are named in does not matter.
func TestRingMovesLittle(t *testing.T) {
	const n = 30000
	three := NewRing([]string{"a", "b", "c"}, 0)
	four := NewRing([]string{"d", "c", "b", "a"}, 0)
	two := NewRing([]string{"a", "c"}, 0)
	same := NewRing([]string{"c", "a", "b", "b"}, 0)
	moved := 0
	for _, k := range keys(n) {
		before, after := three.Owner(k), four.Owner(k)
		if before != after {
			moved++
			if after != "d" {
				t.Fatalf("adding d moved %s from %s to %s", k, before, after)
			}
		}
		if before != "b" && two.Owner(k) != before {
			t.Fatalf("removing b moved %s from %s to %s", k, before, two.Owner(k))
		}
		if same.Owner(k) != before {
			t.Fatalf("the same shards named in another order put %s on %s, not %s", k, same.Owner(k), before)
		}
	}
	if share := float64(moved) / n; share < 0.17 || share > 0.33 {
		t.Errorf("adding a fourth shard moved %.1f%% of the keys, want about 25%%", share*100)
	}
}

func TestRingEmpty(t *testing.T) {
	if got := NewRing(nil, 0).Owner("x"); got != "" {
		t.Errorf("Owner on an empty ring = %q, want \"\"", got)
	}
	if got := NewRing([]string{"only"}, 3).Owner("x"); got != "only" {
		t.Errorf("Owner on a ring of one = %q, want only", got)
	}
}
