package controller

import (
	"net/url"
	"testing"
)

func TestRequestVerb(t *testing.T) {
	tests := []struct{ method, url, verb, resource string }{
		{"GET", "/api/v1/namespaces/ns/configmaps/c", "get", "configmaps"},
		{"GET", "/api/v1/namespaces/ns/configmaps", "list", "configmaps"},
		{"GET", "/api/v1/configmaps?watch=true", "watch", "configmaps"},
		{"GET", "/apis/apps/v1/deployments?labelSelector=a%3Db", "list", "deployments"},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments/d/status", "get", "deployments/status"},
		{"GET", "/api/v1/namespaces", "list", "namespaces"},
		{"GET", "/api/v1/namespaces/ns", "get", "namespaces"},
		{"GET", "/apis", "get", ""},
		{"GET", "/api/v1", "get", ""},
		{"POST", "/api/v1/namespaces/ns/configmaps", "create", "configmaps"},
		{"PATCH", "/apis/example.com/v1/namespaces/ns/webapps/w/status", "patch", "webapps/status"},
		{"PATCH", "/apis/rbac.authorization.k8s.io/v1/clusterroles/r", "patch", "clusterroles"},
		{"PUT", "/api/v1/namespaces/ns/configmaps/c", "update", "configmaps"},
		{"DELETE", "/api/v1/namespaces/ns/configmaps/c", "delete", "configmaps"},
		{"DELETE", "/api/v1/namespaces/ns/configmaps", "deletecollection", "configmaps"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if verb, resource := RequestVerb(tt.method, *u); verb != tt.verb || resource != tt.resource {
			t.Errorf("RequestVerb(%s %s) = %s %s, want %s %s", tt.method, tt.url, verb, resource, tt.verb, tt.resource)
		}
	}
}
