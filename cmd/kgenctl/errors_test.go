package main

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A refusal says what the API server said, in kubectl's words, where
// client-go's discovery client lost the server's message.
func TestRefusedRequests(t *testing.T) {
	noCluster(t)
	api := newFakeAPI(t)
	kubeconfig := writeKubeconfig(t, api, api.URL)
	forbidden := metav1.Status{Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden,
		Message: `forbidden: User "a" cannot impersonate-on:user-info:get path "/api"`}
	unauthorized := metav1.Status{Reason: metav1.StatusReasonUnauthorized, Code: http.StatusUnauthorized, Message: "Unauthorized"}
	tests := []struct {
		args   []string
		status metav1.Status
		want   string
	}{
		{
			args:   []string{"gvk-to-gvr", "deploy"},
			status: forbidden,
			want:   `Error from server (Forbidden): forbidden: User "a" cannot impersonate-on:user-info:get path "/api"`,
		},
		{
			args:   []string{"rbac", "--rules", "../../examples/webapp/rules.yaml", "--offline=false"},
			status: forbidden,
			want:   `Error from server (Forbidden): forbidden: User "a" cannot impersonate-on:user-info:get path "/api"`,
		},
		{
			args:   []string{"gvk-to-gvr", "deploy"},
			status: unauthorized,
			want:   `error: You must be logged in to the server (discovery: the server has asked for the client to provide credentials)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.args[0]+" "+string(tt.status.Reason), func(t *testing.T) {
			tt.status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
			tt.status.Status = metav1.StatusFailure
			api.mu.Lock()
			api.refuse = &tt.status
			api.mu.Unlock()
			_, _, err := runKgenctl(t, append(tt.args, "--kubeconfig", kubeconfig)...)
			if err == nil {
				t.Fatal("no error")
			}
			if got := errorMessage(err); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{errors.New("no rule selects it"), "Error: no rule selects it"},
		{fmt.Errorf("discovery: %w", apierrors.NewForbidden(schema.GroupResource{Resource: "users"}, "jane", errors.New("no"))),
			`Error from server (Forbidden): discovery: users "jane" is forbidden: no`},
		{apierrors.NewUnauthorized("Unauthorized"), "error: You must be logged in to the server (Unauthorized)"},
		{&apierrors.StatusError{ErrStatus: metav1.Status{Message: "odd"}}, "Error from server: odd"},
	}
	for _, tt := range tests {
		if got := errorMessage(tt.err); got != tt.want {
			t.Errorf("errorMessage(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
