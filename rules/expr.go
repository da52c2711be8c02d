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
