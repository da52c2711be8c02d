package rules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/cel-go/common/types/ref"
)

// MaxForEachElements bounds the objects one forEach child may render for a
// parent: the cartesian product of its entries.
const MaxForEachElements = 1000

// Elements evaluates the child's forEach entries and returns one binding
// of their names per element of the cartesian product, in order: the first
// entry varies slowest. A list contributes its items, a map one {"key": k,
// "value": v} per key, by sorted key. The values are JSON values sharing
// no memory with the variables. It returns nil for a child without
// forEach.
//
// An error is an *Error naming the expression; one over a limit (more than
// MaxForEachElements elements, a value over Options.MaxOutputBytes) also
// matches ErrLimitExceeded.
func (c *Child) Elements(v *Vars) ([]map[string]any, error) {
	if len(c.ForEach) == 0 {
		return nil, nil
	}
	out := []map[string]any{{}}
	for _, f := range c.ForEach {
		val, err := f.Expr.eval(v)
		if err != nil {
			return nil, err
		}
		items, err := f.items(val)
		if err != nil {
			return nil, f.Expr.error(err)
		}
		if len(out)*len(items) > MaxForEachElements {
			return nil, f.Expr.error(&limitError{what: "number of forEach elements", limit: MaxForEachElements})
		}
		next := make([]map[string]any, 0, len(out)*len(items))
		for _, prefix := range out {
			for _, item := range items {
				b := make(map[string]any, len(prefix)+1)
				for k, x := range prefix {
					b[k] = x
				}
				b[f.Name] = item
				next = append(next, b)
			}
		}
		out = next
	}
	return out, nil
}

// items turns a forEach expression's result into its elements.
func (f *ForEach) items(val ref.Val) ([]any, error) {
	ev := &evaluation{budget: f.maxBytes, limit: f.maxBytes}
	native, ok, err := ev.native(val, 0)
	if err != nil {
		return nil, err
	}
	switch n := native.(type) {
	case []any:
		return n, nil
	case map[string]any:
		keys := make([]string, 0, len(n))
		for k := range n {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		items := make([]any, len(keys))
		for i, k := range keys {
			items[i] = map[string]any{"key": k, "value": n[k]}
		}
		return items, nil
	case nil:
		if !ok {
			return nil, nil // an empty optional: no elements
		}
	}
	return nil, fmt.Errorf("must be a list or a map, but is %s", describeJSON(native))
}

func describeJSON(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", strings.TrimSpace(v))
	}
	return fmt.Sprintf("%T", v)
}
