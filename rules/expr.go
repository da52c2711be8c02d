package rules

import (
	"errors"
	"fmt"
	"slices"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apimachinery/pkg/util/version"
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
)

// compiler holds the CEL environments that expressions compile in: one
// without self (templates, includeWhen, status) and one with it (readyWhen).
type compiler struct {
	opts     Options
	env      *cel.Env
	selfEnv  *cel.Env
	maxDepth int
}

func newCompiler(opts Options) (*compiler, error) {
	object := cel.MapType(cel.StringType, cel.DynType)
	vars := []cel.EnvOption{
		cel.Variable(varParent, object),
		cel.Variable(varChildren, cel.MapType(cel.StringType, object)),
	}
	base := environment.MustBaseEnvSet(celVersion)
	set, err := base.Extend(environment.VersionedOptions{IntroducedVersion: version.MajorMinor(1, 0), EnvOptions: vars})
	if err != nil {
		return nil, fmt.Errorf("build the CEL environment: %w", err)
	}
	selfSet, err := set.Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        []cel.EnvOption{cel.Variable(varSelf, object)},
	})
	if err != nil {
		return nil, fmt.Errorf("build the CEL environment: %w", err)
	}
	return &compiler{opts: opts, env: set.NewExpressionsEnv(), selfEnv: selfSet.NewExpressionsEnv(), maxDepth: maxValueDepth}, nil
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

	program   cel.Program
	costLimit uint64
}

// String returns the expression as written: ${Source}.
func (e *Expression) String() string { return "${" + e.Source + "}" }

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
)

// compile compiles one expression. exact tells whether pos is the exact
// place of the "${", so that CEL's own positions can be added to it. All
// problems are appended to errs; the result is nil when there were any.
func (c *compiler) compile(src string, pos Position, exact bool, w where, kind exprKind, errs *ErrorList) *Expression {
	e := &Expression{Source: src, Pos: pos, Rule: w.rule, Child: w.child, Field: w.field, costLimit: c.opts.CostLimit}
	env := c.env
	if kind == readyExpr {
		env = c.selfEnv
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		for _, ce := range iss.Errors() {
			ep := pos
			if exact && ce.Location.Line() == 1 {
				ep.Column += len("${") + ce.Location.Column()
			}
			err := e.error(errors.New(ce.Message))
			err.Pos = ep
			*errs = append(*errs, err)
		}
		return nil
	}
	if kind != valueExpr {
		if t := ast.OutputType(); t.Kind() != types.BoolKind && t.Kind() != types.DynKind {
			*errs = append(*errs, e.error(fmt.Errorf("must be a bool expression, but its type is %s", t)))
			return nil
		}
	}
	refs, err := childReferences(ast)
	if err != nil {
		*errs = append(*errs, e.error(err))
		return nil
	}
	if err := volatileRead(ast); err != nil {
		*errs = append(*errs, e.error(err))
		return nil
	}
	e.References = refs
	prg, err := env.Program(ast, cel.CostLimit(c.opts.CostLimit))
	if err != nil {
		*errs = append(*errs, e.error(err))
		return nil
	}
	e.program = prg
	return e
}

// childReferences returns the child ids an expression reads. The children
// variable may only be used as children.<id>, children["<id>"] or their
// optional forms (children.?<id>, children[?"<id>"]), so that the
// dependencies of every expression are known when the rules load.
func childReferences(ast *cel.Ast) ([]string, error) {
	nav := celast.NavigateAST(ast.NativeRep())
	seen := map[string]bool{}
	for _, ident := range celast.MatchDescendants(nav, celast.KindMatcher(celast.IdentKind)) {
		if ident.AsIdent() != varChildren {
			continue
		}
		id, ok := childIDOf(ident)
		if !ok {
			return nil, errors.New(`children must be followed by a child id, as in children.config or children["config"]`)
		}
		seen[id] = true
	}
	if len(seen) == 0 {
		return nil, nil
	}
	refs := make([]string, 0, len(seen))
	for id := range seen {
		refs = append(refs, id)
	}
	slices.Sort(refs)
	return refs, nil
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
// make kgen write forever (contract section 6). Presence tests (has()) and
// selections of other fields are fine.
func volatileRead(ast *cel.Ast) error {
	nav := celast.NavigateAST(ast.NativeRep())
	for _, ident := range celast.MatchDescendants(nav, celast.KindMatcher(celast.IdentKind)) {
		root := ident.AsIdent()
		if root != varParent && root != varSelf && root != varChildren {
			continue
		}
		path, test, computed := accessPath(ident)
		if root == varChildren {
			if len(path) == 0 {
				continue // not a child id: childReferences reports it
			}
			root += "." + path[0]
			path = path[1:]
		}
		switch {
		case len(path) == 0 && test:
		case len(path) == 0 && computed:
			return fmt.Errorf("reads %s with a computed key, which may be metadata, whose resourceVersion changes with every write, so kgen would write in a loop: select a field by name", root)
		case len(path) == 0:
			return fmt.Errorf("uses all of %s as a value, including metadata.resourceVersion, %s: select the fields you need, such as %s.metadata.name", root, errLoop, root)
		case path[0] != "metadata":
		case len(path) == 1 && test:
		case len(path) == 1 && computed:
			return fmt.Errorf("reads %s.metadata with a computed key, which may be resourceVersion, %s: select a field by name", root, errLoop)
		case len(path) == 1:
			return fmt.Errorf("uses all of %s.metadata as a value, including resourceVersion, %s: select the fields you need, such as %s.metadata.name", root, errLoop, root)
		case slices.Contains(volatileFields, path[1]) && !(len(path) == 2 && test):
			return fmt.Errorf("reads %s.metadata.%s, %s", root, path[1], errLoop)
		}
	}
	return nil
}

// accessPath returns the field names selected, one after the other, from an
// identifier: by select, index with a literal string, or their optional
// forms. test is true when the last selection is a has() test, computed when
// the path ends at an index with a key that is not a literal string.
func accessPath(ident celast.NavigableExpr) (path []string, test, computed bool) {
	cur := ident
	for {
		p, ok := cur.Parent()
		if !ok {
			return path, false, false
		}
		switch p.Kind() {
		case celast.SelectKind:
			sel := p.AsSelect()
			path = append(path, sel.FieldName())
			if sel.IsTestOnly() {
				return path, true, false
			}
			cur = p
			continue
		case celast.CallKind:
			call := p.AsCall()
			switch call.FunctionName() {
			case operators.Index, operators.OptIndex, operators.OptSelect:
			default:
				return path, false, false
			}
			args := call.Args()
			if len(args) != 2 || args[0].ID() != cur.ID() {
				return path, false, false
			}
			key, isStr := types.String(""), false
			if args[1].Kind() == celast.LiteralKind {
				key, isStr = args[1].AsLiteral().(types.String)
			}
			if !isStr {
				return path, false, true
			}
			path = append(path, string(key))
			cur = p
			continue
		}
		return path, false, false
	}
}

// Vars are the values of the variables an expression sees.
type Vars struct {
	act interpreter.Activation
}

// NewVars binds the variables: parent is the parent object, children the
// observed children by id (each an object as map[string]any), and self the
// observed child whose readiness is being judged (nil outside readyWhen).
// The maps are read, never modified; they must not change while in use.
func NewVars(parent map[string]any, children map[string]any, self map[string]any) *Vars {
	if children == nil {
		children = map[string]any{}
	}
	bindings := map[string]any{varParent: parent, varChildren: children}
	if self != nil {
		bindings[varSelf] = self
	}
	act, err := interpreter.NewActivation(bindings)
	if err != nil {
		// NewActivation fails only for nil bindings.
		panic(err)
	}
	return &Vars{act: act}
}

// eval runs the expression. The error, when there is one, is an *Error.
func (e *Expression) eval(v *Vars) (ref.Val, error) {
	out, _, err := e.program.Eval(v.act)
	if err != nil {
		var cancelled interpreter.EvalCancelledError
		if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
			err = &limitError{what: "evaluation cost", limit: int(e.costLimit)}
		}
		return nil, e.error(err)
	}
	return out, nil
}

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
