package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"sigs.k8s.io/yaml"
)

// TestExampleCRDs validates every example's CustomResourceDefinition as the
// API server will when the e2e tests install it: strict decoding, the
// API server's defaults and validation (structural schemas included), and a
// status subresource, which the parents need for kgen to write their status.
func TestExampleCRDs(t *testing.T) {
	paths, err := filepath.Glob("../../examples/*/crd.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example CRDs: %v", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(filepath.Dir(path)), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(data, crd); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if crd.APIVersion != "apiextensions.k8s.io/v1" || crd.Kind != "CustomResourceDefinition" {
				t.Fatalf("%s %s is not an apiextensions.k8s.io/v1 CustomResourceDefinition", crd.APIVersion, crd.Kind)
			}
			apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
			internal := &apiextensions.CustomResourceDefinition{}
			if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
				t.Fatal(err)
			}
			for _, e := range validation.ValidateCustomResourceDefinition(context.Background(), internal) {
				t.Errorf("invalid: %v", e)
			}
			for _, v := range crd.Spec.Versions {
				if v.Subresources == nil || v.Subresources.Status == nil {
					t.Errorf("version %s has no status subresource", v.Name)
				}
			}
		})
	}
}
