package rules

import (
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// ObjectFile is how the Position of an error in a rule read from a Rule
// object names its source: "Rule/NAME".
func ObjectFile(name string) string { return "Rule/" + name }

// FromObject reads a Rule object, as the API server returns it, into a rule:
// the same checks as a rules file, without the fields the server adds
// (metadata but name, labels and annotations; status). A rules document is a
// valid Rule object and the reverse. Errors are as for Parse; their File is
// ObjectFile(name) and their lines are those of the object's YAML, so FieldPath
// is what says where they are.
func FromObject(obj map[string]any, opts Options) (*Rule, error) {
	meta, _ := obj["metadata"].(map[string]any)
	clean := map[string]any{}
	for _, k := range []string{"name", "labels", "annotations"} {
		if v, ok := meta[k]; ok {
			clean[k] = v
		}
	}
	if ann, ok := clean["annotations"].(map[string]any); ok {
		kept := map[string]any{}
		for k, v := range ann {
			if k != "kubectl.kubernetes.io/last-applied-configuration" {
				kept[k] = v
			}
		}
		clean["annotations"] = kept
	}
	doc := map[string]any{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": clean}
	if spec, ok := obj["spec"]; ok {
		doc["spec"] = spec
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode rule: %w", err)
	}
	name, _ := clean["name"].(string)
	parsed, err := parse(ObjectFile(name), data, opts, true)
	if err != nil {
		return nil, err
	}
	if len(parsed) != 1 {
		return nil, fmt.Errorf("a Rule object holds one rule, not %d", len(parsed))
	}
	return parsed[0], nil
}

// FieldPath returns where in a Rule object (or rules document) an error is,
// as a field path from the object's top: "spec.children[1].template.metadata.name".
// children are the document's spec.children, for the index of the child the
// error names.
func FieldPath(e *Error, children []any) string {
	if e.Child == "" {
		return e.Field
	}
	index := -1
	for i, c := range children {
		if m, ok := c.(map[string]any); ok && m["id"] == e.Child {
			index = i
			break
		}
	}
	path := "spec.children"
	if index >= 0 {
		path += fmt.Sprintf("[%d]", index)
	} else {
		path += fmt.Sprintf("[id=%s]", e.Child)
	}
	if e.Field != "" {
		if !strings.HasPrefix(e.Field, "[") {
			path += "."
		}
		path += e.Field
	}
	return path
}

// Files lists the rules files that paths name, as Load reads them: a file
// as it is, a directory's *.yaml and *.yml files (or symlinks to files) in
// name order.
func Files(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		found, err := expand(p)
		if err != nil {
			return nil, &Error{Pos: Position{File: p}, Err: withoutPath(err)}
		}
		files = append(files, found...)
	}
	return files, nil
}

// FilesOrNone is Files for a path read again: a directory with no rules
// files in it holds no rules, rather than being an error. The directory
// itself must still exist. A ConfigMap mounted as the rules directory
// whose last rules file was removed is such a directory: its rules are
// gone, not broken.
func FilesOrNone(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		found, err := expand(p)
		if errors.Is(err, ErrNoRulesFiles) {
			continue
		}
		if err != nil {
			return nil, &Error{Pos: Position{File: p}, Err: withoutPath(err)}
		}
		files = append(files, found...)
	}
	return files, nil
}

// CheckSet checks what only a set of rules can show: unique names, and no
// two rules that may select one parent. An error names the later rule of a
// pair, in the order given.
func CheckSet(rules []*Rule) ErrorList {
	errs := append(uniqueNames(rules), uniqueParents(rules)...)
	sortErrors(errs)
	return errs
}
