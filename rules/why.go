package rules

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
)

// Why says, in words a person understands, why a condition (a readyWhen, an
// includeWhen) does not hold, from the expression's shape and the values
// its field paths have in v. evalErr is what EvalBool returned for v: nil
// when the condition is false.
//
//   - The evaluation failed and a field the expression reads is not set:
//     "waiting for status.availableReplicas (not set yet)" for a field of
//     self (the first one, in reading order); "parent.spec.replicas is not
//     set" for one of the other variables. A has() test that is false says
//     the same.
//   - A comparison of a field with another field or a literal is false:
//     "status.availableReplicas is 1, wants >= 2 (parent.spec.replicas)".
//   - A bool field is false ("status.ready is false, wants true"), or a
//     negated one true.
//   - Of a conjunction (&&), the first operand that is false, as above, or
//     else as "${operand} is false".
//   - An exists() or all() over a list field is false: "status.conditions
//     has no entry where ${...}; its entries: {type: "Ready", status:
//     "False"}", each entry by the fields the condition reads of it.
//
// Paths of self are named without "self.": the message is about the
// child. Why returns "" for any other shape, and for an error that no
// missing field explains; the caller then shows the expression (and the
// error).
func (e *Expression) Why(v *Vars, evalErr error) string {
	if e.ast == nil || v == nil {
		return ""
	}
	w := &why{act: v.act, info: e.ast.SourceInfo(), shadow: map[string]int{}}
	root := e.ast.Expr()
	if evalErr != nil {
		if p, ok := w.firstMissing(root); ok {
			return p.notSet()
		}
		return ""
	}
	msg, _ := w.whyFalse(root)
	return msg
}

// Read says what an expression read, for a message about an evaluation Why
// does not explain: "data.port is \"8080\"", each field it reads (its
// longest paths, in reading order, at most 5) with its value, or "is not
// set"; "" when it reads no field. Paths of self are named without
// "self.", as in Why.
func (e *Expression) Read(v *Vars) string {
	if e.ast == nil || v == nil {
		return ""
	}
	w := &why{act: v.act, info: e.ast.SourceInfo(), shadow: map[string]int{}}
	var seen []string
	var parts []string
	const most = 5
	w.paths(e.ast.Expr(), func(p fieldPath) {
		name := p.String()
		if slices.Contains(seen, name) {
			return
		}
		seen = append(seen, name)
		switch val, st := w.lookup(p); st {
		case found:
			parts = append(parts, w.hidden(p).is(val))
		case missing:
			parts = append(parts, name+" is not set")
		}
	})
	if len(parts) > most {
		parts = append(parts[:most], fmt.Sprintf("and %d more", len(parts)-most))
	}
	return strings.Join(parts, ", ")
}

// paths calls f with each field path an expression reads, longest first
// along one chain (self.data.port, not self.data), in reading order; not
// the paths of comprehension variables.
func (w *why) paths(e celast.Expr, f func(fieldPath)) {
	if p, ok := w.pathOf(e); ok {
		if w.shadow[p.root] == 0 && len(p.segs) > 0 {
			f(p)
		}
		return
	}
	if p, ok := w.optionalPathOf(e); ok {
		if w.shadow[p.root] == 0 {
			f(p)
		}
		return
	}
	if e.Kind() == celast.ComprehensionKind {
		w.paths(e.AsComprehension().IterRange(), f)
		defer w.enter(e.AsComprehension())()
	}
	for _, n := range operands(e) {
		w.paths(n, f)
	}
}

// operands returns the expressions an expression is made of, in reading
// order; of a comprehension, those its variables are in scope in (see
// enter), not its range.
func operands(e celast.Expr) []celast.Expr {
	var next []celast.Expr
	switch e.Kind() {
	case celast.SelectKind:
		next = []celast.Expr{e.AsSelect().Operand()}
	case celast.CallKind:
		call := e.AsCall()
		if call.IsMemberFunction() {
			next = append(next, call.Target())
		}
		next = append(next, call.Args()...)
	case celast.ListKind:
		next = e.AsList().Elements()
	case celast.MapKind:
		for _, entry := range e.AsMap().Entries() {
			next = append(next, entry.AsMapEntry().Key(), entry.AsMapEntry().Value())
		}
	case celast.ComprehensionKind:
		comp := e.AsComprehension()
		next = []celast.Expr{comp.AccuInit(), comp.LoopCondition(), comp.LoopStep(), comp.Result()}
	}
	return next
}

// enter brings a comprehension's variables in scope, where they hide the
// variables of the same name; the function returned leaves it.
func (w *why) enter(comp celast.ComprehensionExpr) func() {
	vars := []string{comp.IterVar(), comp.IterVar2(), comp.AccuVar()}
	for _, v := range vars {
		w.shadow[v]++
	}
	return func() {
		for _, v := range vars {
			w.shadow[v]--
		}
	}
}

// why explains one evaluation of an expression.
type why struct {
	act  interpreter.Activation
	info *celast.SourceInfo
	// shadow counts the comprehension variables in scope, which hide the
	// variables of the same name.
	shadow map[string]int
}

// fieldPath is a chain of selections from a variable: field names and map
// keys (strings), list indexes (int64).
type fieldPath struct {
	root string
	segs []any
	// defaulted is set on the path of an optional read with a default
	// (x.?f.orValue(d)) that found the field not set: its value is d.
	defaulted bool
	// secret is set on a path into a Secret's data (see why.hidden).
	secret bool
}

func (p fieldPath) with(seg any) fieldPath {
	return fieldPath{root: p.root, segs: append(slices.Clone(p.segs), seg), secret: p.secret}
}

// withKey returns the path followed by an index or a key, given as a
// literal: a string key, or an integer index.
func (p fieldPath) withKey(lit celast.Expr) (fieldPath, bool) {
	switch k := lit.AsLiteral().(type) {
	case types.String:
		return p.with(string(k)), true
	case types.Int:
		return p.with(int64(k)), true
	case types.Uint:
		return p.with(int64(k)), true
	}
	return fieldPath{}, false
}

// is says what a comparison saw at the path: "status.ready is 1", or for a
// default, "status.ready is not set yet (0 by default)". The value of a
// Secret's data is not shown (see why.hidden).
func (p fieldPath) is(v any) string {
	shown := show(v)
	if p.secret {
		shown = hiddenValue
	}
	if !p.defaulted {
		return p.String() + " is " + shown
	}
	if p.root == varSelf || p.root == varChildren {
		return p.String() + " is not set yet (" + shown + " by default)"
	}
	return p.String() + " is not set (" + shown + " by default)"
}

// hiddenValue stands for a value read from a Secret's data: the parent's
// status, where messages go, is read by many who may not read Secrets.
const hiddenValue = "(a Secret's data, not shown)"

// hidden marks a path that reads a Secret's data or stringData: of self,
// of a child or an input (any of its objects, for a list), or of the
// parent.
func (w *why) hidden(p fieldPath) fieldPath {
	obj, ok := w.act.ResolveName(p.root)
	if !ok {
		return p
	}
	segs := p.segs
	if p.root == varChildren || p.root == varInputs {
		if len(segs) == 0 {
			return p
		}
		m, _ := obj.(map[string]any)
		obj, segs = m[fmt.Sprint(segs[0])], segs[1:]
		if l, isList := obj.([]any); isList {
			if len(segs) > 0 {
				if i, isIndex := segs[0].(int64); isIndex && i >= 0 && i < int64(len(l)) {
					obj, segs = l[i], segs[1:]
				}
			}
			if l, isList := obj.([]any); isList && len(l) > 0 {
				obj = l[0] // the objects of one child or input are of one kind
			}
		}
	}
	m, _ := obj.(map[string]any)
	if m["apiVersion"] == "v1" && m["kind"] == "Secret" && len(segs) > 0 && (segs[0] == "data" || segs[0] == "stringData") {
		p.secret = true
	}
	return p
}

// source names the path as the other side of a comparison: "(parent.spec.replicas)",
// or for a default, "(the default of parent.spec.size, which is not set)".
func (p fieldPath) source() string {
	if p.defaulted {
		return "(the default of " + p.String() + ", which is not set)"
	}
	return "(" + p.String() + ")"
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// String names the path as the expression spells it, without "self.".
func (p fieldPath) String() string {
	var b strings.Builder
	if p.root != varSelf {
		b.WriteString(p.root)
	}
	for _, s := range p.segs {
		switch s := s.(type) {
		case int64:
			fmt.Fprintf(&b, "[%d]", s)
		case string:
			if !identifier.MatchString(s) {
				fmt.Fprintf(&b, "[%q]", s)
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		}
	}
	if b.Len() == 0 {
		return p.root
	}
	return b.String()
}

// notSet says that the path's field is not set: the child's own fields
// and those of other children are waited for, as they are observed state.
func (p fieldPath) notSet() string {
	if p.root == varSelf || p.root == varChildren {
		return "waiting for " + p.String() + " (not set yet)"
	}
	return p.String() + " is not set"
}

// presence is what a lookup found.
type presence int

const (
	unknown presence = iota // not a variable, or not data Why can walk
	found
	missing
)

// lookup returns the value at a path.
func (w *why) lookup(p fieldPath) (any, presence) {
	v, st, _ := w.walk(p)
	return v, st
}

// unset returns the segment of p, a path lookup finds missing, that is
// not set: its first field or index that is not there, or the one after a
// null (whose read is what fails). Nil when p is not missing, or when only
// the value at its end is null.
func (w *why) unset(p fieldPath) any {
	_, _, at := w.walk(p)
	return at
}

// walk is lookup, and when p is missing, the segment that is not set (see
// unset).
func (w *why) walk(p fieldPath) (any, presence, any) {
	if w.shadow[p.root] > 0 {
		return nil, unknown, nil
	}
	v, ok := w.act.ResolveName(p.root)
	if !ok {
		return nil, unknown, nil
	}
	for i, s := range p.segs {
		switch s := s.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil, unknown, nil
			}
			val, present := m[s]
			if v = val; v == nil {
				if present && i+1 < len(p.segs) {
					// A null: CEL fails reading what follows it.
					return nil, missing, p.segs[i+1]
				}
				return nil, missing, s
			}
		case int64:
			l, ok := v.([]any)
			if !ok || s < 0 {
				return nil, unknown, nil // a negative index is never set
			}
			if s >= int64(len(l)) {
				return nil, missing, s
			}
			v = l[s]
		}
	}
	if v == nil {
		return nil, missing, nil
	}
	if _, ok := v.(ref.Val); ok {
		return nil, unknown, nil
	}
	return v, found, nil
}

// pathOf returns the path an expression selects: a variable followed by
// field selections and indexes with literal keys.
func (w *why) pathOf(e celast.Expr) (fieldPath, bool) {
	switch e.Kind() {
	case celast.IdentKind:
		return fieldPath{root: e.AsIdent()}, true
	case celast.SelectKind:
		sel := e.AsSelect()
		if sel.IsTestOnly() {
			return fieldPath{}, false
		}
		p, ok := w.pathOf(sel.Operand())
		if !ok {
			return fieldPath{}, false
		}
		return p.with(sel.FieldName()), true
	case celast.CallKind:
		call := e.AsCall()
		args := call.Args()
		if call.FunctionName() != operators.Index || len(args) != 2 || args[1].Kind() != celast.LiteralKind {
			return fieldPath{}, false
		}
		p, ok := w.pathOf(args[0])
		if !ok {
			return fieldPath{}, false
		}
		return p.withKey(args[1])
	}
	return fieldPath{}, false
}

// optionalPathOf returns the path of an optional read, x.?f or x[?k] over
// a path, in any number of steps: the path with its fields as if read
// plainly.
func (w *why) optionalPathOf(e celast.Expr) (fieldPath, bool) {
	if e.Kind() != celast.CallKind {
		return fieldPath{}, false
	}
	call := e.AsCall()
	args := call.Args()
	if fn := call.FunctionName(); (fn != operators.OptSelect && fn != operators.OptIndex) || len(args) != 2 || args[1].Kind() != celast.LiteralKind {
		return fieldPath{}, false
	}
	p, ok := w.optionalPathOf(args[0])
	if !ok {
		if p, ok = w.pathOf(args[0]); !ok {
			return fieldPath{}, false
		}
	}
	return p.withKey(args[1])
}

// withDefault reads an optional path with a default,
// self.status.?ready.orValue(false): the field's value when it is set,
// else the default's, with the path marked defaulted. ok is false for
// another shape, or a default that is not a literal or a set field.
func (w *why) withDefault(e celast.Expr) (v any, p fieldPath, ok bool) {
	if e.Kind() != celast.CallKind {
		return nil, fieldPath{}, false
	}
	call := e.AsCall()
	if call.FunctionName() != "orValue" || !call.IsMemberFunction() || len(call.Args()) != 1 {
		return nil, fieldPath{}, false
	}
	if p, ok = w.optionalPathOf(call.Target()); !ok {
		return nil, fieldPath{}, false
	}
	switch v, st := w.lookup(p); st {
	case found:
		return v, p, true
	case missing:
		d, dp, dok := w.operand(call.Args()[0])
		if !dok || dp != nil && dp.defaulted {
			return nil, fieldPath{}, false
		}
		p.defaulted = true
		return d, p, true
	}
	return nil, fieldPath{}, false
}

// tested returns the path of a has() test.
func (w *why) tested(e celast.Expr) (fieldPath, bool) {
	if e.Kind() != celast.SelectKind || !e.AsSelect().IsTestOnly() {
		return fieldPath{}, false
	}
	p, ok := w.pathOf(e.AsSelect().Operand())
	if !ok {
		return fieldPath{}, false
	}
	return p.with(e.AsSelect().FieldName()), true
}

// firstMissing returns the first path, in reading order, that the
// expression reads and that is not set.
func (w *why) firstMissing(e celast.Expr) (fieldPath, bool) {
	var first fieldPath
	found := w.eachMissing(e, func(p fieldPath, _ celast.Expr) bool {
		first = p
		return true
	})
	return first, found
}

// eachMissing calls yield, in reading order, with each path the expression
// reads that is not set and the node that reads it, until yield returns
// true; it reports whether one did.
func (w *why) eachMissing(e celast.Expr, yield func(fieldPath, celast.Expr) bool) bool {
	if p, ok := w.tested(e); ok {
		// has(x.f) fails only when x is not set.
		if _, st := w.lookup(fieldPath{root: p.root, segs: p.segs[:len(p.segs)-1]}); st == missing {
			return yield(p, e)
		}
		return false
	}
	if p, ok := w.pathOf(e); ok {
		if _, st := w.lookup(p); st == missing {
			return yield(p, e)
		}
		return false
	}
	if e.Kind() == celast.ComprehensionKind {
		if w.eachMissing(e.AsComprehension().IterRange(), yield) {
			return true
		}
		defer w.enter(e.AsComprehension())()
	}
	for _, n := range operands(e) {
		if w.eachMissing(n, yield) {
			return true
		}
	}
	return false
}

// comparisons are the operators Why explains, as written.
var comparisons = map[string]string{
	operators.Equals: "==", operators.NotEquals: "!=",
	operators.Less: "<", operators.LessEquals: "<=",
	operators.Greater: ">", operators.GreaterEquals: ">=",
}

// flipped is the operator with its operands swapped.
var flipped = map[string]string{
	operators.Equals: operators.Equals, operators.NotEquals: operators.NotEquals,
	operators.Less: operators.Greater, operators.LessEquals: operators.GreaterEquals,
	operators.Greater: operators.Less, operators.GreaterEquals: operators.LessEquals,
}

// whyFalse explains an expression that evaluated to false.
func (w *why) whyFalse(e celast.Expr) (string, bool) {
	if p, ok := w.tested(e); ok {
		if _, st := w.lookup(p); st == missing {
			return p.notSet(), true
		}
		return "", false
	}
	if p, ok := w.pathOf(e); ok {
		if v, st := w.lookup(p); st == found && v == false {
			return p.String() + " is false, wants true", true
		}
		return "", false
	}
	if v, p, ok := w.withDefault(e); ok {
		if v == false {
			return w.hidden(p).is(v) + ", wants true", true
		}
		return "", false
	}
	if e.Kind() == celast.ComprehensionKind {
		return w.whyNone(e.AsComprehension())
	}
	if e.Kind() != celast.CallKind {
		return "", false
	}
	call := e.AsCall()
	args := call.Args()
	switch fn := call.FunctionName(); {
	case fn == operators.LogicalAnd:
		// The operand that is false: the first one known to be, or the
		// only one not known when the others hold.
		var falseArg, unknownArg celast.Expr
		unknowns := 0
		for _, a := range args {
			holds, known := w.holds(a)
			if known && !holds {
				falseArg = a
				break
			}
			if !known {
				unknowns++
				unknownArg = a
			}
		}
		if falseArg == nil && unknowns == 1 {
			falseArg = unknownArg
		}
		if falseArg == nil {
			return "", false
		}
		if msg, ok := w.whyFalse(falseArg); ok {
			return msg, true
		}
		if src, err := cel.ExprToString(falseArg, w.info); err == nil {
			return "${" + src + "} is false", true
		}
	case fn == operators.LogicalNot && len(args) == 1:
		if p, ok := w.tested(args[0]); ok {
			if _, st := w.lookup(p); st == found {
				return p.String() + " is set, wants it not set", true
			}
			return "", false
		}
		if p, ok := w.pathOf(args[0]); ok {
			if v, st := w.lookup(p); st == found && v == true {
				return p.String() + " is true, wants false", true
			}
		}
	case comparisons[fn] != "" && len(args) == 2:
		return w.comparison(fn, args[0], args[1])
	}
	return "", false
}

// whyNone explains an exists() or all() over a list field that is false:
// "status.conditions has no entry where ${c.type == "Available" &&
// c.status == "True"}; its entries: {type: "Available", status: "False"}",
// each entry shown by the fields the condition reads of it.
func (w *why) whyNone(c celast.ComprehensionExpr) (string, bool) {
	p, ok := w.pathOf(c.IterRange())
	if !ok || c.HasIterVar2() {
		return "", false
	}
	v, st := w.lookup(p)
	list, isList := v.([]any)
	if st != found || !isList || w.hidden(p).secret {
		return "", false
	}
	// exists(x, P): the step is accu || P; all(x, P): accu && P.
	step := c.LoopStep()
	if step.Kind() != celast.CallKind {
		return "", false
	}
	call := step.AsCall()
	args := call.Args()
	if len(args) != 2 || args[0].Kind() != celast.IdentKind || args[0].AsIdent() != c.AccuVar() {
		return "", false
	}
	var verb string
	switch call.FunctionName() {
	case operators.LogicalOr:
		verb = "has no entry where"
	case operators.LogicalAnd:
		verb = "has an entry where not"
	default:
		return "", false
	}
	src, err := cel.ExprToString(args[1], w.info)
	if err != nil {
		return "", false
	}
	if len(list) == 0 {
		return fmt.Sprintf("%s %s ${%s}: it has no entries", p, verb, src), true
	}
	fields := readOf(args[1], c.IterVar())
	const most = 5
	shown := make([]string, 0, most)
	for _, item := range list[:min(len(list), most)] {
		m, isMap := item.(map[string]any)
		if !isMap || len(fields) == 0 {
			shown = append(shown, show(item))
			continue
		}
		parts := make([]string, 0, len(fields))
		for _, f := range fields {
			if fv, set := m[f]; set {
				parts = append(parts, f+": "+show(fv))
			}
		}
		shown = append(shown, "{"+strings.Join(parts, ", ")+"}")
	}
	if len(list) > most {
		shown = append(shown, fmt.Sprintf("and %d more", len(list)-most))
	}
	return fmt.Sprintf("%s %s ${%s}; its entries: %s", p, verb, src, strings.Join(shown, ", ")), true
}

// readOf returns the fields an expression selects of a variable (c.type,
// c.status for c), in reading order, each once.
func readOf(e celast.Expr, name string) []string {
	var out []string
	var walk func(celast.Expr)
	walk = func(e celast.Expr) {
		switch e.Kind() {
		case celast.SelectKind:
			sel := e.AsSelect()
			if op := sel.Operand(); op.Kind() == celast.IdentKind && op.AsIdent() == name {
				if !slices.Contains(out, sel.FieldName()) {
					out = append(out, sel.FieldName())
				}
				return
			}
			walk(sel.Operand())
		case celast.CallKind:
			call := e.AsCall()
			if call.IsMemberFunction() {
				walk(call.Target())
			}
			for _, a := range call.Args() {
				walk(a)
			}
		case celast.ListKind:
			for _, el := range e.AsList().Elements() {
				walk(el)
			}
		}
	}
	walk(e)
	return out
}

// operand returns the value of a comparison's operand: a field path (then
// returned too) or a literal.
func (w *why) operand(e celast.Expr) (v any, path *fieldPath, ok bool) {
	if p, isPath := w.pathOf(e); isPath {
		v, st := w.lookup(p)
		return v, &p, st == found
	}
	if v, p, isDefault := w.withDefault(e); isDefault {
		return v, &p, true
	}
	if e.Kind() != celast.LiteralKind {
		return nil, nil, false
	}
	lit := e.AsLiteral()
	if lit.Type() == types.NullType {
		return nil, nil, true
	}
	switch lit.(type) {
	case types.Int, types.Uint, types.Double, types.String, types.Bool:
		return lit.Value(), nil, true
	}
	return nil, nil, false
}

// comparison explains a false comparison, naming the field first: the
// child's own, if either is.
func (w *why) comparison(fn string, l, r celast.Expr) (string, bool) {
	lv, lp, lok := w.operand(l)
	rv, rp, rok := w.operand(r)
	if !lok || !rok {
		return "", false
	}
	if lp == nil || (rp != nil && rp.root == varSelf && lp.root != varSelf) {
		lv, lp, rv, rp, fn = rv, rp, lv, lp, flipped[fn]
	}
	if lp == nil {
		return "", false
	}
	if holds, known := compare(fn, lv, rv); !known || holds {
		return "", false // not what CEL found: say nothing rather than something wrong
	}
	right := show(rv)
	if rp != nil && w.hidden(*rp).secret {
		right = hiddenValue
	}
	msg := fmt.Sprintf("%s, wants %s %s", w.hidden(*lp).is(lv), comparisons[fn], right)
	if rp != nil {
		msg += " " + rp.source()
	}
	return msg, true
}

// holds evaluates the shapes whyFalse explains, to find the operand of a
// conjunction that is false. known is false for anything else.
func (w *why) holds(e celast.Expr) (holds, known bool) {
	if p, ok := w.tested(e); ok {
		switch _, st := w.lookup(p); st {
		case found:
			return true, true
		case missing:
			return false, true
		}
		return false, false
	}
	if p, ok := w.pathOf(e); ok {
		v, st := w.lookup(p)
		b, isBool := v.(bool)
		return b, st == found && isBool
	}
	if v, _, ok := w.withDefault(e); ok {
		b, isBool := v.(bool)
		return b, isBool
	}
	switch e.Kind() {
	case celast.LiteralKind:
		b, ok := e.AsLiteral().Value().(bool)
		return b, ok
	case celast.CallKind:
	default:
		return false, false
	}
	call := e.AsCall()
	args := call.Args()
	switch fn := call.FunctionName(); {
	case fn == operators.LogicalNot && len(args) == 1:
		h, known := w.holds(args[0])
		return !h, known
	case fn == operators.LogicalAnd || fn == operators.LogicalOr:
		all := true
		for _, a := range args {
			h, known := w.holds(a)
			if !known {
				all = false
				continue
			}
			if h == (fn == operators.LogicalOr) {
				return h, true // decided whatever the others are
			}
		}
		return fn == operators.LogicalAnd, all
	case comparisons[fn] != "" && len(args) == 2:
		lv, _, lok := w.operand(args[0])
		rv, _, rok := w.operand(args[1])
		if !lok || !rok {
			return false, false
		}
		return compare(fn, lv, rv)
	}
	return false, false
}

// compare applies a comparison operator to two JSON values, as CEL does
// for numbers, strings, bools and null; known is false for other values.
func compare(fn string, a, b any) (holds, known bool) {
	if x, ok := number(a); ok {
		y, ok := number(b)
		if !ok {
			return fn == operators.NotEquals, fn == operators.Equals || fn == operators.NotEquals
		}
		return order(fn, cmpOrdered(x, y))
	}
	if x, ok := a.(string); ok {
		y, ok := b.(string)
		if !ok {
			return fn == operators.NotEquals, fn == operators.Equals || fn == operators.NotEquals
		}
		return order(fn, strings.Compare(x, y))
	}
	switch fn {
	case operators.Equals, operators.NotEquals:
		switch a.(type) {
		case bool, nil:
			return reflect.DeepEqual(a, b) == (fn == operators.Equals), true
		}
	}
	return false, false
}

func cmpOrdered(x, y float64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func order(fn string, c int) (bool, bool) {
	switch fn {
	case operators.Equals:
		return c == 0, true
	case operators.NotEquals:
		return c != 0, true
	case operators.Less:
		return c < 0, true
	case operators.LessEquals:
		return c <= 0, true
	case operators.Greater:
		return c > 0, true
	case operators.GreaterEquals:
		return c >= 0, true
	}
	return false, false
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// show writes a value as it would appear in JSON, cut short when long.
func show(v any) string {
	const limit = 60
	switch v := v.(type) {
	case string:
		if len(v) > limit {
			// As JSON values are: a message stays short whatever the
			// field holds (a whole configuration file, say).
			return strconv.Quote(strings.ToValidUTF8(v[:limit], "")) + "…"
		}
		return strconv.Quote(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > limit {
		return string(b[:limit]) + "…"
	}
	return string(b)
}
