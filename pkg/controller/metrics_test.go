package controller

import (
	"net/url"
	"testing"
)

func TestRequestVerb(t *testing.T) {
	tests := []struct{ method, url, want string }{
		{"GET", "/api/v1/namespaces/ns/configmaps/c", "get"},
		{"GET", "/api/v1/namespaces/ns/configmaps", "list"},
		{"GET", "/api/v1/configmaps?watch=true", "watch"},
		{"GET", "/apis/apps/v1/deployments?labelSelector=a%3Db", "list"},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments/d/status", "get"},
		{"GET", "/api/v1/namespaces", "list"},
		{"GET", "/api/v1/namespaces/ns", "get"},
		{"GET", "/apis", "get"},
		{"POST", "/api/v1/namespaces/ns/configmaps", "create"},
		{"PATCH", "/apis/example.com/v1/namespaces/ns/webapps/w/status", "patch"},
		{"PUT", "/api/v1/namespaces/ns/configmaps/c", "update"},
		{"DELETE", "/api/v1/namespaces/ns/configmaps/c", "delete"},
		{"DELETE", "/api/v1/namespaces/ns/configmaps", "deletecollection"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := RequestVerb(tt.method, *u); got != tt.want {
			t.Errorf("RequestVerb(%s %s) = %s, want %s", tt.method, tt.url, got, tt.want)
		}
	}
}
