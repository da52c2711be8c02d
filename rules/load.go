package rules

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	apiservercel "k8s.io/apiserver/pkg/cel"

	"kgen.dev/kgen/pkg/kinds"
	kschema "kgen.dev/kgen/pkg/schema"
)

// Load reads rules from files and directories. A directory contributes its
// *.yaml and *.yml files (or symlinks to files), in name order, not its
// subdirectories; a file is read whatever its name. Every document must be a Rule,
// or a List of Rules as kubectl prints them.
//
// On any problem Load returns no rules and an ErrorList of every problem it
// found, each with its file, line and column.
func Load(paths []string, opts Options) ([]*Rule, error) {
	c, err := newCompiler(opts.withDefaults())
	if err != nil {
		return nil, err
	}
	var errs ErrorList
	var files []string
	for _, p := range paths {
		found, err := expand(p)
		if err != nil {
			errs = append(errs, &Error{Pos: Position{File: p}, Err: withoutPath(err)})
			continue
		}
		files = append(files, found...)
	}
	var all []*Rule
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, &Error{Pos: Position{File: f}, Err: withoutPath(err)})
			continue
		}
		rules, fileErrs := c.parse(f, data)
		all = append(all, rules...)
		errs = append(errs, fileErrs...)
	}
	return checkSet(all, errs)
}

// Parse reads the rules in one file's contents; file names it in errors.
// Errors are as for Load.
func Parse(file string, data []byte, opts Options) ([]*Rule, error) {
	return parse(file, data, opts, false)
}

// parse is Parse, for a file or, when object is set, for the YAML FromObject
// makes of a Rule object, whose lines no one can see: its errors then name
// other places by field path rather than by line.
func parse(file string, data []byte, opts Options, object bool) ([]*Rule, error) {
	c, err := newCompiler(opts.withDefaults())
	if err != nil {
		return nil, err
	}
	c.object = object
	rules, errs := c.parse(file, data)
	return checkSet(rules, errs)
}

// checkSet adds the checks that need every rule at once to the errors
// found so far, and returns the rules or every error, sorted.
func checkSet(rules []*Rule, errs ErrorList) ([]*Rule, error) {
	errs = append(errs, uniqueNames(rules)...)
	errs = append(errs, uniqueParents(rules)...)
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, errs
	}
	return rules, nil
}

// expand lists the rules files a path names.
func expand(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if ext != ".yaml" && ext != ".yml" {
			continue
		}
		file := filepath.Join(path, e.Name())
		mode := e.Type()
		if mode&fs.ModeSymlink != 0 {
			// A ConfigMap mounted as a volume, as the Helm chart mounts the
			// rules, holds symlinks to its files.
			info, err := os.Stat(file)
			if err != nil {
				// Named here: the caller reports the path it was given.
				target, _ := os.Readlink(file)
				return nil, fmt.Errorf("%s is a symlink to %q, which cannot be read: %v", e.Name(), target, withoutPath(err))
			}
			mode = info.Mode()
		}
		if mode.IsRegular() {
			files = append(files, file)
		}
	}
	if len(files) == 0 {
		return nil, ErrNoRulesFiles
	}
	return files, nil
}

// ErrNoRulesFiles is the error of a directory with no *.yaml or *.yml file
// in it. Load and Files refuse it (a path given by mistake); a directory
// that was read before and is empty now holds no rules (see
// FilesOrNone).
var ErrNoRulesFiles = errors.New("the directory has no *.yaml or *.yml files")

// withoutPath drops the path from a file system error, which Error already
// starts with.
func withoutPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// uniqueNames reports rules that reuse an earlier rule's name.
func uniqueNames(rules []*Rule) ErrorList {
	var errs ErrorList
	first := map[string]*Rule{}
	for _, r := range rules {
		if f, dup := first[r.Name]; dup {
			errs = append(errs, &Error{Pos: r.Pos, Rule: r.Name, Field: "metadata.name",
				Err: fmt.Errorf("duplicate rule name: also defined at %s", f.Pos)})
			continue
		}
		first[r.Name] = r
	}
	return errs
}

// uniqueParents reports rules that may select a parent an earlier rule
// selects too: a parent has one Ready condition, one set of status fields
// written by kgen and one cleanup finalizer, so two rules on one object would
// overwrite each other's status forever. Rules on one kind are fine when
// their namespaces are disjoint or their selectors require different values
// of one label. It also reports status fields on a built-in parent kind,
// whose status belongs to Kubernetes and has a fixed schema.
func uniqueParents(rules []*Rule) ErrorList {
	var errs ErrorList
	seen := map[schema.GroupKind][]*Rule{}
	names := map[string]bool{}
	for _, r := range rules {
		if names[r.Name] {
			continue // a duplicate name, reported by uniqueNames
		}
		names[r.Name] = true
		gk := r.Parent.GroupVersionKind.GroupKind()
		for _, f := range seen[gk] {
			if mayOverlap(f.Parent, r.Parent) {
				errs = append(errs, &Error{Pos: r.Pos, Rule: r.Name, Field: "spec.parent",
					Err: fmt.Errorf("rule %q (%s) may select the same %s objects: give the rules disjoint namespaces, or selectors that no object matches both of (different values of one label, or a label one requires and the other excludes)", f.Name, f.Pos, gk)})
				break
			}
		}
		seen[gk] = append(seen[gk], r)
		if _, builtin := kinds.Builtin(gk); builtin && len(r.Status) > 0 {
			errs = append(errs, &Error{Pos: r.Pos, Rule: r.Name, Field: "spec.status",
				Err: fmt.Errorf("%s is a built-in kind: its status belongs to Kubernetes, so a rule cannot add status fields to it", gk)})
		}
	}
	return errs
}

// mayOverlap reports whether two parents of one kind may select one object.
func mayOverlap(a, b Parent) bool {
	if len(a.Namespaces) > 0 && len(b.Namespaces) > 0 && !slices.ContainsFunc(a.Namespaces, func(ns string) bool { return slices.Contains(b.Namespaces, ns) }) {
		return false
	}
	if a.LabelSelector == nil || b.LabelSelector == nil {
		return true
	}
	ca, cb := labelConstraints(a.LabelSelector), labelConstraints(b.LabelSelector)
	for k, x := range ca {
		if y, ok := cb[k]; ok && x.excludes(y) {
			return false
		}
	}
	return true
}

// labelConstraint is what a selector requires of one label.
type labelConstraint struct {
	present, absent bool
	// allowed is the values it may have (nil: any); excluded the values
	// it may not.
	allowed, excluded map[string]bool
}

// labelConstraints returns what a valid selector requires of each label it
// names: matchLabels and In allow values (and the label), NotIn excludes
// values, Exists and DoesNotExist require the label or its absence.
func labelConstraints(sel *metav1.LabelSelector) map[string]*labelConstraint {
	out := map[string]*labelConstraint{}
	of := func(k string) *labelConstraint {
		if out[k] == nil {
			out[k] = &labelConstraint{excluded: map[string]bool{}}
		}
		return out[k]
	}
	allow := func(c *labelConstraint, values []string) {
		c.present = true
		set := map[string]bool{}
		for _, v := range values {
			if c.allowed == nil || c.allowed[v] {
				set[v] = true
			}
		}
		c.allowed = set
	}
	for k, v := range sel.MatchLabels {
		allow(of(k), []string{v})
	}
	for _, e := range sel.MatchExpressions {
		c := of(e.Key)
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			allow(c, e.Values)
		case metav1.LabelSelectorOpNotIn:
			for _, v := range e.Values {
				c.excluded[v] = true
			}
		case metav1.LabelSelectorOpExists:
			c.present = true
		case metav1.LabelSelectorOpDoesNotExist:
			c.absent = true
		}
	}
	return out
}

// excludes reports whether no label value satisfies both constraints: one
// requires the label and the other its absence, or no value is allowed by
// one and not excluded by the other.
func (c *labelConstraint) excludes(d *labelConstraint) bool {
	if c.present && d.absent || d.present && c.absent {
		return true
	}
	none := func(allowed, excluded1, excluded2 map[string]bool, other map[string]bool) bool {
		for v := range allowed {
			if !excluded1[v] && !excluded2[v] && (other == nil || other[v]) {
				return false
			}
		}
		return true
	}
	switch {
	case c.allowed != nil:
		return none(c.allowed, c.excluded, d.excluded, d.allowed)
	case d.allowed != nil:
		return none(d.allowed, c.excluded, d.excluded, nil)
	}
	return false
}

func sortErrors(errs ErrorList) {
	sort.SliceStable(errs, func(i, j int) bool {
		a, b := errs[i].Pos, errs[j].Pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
}

// loader decodes the documents of one file.
type loader struct {
	c      *compiler
	file   string
	errs   ErrorList
	budget int
	// x is what the expressions being compiled may use, and kind what
	// they are (valueExpr, or inputExpr for input names).
	x    exprEnv
	kind exprKind
	// shapeName names the schema a template is checked against, in
	// errors ("the schema of apps/v1 Deployment").
	shapeName string
	// parentShape is the schema of the rule's parent kind where the
	// cluster (or --crd) gives it, for its status fields; nil when it is
	// not known, or only from spec.parent.schema, whose status kgen makes
	// from the rule's status fields.
	parentShape *kschema.Type
	// literals is set while literal scalars are checked against their
	// fields too, as for status fields (see checkLiteral).
	literals bool
}

// parse decodes every document of a file into rules. Rules with errors are
// left out; the errors say why.
func (c *compiler) parse(file string, data []byte) ([]*Rule, ErrorList) {
	l := &loader{c: c, file: file}
	var rules []*Rule
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			l.errs = append(l.errs, l.syntaxError(err))
			break
		}
		l.budget = maxDocumentNodes
		for _, n := range l.documents(&doc) {
			before := len(l.errs)
			r := l.rule(n)
			if r != nil && len(l.errs) == before {
				version, document := versionDigest(n)
				if c.object {
					document = nil // a Rule object keeps its own (status.running)
				}
				r.source = &source{file: file, data: data, opts: c.opts, digest: documentDigest(n), version: version, document: document, object: c.object}
				rules = append(rules, r)
			}
		}
	}
	return rules, l.errs
}

// documentDigest identifies a rule's document by its text and where every
// node of it is in the file (what the rule's positions are made of), so two
// rules with one digest compile alike and report the same lines. Comments
// are not part of it; what an alias refers to is, once.
func documentDigest(n *yaml.Node) [32]byte {
	h := sha256.New()
	seen := map[*yaml.Node]bool{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		fmt.Fprintf(h, "%d:%d:%d:%q:%q:%q:%d|", n.Kind, n.Line, n.Column, n.Tag, n.Value, n.Anchor, n.Style)
		if n.Alias != nil && !seen[n.Alias] {
			seen[n.Alias] = true
			walk(n.Alias)
		}
		for _, c := range n.Content {
			walk(c)
		}
		h.Write([]byte{'.'})
	}
	walk(n)
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// versionDigest identifies what a rule document says, its name and spec,
// whatever its place in its file, its comments or its layout: two
// documents with one digest are one version of a rule. It is "" for a
// document whose spec JSON cannot hold (a map with keys that are not
// strings), which is then never taken for one that ran before. document
// is that version as a Rule object's JSON (see Rule.Document).
func versionDigest(n *yaml.Node) (version string, document []byte) {
	var doc struct {
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec any `yaml:"spec"`
	}
	if err := n.Decode(&doc); err != nil {
		return "", nil
	}
	data, err := json.Marshal([]any{doc.Metadata.Name, doc.Spec}) // map keys sorted
	if err != nil {
		return "", nil
	}
	sum := sha256.Sum256(data)
	document, err = json.Marshal(map[string]any{"apiVersion": APIVersion, "kind": Kind,
		"metadata": map[string]any{"name": doc.Metadata.Name}, "spec": doc.Spec})
	if err != nil {
		return "", nil
	}
	return "sha256:" + hex.EncodeToString(sum[:]), document
}

// documents returns the rules a YAML document holds: itself, or the items
// of a list, as "kubectl get rules -o yaml" prints them (apiVersion v1,
// kind List) and as the API server lists them (kind RuleList). Nothing for
// an empty document.
func (l *loader) documents(doc *yaml.Node) []*yaml.Node {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	root := l.resolve(doc.Content[0])
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return []*yaml.Node{root}
	}
	var apiVersion, kind string
	for _, e := range l.entries(root, where{}) {
		if v := l.resolve(e.valNode); v.Kind == yaml.ScalarNode {
			switch e.key {
			case "apiVersion":
				apiVersion = v.Value
			case "kind":
				kind = v.Value
			}
		}
	}
	if !(apiVersion == "v1" && kind == "List") && !(apiVersion == APIVersion && kind == Kind+"List") {
		return []*yaml.Node{root}
	}
	// The list's own metadata (resourceVersion, continue) is the server's.
	top := l.fields(root, where{}, "apiVersion", "kind", "metadata", "items")
	items, ok := top["items"]
	if !ok {
		return nil
	}
	seq := l.resolve(items.valNode)
	if seq.Kind == yaml.ScalarNode && seq.ShortTag() == "!!null" {
		return nil
	}
	if seq.Kind != yaml.SequenceNode {
		l.errorf(seq, where{field: "items"}, "must be a list of rules")
		return nil
	}
	return seq.Content
}

// rbacGroup is the API group of RBAC's kinds.
const rbacGroup = "rbac.authorization.k8s.io"

var childIDPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// rule decodes one rule: a document, or an item of a list.
func (l *loader) rule(root *yaml.Node) *Rule {
	root = l.resolve(root)
	if root.Kind != yaml.MappingNode {
		l.errorf(root, where{}, "a rule must be a mapping with apiVersion, kind, metadata and spec")
		return nil
	}
	r := &Rule{Pos: l.pos(root), byID: map[string]*Child{}}
	top := map[string]entry{}
	for _, e := range l.entries(root, where{}) {
		top[e.key] = e
	}
	// A document of another kind (a CRD, a parent) is one error, not one
	// for each of its fields.
	if !l.isRule(root, top) {
		return nil
	}
	// status is the server's: a Rule object read back (kubectl get -o
	// yaml) is a valid rules document.
	top = l.fields(root, where{}, "apiVersion", "kind", "metadata", "spec", "status")
	w := where{}
	// The name comes first so that every other error can name the rule.
	if md, ok := top["metadata"]; ok {
		r.Name = l.metadata(md.valNode, w.key("metadata"))
		w.rule = r.Name
	} else {
		l.errorf(root, w, "metadata.name is required")
	}
	spec, ok := top["spec"]
	if !ok {
		l.errorf(root, w, "spec is required")
		return r
	}
	l.spec(r, spec.valNode, w.key("spec"))
	return r
}

// isRule checks that a document declares kgen's apiVersion and kind.
func (l *loader) isRule(root *yaml.Node, top map[string]entry) bool {
	var got [2]string
	var at *yaml.Node
	for i, key := range []string{"apiVersion", "kind"} {
		e, ok := top[key]
		if !ok {
			l.errorf(root, where{}, "%s is required: every document must be a %s %s", key, APIVersion, Kind)
			return false
		}
		v := l.resolve(e.valNode)
		if at == nil {
			at = v
		}
		got[i] = v.Value
		if v.Kind != yaml.ScalarNode {
			got[i] = "a " + map[yaml.Kind]string{yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}[v.Kind]
		}
	}
	if got[0] != APIVersion || got[1] != Kind {
		l.errorf(at, where{}, "not a rule: apiVersion %s, kind %s; every document must be a %s %s", got[0], got[1], APIVersion, Kind)
		return false
	}
	return true
}

// serverMetadata are the fields of ObjectMeta that the API server sets,
// or that other controllers set on any object, which a rule ignores.
var serverMetadata = []string{"uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
	"deletionGracePeriodSeconds", "managedFields", "selfLink", "finalizers", "ownerReferences"}

// metadata decodes the rule's metadata and returns its name.
func (l *loader) metadata(n *yaml.Node, w where) string {
	// The fields the API server sets on every object are ignored, so that
	// a Rule object read back (kubectl get -o yaml) is a valid rules
	// document; the rest of ObjectMeta means nothing to a rule.
	f := l.fields(n, w, append([]string{"name", "labels", "annotations"}, serverMetadata...)...)
	if f == nil {
		return ""
	}
	for _, k := range []string{"labels", "annotations"} {
		if e, ok := f[k]; ok {
			m := l.resolve(e.valNode)
			if m.Kind != yaml.MappingNode {
				l.errorf(m, w.key(k), "must be a mapping of strings")
				continue
			}
			for _, kv := range l.entries(m, w.key(k)) {
				l.str(kv.valNode, w.key(k).key(kv.key))
			}
		}
	}
	e, ok := f["name"]
	if !ok {
		l.errorf(l.resolve(n), w, "name is required")
		return ""
	}
	name, ok := l.str(e.valNode, w.key("name"))
	if !ok {
		return ""
	}
	if name == "" {
		l.errorf(e.valNode, w.key("name"), "must not be empty")
		return ""
	}
	if msgs := validation.IsValidLabelValue(name); len(msgs) > 0 {
		l.errorf(e.valNode, w.key("name"), "%q must be a valid label value, since children carry it in a label: %s", name, strings.Join(msgs, "; "))
		return ""
	}
	return name
}

func (l *loader) spec(r *Rule, n *yaml.Node, w where) {
	f := l.fields(n, w, "parent", "allowCrossNamespace", "allowBindRoles", "serviceAccount", "inputs", "children", "status")
	if f == nil {
		return
	}
	if e, ok := f["allowCrossNamespace"]; ok {
		l.allowCrossNamespace(r, e.valNode, w.key("allowCrossNamespace"))
	}
	if e, ok := f["allowBindRoles"]; ok {
		names, nodes := l.strings(e.valNode, w.key("allowBindRoles"))
		for i, name := range names {
			iw := w.key("allowBindRoles").index(i)
			switch msgs := path.IsValidPathSegmentName(name); {
			case name == "" || strings.Contains(name, "${"):
				l.errorf(nodes[i], iw, "must be the literal name of a role")
			case len(msgs) > 0:
				l.errorf(nodes[i], iw, "%q is not a valid role name: %s", name, strings.Join(msgs, "; "))
			case slices.Contains(r.AllowBindRoles, name):
				l.errorf(nodes[i], iw, "duplicate role %q", name)
			default:
				r.AllowBindRoles = append(r.AllowBindRoles, name)
			}
		}
	}
	if e, ok := f["serviceAccount"]; ok {
		l.serviceAccount(r, e.valNode, w.key("serviceAccount"))
	}
	if e, ok := f["parent"]; ok {
		l.parent(r, e.valNode, w.key("parent"))
	} else {
		l.errorf(l.resolve(n), w, "parent is required")
	}
	l.x = exprEnv{}
	l.parentType(r, f, w)
	if e, ok := f["inputs"]; ok {
		l.inputs(r, e.valNode, w.key("inputs"))
	}
	if e, ok := f["children"]; ok {
		l.children(r, e.valNode, w.key("children"))
	} else {
		l.errorf(l.resolve(n), w, "children is required")
	}
	if e, ok := f["status"]; ok {
		l.status(r, e.valNode, w.key("status"), l.statusShape(r, e.keyNode, w))
	}
	l.graph(r)
	l.sameObjects(r)
}

// gvk reads the apiVersion and kind of a parent or a template. Both must be
// literal strings: kgen watches by kind, so kinds are known at load time.
func (l *loader) gvk(n *yaml.Node, f map[string]entry, w where) (schema.GroupVersionKind, bool) {
	var gv schema.GroupVersion
	var kind string
	ok := true
	for _, key := range []string{"apiVersion", "kind"} {
		e, found := f[key]
		if !found {
			l.errorf(n, w, "%s is required", key)
			ok = false
			continue
		}
		s, isStr := l.str(e.valNode, w.key(key))
		switch {
		case !isStr:
			ok = false
		case s == "":
			l.errorf(e.valNode, w.key(key), "must not be empty")
			ok = false
		case strings.Contains(s, "${"):
			l.errorf(e.valNode, w.key(key), "must be a literal, not an expression: kgen watches children by kind, so kinds must be known when the rules load")
			ok = false
		case key == "apiVersion":
			parsed, err := schema.ParseGroupVersion(s)
			if err != nil {
				l.errorf(e.valNode, w.key(key), "%v", err)
				ok = false
			}
			gv = parsed
		default:
			kind = s
			if msg := unknownBuiltinKind(gv, kind); msg != "" && gv.Version != "" {
				l.errorf(e.valNode, w.key(key), "%s", msg)
				ok = false
			}
		}
	}
	return gv.WithKind(kind), ok
}

// unknownBuiltinKind returns an error message for a kind that a group only
// kube-apiserver serves does not have: the core group ("v1") or one whose
// name has no dot (apps, batch, …), which no CustomResourceDefinition may
// use. "" for any other kind.
func unknownBuiltinKind(gv schema.GroupVersion, kind string) string {
	if strings.Contains(gv.Group, ".") {
		return ""
	}
	if _, ok := kinds.Builtin(schema.GroupKind{Group: gv.Group, Kind: kind}); ok {
		return ""
	}
	var known []string
	for gk := range kinds.Builtins() {
		if gk.Group == gv.Group {
			known = append(known, gk.Kind)
		}
	}
	if len(known) == 0 {
		return "" // not a built-in group after all
	}
	slices.Sort(known)
	group := gv.Group
	if group == "" {
		group = "the core group (v1)"
	}
	msg := fmt.Sprintf("%s has no kind %q", group, kind)
	msg += didYouMean(kind, known)
	return msg
}

// parentType declares the parent's type for the rule's expressions when its
// schema is known: from Options.Schemas, or else Options.Types, or else
// from spec.parent.schema.
func (l *loader) parentType(r *Rule, f map[string]entry, w where) {
	gvk := r.Parent.GroupVersionKind
	l.parentShape = nil // not the previous rule's
	if gvk.Kind == "" {
		return
	}
	var props *apiextensionsv1.JSONSchemaProps
	var published *kschema.Type
	source := fmt.Sprintf("the schema of %s %s", gvk.GroupVersion(), gvk.Kind)
	if l.c.opts.Schemas != nil {
		if p, ok := l.c.opts.Schemas(gvk); ok && p != nil {
			props = p
		}
	}
	if props == nil && l.c.opts.Types != nil {
		if t, ok := l.c.opts.Types(gvk); ok && t.Is("object") {
			published = t
		}
	}
	switch {
	case props != nil:
		l.parentShape = kschema.TypeOf(props)
	case published != nil:
		l.parentShape = published
	case r.Parent.Schema != nil:
		props, source = r.Parent.objectSchema(nil), "spec.parent.schema"
	}
	var t *apiservercel.DeclType
	var err error
	switch {
	case props != nil:
		t, err = parentType(props)
	case published != nil:
		t, err = publishedParentType(published)
	default:
		return
	}
	if err != nil {
		l.errorf(l.resolve(f["parent"].valNode), w.key("parent"), "%v", err)
		return
	}
	if t == nil {
		return
	}
	l.x.parent, l.x.schema = t, source
	r.Parent.TypeChecked = true
}

// inputs decodes spec.inputs.
func (l *loader) inputs(r *Rule, n *yaml.Node, w where) {
	n = l.resolve(n)
	if n.Kind != yaml.SequenceNode {
		l.errorf(n, w, "must be a list of inputs")
		return
	}
	for i, item := range n.Content {
		item = l.resolve(item)
		iw := w.index(i)
		f := l.fields(item, iw, "id", "apiVersion", "kind", "name", "namespace", "selector")
		if f == nil {
			continue
		}
		in := &Input{Pos: l.pos(item)}
		if e, ok := f["id"]; !ok {
			l.errorf(item, iw, "id is required")
		} else if id, ok := l.str(e.valNode, iw.key("id")); ok {
			switch {
			case !childIDPattern.MatchString(id):
				l.errorf(e.valNode, iw.key("id"), "input id %q must match [a-z][a-z0-9_]*", id)
			case slices.ContainsFunc(r.Inputs, func(o *Input) bool { return o.ID == id }):
				l.errorf(e.valNode, iw.key("id"), "duplicate input id %q", id)
			default:
				in.ID = id
			}
		}
		in.GroupVersionKind, _ = l.gvk(item, f, iw)
		_, named := f["name"]
		_, selected := f["selector"]
		switch {
		case named && selected:
			l.errorf(item, iw, "name and selector exclude each other: name one object, or select a list of them")
		case !named && !selected:
			l.errorf(item, iw, "name or selector is required")
		}
		l.kind = inputExpr
		for _, key := range []string{"name", "namespace"} {
			e, ok := f[key]
			if !ok {
				continue
			}
			v := l.resolve(e.valNode)
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" || v.Value == "" {
				l.errorf(v, iw.key(key), "must be a non-empty string, which may hold ${...} expressions of parent")
				continue
			}
			t := l.compileTemplate(v, iw.key(key), nil)
			if key == "name" {
				in.Name = t
			} else {
				in.Namespace, in.inParentNamespace = t, isParentNamespace(v)
			}
		}
		l.kind = valueExpr
		if e, ok := f["selector"]; ok {
			in.LabelSelector, in.Selector = l.selector(e.valNode, iw.key("selector"))
		}
		r.Inputs = append(r.Inputs, in)
	}
}

// allowCrossNamespace decodes the namespaces, other than the parent's, that
// children may be in: a list of namespace names, or false for none.
func (l *loader) allowCrossNamespace(r *Rule, n *yaml.Node, w where) {
	v := l.resolve(n)
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!bool" {
		if v.Value == "true" {
			l.errorf(v, w, "true is not accepted: list the namespaces the children may be in, as in allowCrossNamespace: [ns-a, ns-b] (a cluster-scoped parent needs no list: set spec.parent.scope: Cluster)")
		}
		return
	}
	if v.Kind != yaml.SequenceNode {
		l.errorf(v, w, "must be a list of namespaces, as in allowCrossNamespace: [ns-a, ns-b]")
		return
	}
	names, nodes := l.strings(v, w)
	for i, ns := range names {
		switch msgs := validation.IsDNS1123Label(ns); {
		case strings.Contains(ns, "${"):
			l.errorf(nodes[i], w.index(i), "must be a literal namespace, not an expression")
		case len(msgs) > 0:
			l.errorf(nodes[i], w.index(i), "%q is not a valid namespace name: %s", ns, strings.Join(msgs, "; "))
		case slices.Contains(r.AllowCrossNamespace, ns):
			l.errorf(nodes[i], w.index(i), "duplicate namespace %q", ns)
		default:
			r.AllowCrossNamespace = append(r.AllowCrossNamespace, ns)
		}
	}
}

func (l *loader) parent(r *Rule, n *yaml.Node, w where) {
	f := l.fields(n, w, "apiVersion", "kind", "selector", "namespaces", "scope", "schema")
	if f == nil {
		return
	}
	var gvkOK bool
	r.Parent.GroupVersionKind, gvkOK = l.gvk(l.resolve(n), f, w)
	builtin, isBuiltin := kinds.Builtin(r.Parent.GroupVersionKind.GroupKind())
	if isBuiltin && gvkOK {
		r.Parent.Scope = kinds.Cluster
		if builtin.Namespaced {
			r.Parent.Scope = kinds.Namespaced
		}
	}
	if e, ok := f["scope"]; ok {
		s, _ := l.str(e.valNode, w.key("scope"))
		declared := map[string]kinds.Scope{"Namespaced": kinds.Namespaced, "Cluster": kinds.Cluster}[s]
		switch {
		case declared == kinds.ScopeUnknown:
			l.errorf(e.valNode, w.key("scope"), "must be Namespaced or Cluster")
		case isBuiltin && declared != r.Parent.Scope:
			l.errorf(e.valNode, w.key("scope"), "%s is a built-in kind, and it is not %s", r.Parent.GroupVersionKind.GroupKind(), s)
		default:
			r.Parent.Scope = declared
		}
	}
	r.Parent.Selector = labels.Everything()
	if e, ok := f["selector"]; ok {
		if sel, compiled := l.selector(e.valNode, w.key("selector")); sel != nil {
			r.Parent.LabelSelector, r.Parent.Selector = sel, compiled
		}
	}
	if e, ok := f["schema"]; ok {
		r.Parent.Schema = l.simpleSchema(e.valNode, w.key("schema"))
		if isBuiltin {
			l.errorf(e.valNode, w.key("schema"), "%s is a built-in kind: its schema is Kubernetes'", r.Parent.GroupVersionKind.GroupKind())
		}
	}
	if e, ok := f["namespaces"]; ok {
		names, nodes := l.strings(e.valNode, w.key("namespaces"))
		for i, ns := range names {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				l.errorf(nodes[i], w.key("namespaces").index(i), "%q is not a valid namespace name: %s", ns, strings.Join(msgs, "; "))
			}
		}
		r.Parent.Namespaces = names
	}
}

// selector decodes a metav1.LabelSelector, checking each label and
// requirement where it is written; nil when it is invalid.
func (l *loader) selector(n *yaml.Node, w where) (*metav1.LabelSelector, labels.Selector) {
	f := l.fields(n, w, "matchLabels", "matchExpressions")
	if f == nil {
		return nil, nil
	}
	sel := &metav1.LabelSelector{}
	valid := true
	if e, ok := f["matchLabels"]; ok {
		m := l.resolve(e.valNode)
		lw := w.key("matchLabels")
		if m.Kind != yaml.MappingNode {
			l.errorf(m, lw, "must be a mapping of label keys to values")
			valid = false
		} else {
			sel.MatchLabels = map[string]string{}
			for _, kv := range l.entries(m, lw) {
				if msgs := validation.IsQualifiedName(kv.key); len(msgs) > 0 {
					l.errorf(kv.keyNode, lw, "invalid label key %q: %s", kv.key, strings.Join(msgs, "; "))
					valid = false
				}
				v, ok := l.str(kv.valNode, lw.key(kv.key))
				if !ok {
					valid = false
					continue
				}
				if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
					l.errorf(kv.valNode, lw.key(kv.key), "invalid label value %q: %s", v, strings.Join(msgs, "; "))
					valid = false
				}
				sel.MatchLabels[kv.key] = v
			}
		}
	}
	if e, ok := f["matchExpressions"]; ok {
		s := l.resolve(e.valNode)
		ew := w.key("matchExpressions")
		if s.Kind != yaml.SequenceNode {
			l.errorf(s, ew, "must be a list of label selector requirements")
			valid = false
		} else {
			for i, item := range s.Content {
				iw := ew.index(i)
				rf := l.fields(item, iw, "key", "operator", "values")
				if rf == nil {
					valid = false
					continue
				}
				var req metav1.LabelSelectorRequirement
				if kv, ok := rf["key"]; ok {
					req.Key, _ = l.str(kv.valNode, iw.key("key"))
				}
				if kv, ok := rf["operator"]; ok {
					op, _ := l.str(kv.valNode, iw.key("operator"))
					req.Operator = metav1.LabelSelectorOperator(op)
				}
				if kv, ok := rf["values"]; ok {
					req.Values, _ = l.strings(kv.valNode, iw.key("values"))
				}
				one := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req}}
				if _, err := metav1.LabelSelectorAsSelector(one); err != nil {
					l.errorf(l.resolve(item), iw, "%v", err)
					valid = false
				}
				sel.MatchExpressions = append(sel.MatchExpressions, req)
			}
		}
	}
	if !valid {
		return nil, nil
	}
	compiled, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		l.errorf(l.resolve(n), w, "%v", err)
		return nil, nil
	}
	return sel, compiled
}

func (l *loader) children(r *Rule, n *yaml.Node, w where) {
	n = l.resolve(n)
	if n.Kind != yaml.SequenceNode {
		l.errorf(n, w, "must be a list of children")
		return
	}
	if len(n.Content) == 0 {
		l.errorf(n, w, "must have at least one child")
		return
	}
	firstAt := map[string]*yaml.Node{}
	firstIndex := map[string]int{}
	for i, item := range n.Content {
		item = l.resolve(item)
		iw := w.index(i)
		f := l.fields(item, iw, "id", "forEach", "includeWhen", "readyWhen", "deletionPolicy", "updatePolicy", "template")
		if f == nil {
			continue
		}
		c := &Child{Pos: l.pos(item)}
		if e, ok := f["id"]; ok {
			if id, ok := l.str(e.valNode, iw.key("id")); ok {
				switch {
				case !childIDPattern.MatchString(id):
					l.errorf(e.valNode, iw.key("id"), "child id %q must match [a-z][a-z0-9_]*", id)
				case len(id) > validation.LabelValueMaxLength || strings.HasSuffix(id, "_"):
					l.errorf(e.valNode, iw.key("id"), "child id %q must be a valid label value (at most 63 characters, not ending in _), since children carry it in a label", id)
				case firstAt[id] != nil:
					first := fmt.Sprintf("line %d", firstAt[id].Line)
					if l.c.object {
						first = fmt.Sprintf("spec.children[%d]", firstIndex[id])
					}
					l.errorf(e.valNode, iw.key("id"), "duplicate child id %q (first at %s)", id, first)
				default:
					c.ID = id
					firstAt[id] = e.valNode
					firstIndex[id] = i
				}
			}
		} else {
			l.errorf(item, iw, "id is required")
		}
		cw := where{rule: r.Name, child: c.ID}
		if c.ID == "" {
			cw = iw
		}
		c.DeletionPolicy = DeletionDelete
		if e, ok := f["deletionPolicy"]; ok {
			if v, ok := l.str(e.valNode, cw.key("deletionPolicy")); ok {
				if v != string(DeletionDelete) && v != string(DeletionOrphan) {
					l.errorf(e.valNode, cw.key("deletionPolicy"), "must be Delete or Orphan, not %q", v)
				}
				c.DeletionPolicy = DeletionPolicy(v)
			}
		}
		c.UpdatePolicy = UpdateApply
		if e, ok := f["updatePolicy"]; ok {
			if v, ok := l.str(e.valNode, cw.key("updatePolicy")); ok {
				if v != string(UpdateApply) && v != string(UpdateCreateOnly) {
					l.errorf(e.valNode, cw.key("updatePolicy"), "must be Apply or CreateOnly, not %q", v)
				}
				c.UpdatePolicy = UpdatePolicy(v)
			}
		}
		ruleEnv := l.x
		if e, ok := f["forEach"]; ok {
			l.x.each = l.forEach(c, e.valNode, cw.key("forEach"))
		}
		if e, ok := f["template"]; ok {
			l.x.random = c.UpdatePolicy == UpdateCreateOnly
			c.nameNode = l.template(r, c, e.valNode, cw.key("template"))
			l.x.random = false
		} else {
			l.errorf(item, cw, "template is required")
		}
		if e, ok := f["includeWhen"]; ok {
			c.IncludeWhen = l.conditions(e.valNode, cw.key("includeWhen"), conditionExpr)
		}
		if e, ok := f["readyWhen"]; ok {
			c.ReadyWhen = l.conditions(e.valNode, cw.key("readyWhen"), readyExpr)
		}
		l.x = ruleEnv
		r.Children = append(r.Children, c)
		if c.ID != "" {
			r.byID[c.ID] = c
		}
	}
}

// sameObjects rejects two children that render one object always, whatever
// the parent: they would write it over each other forever. Those that
// differ only once rendered, that are a forEach's (its elements have
// names of their own), or that may be left out are left to Render, which
// reports two renders of one object on the parent. A child may be left
// out when it has an includeWhen or reads a child that may be (Render
// leaves out a child whose dependency it left out), not for reading a
// forEach child, which Render never leaves out for having no element. It
// runs after graph, which fills in DependsOn and the order that puts
// dependencies first.
func (l *loader) sameObjects(r *Rule) {
	children := r.order
	if children == nil {
		children = r.Children // a cycle, reported already: no dependencies
	}
	mayBeLeftOut := map[string]bool{}
	sameAt := map[sameObject]*Child{}
	for _, c := range children {
		left := len(c.IncludeWhen) > 0
		if r.order != nil {
			for _, d := range c.DependsOn {
				left = left || mayBeLeftOut[d]
			}
		}
		mayBeLeftOut[c.ID] = left
		if left || len(c.ForEach) > 0 || c.nameNode == nil || c.ID == "" {
			continue
		}
		key := sameObject{c.GroupVersionKind.GroupKind(), c.namespaceKey(), c.nameNode.Value}
		first := sameAt[key]
		if first == nil {
			sameAt[key] = c
			continue
		}
		// Report the later of the two in the file, naming the earlier.
		if first.Pos.Line > c.Pos.Line {
			first, c = c, first
			sameAt[key] = first
		}
		at := fmt.Sprintf(" (line %d)", first.Pos.Line)
		if l.c.object {
			at = "" // the object's lines are no one's; its id says where
		}
		l.errorf(c.nameNode, where{rule: r.Name, child: c.ID}.key("template").key("metadata").key("name"),
			"renders the same %s as child %q%s: give each child a name of its own", c.GroupVersionKind.Kind, first.ID, at)
	}
}

// sameObject is what tells, in the rules file, that two children render
// one object: the group and kind of their templates and the text of their
// metadata.namespace (see Child.namespaceKey) and metadata.name.
type sameObject struct {
	kind            schema.GroupKind
	namespace, name string
}

// namespaceKey is the text of the template's metadata.namespace, the same
// for the two ways of saying "the parent's namespace" (absent, and
// ${parent.metadata.namespace}).
func (c *Child) namespaceKey() string {
	if c.namespace == nsAbsent || c.namespace == nsParent {
		return ""
	}
	return c.namespaceSource
}

var forEachName = regexp.MustCompile(`^[a-z][a-zA-Z0-9_]*$`)

// forEach decodes a child's forEach: a list of {NAME: "${list or map}"}. It
// returns the names, also those whose expression has errors, so that the
// template is checked with them.
func (l *loader) forEach(c *Child, n *yaml.Node, w where) (names []string) {
	n = l.resolve(n)
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		l.errorf(n, w, `must be a list of {NAME: "${list or map expression}"}`)
		return nil
	}
	for i, item := range n.Content {
		iw := w.index(i)
		item = l.resolve(item)
		if item.Kind != yaml.MappingNode {
			l.errorf(item, iw, `must be a mapping of one name to a "${list or map expression}"`)
			continue
		}
		entries := l.entries(item, iw)
		if len(entries) != 1 {
			l.errorf(item, iw, `must be a mapping of one name to a "${list or map expression}": write one entry per name, in the order of the product`)
			for _, e := range entries {
				if forEachName.MatchString(e.key) && !slices.Contains(reservedNames, e.key) && !slices.Contains(names, e.key) {
					names = append(names, e.key) // spares errors about their uses
				}
			}
			continue
		}
		e := entries[0]
		name := e.key
		switch {
		case !forEachName.MatchString(name):
			l.errorf(e.keyNode, iw, "forEach name %q must match [a-z][a-zA-Z0-9_]*", name)
			continue
		case slices.Contains(reservedNames, name):
			l.errorf(e.keyNode, iw, "forEach name %q is a variable of every expression already: pick another", name)
			continue
		case slices.Contains(names, name):
			l.errorf(e.keyNode, iw, "duplicate forEach name %q", name)
			continue
		}
		names = append(names, name)
		exprs := l.conditionList([]*yaml.Node{e.valNode}, iw.key(name), forEachExpr, `must be a string holding one "${...}" list or map expression`)
		if len(exprs) == 1 {
			c.ForEach = append(c.ForEach, &ForEach{Name: name, Expr: exprs[0], maxBytes: l.c.opts.MaxOutputBytes})
		}
	}
	return names
}

// conditions compiles a list of ${...} conditions.
func (l *loader) conditions(n *yaml.Node, w where, kind exprKind) []*Expression {
	n = l.resolve(n)
	if n.Kind != yaml.SequenceNode {
		l.errorf(n, w, `must be a list of "${...}" expressions`)
		return nil
	}
	return l.conditionList(n.Content, w, kind, `must be a string holding one "${...}" expression`)
}

// conditionList compiles strings that are each exactly one ${...}: at w
// indexed, or at w itself for a single node.
func (l *loader) conditionList(nodes []*yaml.Node, w where, kind exprKind, notString string) []*Expression {
	var out []*Expression
	for i, item := range nodes {
		iw := w.index(i)
		if kind == forEachExpr {
			iw = w
		}
		item = l.resolve(item)
		if item.Kind != yaml.ScalarNode || item.ShortTag() != "!!str" {
			l.errorf(item, iw, "%s", notString)
			continue
		}
		segs, err := splitTemplate(item.Value)
		if err != nil {
			l.splitError(item, iw, err)
			continue
		}
		if len(segs) != 1 || !segs[0].expr {
			l.errorf(item, iw, `must be exactly one "${...}" expression, with no text around it`)
			continue
		}
		pos, exact := l.exprPos(item, segs[0].offset)
		if e := l.c.compile(segs[0].text, pos, exact, iw, kind, l.x, &l.errs); e != nil {
			out = append(out, e)
		}
	}
	return out
}

// template checks and compiles a child's template into c. It returns the
// node of its metadata.name when that is a string, or nil.
func (l *loader) template(r *Rule, c *Child, n *yaml.Node, w where) (nameValue *yaml.Node) {
	n = l.resolve(n)
	if n.Kind != yaml.MappingNode {
		l.errorf(n, w, "must be a mapping: a full Kubernetes object")
		return nil
	}
	top := map[string]entry{}
	for _, e := range l.entries(n, w) {
		top[e.key] = e
	}
	c.GroupVersionKind, _ = l.gvk(n, top, w)
	mw := w.key("metadata")
	md, ok := top["metadata"]
	if !ok {
		l.errorf(n, w, "metadata.name is required")
	} else if m := l.resolve(md.valNode); m.Kind != yaml.MappingNode {
		l.errorf(m, mw, "must be a mapping")
	} else {
		meta := map[string]entry{}
		for _, e := range l.entries(m, mw) {
			meta[e.key] = e
		}
		if e, ok := meta["name"]; !ok {
			l.errorf(m, mw, "name is required")
		} else if s, ok := l.str(e.valNode, mw.key("name")); ok && s == "" {
			l.errorf(e.valNode, mw.key("name"), "must not be empty")
		} else if ok {
			nameValue = l.resolve(e.valNode)
		}
		if e, ok := meta["namespace"]; ok {
			v := l.resolve(e.valNode)
			c.namespaceSource = v.Value
			switch {
			case isParentNamespace(v):
				c.namespace = nsParent
			case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && v.Value == "":
				c.namespace = nsAbsent
			case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && !strings.Contains(v.Value, "${"):
				c.namespace, c.namespaceLiteral = nsLiteral, strings.ReplaceAll(v.Value, "$${", "${")
			default:
				c.namespace = nsExpression
			}
			switch {
			case c.namespace == nsParent || c.namespace == nsAbsent:
			case len(r.AllowCrossNamespace) > 0:
				if c.namespace == nsLiteral && !slices.Contains(r.AllowCrossNamespace, c.namespaceLiteral) {
					l.errorf(e.valNode, mw.key("namespace"), "%q is not in spec.allowCrossNamespace (%s): add it there", c.namespaceLiteral, strings.Join(r.AllowCrossNamespace, ", "))
				}
			case r.Parent.Scope != kinds.Cluster:
				l.errorf(e.valNode, mw.key("namespace"), "must be absent or exactly ${parent.metadata.namespace}, unless the rule lists the namespaces it allows in spec.allowCrossNamespace, or its parent is cluster-scoped (spec.parent.scope: Cluster)")
			}
		} else if r.Parent.Scope == kinds.Cluster && c.GroupVersionKind.Kind != "" {
			if b, ok := kinds.Builtin(c.GroupVersionKind.GroupKind()); ok && b.Namespaced {
				l.errorf(m, mw, "namespace is required: the parent is cluster-scoped, so a %s must name its namespace", c.GroupVersionKind.Kind)
			}
		}
		for _, k := range []string{"generateName", "ownerReferences", "uid", "resourceVersion", "managedFields"} {
			if e, ok := meta[k]; ok {
				l.errorf(e.keyNode, mw.key(k), "must not be set: kgen manages it")
			}
		}
	}
	l.roleRef(r, c, n, top, w)
	gvk := c.GroupVersionKind
	l.shapeName = fmt.Sprintf("the schema of %s %s", gvk.GroupVersion(), gvk.Kind)
	t := l.compileTemplate(n, w, l.childShape(gvk))
	if t != nil {
		t.child = c.ID
		c.Template = t
		if len(l.x.each) > 0 && md.valNode != nil {
			if name := t.at([]string{"metadata", "name"}); name != nil && !name.reads(l.x.each) {
				nameNode := l.resolve(md.valNode)
				for _, e := range l.entries(nameNode, mw) {
					if e.key == "name" {
						nameNode = e.valNode
					}
				}
				l.errorf(nameNode, mw.key("name"), "must use a forEach name (%s): kgen tells the objects of a forEach child apart by their names", strings.Join(l.x.each, ", "))
			}
		}
	}
	return nameValue
}

// roleRef checks the roleRef of a RoleBinding or ClusterRoleBinding
// template: a role it names by an expression must be one the rule lists in
// spec.allowBindRoles, since kgen needs bind on every role it may bind, and
// bind on every role would let a parent grant anything.
func (l *loader) roleRef(r *Rule, c *Child, n *yaml.Node, top map[string]entry, w where) {
	gvk := c.GroupVersionKind
	if gvk.Group != rbacGroup || (gvk.Kind != "RoleBinding" && gvk.Kind != "ClusterRoleBinding") {
		return
	}
	e, ok := top["roleRef"]
	if !ok {
		return // the API server says what is missing
	}
	at, rw := l.resolve(e.valNode), w.key("roleRef")
	if at.Kind == yaml.MappingNode {
		for _, kv := range l.entries(at, rw) {
			if kv.key == "name" {
				at, rw = l.resolve(kv.valNode), rw.key("name")
			}
		}
	}
	if at.Kind != yaml.ScalarNode || at.ShortTag() != "!!str" || !strings.Contains(at.Value, "${") {
		return // a literal role name, or none: the API server says so
	}
	c.templatedRoleRef = true
	if len(r.AllowBindRoles) == 0 {
		l.errorf(at, rw, "the role is computed by an expression: list the roles it may name in spec.allowBindRoles, so that kgen may bind those and no other")
	}
}

// isParentNamespace tells whether a node is exactly ${parent.metadata.namespace}.
func isParentNamespace(n *yaml.Node) bool {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return false
	}
	segs, err := splitTemplate(n.Value)
	return err == nil && len(segs) == 1 && segs[0].expr && strings.TrimSpace(segs[0].text) == "parent.metadata.namespace"
}

var reservedStatus = []string{"conditions", "observedGeneration"}

// statusShape returns the schema of the parent's status, as far as it is
// known (see loader.parentShape), for checking the rule's status fields
// against it: a status field the parent's schema has no place for, or a
// value that cannot fit its field, would make every status write of every
// parent fail. It reports a parent schema without a status. Nil checks
// nothing: a built-in parent kind, whose status fields are an error of
// their own (uniqueParents), or an unknown schema.
func (l *loader) statusShape(r *Rule, key *yaml.Node, w where) *kschema.Type {
	gvk := r.Parent.GroupVersionKind
	if _, builtin := kinds.Builtin(gvk.GroupKind()); builtin || l.parentShape == nil {
		return nil
	}
	l.shapeName = fmt.Sprintf("the schema of %s %s", gvk.GroupVersion(), gvk.Kind)
	t := l.checkKey(l.parentShape, "status", key, w)
	if t == nil || len(t.Types) > 0 && !t.Is("object") {
		return nil
	}
	l.shapeName = fmt.Sprintf("the status schema of %s %s", gvk.GroupVersion(), gvk.Kind)
	return t
}

// status decodes spec.status, checking each field against the parent's
// status schema t (nil when not known).
func (l *loader) status(r *Rule, n *yaml.Node, w where, t *kschema.Type) {
	n = l.resolve(n)
	if n.Kind != yaml.MappingNode {
		l.errorf(n, w, "must be a mapping of status fields")
		return
	}
	l.literals = t != nil
	defer func() { l.literals = false }()
	for _, e := range l.entries(n, w) {
		if slices.Contains(reservedStatus, e.key) {
			l.errorf(e.keyNode, w, "status field %q is written by kgen itself", e.key)
			continue
		}
		fw := w.key(e.key)
		fw.rule = r.Name
		var field *kschema.Type
		if t != nil {
			field = l.checkKey(t, e.key, e.keyNode, w)
		}
		if v := l.compileTemplate(e.valNode, fw, field); v != nil {
			r.Status = append(r.Status, &StatusField{Name: e.key, Value: v})
		}
	}
}

// compileTemplate compiles a YAML value whose strings may hold expressions,
// checking it against the shape of its kind when that is known (see
// childShape); nil checks nothing.
func (l *loader) compileTemplate(n *yaml.Node, w where, shape *kschema.Type) *Template {
	before := len(l.errs)
	root := l.node(n, w, shape)
	if root == nil || len(l.errs) > before {
		return nil
	}
	t := &Template{root: root, rule: w.rule, child: w.child, field: w.field, maxBytes: l.c.opts.MaxOutputBytes}
	t.collect()
	return t
}

// node compiles one YAML node of a template, of the shape t (nil when not
// known).
func (l *loader) node(n *yaml.Node, w where, t *kschema.Type) *node {
	if !l.spend(n, w) {
		return nil
	}
	n = l.resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		if !l.checkShape(t, "object", "a mapping", n, w) {
			t = nil
		}
		out := &node{kind: mapNode}
		for _, e := range l.entries(n, w) {
			segs, err := splitTemplate(e.key)
			if err != nil || len(segs) > 1 || (len(segs) == 1 && segs[0].expr) {
				l.errorf(e.keyNode, w, `key %q: keys cannot hold expressions (write $${ for a literal "${")`, e.key)
				continue
			}
			key := ""
			if len(segs) == 1 {
				key = segs[0].text
			}
			v := l.node(e.valNode, w.key(key), l.checkKey(t, key, e.keyNode, w))
			if v == nil {
				continue
			}
			out.keys = append(out.keys, key)
			out.elems = append(out.elems, v)
		}
		return out
	case yaml.SequenceNode:
		if !l.checkShape(t, "array", "a list", n, w) {
			t = nil
		}
		var items *kschema.Type
		if t != nil {
			items = t.Items
		}
		out := &node{kind: listNode}
		for i, item := range n.Content {
			if v := l.node(item, w.index(i), items); v != nil {
				out.elems = append(out.elems, v)
			}
		}
		return out
	case yaml.ScalarNode:
		if n.ShortTag() == "!!str" {
			return l.stringNode(n, w, t)
		}
		v, err := scalarValue(n)
		if err != nil {
			l.errorf(n, w, "%v", err)
			return nil
		}
		l.checkLiteral(t, v, n, w)
		return &node{kind: literalNode, lit: v}
	}
	l.errorf(n, w, "unsupported YAML node")
	return nil
}

// stringNode compiles a string scalar of a template, of the shape t.
func (l *loader) stringNode(n *yaml.Node, w where, t *kschema.Type) *node {
	segs, err := splitTemplate(n.Value)
	if err != nil {
		l.splitError(n, w, err)
		return nil
	}
	switch {
	case len(segs) == 0:
		l.checkLiteral(t, "", n, w)
		return &node{kind: literalNode, lit: ""}
	case len(segs) == 1 && !segs[0].expr:
		l.checkLiteral(t, segs[0].text, n, w)
		return &node{kind: literalNode, lit: segs[0].text}
	}
	var parts []part
	for _, s := range segs {
		if !s.expr {
			parts = append(parts, part{text: s.text})
			continue
		}
		pos, exact := l.exprPos(n, s.offset)
		e := l.c.compile(s.text, pos, exact, w, l.kind, l.x, &l.errs)
		if e == nil {
			return nil
		}
		parts = append(parts, part{expr: e})
	}
	if len(parts) == 1 {
		l.checkExpression(t, parts[0].expr)
		return &node{kind: exprNode, expr: parts[0].expr}
	}
	l.checkText(t, n, w)
	return &node{kind: textNode, parts: parts}
}

// exprPos is the position of the "${" at a character offset of a string
// scalar. It is exact (true) for a one-line plain or quoted scalar; for
// other scalars it is where the scalar starts.
func (l *loader) exprPos(n *yaml.Node, offset int) (Position, bool) {
	p := l.pos(n)
	if strings.Contains(n.Value, "\n") {
		return p, false
	}
	switch n.Style {
	case 0:
		p.Column += offset
		return p, true
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		p.Column += 1 + offset
		return p, true
	}
	return p, false
}

func (l *loader) splitError(n *yaml.Node, w where, err error) {
	var se *splitError
	if errors.As(err, &se) {
		p, _ := l.exprPos(n, se.offset)
		l.errs = append(l.errs, &Error{Pos: p, Rule: w.rule, Child: w.child, Field: w.field, Err: err})
		return
	}
	l.errorf(n, w, "%v", err)
}

// serviceAccount reads spec.serviceAccount: the ServiceAccount whose rights
// every write of the rule's children is made with.
func (l *loader) serviceAccount(r *Rule, n *yaml.Node, w where) {
	f := l.fields(n, w, "namespace", "name")
	if f == nil {
		return
	}
	sa := &ServiceAccount{}
	valid := true
	for _, k := range []string{"namespace", "name"} {
		e, ok := f[k]
		if !ok {
			l.errorf(l.resolve(n), w, "%s is required", k)
			valid = false
			continue
		}
		v, ok := l.str(e.valNode, w.key(k))
		if !ok {
			valid = false
			continue
		}
		var msgs []string
		if k == "namespace" {
			msgs = validation.IsDNS1123Label(v)
		} else {
			msgs = validation.IsDNS1123Subdomain(v)
		}
		switch {
		case strings.Contains(v, "${"):
			l.errorf(e.valNode, w.key(k), "must be a literal, not an expression: kgen's RBAC names the ServiceAccounts it may act as")
			valid = false
		case len(msgs) > 0:
			l.errorf(e.valNode, w.key(k), "%q is not a valid %s: %s", v, k, strings.Join(msgs, "; "))
			valid = false
		case k == "namespace":
			sa.Namespace = v
		default:
			sa.Name = v
		}
	}
	if valid {
		r.ServiceAccount = sa
	}
}

// MayOverlap reports whether two parents of one kind may select one
// object: their namespaces meet, and their selectors do not require
// different values of one label.
func MayOverlap(a, b Parent) bool { return mayOverlap(a, b) }
