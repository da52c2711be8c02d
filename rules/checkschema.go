package rules

import (
	"errors"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kschema "kgen.dev/kgen/pkg/schema"
)

// CheckSchema checks the rule against the schemas of its kinds, once they
// are known: its expressions against the OpenAPI v3 schema of its parent
// kind, as a CustomResourceDefinition version declares it (props), and,
// through types, its children's templates against their kinds' schemas,
// and its expressions against a built-in parent kind's, as the API server
// publishes them (see Options.Types). It finds exactly what a load with
// those schemas would have found. kgenctl run uses it once the cluster
// serves the rule's kinds, which it does not know when the rules load.
//
// The rule is compiled again from the file (or Rule object) it was read
// from; nothing of the rule changes. The error is an ErrorList, as Load's,
// whose errors name the file, line, rule, child, field and expression. A
// nil props and a nil types check nothing.
func (r *Rule) CheckSchema(props *apiextensionsv1.JSONSchemaProps, types func(schema.GroupVersionKind) (*kschema.Type, bool)) error {
	if props == nil && types == nil {
		return nil
	}
	if r.source == nil {
		return fmt.Errorf("rule %q: its source is not known, so its expressions cannot be checked again", r.Name)
	}
	opts := r.source.opts
	want := r.Parent.GroupVersionKind
	opts.Schemas = func(gvk schema.GroupVersionKind) (*apiextensionsv1.JSONSchemaProps, bool) {
		return props, props != nil && gvk == want
	}
	opts.Types = types
	c, err := newCompiler(opts)
	if err != nil {
		return err
	}
	c.object = r.source.object
	parsed, errs := c.parse(r.source.file, r.source.data)
	var mine ErrorList
	for _, e := range errs {
		if e.Rule == r.Name {
			mine = append(mine, e)
		}
	}
	if len(mine) > 0 {
		sortErrors(mine)
		return mine
	}
	for _, p := range parsed {
		if p.Name == r.Name {
			return nil
		}
	}
	// The source no longer yields the rule: it cannot be, as sources are
	// never changed, but say so rather than pass it.
	return errors.New("rule " + r.Name + ": not found in its source again")
}
