package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"kgen.dev/kgen/internal/manifest"
	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/rules"
)

// placeholderUID stands in for the UID of a parent read from a file that has
// none, so that labels and ownerReferences can be shown.
const placeholderUID = types.UID("00000000-0000-0000-0000-000000000000")

type renderOptions struct {
	rules    []string
	parent   string
	observed string
	inputs   []string
	crds     []string
	output   *outputFlags
}

func newRenderCmd(out io.Writer) *cobra.Command {
	o := &renderOptions{}
	cmd := &cobra.Command{
		Use:   "render --rules PATH --parent FILE",
		Short: "Render the children of one parent offline, as run would apply them",
		Long: `Render the children that the rules selecting a parent want, exactly as
"kgenctl run" would apply them, without a cluster: no kubeconfig is read.

The children are printed as a YAML stream, in the order they are applied.
-o json prints them as a v1 List, -o name as KIND[.GROUP]/NAME lines, and
-o jsonpath=TEMPLATE reads that List. No connection flag is taken. Notes go to stderr: children excluded by their
includeWhen, children waiting for a child they read, and the status fields
that would be written to the parent.

The scope of built-in kinds is known, and that of custom resources whose
CustomResourceDefinition is given with --crd. Without it, a parent with
metadata.namespace is taken as namespaced and one without as cluster-scoped;
a child of an unknown kind is taken as namespaced when its template sets
metadata.namespace, and otherwise as having its parent's scope. Each such
assumption is noted on stderr. A parent without metadata.namespace, of a
kind known to be namespaced, is taken to be in "default", as kubectl does;
one without metadata.uid gets a placeholder UID.
--observed gives the children as they exist in the cluster (labelled
kgen.dev/child, as kgen labels them, or of a kind only one child has), for
rules whose children read other children. --input gives the objects the
rules read through spec.inputs: each input takes the objects of its kind
with its name and namespace, or matching its selector; a child reading a
named input that none of them is waits, and says so.

With --crd, expressions are type-checked against the parent's schema, as
"kgenctl run" does with the CRD it finds. randomString(n), allowed in
CreateOnly children, is shown as n characters of "RANDOM" repeated, so the
output is the same every time; kgen generates random characters.`,
		Example: `  kgenctl render --rules examples/webapp/rules.yaml --parent examples/webapp/parent.yaml \
      --crd examples/webapp/crd.yaml
  kgenctl render --rules rules/ --parent foo.yaml --crd crds/foo.yaml -o json
  kgenctl render --rules rules/ --parent foo.yaml --crd crds/foo.yaml -o name`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(out, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.rules, "rules", nil, "a rules file or directory (repeatable)")
	f.StringVar(&o.parent, "parent", "", "a file holding the parent object")
	f.StringVar(&o.observed, "observed", "", "a file holding observed children (a YAML stream or a List)")
	f.StringArrayVar(&o.inputs, "input", nil, "a file of objects the rules read as inputs (a YAML stream or a List; repeatable)")
	f.StringArrayVar(&o.crds, "crd", nil, "a file of CustomResourceDefinitions of kinds involved (repeatable)")
	o.output = addOutputFlag(cmd, "yaml")
	_ = cmd.MarkFlagRequired("rules")
	_ = cmd.MarkFlagRequired("parent")
	return cmd
}

func (o *renderOptions) run(out, notes io.Writer) error {
	err := o.render(out, notes)
	if errors.Is(err, kinds.ErrUnknownKind) {
		return fmt.Errorf("%w (pass its CustomResourceDefinition with --crd)", err)
	}
	return err
}

func (o *renderOptions) render(out, notes io.Writer) error {
	printer, err := o.output.printer()
	if err != nil {
		return err
	}
	scope, err := readCRDs(o.crds)
	if err != nil {
		return err
	}
	loaded, err := rules.Load(o.rules, rules.Options{Schemas: scope.Schema, RandomString: rules.PlaceholderRandomString})
	if err != nil {
		return err
	}
	parent, err := o.readParent(scope, notes)
	if err != nil {
		return err
	}
	var selected []*rules.Rule
	for _, r := range loaded {
		if r.Selects(parent) {
			selected = append(selected, r)
		}
	}
	if len(selected) == 0 {
		return fmt.Errorf("no rule selects %s %s (check the rules' parent kind, selector and namespaces)", parent.GetKind(), describeObject(parent))
	}
	for _, n := range reconcile.AssumeScopes(scope, parent, selected) {
		if _, err := fmt.Fprintf(notes, "# %s\n", n); err != nil {
			return err
		}
	}
	observed, err := o.readObserved(selected)
	if err != nil {
		return err
	}
	inputs, err := readInputFiles(o.inputs)
	if err != nil {
		return err
	}
	var children []unstructured.Unstructured
	for _, r := range selected {
		obs := observed[r.Name]
		if obs.Inputs, err = matchInputs(r, parent, scope, inputs); err != nil {
			return err
		}
		rendered, err := reconcile.Render(r, parent, obs, scope)
		if err != nil {
			return err
		}
		if err := notePolicies(notes, r); err != nil {
			return err
		}
		for _, c := range rendered.Children {
			children = append(children, *c.Object)
		}
		if err := writeNotes(notes, r.Name, rendered); err != nil {
			return err
		}
	}
	return printObjects(out, o.output.format, printer, children)
}

// readParent reads the one parent object and completes it as the API server
// would have: a namespace for a namespaced kind, a UID.
func (o *renderOptions) readParent(scope kinds.Scoper, notes io.Writer) (*unstructured.Unstructured, error) {
	objs, err := readObjects(o.parent)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: holds %d objects, want exactly one parent", o.parent, len(objs))
	}
	parent := objs[0]
	if parent.GetNamespace() == "" {
		// A kind of unknown scope is taken as cluster-scoped, since the
		// parent has no namespace (see reconcile.AssumeScopes).
		namespaced, err := scope.Namespaced(parent.GroupVersionKind())
		if err != nil && !errors.Is(err, kinds.ErrUnknownKind) {
			return nil, fmt.Errorf("%s: %w", o.parent, err)
		}
		if namespaced {
			parent.SetNamespace("default")
		}
	}
	if parent.GetUID() == "" {
		parent.SetUID(placeholderUID)
		if _, err := fmt.Fprintf(notes, "# the parent has no metadata.uid: using %s\n", placeholderUID); err != nil {
			return nil, err
		}
	}
	return parent, nil
}

// readCRDs reads CustomResourceDefinition files into an offline resolver.
func readCRDs(paths []string) (*kinds.Static, error) {
	scope := kinds.NewStatic()
	for _, path := range paths {
		objs, err := readObjects(path)
		if err != nil {
			return nil, err
		}
		for _, crd := range objs {
			if err := scope.AddCRD(crd); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	return scope, nil
}

// readObserved reads the observed children and sorts them by rule and child
// id: by their kgen.dev/rule and kgen.dev/child labels, or else by their kind
// when only one child of the selected rules has it.
func (o *renderOptions) readObserved(selected []*rules.Rule) (map[string]reconcile.Observed, error) {
	out := map[string]reconcile.Observed{}
	for _, r := range selected {
		out[r.Name] = reconcile.Observed{Children: map[string][]*unstructured.Unstructured{}}
	}
	if o.observed == "" {
		return out, nil
	}
	objs, err := readObjects(o.observed)
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		rule, id, err := childOf(obj, selected)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.observed, err)
		}
		out[rule].Children[id] = append(out[rule].Children[id], obj)
	}
	return out, nil
}

// inputFile is an object of an --input file.
type inputFile struct {
	path string
	obj  *unstructured.Unstructured
}

func readInputFiles(paths []string) ([]inputFile, error) {
	var out []inputFile
	for _, path := range paths {
		objs, err := readObjects(path)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			out = append(out, inputFile{path: path, obj: obj})
		}
	}
	return out, nil
}

// matchInputs gives each input of a rule the objects of the --input files
// it reads for the parent.
func matchInputs(r *rules.Rule, parent *unstructured.Unstructured, scope kinds.Scoper, files []inputFile) (map[string][]*unstructured.Unstructured, error) {
	refs, err := r.InputRefs(parent, scope)
	if err != nil {
		return nil, err
	}
	out := map[string][]*unstructured.Unstructured{}
	for _, ref := range refs {
		for _, f := range files {
			obj := f.obj
			if obj.GetNamespace() == "" && ref.Namespace != "" {
				// As for the parent: a namespaced object without a
				// namespace is in the one kubectl would put it in.
				obj = obj.DeepCopy()
				obj.SetNamespace("default")
			}
			if ref.Matches(obj) {
				out[ref.ID] = append(out[ref.ID], obj)
			}
		}
	}
	return out, nil
}

// notePolicies says on stderr what the output does not show of the
// children's policies, and how randomString is shown.
func notePolicies(w io.Writer, r *rules.Rule) error {
	var b strings.Builder
	for _, c := range r.Children {
		if c.UpdatePolicy == rules.UpdateCreateOnly {
			fmt.Fprintf(&b, "# rule %s: child %s is CreateOnly: kgen creates it and never updates it\n", r.Name, c.ID)
		}
		if c.DeletionPolicy == rules.DeletionOrphan {
			fmt.Fprintf(&b, "# rule %s: child %s is orphaned when pruned or when its parent goes: it has no ownerReference\n", r.Name, c.ID)
		}
		for _, e := range c.Template.Expressions() {
			if e.Random {
				fmt.Fprintf(&b, "# rule %s: child %s: randomString(n) is shown as n characters of RANDOM; kgen generates random ones\n", r.Name, c.ID)
				break
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func childOf(obj *unstructured.Unstructured, selected []*rules.Rule) (rule, id string, err error) {
	labels := obj.GetLabels()
	if id := labels[reconcile.LabelChild]; id != "" {
		for _, r := range selected {
			if want := labels[reconcile.LabelRule]; (want == "" || want == r.Name) && r.Child(id) != nil {
				return r.Name, id, nil
			}
		}
		return "", "", fmt.Errorf("%s %s: no selected rule has child %q", obj.GetKind(), describeObject(obj), id)
	}
	var matches []string
	for _, r := range selected {
		for _, c := range r.Children {
			if c.GroupVersionKind == obj.GroupVersionKind() {
				rule, id = r.Name, c.ID
				matches = append(matches, r.Name+"/"+c.ID)
			}
		}
	}
	switch len(matches) {
	case 1:
		return rule, id, nil
	case 0:
		return "", "", fmt.Errorf("%s %s: no child of the selected rules has this kind", obj.GetKind(), describeObject(obj))
	}
	return "", "", fmt.Errorf("%s %s: several children have this kind (%s): label it %s=<child id>",
		obj.GetKind(), describeObject(obj), strings.Join(matches, ", "), reconcile.LabelChild)
}

func describeObject(obj *unstructured.Unstructured) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

// writeNotes tells on stderr what the output does not show.
func writeNotes(w io.Writer, rule string, r *reconcile.Rendered) error {
	var b strings.Builder
	for _, id := range r.Excluded {
		fmt.Fprintf(&b, "# rule %s: child %s is excluded\n", rule, id)
	}
	for _, id := range slices.Sorted(maps.Keys(r.Waiting)) {
		fmt.Fprintf(&b, "# rule %s: child %s is not rendered: %s\n", rule, id, r.Waiting[id])
	}
	if len(r.Status) > 0 {
		status, err := json.Marshal(r.Status)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "# rule %s: status: %s\n", rule, status)
	}
	for _, f := range sortedKeys(r.StatusOmitted) {
		fmt.Fprintf(&b, "# rule %s: status field %s is left out: %s\n", rule, f, r.StatusOmitted[f])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// readObjects reads the objects of a YAML stream or JSON file (see
// manifest.Decode).
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	objs, err := manifest.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}
