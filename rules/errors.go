package rules

import (
	"errors"
	"fmt"
	"strings"
)

// Position is a place in a rules file. Line and Column are 1-based; zero means
// unknown. Columns count characters, as YAML parsers do.
type Position struct {
	File   string
	Line   int
	Column int
}

// String formats the position as file:line:col, leaving out what is unknown.
func (p Position) String() string {
	switch {
	case p.File == "":
		return ""
	case p.Line == 0:
		return p.File
	case p.Column == 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// Error is one problem with a rule, found when the rules load or when an
// expression is evaluated. Every field but Err is optional and is left out of
// the message when empty.
type Error struct {
	// Pos is where in the rules file the problem is.
	Pos Position
	// Rule is the rule's metadata.name.
	Rule string
	// Child is the child id, when the problem is inside a child.
	Child string
	// Field is the path of the field, relative to the child entry for
	// problems inside a child ("template.spec.replicas", "includeWhen[0]"),
	// and to the rule document otherwise ("spec.parent.kind").
	Field string
	// Expression is the source of the expression involved, without ${ }.
	Expression string
	// Err is the cause.
	Err error
}

// Error formats the error as
// "file:line:col: rule "r": child "c": field: ${expression}: cause".
func (e *Error) Error() string {
	var b strings.Builder
	add := func(s string) {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(s)
	}
	if p := e.Pos.String(); p != "" {
		add(p)
	}
	if e.Rule != "" {
		add(fmt.Sprintf("rule %q", e.Rule))
	}
	if e.Child != "" {
		add(fmt.Sprintf("child %q", e.Child))
	}
	if e.Field != "" {
		add(e.Field)
	}
	if e.Expression != "" {
		add("${" + e.Expression + "}")
	}
	if e.Err != nil {
		add(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// ErrorList is every problem found in a set of rules, in file order.
type ErrorList []*Error

// Error joins the errors' messages, one a line.
func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap returns the errors, so errors.Is and errors.As look into each.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// ErrLimitExceeded is matched, with errors.Is, by the errors of an evaluation
// that went over a limit of Options: its CEL cost, the size of its output, or
// the nesting depth of a value. Such an error comes from the parent's data (or
// a rule that cannot cope with it) and does not go away on retry.
var ErrLimitExceeded = errors.New("limit exceeded")

// limitError says which limit was exceeded; it matches ErrLimitExceeded.
type limitError struct {
	what  string
	limit int
}

func (e *limitError) Error() string {
	return fmt.Sprintf("%s exceeds the limit of %d", e.what, e.limit)
}

func (e *limitError) Is(target error) bool { return target == ErrLimitExceeded }
