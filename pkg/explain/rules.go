package explain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"kgen.dev/kgen/pkg/ruleset"
	"kgen.dev/kgen/rules"
)

// RuleSource says which rules to read, as kgenctl run's flags do.
type RuleSource struct {
	// Paths are rules files and directories (--rules).
	Paths []string
	// Objects reads the cluster's Rule objects too (--rule-objects).
	Objects bool
}

// LoadRules reads the rules kgenctl run serves from src: the files', and
// the Rule objects no file rule shadows: neither one of src's files nor,
// as the object's status says, one of the running kgen's. It returns,
// besides, notes on what it left out: Rule objects that are invalid, or
// whose latest version the running kgen did not accept, as their status
// says (a running kgen keeps their previous valid version, which explain
// cannot see), or, when files were
// given, Rule objects it could not read. An invalid file is an error, and
// so is finding no rules at all.
func LoadRules(ctx context.Context, client dynamic.Interface, res Resources, src RuleSource) ([]*rules.Rule, []string, error) {
	var out []*rules.Rule
	var notes []string
	if len(src.Paths) > 0 {
		loaded, err := rules.Load(src.Paths, rules.Options{})
		if err != nil {
			return nil, nil, err
		}
		out = loaded
	}
	if src.Objects {
		objs, err := ruleObjects(ctx, client, res)
		switch {
		case err != nil && len(out) == 0:
			return nil, nil, err
		case err != nil:
			notes = append(notes, fmt.Sprintf("Rule objects were not read: %v", err))
		}
		for _, o := range objs {
			if slices.ContainsFunc(out, func(r *rules.Rule) bool { return r.Name == o.GetName() }) {
				continue // the file's rule runs
			}
			if shadowed(o) {
				// A rules file of the running kgen has its name, and
				// that file's rule runs: explaining with the object
				// would tell what kgen does not do.
				notes = append(notes, fmt.Sprintf("Rule %s is shadowed by a --rules file of the running kgen, whose rule runs instead; give that file with --rules to explain its parents", o.GetName()))
				continue
			}
			var note string
			r, err := rules.FromObject(o.Object, rules.Options{})
			if why, rejected := notAccepted(o); rejected {
				// Valid on its own, but the running kgen did not take
				// this version (it does not fit its kinds' schemas, or
				// conflicts with another rule).
				note = fmt.Sprintf("Rule %s: the running kgen did not accept its latest version (%s)", o.GetName(), oneLine(why))
			} else if err != nil {
				note = fmt.Sprintf("Rule %s is invalid (%s)", o.GetName(), oneLine(err.Error()))
			}
			if note == "" {
				out = append(out, r)
				continue
			}
			// Explaining with the latest version would tell what kgen
			// does not do. The version kgen runs instead, if any, is
			// in the Rule's status.
			if prev, gen, ok := runningVersion(o); ok {
				notes = append(notes, fmt.Sprintf("%s; explained with the version kgen runs, of generation %d", note, gen))
				out = append(out, prev)
				continue
			}
			notes = append(notes, note+", and its status records no version that runs")
		}
	}
	if len(out) == 0 {
		if len(notes) > 0 {
			return nil, nil, errors.New("no rules: " + strings.Join(notes, "; "))
		}
		return nil, nil, errors.New("no rules: give --rules, or serve Rule objects (rules.kgen.dev)")
	}
	return out, notes, nil
}

// runningVersion returns the version of a Rule object that kgen runs, as
// its status records it, compiled; ok is false if it records none (or
// none this kgenctl can read).
func runningVersion(o unstructured.Unstructured) (*rules.Rule, int64, bool) {
	doc, gen, found := ruleset.Running(&o)
	if !found {
		return nil, 0, false
	}
	r, err := rules.FromObject(doc, rules.Options{})
	if err != nil {
		return nil, 0, false
	}
	return r, gen, true
}

// shadowed reports whether a Rule object's status says a rules file's
// rule of its name runs instead (condition Ready, reason Shadowed).
func shadowed(o unstructured.Unstructured) bool {
	c := conditionOf(o, ruleset.ConditionReady)
	return c != nil && c["reason"] == ruleset.ReasonShadowed
}

// notAccepted reports whether a Rule object's status says the running kgen
// did not accept its current generation (condition Accepted False, for
// that generation), and why.
func notAccepted(o unstructured.Unstructured) (string, bool) {
	c := conditionOf(o, ruleset.ConditionAccepted)
	if c == nil || c["status"] != string(metav1.ConditionFalse) || fmt.Sprint(c["observedGeneration"]) != fmt.Sprint(o.GetGeneration()) {
		return "", false
	}
	msg, _ := c["message"].(string)
	return msg, true
}

// conditionOf returns a Rule object's status condition of a type, or nil.
func conditionOf(o unstructured.Unstructured, condType string) map[string]any {
	conditions, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == condType {
			return m
		}
	}
	return nil
}

// ruleObjects lists the cluster's Rule objects.
func ruleObjects(ctx context.Context, client dynamic.Interface, res Resources) ([]unstructured.Unstructured, error) {
	if _, err := res.ResourceFor(ruleset.RuleGVK); err != nil {
		return nil, fmt.Errorf("the Rule kind: %w", err)
	}
	list, err := client.Resource(ruleset.RuleGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list rules.kgen.dev: %w", err)
	}
	return list.Items, nil
}
