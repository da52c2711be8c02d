package rules

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// The short form of a parent's spec schema (spec.parent.schema), after
// kro's SimpleSchema: a mapping of field names to
//
//   - a type, optionally followed by " | " and markers:
//     "integer | default=1 minimum=0";
//   - a nested mapping: an object with those fields;
//   - a list holding one mapping: a list of such objects.
//
// Types are string, integer, number, boolean, object (any value:
// x-kubernetes-preserve-unknown-fields), []TYPE and map[string]TYPE.
// Markers are KEY=VALUE separated by spaces, VALUE in double quotes when it
// holds spaces: required=true, default=VALUE (of the field's type, JSON for
// lists and maps), description="...", minimum=N, maximum=N, enum=a,b,c,
// pattern=REGEX, minLength=N, maxLength=N, minItems=N, maxItems=N.

// simpleSchema decodes spec.parent.schema into the OpenAPI v3 schema of the
// parent's spec; nil when it has errors (reported).
func (l *loader) simpleSchema(n *yaml.Node, w where) *apiextensionsv1.JSONSchemaProps {
	before := len(l.errs)
	s := l.schemaObject(n, w)
	if len(l.errs) > before {
		return nil
	}
	return s
}

// schemaObject decodes a mapping of fields into an object schema.
func (l *loader) schemaObject(n *yaml.Node, w where) *apiextensionsv1.JSONSchemaProps {
	n = l.resolve(n)
	if n.Kind != yaml.MappingNode {
		l.errorf(n, w, `must be a mapping of field names to types, as in {image: string, replicas: "integer | default=1"}`)
		return nil
	}
	out := &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{}}
	for _, e := range l.entries(n, w) {
		fw := w.key(e.key)
		if !l.spend(e.valNode, fw) {
			return nil
		}
		field, required := l.schemaField(e.valNode, fw)
		if field == nil {
			continue
		}
		out.Properties[e.key] = *field
		if required {
			out.Required = append(out.Required, e.key)
		}
	}
	return out
}

// schemaField decodes one field's schema, and whether it is required.
func (l *loader) schemaField(n *yaml.Node, w where) (*apiextensionsv1.JSONSchemaProps, bool) {
	n = l.resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		return l.schemaObject(n, w), false
	case yaml.SequenceNode:
		if len(n.Content) != 1 || l.resolve(n.Content[0]).Kind != yaml.MappingNode {
			l.errorf(n, w, `a list must hold one mapping, the fields of its items; write "[]TYPE" for a list of scalars`)
			return nil, false
		}
		items := l.schemaObject(n.Content[0], w.index(0))
		if items == nil {
			return nil, false
		}
		return &apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: items}}, false
	case yaml.ScalarNode:
		if n.ShortTag() != "!!str" {
			break
		}
		typ, markers, _ := strings.Cut(n.Value, "|")
		s, err := simpleType(strings.TrimSpace(typ))
		if err != nil {
			l.errorf(n, w, "%v", err)
			return nil, false
		}
		required, err := applyMarkers(s, markers)
		if err != nil {
			l.errorf(n, w, "%v", err)
			return nil, false
		}
		return s, required
	}
	l.errorf(n, w, `must be a type ("string", "integer | default=1"), a mapping of fields, or a list of one mapping`)
	return nil, false
}

// simpleType returns the schema of a type name.
func simpleType(t string) (*apiextensionsv1.JSONSchemaProps, error) {
	switch {
	case t == "string" || t == "integer" || t == "number" || t == "boolean":
		return &apiextensionsv1.JSONSchemaProps{Type: t}, nil
	case t == "object":
		preserve := true
		return &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}, nil
	case strings.HasPrefix(t, "[]"):
		items, err := simpleType(t[2:])
		if err != nil {
			return nil, err
		}
		return &apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: items}}, nil
	case strings.HasPrefix(t, "map[string]"):
		values, err := simpleType(strings.TrimPrefix(t, "map[string]"))
		if err != nil {
			return nil, err
		}
		return &apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: values}}, nil
	}
	return nil, fmt.Errorf("unknown type %q: use string, integer, number, boolean, object, []TYPE or map[string]TYPE", t)
}

var markerKey = regexp.MustCompile(`^[a-zA-Z]+$`)

// applyMarkers sets the markers of a field (the text after "|") on its
// schema, and tells whether the field is required.
func applyMarkers(s *apiextensionsv1.JSONSchemaProps, text string) (required bool, err error) {
	text = strings.TrimSpace(text)
	for text != "" {
		key, rest, ok := strings.Cut(text, "=")
		if !ok || !markerKey.MatchString(key) {
			return false, fmt.Errorf("marker %q: want KEY=VALUE", strings.Fields(text)[0])
		}
		var value string
		if strings.HasPrefix(rest, `"`) {
			quoted, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return false, fmt.Errorf("marker %s: unterminated quoted value", key)
			}
			value, _ = strconv.Unquote(quoted)
			rest = rest[len(quoted):]
		} else {
			value, rest, _ = strings.Cut(rest, " ")
		}
		text = strings.TrimSpace(rest)
		if err := applyMarker(s, key, value, &required); err != nil {
			return false, fmt.Errorf("marker %s=%s: %w", key, value, err)
		}
	}
	return required, nil
}

func applyMarker(s *apiextensionsv1.JSONSchemaProps, key, value string, required *bool) error {
	number := func() (*float64, error) {
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("not a number")
		}
		return &f, nil
	}
	count := func() (*int64, error) {
		i, err := strconv.ParseInt(value, 10, 64)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("not a count")
		}
		return &i, nil
	}
	var err error
	switch key {
	case "required":
		*required, err = strconv.ParseBool(value)
	case "description":
		s.Description = value
	case "default":
		var v any
		v, err = typedValue(s, value)
		if err == nil {
			raw, _ := json.Marshal(v)
			s.Default = &apiextensionsv1.JSON{Raw: raw}
		}
	case "minimum":
		s.Minimum, err = number()
	case "maximum":
		s.Maximum, err = number()
	case "minLength":
		s.MinLength, err = count()
	case "maxLength":
		s.MaxLength, err = count()
	case "minItems":
		s.MinItems, err = count()
	case "maxItems":
		s.MaxItems, err = count()
	case "pattern":
		if _, err = regexp.Compile(value); err == nil {
			s.Pattern = value
		}
	case "enum":
		for _, item := range strings.Split(value, ",") {
			v, err := typedValue(s, item)
			if err != nil {
				return err
			}
			raw, _ := json.Marshal(v)
			s.Enum = append(s.Enum, apiextensionsv1.JSON{Raw: raw})
		}
	default:
		return fmt.Errorf("unknown marker: use required, default, description, minimum, maximum, enum, pattern, minLength, maxLength, minItems or maxItems")
	}
	return err
}

// typedValue parses a marker's value as a value of the field's type.
func typedValue(s *apiextensionsv1.JSONSchemaProps, text string) (any, error) {
	var v any
	var err error
	switch s.Type {
	case "string":
		return text, nil
	case "integer":
		v, err = strconv.ParseInt(text, 10, 64)
	case "number":
		v, err = strconv.ParseFloat(text, 64)
	case "boolean":
		v, err = strconv.ParseBool(text)
	default:
		err = json.Unmarshal([]byte(text), &v)
	}
	if err != nil {
		return nil, fmt.Errorf("%q is not a value of type %s", text, s.Type)
	}
	return v, nil
}
