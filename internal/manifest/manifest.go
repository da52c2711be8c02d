// Package manifest reads Kubernetes objects from YAML streams and JSON, as
// kubectl apply -f does: documents separated by ---, the items of a List
// counted as objects, empty documents skipped, and numbers decoded as the API
// server's objects are (integers as int64).
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Decode reads every object of a YAML stream (or one JSON document).
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	docs := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
			continue
		}
		obj, _, err := unstructured.UnstructuredJSONScheme.Decode(j, nil, nil)
		if err != nil {
			return nil, err
		}
		switch obj := obj.(type) {
		case *unstructured.Unstructured:
			if obj.GetAPIVersion() == "" || obj.GetKind() == "" {
				return nil, fmt.Errorf("an object without apiVersion or kind")
			}
			objs = append(objs, obj)
		case *unstructured.UnstructuredList:
			for i := range obj.Items {
				objs = append(objs, &obj.Items[i])
			}
		}
	}
}
