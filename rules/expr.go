package rules

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apimachinery/pkg/util/version"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// celVersion pins the Kubernetes CEL libraries and language settings that
// expressions see, so a dependency update cannot change the language under
// existing rules unnoticed.
var celVersion = version.MajorMinor(1, 36)

// The variables expressions can use.
const (
	varParent   = "parent"
	varChildren = "children"
	varSelf     = "self"
	varInputs   = "inputs"
)

// reservedNames may not be forEach names.
var reservedNames = []string{varParent, varChildren, varSelf, varInputs}

// compiler holds the CEL environments that expressions compile in. They
// differ by the parent's declared type (map(string, dyn) when its schema is
// not known), whether self is declared (readyWhen), and the forEach names a
// child binds; each is built once.
type compiler struct {
	opts     Options
	base     *environment.EnvSet
	envs     map[envKey]*cel.Env
	maxDepth int
	// object is set while it compiles a Rule object (see parse).
	object bool
}

// envKey identifies a CEL environment of a compiler.
type envKey struct {
	parent *apiservercel.DeclType // nil: map(string, dyn)
	self   bool
	each   string // the forEach names, joined by ","
}

func newCompiler(opts Options) (*compiler, error) {
	random := opts.RandomString
	if random == nil {
		random = cryptoRandomString
	}
	base, err := environment.MustBaseEnvSet(celVersion).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        []cel.EnvOption{randomStringFunction(random)},
	})
	if err != nil {
		return nil, fmt.Errorf("build the CEL environment: %w", err)
	}
	c := &compiler{opts: opts, base: base, envs: map[envKey]*cel.Env{}, maxDepth: maxValueDepth}
	if _, err := c.env(envKey{}); err != nil {
		return nil, err
	}
	return c, nil
}

// env returns the environment for a key, building it the first time.
func (c *compiler) env(k envKey) (*cel.Env, error) {
	if env, ok := c.envs[k]; ok {
		return env, nil
	}
	object := cel.MapType(cel.StringType, cel.DynType)
	parent := object
	opts := environment.VersionedOptions{IntroducedVersion: version.MajorMinor(1, 0)}
	if k.parent != nil {
		parent = k.parent.CelType()
		opts.DeclTypes = []*apiservercel.DeclType{k.parent}
	}
	opts.EnvOptions = []cel.EnvOption{
		cel.Variable(varParent, parent),
		// A child is an object, and a forEach child a list of them.
		cel.Variable(varChildren, cel.MapType(cel.StringType, cel.DynType)),
		// A named input is an object, a selector input a list of them.
		cel.Variable(varInputs, cel.MapType(cel.StringType, cel.DynType)),
	}
	if k.self {
		opts.EnvOptions = append(opts.EnvOptions, cel.Variable(varSelf, object))
	}
	if k.each != "" {
		for _, name := range strings.Split(k.each, ",") {
			opts.EnvOptions = append(opts.EnvOptions, cel.Variable(name, cel.DynType))
		}
	}
	set, err := c.base.Extend(opts)
	if err != nil {
		return nil, fmt.Errorf("build the CEL environment: %w", err)
	}
	env := set.NewExpressionsEnv()
	c.envs[k] = env
	return env, nil
}

// Expression is one compiled ${...} expression.
type Expression struct {
	// Source is the CEL text between ${ and }.
	Source string
	// Pos is where the expression's "${" is in the rules file (for a
	// multi-line or escaped YAML string, where the string starts).
	Pos Position
	// Rule, Child and Field say where the expression is used, as in Error.
	Rule, Child, Field string
	// References are the ids of the children the expression reads through
	// children.<id>, sorted and without repeats.
	References []string
	// Inputs are the ids of the inputs the expression reads through
	// inputs.<id>, sorted and without repeats.
	Inputs []string
	// Random is true when the expression calls randomString: its value
	// differs from one evaluation to the next.
	Random bool

	idents     map[string]bool // the variables it reads
	outputType *cel.Type       // as checked
	ast        *celast.AST     // as checked, for Why
	program    cel.Program
	costLimit  uint64
	// env and checked build tracked, a program that records every node's
	// value, on the first failure that needs it (failedAt).
	env       *cel.Env
	checked   *cel.Ast
	trackOnce sync.Once
	tracked   cel.Program
}

// String returns the expression as written: ${Source}.
func (e *Expression) String() string { return "${" + e.Source + "}" }

// Reads tells whether the expression reads the variable name (a forEach
// name, parent, children, inputs or self).
func (e *Expression) Reads(name string) bool { return e.idents[name] }

// errorf builds an Error about this expression.
func (e *Expression) error(err error) *Error {
	return &Error{Pos: e.Pos, Rule: e.Rule, Child: e.Child, Field: e.Field, Expression: e.Source, Err: err}
}

// exprKind says where an expression is used, which decides its environment
// and the type it must have.
type exprKind int

const (
	valueExpr     exprKind = iota // a template or status value: any type
	conditionExpr                 // includeWhen: a bool
	readyExpr                     // readyWhen: a bool, with self
	forEachExpr                   // forEach: a list or a map
	inputExpr                     // an input's name or namespace: of parent only
)

// exprEnv is what an expression may use besides its kind: the parent's
// type, the forEach names, and whether randomString is allowed.
type exprEnv struct {
	parent *apiservercel.DeclType
	each   []string
	random bool
	schema string // names the parent's schema in errors
}

// compile compiles one expression. exact tells whether pos is the exact
// place of the "${", so that CEL's own positions can be added to it. All
// problems are appended to errs; the result is nil when there were any.
func (c *compiler) compile(src string, pos Position, exact bool, w where, kind exprKind, x exprEnv, errs *ErrorList) *Expression {
	e := &Expression{Source: src, Pos: pos, Rule: w.rule, Child: w.child, Field: w.field, costLimit: c.opts.CostLimit}
	env, err := c.env(envKey{parent: x.parent, self: kind == readyExpr, each: strings.Join(x.each, ",")})
	if err != nil {
		*errs = append(*errs, e.error(err))
		return nil
	}
	parsed, iss := env.Parse(src)
	var ast *cel.Ast
	if iss.Err() == nil {
		ast, iss = env.Check(parsed)
	}
	if iss.Err() != nil {
		fields := map[string][]string{}
		if x.parent != nil && parsed != nil {
			fields = undefinedFields(parsed, x.parent, x.schema)
		}
		for _, ce := range iss.Errors() {
			ep := pos
			if exact && ce.Location.Line() == 1 {
				ep.Column += len("${") + ce.Location.Column()
			}
			msg := ce.Message
			if m := undefinedField.FindStringSubmatch(msg); m != nil && len(fields[m[1]]) > 0 {
				msg, fields[m[1]] = fields[m[1]][0], fields[m[1]][1:]
			}
			err := e.error(errors.New(msg))
			err.Pos = ep
			*errs = append(*errs, err)
		}
		return nil
	}
	switch t := ast.OutputType(); {
	case kind == conditionExpr || kind == readyExpr:
		if t.Kind() != types.BoolKind && t.Kind() != types.DynKind {
			*errs = append(*errs, e.error(fmt.Errorf("must be a bool expression, but its type is %s", t)))
			return nil
		}
	case kind == forEachExpr:
		optional := t.Kind() == types.OpaqueKind && t.TypeName() == "optional_type"
		if t.Kind() != types.ListKind && t.Kind() != types.MapKind && t.Kind() != types.DynKind && !optional {
			*errs = append(*errs, e.error(fmt.Errorf("must be a list or a map, but its type is %s", t)))
			return nil
		}
	}
	refs, err := literalReferences(ast, varChildren, "children must be followed by a child id, as in children.config or children[\"config\"]")
	if err != nil {
		*errs = append(*errs, e.error(err))
		return nil
	}
	inputs, err := literalReferences(ast, varInputs, "inputs must be followed by an input id, as in inputs.config or inputs[\"config\"]")
	if err != nil {
		*errs = append(*errs, e.error(err))
		return nil
	}
	if err := volatileRead(ast); err != nil {
		*errs = append(*errs, e.error(err))
		return nil
	}
	e.References, e.Inputs, e.idents, e.outputType = refs, inputs, identifiers(ast), ast.OutputType()
	e.ast = ast.NativeRep()
	e.Random = callsRandomString(ast)
	if err := checkRandomArgs(ast); err != nil {
		*errs = append(*errs, e.error(err))
		return nil
	}
	switch {
	case kind == inputExpr && (len(refs) > 0 || len(inputs) > 0):
		*errs = append(*errs, e.error(errors.New("an input's name and namespace may read only parent")))
		return nil
	case e.Random && !x.random:
		*errs = append(*errs, e.error(errors.New("randomString is allowed only in the template of a child with updatePolicy: CreateOnly: elsewhere its value would change at every reconcile, and kgen would write forever")))
		return nil
	}
	prg, err := env.Program(ast, cel.CostLimit(c.opts.CostLimit))
	if err != nil {
		*errs = append(*errs, e.error(err))
		return nil
	}
	e.program, e.env, e.checked = prg, env, ast
	return e
}

// identifiers returns the variables an expression reads.
func identifiers(ast *cel.Ast) map[string]bool {
	out := map[string]bool{}
	nav := celast.NavigateAST(ast.NativeRep())
	for _, ident := range celast.MatchDescendants(nav, celast.KindMatcher(celast.IdentKind)) {
		out[ident.AsIdent()] = true
	}
	return out
}

// literalReferences returns the ids an expression reads from the variable
// name (children or inputs). The variable may only be used as name.<id>,
// name["<id>"] or their optional forms (name.?<id>, name[?"<id>"]), so that
// what every expression reads is known when the rules load.
func literalReferences(ast *cel.Ast, name, usage string) ([]string, error) {
	nav := celast.NavigateAST(ast.NativeRep())
	seen := map[string]bool{}
	for _, ident := range celast.MatchDescendants(nav, celast.KindMatcher(celast.IdentKind)) {
		if ident.AsIdent() != name {
			continue
		}
		id, ok := childIDOf(ident)
		if !ok {
			return nil, errors.New(usage)
		}
		seen[id] = true
	}
	if len(seen) == 0 {
		return nil, nil
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// childIDOf returns the id selected from the children identifier.
func childIDOf(ident celast.NavigableExpr) (string, bool) {
	parent, ok := ident.Parent()
	if !ok {
		return "", false
	}
	switch parent.Kind() {
	case celast.SelectKind:
		return parent.AsSelect().FieldName(), true
	case celast.CallKind:
		call := parent.AsCall()
		switch call.FunctionName() {
		case operators.Index, operators.OptIndex, operators.OptSelect:
		default:
			return "", false
		}
		args := call.Args()
		if len(args) != 2 || args[0].ID() != ident.ID() || args[1].Kind() != celast.LiteralKind {
			return "", false
		}
		s, ok := args[1].AsLiteral().(types.String)
		return string(s), ok
	}
	return "", false
}

// volatileFields are the metadata fields whose value changes with every
// write of an object.
var volatileFields = []string{"resourceVersion", "managedFields"}

// errLoop ends the message of an expression that reads a volatile field.
const errLoop = "which changes with every write, so kgen would write in a loop"

// volatileRead rejects an expression that reads a value changing with every
// write of an object: metadata.resourceVersion or metadata.managedFields of
// parent, self or children.<id>, selected in any way (a field, an index with
// a literal key, their optional forms), and also the whole object or its
// whole metadata used as a value, or indexed with a computed key, since
// those hold the volatile fields too. A status write changes the parent's
// resourceVersion, and an apply the child's, so a rule that read them would
// make kgen write forever (contract section 6). Presence tests (has()),
// size() and selections of other fields are fine. The objects of a forEach
// child (children.<id>[i], or the variables of a comprehension over
// children.<id>) are checked as objects too.
func volatileRead(ast *cel.Ast) error {
	nav := celast.NavigateAST(ast.NativeRep())
	for _, ident := range celast.MatchDescendants(nav, celast.KindMatcher(celast.IdentKind)) {
		root := ident.AsIdent()
		if root != varParent && root != varSelf && root != varChildren {
			continue
		}
		u := accessPath(ident)
		if root == varChildren {
			if len(u.path) == 0 {
				continue // not a child id: literalReferences reports it
			}
			root += "." + u.path[0]
			u.path = u.path[1:]
		}
		if err := checkObjectUse(root, u); err != nil {
			return err
		}
	}
	return nil
}

// checkObjectUse checks one use of an object (root) for reads of what
// changes with every write.
func checkObjectUse(root string, u use) error {
	path := u.path
	for len(path) > 0 && path[0] == elementSegment {
		root += "[i]"
		path = path[1:]
	}
	switch {
	case len(path) == 0 && (u.test || u.sized):
	case len(path) == 0 && u.iterated != nil:
		// A list of objects (a forEach child): each item is an object.
		comp := u.iterated.AsComprehension()
		for _, v := range []string{comp.IterVar(), comp.IterVar2()} {
			if v == "" {
				continue
			}
			for _, ident := range celast.MatchDescendants(u.iterated, func(e celast.NavigableExpr) bool {
				return e.Kind() == celast.IdentKind && e.AsIdent() == v && !within(e, comp.IterRange().ID())
			}) {
				iu, name := accessPath(ident), v
				if collected(ident, comp.AccuVar()) {
					name = root
					// filter: the result is a list of the same objects.
					iu = accessPath(u.iterated)
					iu.path = append([]string{elementSegment}, iu.path...)
					if len(iu.path) == 1 && (iu.sized || iu.iterated != nil) {
						iu.path = nil
					}
				}
				if err := checkObjectUse(name, iu); err != nil {
					return err
				}
			}
		}
	case len(path) == 0 && u.computed:
		return fmt.Errorf("reads %s with a computed key, which may be metadata, whose resourceVersion changes with every write, so kgen would write in a loop: select a field by name", root)
	case len(path) == 0:
		return fmt.Errorf("uses all of %s as a value, including metadata.resourceVersion, %s: select the fields you need, such as %s.metadata.name", root, errLoop, root)
	case path[0] != "metadata":
	case len(path) == 1 && (u.test || u.sized):
	case len(path) == 1 && u.computed:
		return fmt.Errorf("reads %s.metadata with a computed key, which may be resourceVersion, %s: select a field by name", root, errLoop)
	case len(path) == 1:
		return fmt.Errorf("uses all of %s.metadata as a value, including resourceVersion, %s: select the fields you need, such as %s.metadata.name", root, errLoop, root)
	case slices.Contains(volatileFields, path[1]) && !(len(path) == 2 && u.test):
		return fmt.Errorf("reads %s.metadata.%s, %s", root, path[1], errLoop)
	}
	return nil
}

// collected tells whether an identifier is appended whole to the
// accumulator of its comprehension, as filter does: accu + [ident].
func collected(ident celast.NavigableExpr, accu string) bool {
	list, ok := ident.Parent()
	if !ok || list.Kind() != celast.ListKind {
		return false
	}
	add, ok := list.Parent()
	if !ok || add.Kind() != celast.CallKind || add.AsCall().FunctionName() != operators.Add {
		return false
	}
	args := add.AsCall().Args()
	return len(args) == 2 && args[0].Kind() == celast.IdentKind && args[0].AsIdent() == accu
}

// within tells whether e is the expression id or inside it.
func within(e celast.NavigableExpr, id int64) bool {
	for {
		if e.ID() == id {
			return true
		}
		p, ok := e.Parent()
		if !ok {
			return false
		}
		e = p
	}
}

// elementSegment stands in a path for an item of a list, selected with a
// literal number.
const elementSegment = "[]"

// use is how an expression uses a variable: the path it selects from it,
// and what it does with the value there.
type use struct {
	// path are the field names selected one after the other: by select,
	// index with a literal string, or their optional forms; elementSegment
	// for an index with a literal number.
	path []string
	// test is true when the last selection is a has() test.
	test bool
	// computed is true when the value is indexed with a key that is not a
	// literal.
	computed bool
	// sized is true when the value is only given to size().
	sized bool
	// iterated is the comprehension (all, map, filter, ...) that iterates
	// over the value, or nil.
	iterated celast.NavigableExpr
}

// accessPath returns how an identifier is used.
func accessPath(ident celast.NavigableExpr) use {
	var u use
	cur := ident
	for {
		p, ok := cur.Parent()
		if !ok {
			return u
		}
		switch p.Kind() {
		case celast.SelectKind:
			sel := p.AsSelect()
			u.path = append(u.path, sel.FieldName())
			if sel.IsTestOnly() {
				u.test = true
				return u
			}
			cur = p
			continue
		case celast.ComprehensionKind:
			if p.AsComprehension().IterRange().ID() == cur.ID() {
				u.iterated = p
			}
			return u
		case celast.CallKind:
			call := p.AsCall()
			args := call.Args()
			switch call.FunctionName() {
			case overloads.Size:
				u.sized = (call.IsMemberFunction() && call.Target().ID() == cur.ID()) || (len(args) == 1 && args[0].ID() == cur.ID())
				return u
			case operators.Index, operators.OptIndex, operators.OptSelect:
			default:
				return u
			}
			if len(args) != 2 || args[0].ID() != cur.ID() {
				return u
			}
			if args[1].Kind() != celast.LiteralKind {
				u.computed = true
				return u
			}
			switch key := args[1].AsLiteral().(type) {
			case types.String:
				u.path = append(u.path, string(key))
			case types.Int, types.Uint:
				u.path = append(u.path, elementSegment)
			default:
				u.computed = true
				return u
			}
			cur = p
			continue
		}
		return u
	}
}

// Vars are the values of the variables an expression sees.
type Vars struct {
	act interpreter.Activation
}

// NewVars binds the variables: parent is the parent object, children the
// observed children by id (each an object as map[string]any, or for a
// forEach child a []any of them), and self the observed child whose
// readiness is being judged (nil outside readyWhen). inputs is bound to no
// input; see WithInputs. The maps are read, never modified; they must not
// change while in use.
func NewVars(parent map[string]any, children map[string]any, self map[string]any) *Vars {
	if children == nil {
		children = map[string]any{}
	}
	bindings := map[string]any{varParent: parent, varChildren: children, varInputs: map[string]any{}}
	if self != nil {
		bindings[varSelf] = self
	}
	return &Vars{act: activation(bindings)}
}

// WithInputs returns the variables with inputs bound: by input id, an
// object as map[string]any for a named input, a []any of objects for a
// selector input.
func (v *Vars) WithInputs(inputs map[string]any) *Vars {
	if inputs == nil {
		inputs = map[string]any{}
	}
	return &Vars{act: interpreter.NewHierarchicalActivation(v.act, activation(map[string]any{varInputs: inputs}))}
}

// With returns the variables with more bound: a forEach name to its
// element, or self.
func (v *Vars) With(bindings map[string]any) *Vars {
	if len(bindings) == 0 {
		return v
	}
	return &Vars{act: interpreter.NewHierarchicalActivation(v.act, activation(bindings))}
}

func activation(bindings map[string]any) interpreter.Activation {
	act, err := interpreter.NewActivation(bindings)
	if err != nil {
		// NewActivation fails only for nil bindings.
		panic(err)
	}
	return act
}

// eval runs the expression. The error, when there is one, is an *Error;
// its Err is a *NotSetError when a field of a child that the expression
// reads is not set.
func (e *Expression) eval(v *Vars) (ref.Val, error) {
	out, _, err := e.program.Eval(v.act)
	if err != nil {
		var cancelled interpreter.EvalCancelledError
		if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
			err = &limitError{what: "evaluation cost", limit: int(e.costLimit)}
		} else if e.ast != nil {
			w := &why{act: v.act, info: e.ast.SourceInfo(), shadow: map[string]int{}}
			// Only when a read of a child's path not set is what failed:
			// CEL's error is the one for the path's first segment that
			// is not set (missingKey), and the path's nodes hold it
			// (failedAt). Another error of an expression that also
			// reads a field not set, in a branch not taken, is the
			// rule's; so is one when a read of the parent, an input or
			// self that is not set failed too with the same error (a
			// review: "index out of bounds: 0" of both
			// parent.spec.hosts[0] and a child's list).
			var failed *evalState
			tracked := false
			var notSet *NotSetError
			w.eachMissing(e.ast.Expr(), func(p fieldPath, at celast.Expr) bool {
				child := p.root == varChildren && len(p.segs) >= 2
				if !missingKey(err, w.unset(p)) || child && notSet != nil {
					return false
				}
				if !tracked {
					failed, tracked = e.track(v), true
				}
				if !failed.failedAt(pathNodes(at)) {
					return false
				}
				if !child {
					notSet = nil // another read not set failed too, with the same error: the rule's
					return true
				}
				if id, ok := p.segs[0].(string); ok {
					notSet = &NotSetError{Child: id, Path: p.String(), Err: err}
				}
				return false
			})
			if notSet != nil {
				err = notSet
			}
		}
		return nil, e.error(err)
	}
	return out, nil
}

// evalState is the value of every node of an evaluation (track).
type evalState struct{ state interpreter.EvalState }

// track evaluates the expression again, recording the value of every
// node: only an evaluation that failed pays for it. Nil if it cannot.
func (e *Expression) track(v *Vars) *evalState {
	e.trackOnce.Do(func() {
		e.tracked, _ = e.env.Program(e.checked, cel.CostLimit(e.costLimit), cel.EvalOptions(cel.OptTrackState))
	})
	if e.tracked == nil {
		return nil
	}
	_, details, _ := e.tracked.Eval(v.act)
	if details == nil {
		return nil
	}
	return &evalState{details.State()}
}

// failedAt reports whether one of the nodes ids (those of a path's reads,
// as pathNodes returns them: which one holds it depends on how CEL planned
// the path) holds an error: whether the read of that path is what failed,
// and not the same error elsewhere while the read was in a branch not
// taken (a review: "index out of bounds: 0" of the parent's list in the
// branch taken, beside an empty list of a child's in the other).
func (s *evalState) failedAt(ids []int64) bool {
	if s == nil {
		return false
	}
	for _, id := range ids {
		if val, ok := s.state.Value(id); ok && types.IsError(val) {
			return true
		}
	}
	return false
}

// pathNodes returns the ids of the nodes of a path's reads: e, a selection
// or an index, and those of its operand, down to the variable.
func pathNodes(e celast.Expr) []int64 {
	var ids []int64
	for e != nil {
		ids = append(ids, e.ID())
		switch e.Kind() {
		case celast.SelectKind:
			e = e.AsSelect().Operand()
		case celast.CallKind:
			if args := e.AsCall().Args(); len(args) > 0 {
				e = args[0]
			} else {
				e = nil
			}
		default:
			e = nil
		}
	}
	return ids
}

// missingKey reports whether an evaluation error is CEL's for seg, a
// field or index of a path that is not set: "no such key: F" for a map's
// key, "index out of bounds: I" (or "index 'I' out of range") for a
// list's (a Service's status.loadBalancer.ingress[0] before it has one),
// "no such key: I" for an index of a list that is null.
func missingKey(err error, seg any) bool {
	switch seg := seg.(type) {
	case string:
		return strings.HasSuffix(err.Error(), "no such key: "+seg)
	case int64:
		msg := err.Error()
		return strings.HasSuffix(msg, fmt.Sprintf("index out of bounds: %d", seg)) || strings.Contains(msg, fmt.Sprintf("index '%d' out of range", seg)) ||
			strings.HasSuffix(msg, fmt.Sprintf("no such key: %d", seg)) // an index of a null
	}
	return false
}

// NotSetError is the cause of an evaluation that failed reading a field
// of a child that is not set: observed state another controller may fill
// in later (a Deployment's status.availableReplicas, a Service's
// status.loadBalancer). The child that reads it waits for it, as it waits
// for a child that does not exist yet.
type NotSetError struct {
	// Child is the id of the child whose field is not set.
	Child string
	// Path is the first field the expression reads that is not set, as it
	// spells it: "children.deployment.status.availableReplicas".
	Path string
	// Err is the evaluation's error.
	Err error
}

func (e *NotSetError) Error() string { return e.Err.Error() }

func (e *NotSetError) Unwrap() error { return e.Err }

// EvalBool evaluates a condition (includeWhen, readyWhen). The error, when
// there is one, is an *Error; a result that is not a bool is an error too.
func (e *Expression) EvalBool(v *Vars) (bool, error) {
	out, err := e.eval(v)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, e.error(fmt.Errorf("must evaluate to a bool, but got %s", out.Type().TypeName()))
	}
	return bool(b), nil
}
