package rules

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// maxValueDepth bounds the nesting of evaluated values, so that a deeply
// nested parent field cannot exhaust the stack.
const maxValueDepth = 1000

// Template is a compiled YAML value whose strings may hold ${...}
// expressions: a child's template or a status field's value.
//
// A string that is exactly one ${...} takes the type of the expression's
// result. A string with text around or between expressions is interpolated.
// A string without expressions is kept as it is, except that "$${" stands for
// a literal "${".
type Template struct {
	root *node
	// rule, child and field name the template for errors that are not about
	// one expression (an output over the size limit).
	rule, child, field string
	maxBytes           int
	refs               []string
	inputs             []string
	exprs              []*Expression
}

// References are the ids of the children the template reads, sorted.
func (t *Template) References() []string { return t.refs }

// Inputs are the ids of the inputs the template reads, sorted.
func (t *Template) Inputs() []string { return t.inputs }

// Expressions are the template's expressions, in the order of the file.
func (t *Template) Expressions() []*Expression { return t.exprs }

// Sets tells whether the template sets a value, a literal or an
// expression, at a path of map keys such as ("metadata", "namespace").
func (t *Template) Sets(path ...string) bool {
	return t.at(path) != nil
}

// at returns the node at a path of map keys, or nil.
func (t *Template) at(path []string) *node {
	n := t.root
	for _, key := range path {
		if n == nil || n.kind != mapNode {
			return nil
		}
		i := slices.Index(n.keys, key)
		if i < 0 {
			return nil
		}
		n = n.elems[i]
	}
	return n
}

// reads tells whether an expression of the node reads one of the
// variables.
func (n *node) reads(vars []string) bool {
	var exprs []*Expression
	switch n.kind {
	case exprNode:
		exprs = []*Expression{n.expr}
	case textNode:
		for _, p := range n.parts {
			if p.expr != nil {
				exprs = append(exprs, p.expr)
			}
		}
	case mapNode, listNode:
		for _, e := range n.elems {
			if e.reads(vars) {
				return true
			}
		}
	}
	for _, e := range exprs {
		for _, v := range vars {
			if e.Reads(v) {
				return true
			}
		}
	}
	return false
}

// Literal returns the constant scalar the template holds at a path of map
// keys, such as ("roleRef", "name"). ok is false when there is nothing at
// the path or the value there holds an expression, or is a map or list.
func (t *Template) Literal(path ...string) (v any, ok bool) {
	n := t.at(path)
	if n == nil || n.kind != literalNode {
		return nil, false
	}
	return n.lit, true
}

// Evaluate renders the template with the given variables into a value made
// of map[string]any, []any, string, int64, float64, bool and nil, sharing no
// memory with the variables. ok is false when the value is absent: the
// template is one expression that returned an empty optional. A map entry or
// list item that is absent in that way is left out of its map or list.
//
// Evaluation stops at the first error, an *Error naming the expression; one
// over a limit of Options also matches ErrLimitExceeded.
func (t *Template) Evaluate(v *Vars) (val any, ok bool, err error) {
	ev := &evaluation{vars: v, budget: t.maxBytes, limit: t.maxBytes}
	val, ok, err = ev.node(t.root, 0)
	if err != nil {
		var re *Error
		if !errors.As(err, &re) {
			err = &Error{Rule: t.rule, Child: t.child, Field: t.field, Err: err}
		}
	}
	return val, ok, err
}

type nodeKind uint8

const (
	literalNode nodeKind = iota // a constant scalar
	exprNode                    // a string that is exactly one expression
	textNode                    // a string interpolating expressions
	mapNode
	listNode
)

// node is one value of a compiled template.
type node struct {
	kind  nodeKind
	lit   any         // literalNode
	expr  *Expression // exprNode
	parts []part      // textNode
	keys  []string    // mapNode: the keys, in the order of the file
	elems []*node     // mapNode: the values of keys; listNode: the items
}

// part is a piece of an interpolated string: text, or an expression.
type part struct {
	text string
	expr *Expression
}

// evaluation is the state of one Template.Evaluate.
type evaluation struct {
	vars   *Vars
	budget int // bytes of output still allowed
	limit  int
}

func (ev *evaluation) spend(n int) error {
	ev.budget -= n
	if ev.budget < 0 {
		return &limitError{what: "output size in bytes", limit: ev.limit}
	}
	return nil
}

func (ev *evaluation) node(n *node, depth int) (any, bool, error) {
	switch n.kind {
	case literalNode:
		return n.lit, true, ev.spend(literalSize(n.lit))
	case exprNode:
		out, err := n.expr.eval(ev.vars)
		if err != nil {
			return nil, false, err
		}
		v, ok, err := ev.native(out, depth)
		if err != nil {
			return nil, false, n.expr.error(err)
		}
		return v, ok, nil
	case textNode:
		var b strings.Builder
		if err := ev.spend(2); err != nil {
			return nil, false, err
		}
		for _, p := range n.parts {
			if p.expr == nil {
				if err := ev.spend(len(p.text)); err != nil {
					return nil, false, err
				}
				b.WriteString(p.text)
				continue
			}
			out, err := p.expr.eval(ev.vars)
			if err != nil {
				return nil, false, err
			}
			if err := ev.text(&b, out, depth); err != nil {
				return nil, false, p.expr.error(err)
			}
		}
		return b.String(), true, nil
	case mapNode:
		m := make(map[string]any, len(n.keys))
		if err := ev.spend(2); err != nil {
			return nil, false, err
		}
		for i, k := range n.keys {
			v, ok, err := ev.node(n.elems[i], depth+1)
			if err != nil {
				return nil, false, err
			}
			if ok {
				if err := ev.spend(len(k) + 4); err != nil {
					return nil, false, err
				}
				m[k] = v
			}
		}
		return m, true, nil
	case listNode:
		l := make([]any, 0, len(n.elems))
		if err := ev.spend(2); err != nil {
			return nil, false, err
		}
		for _, e := range n.elems {
			v, ok, err := ev.node(e, depth+1)
			if err != nil {
				return nil, false, err
			}
			if ok {
				if err := ev.spend(1); err != nil {
					return nil, false, err
				}
				l = append(l, v)
			}
		}
		return l, true, nil
	}
	return nil, false, fmt.Errorf("internal error: unknown node kind %d", n.kind)
}

// literalSize approximates the JSON size of a constant scalar.
func literalSize(v any) int {
	switch v := v.(type) {
	case string:
		return len(v) + 2
	case nil:
		return 4
	case bool:
		return 5
	}
	return 8
}

// native converts an expression's result into the JSON value it renders as.
// See the package documentation for the conversions.
func (ev *evaluation) native(v ref.Val, depth int) (any, bool, error) {
	if depth > maxValueDepth {
		return nil, false, &limitError{what: "nesting depth", limit: maxValueDepth}
	}
	switch v := v.(type) {
	case types.String:
		return string(v), true, ev.spend(len(v) + 2)
	case types.Int:
		return int64(v), true, ev.spend(8)
	case types.Uint:
		if uint64(v) > math.MaxInt64 {
			return nil, false, fmt.Errorf("unsigned integer %d is too large for a JSON integer", uint64(v))
		}
		return int64(v), true, ev.spend(8)
	case types.Double:
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, false, fmt.Errorf("%v is not a JSON number", f)
		}
		return f, true, ev.spend(8)
	case types.Bool:
		return bool(v), true, ev.spend(5)
	case types.Null:
		return nil, true, ev.spend(4)
	case types.Bytes:
		s := base64.StdEncoding.EncodeToString(v)
		return s, true, ev.spend(len(s) + 2)
	case types.Duration:
		s := v.Duration.String()
		return s, true, ev.spend(len(s) + 2)
	case types.Timestamp:
		s := v.Time.UTC().Format(time.RFC3339Nano)
		return s, true, ev.spend(len(s) + 2)
	case *types.Optional:
		if !v.HasValue() {
			return nil, false, nil
		}
		return ev.native(v.GetValue(), depth)
	case traits.Mapper:
		if m, ok := v.Value().(map[string]any); ok {
			out, err := ev.copyJSON(m, depth)
			return out, err == nil, err
		}
		return ev.nativeMap(v, depth)
	case traits.Lister:
		if l, ok := v.Value().([]any); ok {
			out, err := ev.copyJSON(l, depth)
			return out, err == nil, err
		}
		return ev.nativeList(v, depth)
	case *types.Err:
		return nil, false, v
	}
	// Kubernetes library types: quantity, URL, IP, CIDR, semver.
	if s, ok := v.Value().(fmt.Stringer); ok {
		str := s.String()
		return str, true, ev.spend(len(str) + 2)
	}
	return nil, false, fmt.Errorf("a value of type %s cannot be rendered", v.Type().TypeName())
}

func (ev *evaluation) nativeMap(m traits.Mapper, depth int) (any, bool, error) {
	out := map[string]any{}
	if err := ev.spend(2); err != nil {
		return nil, false, err
	}
	for it := m.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		ks, ok := k.(types.String)
		if !ok {
			return nil, false, fmt.Errorf("a map key of type %s cannot be rendered: JSON keys are strings", k.Type().TypeName())
		}
		v, ok, err := ev.native(m.Get(k), depth+1)
		if err != nil {
			return nil, false, err
		}
		if ok {
			if err := ev.spend(len(ks) + 4); err != nil {
				return nil, false, err
			}
			out[string(ks)] = v
		}
	}
	return out, true, nil
}

func (ev *evaluation) nativeList(l traits.Lister, depth int) (any, bool, error) {
	size, ok := l.Size().(types.Int)
	if !ok {
		return nil, false, errors.New("a list without a size cannot be rendered")
	}
	if err := ev.spend(2 + int(size)); err != nil {
		return nil, false, err
	}
	out := make([]any, 0, size)
	for i := types.Int(0); i < size; i++ {
		v, ok, err := ev.native(l.Get(i), depth+1)
		if err != nil {
			return nil, false, err
		}
		if ok {
			out = append(out, v)
		}
	}
	return out, true, nil
}

// copyJSON deep-copies a JSON value taken from the variables (the parent, a
// child), so that rendered objects never share memory with observed ones.
func (ev *evaluation) copyJSON(v any, depth int) (any, error) {
	if depth > maxValueDepth {
		return nil, &limitError{what: "nesting depth", limit: maxValueDepth}
	}
	switch v := v.(type) {
	case map[string]any:
		if err := ev.spend(2); err != nil {
			return nil, err
		}
		out := make(map[string]any, len(v))
		for k, e := range v {
			if err := ev.spend(len(k) + 4); err != nil {
				return nil, err
			}
			c, err := ev.copyJSON(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case []any:
		if err := ev.spend(2 + len(v)); err != nil {
			return nil, err
		}
		out := make([]any, len(v))
		for i, e := range v {
			c, err := ev.copyJSON(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case string:
		return v, ev.spend(len(v) + 2)
	case int64, float64, bool, nil:
		return v, ev.spend(literalSize(v))
	case int:
		return int64(v), ev.spend(8)
	case int32:
		return int64(v), ev.spend(8)
	case float32:
		return float64(v), ev.spend(8)
	}
	return nil, fmt.Errorf("a value of Go type %T cannot be rendered", v)
}

// text appends an expression's result to an interpolated string: strings as
// they are, numbers in decimal (floats without exponent between 1e-6 and
// 1e21, like JSON), bools as true or false, bytes in base64, durations,
// timestamps and Kubernetes values (quantities, URLs, IPs) in their usual
// text form, an empty optional as nothing, and lists, maps and null as
// compact JSON.
func (ev *evaluation) text(b *strings.Builder, v ref.Val, depth int) error {
	var s string
	switch v := v.(type) {
	case types.String:
		s = string(v)
	case types.Int:
		s = strconv.FormatInt(int64(v), 10)
	case types.Uint:
		s = strconv.FormatUint(uint64(v), 10)
	case types.Double:
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%v cannot be interpolated", f)
		}
		s = formatFloat(f)
	case types.Bool:
		s = strconv.FormatBool(bool(v))
	case *types.Optional:
		if !v.HasValue() {
			return nil
		}
		return ev.text(b, v.GetValue(), depth)
	default:
		// native spends the budget as it walks, so a huge value stops
		// early; the text it turns into is what counts in the end.
		saved := ev.budget
		n, ok, err := ev.native(v, depth)
		ev.budget = saved
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if str, isStr := n.(string); isStr {
			s = str
			break
		}
		j, err := json.Marshal(n)
		if err != nil {
			return err
		}
		s = string(j)
	}
	if err := ev.spend(len(s)); err != nil {
		return err
	}
	b.WriteString(s)
	return nil
}

// formatFloat formats like encoding/json: plain decimal unless the exponent
// is large or small.
func formatFloat(f float64) string {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	return strconv.FormatFloat(f, format, -1, 64)
}

// collect gathers a template's expressions and references after compiling.
func (t *Template) collect() {
	var walk func(n *node)
	seen := map[string]bool{}
	walk = func(n *node) {
		switch n.kind {
		case exprNode:
			t.exprs = append(t.exprs, n.expr)
		case textNode:
			for _, p := range n.parts {
				if p.expr != nil {
					t.exprs = append(t.exprs, p.expr)
				}
			}
		case mapNode, listNode:
			for _, e := range n.elems {
				walk(e)
			}
		}
	}
	walk(t.root)
	seenInput := map[string]bool{}
	for _, e := range t.exprs {
		for _, r := range e.References {
			if !seen[r] {
				seen[r] = true
				t.refs = append(t.refs, r)
			}
		}
		for _, in := range e.Inputs {
			if !seenInput[in] {
				seenInput[in] = true
				t.inputs = append(t.inputs, in)
			}
		}
	}
	slices.Sort(t.refs)
	slices.Sort(t.inputs)
}
