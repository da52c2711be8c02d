// Package rules loads kgen's rules files and compiles the expressions in
// them.
//
// A rules file holds YAML documents, each a Rule (apiVersion
// kgen.dev/v1alpha1), or a List of them: a parent kind and the templated
// children every parent of that kind gets. Load reads files and directories
// (their *.yaml and *.yml files). A Rule object read back from the cluster
// is a rules document: the metadata the API server sets and status are
// ignored. Decoding is otherwise strict: an unknown field, a duplicate key,
// a value of the wrong type is an error. Validation checks names and child ids,
// kinds, label selectors, the namespace policy, the children's
// dependencies, and that no two children that are always rendered (no
// includeWhen or forEach, and no dependency on a child with one) write
// their kind, metadata.namespace and metadata.name alike (they would
// render one object for every parent). Load reports every problem it finds, each an *Error with
// the file, line, column, rule, child id, field and expression.
//
// Strings in templates, includeWhen, readyWhen, forEach and status fields
// may hold ${...} CEL expressions, compiled and type-checked once, at load
// time, with cel-go and the Kubernetes CEL libraries of Kubernetes 1.36
// (strings, lists, sets, regex, URLs, IPs and CIDRs, quantities, semver,
// format, optionals, two-variable comprehensions), and kgen's randomString,
// allowed only in CreateOnly children. The variables are parent (the parent
// object), children (children.<id>: an observed child, or the list of a
// forEach child's objects), inputs (inputs.<id>: an object the rule reads,
// or a list of them), self (the child itself, in readyWhen only) and a
// forEach child's names. They are map(string, dyn), checked at run time,
// except parent when its schema is known (Options.Schemas, Options.Types for
// a built-in kind, or the rule's spec.parent.schema): then every parent.…
// path is checked at load time against the type Kubernetes derives from the
// schema for CRD validation rules. A child's template is checked against its
// kind's schema when that is known (Options.Schemas, Options.Types): its
// keys must be fields, and its values' types must fit them (childschema.go).
// Uses of children and inputs name their ids literally, which makes the
// children's dependency graph, and what each child reads, known at load
// time.
// An expression that reads metadata.resourceVersion or metadata.managedFields
// (or a whole object or its whole metadata, which hold them) is rejected:
// they change with every write, kgen's own included, so kgen would write in
// a loop.
//
// A string that is exactly one ${...} takes the type of its result; a string
// with text around expressions interpolates them (see Template.Evaluate for
// the conversions). Results are data: they are never parsed again, so a
// parent field holding "${...}" or YAML text ends up as that literal string.
//
// Evaluation is bounded: each expression by a CEL cost limit, each rendered
// template by an output size (Options); going over is an error matching
// ErrLimitExceeded, never a hang.
//
// Expression.Why says why a condition does not hold in a person's words,
// from the expression's shape (its checked CEL AST) and the values its
// field paths have: the field that is not set yet, or the values a false
// comparison saw.
//
// A child with forEach is one object per element of the product of its
// entries (Child.Elements); Rule.InputRefs resolves a rule's inputs for a
// parent; Rule.CRD builds the CustomResourceDefinition of a parent kind the
// rule describes with spec.parent.schema.
//
// Rule.Placement is the one answer to "where do a rule's parents, children
// and events live, and which children get an ownerReference or need the
// parent's finalizer", given the scope of its kinds (a kinds.Scoper): the
// renderer, pkg/rbac and the controller's watches all use it. Its
// ChildWatchNamespaces and InputWatchNamespaces are what to watch.
//
// The package knows nothing else of clusters: the metadata kgen adds to
// children and the order of applying them are pkg/reconcile's.
package rules
