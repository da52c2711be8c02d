package rules

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// maxDocumentNodes bounds the YAML nodes one rules document may expand to,
// counting every use of an alias, so that an alias bomb is an error rather
// than an exhausted machine.
const maxDocumentNodes = 100_000

// where is the context of an error: the rule, the child and the field path.
type where struct {
	rule, child, field string
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// key returns the context of a mapping entry: ".key", or `["key"]` for a key
// that is not an identifier.
func (w where) key(k string) where {
	switch {
	case !plainKey.MatchString(k):
		w.field += "[" + strconv.Quote(k) + "]"
	case w.field == "":
		w.field = k
	default:
		w.field += "." + k
	}
	return w
}

// index returns the context of a sequence item.
func (w where) index(i int) where {
	w.field += "[" + strconv.Itoa(i) + "]"
	return w
}

func (l *loader) pos(n *yaml.Node) Position {
	return Position{File: l.file, Line: n.Line, Column: n.Column}
}

func (l *loader) errorf(n *yaml.Node, w where, format string, args ...any) {
	l.errs = append(l.errs, &Error{Pos: l.pos(n), Rule: w.rule, Child: w.child, Field: w.field, Err: fmt.Errorf(format, args...)})
}

// resolve follows aliases to the node they stand for.
func (l *loader) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	}
	return n
}

// spend counts a node against the document's budget; false means the budget
// is gone (reported once).
func (l *loader) spend(n *yaml.Node, w where) bool {
	l.budget--
	if l.budget == -1 {
		l.errorf(n, w, "the document expands to more than %d YAML nodes (through aliases?)", maxDocumentNodes)
	}
	return l.budget >= 0
}

// entry is one key and value of a YAML mapping.
type entry struct {
	key      string
	keyNode  *yaml.Node
	valNode  *yaml.Node
	explicit bool
}

// entries returns a mapping's entries in order. Duplicate keys and keys
// that are not scalars are errors; merge keys ("<<") are expanded, explicit
// keys winning over merged ones.
func (l *loader) entries(n *yaml.Node, w where) []entry {
	var out []entry
	seen := map[string]*yaml.Node{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := l.resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			l.errorf(k, w, "mapping keys must be strings")
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			l.errorf(k, w, "duplicate key %q (first at line %d)", k.Value, first.Line)
			continue
		}
		seen[k.Value] = k
		out = append(out, entry{key: k.Value, keyNode: k, valNode: v, explicit: true})
	}
	for _, m := range merges {
		if !l.spend(m, w) {
			break
		}
		m = l.resolve(m)
		sources := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			sources = m.Content
		}
		for _, src := range sources {
			src = l.resolve(src)
			if src.Kind != yaml.MappingNode {
				l.errorf(src, w, "a merge (<<) takes a mapping or a list of mappings")
				continue
			}
			for _, e := range l.entries(src, w) {
				if _, dup := seen[e.key]; dup {
					continue
				}
				seen[e.key] = e.keyNode
				e.explicit = false
				out = append(out, e)
			}
		}
	}
	return out
}

// fields returns the entries of a mapping that has only the known keys; an
// unknown key is an error naming it. A node that is not a mapping is an
// error too, and gives nil.
func (l *loader) fields(n *yaml.Node, w where, known ...string) map[string]entry {
	n = l.resolve(n)
	if n.Kind != yaml.MappingNode {
		l.errorf(n, w, "must be a mapping")
		return nil
	}
	out := map[string]entry{}
	for _, e := range l.entries(n, w) {
		found := false
		for _, k := range known {
			if e.key == k {
				found = true
				break
			}
		}
		if !found {
			l.errorf(e.keyNode, w, "unknown field %q", e.key)
			continue
		}
		out[e.key] = e
	}
	return out
}

// str returns a string scalar; anything else is an error.
func (l *loader) str(n *yaml.Node, w where) (string, bool) {
	n = l.resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		l.errorf(n, w, "must be a string")
		return "", false
	}
	return n.Value, true
}

// strings returns a sequence of string scalars with their nodes.
func (l *loader) strings(n *yaml.Node, w where) ([]string, []*yaml.Node) {
	n = l.resolve(n)
	if n.Kind != yaml.SequenceNode {
		l.errorf(n, w, "must be a list of strings")
		return nil, nil
	}
	var out []string
	var nodes []*yaml.Node
	for i, item := range n.Content {
		if s, ok := l.str(item, w.index(i)); ok {
			out = append(out, s)
			nodes = append(nodes, l.resolve(item))
		}
	}
	return out, nodes
}

// scalarValue returns the JSON value of a YAML scalar that is not a string:
// an int64, a float64, a bool or nil. YAML 1.2's core schema decides, so
// yes/no/on/off are strings.
func scalarValue(n *yaml.Node) (any, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case nil, bool, string, int64:
		return v, nil
	case int:
		return int64(v), nil
	case uint64:
		if v > math.MaxInt64 {
			return float64(v), nil
		}
		return int64(v), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%s is not a JSON number", n.Value)
		}
		return v, nil
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano), nil
	case []byte:
		return string(v), nil
	}
	return nil, fmt.Errorf("unsupported YAML value %q (tag %s)", n.Value, n.ShortTag())
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a YAML parser error into an Error with its line.
func (l *loader) syntaxError(err error) *Error {
	e := &Error{Pos: Position{File: l.file}, Err: err}
	msg := strings.TrimSpace(err.Error())
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Pos.Line, _ = strconv.Atoi(m[1])
		e.Err = fmt.Errorf("yaml: %s", m[2])
	}
	return e
}
