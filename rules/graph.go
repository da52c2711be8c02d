package rules

import (
	"fmt"
	"slices"
	"strings"
)

// graph checks the children's and inputs' references, fills in DependsOn
// and Inputs, rejects dependency cycles and computes the rule's dependency
// order.
func (l *loader) graph(r *Rule) {
	known := make([]string, 0, len(r.Children))
	for _, c := range r.Children {
		if c.ID != "" {
			known = append(known, c.ID)
		}
	}
	inputIDs := make([]string, 0, len(r.Inputs))
	for _, in := range r.Inputs {
		if in.ID != "" {
			inputIDs = append(inputIDs, in.ID)
		}
	}
	check := func(exprs []*Expression) bool {
		ok := true
		for _, e := range exprs {
			for _, ref := range e.References {
				if r.byID[ref] == nil {
					l.errs = append(l.errs, e.error(fmt.Errorf("unknown child id %q in children.%s (the rule's children are: %s)", ref, ref, strings.Join(known, ", "))))
					ok = false
				}
			}
			for _, ref := range e.Inputs {
				if !slices.Contains(inputIDs, ref) {
					msg := "the rule has no inputs"
					if len(inputIDs) > 0 {
						msg = "the rule's inputs are: " + strings.Join(inputIDs, ", ")
					}
					l.errs = append(l.errs, e.error(fmt.Errorf("unknown input id %q in inputs.%s (%s)", ref, ref, msg)))
					ok = false
				}
			}
		}
		return ok
	}
	valid := true
	for _, c := range r.Children {
		if c.ID == "" || c.Template == nil {
			valid = false
			continue
		}
		deps, inputs := map[string]bool{}, map[string]bool{}
		forEach := make([]*Expression, len(c.ForEach))
		for i, f := range c.ForEach {
			forEach[i] = f.Expr
		}
		for _, exprs := range [][]*Expression{c.Template.Expressions(), c.IncludeWhen, forEach} {
			if !check(exprs) {
				valid = false
			}
			for _, e := range exprs {
				for _, ref := range e.References {
					deps[ref] = true
				}
				for _, ref := range e.Inputs {
					inputs[ref] = true
				}
			}
		}
		check(c.ReadyWhen)
		for _, o := range r.Children {
			if deps[o.ID] {
				c.DependsOn = append(c.DependsOn, o.ID)
			}
		}
		for _, id := range inputIDs {
			if inputs[id] {
				c.Inputs = append(c.Inputs, id)
			}
		}
	}
	for _, s := range r.Status {
		check(s.Value.Expressions())
	}
	// A cycle among the children that are well formed is reported with
	// the other errors: every error is listed at once.
	if cycle := findCycle(r); cycle != nil {
		first := r.byID[cycle[0]]
		l.errs = append(l.errs, &Error{Pos: first.Pos, Rule: r.Name, Child: first.ID,
			Err: fmt.Errorf("dependency cycle: %s", strings.Join(cycle, " -> "))})
		return
	}
	if valid {
		r.order = topoOrder(r)
	}
}

// findCycle returns a dependency cycle as a path that starts and ends with
// the same child id, or nil. The search starts from the children in the
// rule's order, so the same rule always reports the same cycle.
func findCycle(r *Rule) []string {
	const (
		unvisited = iota
		inPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(id string) []string
	visit = func(id string) []string {
		state[id] = inPath
		path = append(path, id)
		for _, dep := range r.byID[id].DependsOn {
			if r.byID[dep] == nil {
				continue
			}
			switch state[dep] {
			case inPath:
				start := slices.Index(path, dep)
				return append(slices.Clone(path[start:]), dep)
			case unvisited:
				if c := visit(dep); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[id] = done
		return nil
	}
	for _, c := range r.Children {
		if c.ID != "" && r.byID[c.ID] != nil && state[c.ID] == unvisited {
			if cycle := visit(c.ID); cycle != nil {
				return cycle
			}
		}
	}
	return nil
}

// topoOrder orders the children so that each follows its dependencies,
// taking at every step the first ready child in the rule's order.
func topoOrder(r *Rule) []*Child {
	placed := map[string]bool{}
	order := make([]*Child, 0, len(r.Children))
	for len(order) < len(r.Children) {
		for _, c := range r.Children {
			if placed[c.ID] {
				continue
			}
			ready := true
			for _, d := range c.DependsOn {
				if !placed[d] {
					ready = false
					break
				}
			}
			if ready {
				placed[c.ID] = true
				order = append(order, c)
				break
			}
		}
	}
	return order
}
