package metricsserver

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// fastBackoff retries as reviewBackoff does, five times, without waiting.
var fastBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 5}

// failing answers the first len(errs) reviews with errs, in order, and then
// with answer.
func failing(errs []error, answer func(clienttesting.CreateAction) runtime.Object) (clienttesting.ReactionFunc, *int) {
	calls := 0
	return func(action clienttesting.Action) (bool, runtime.Object, error) {
		calls++
		if calls <= len(errs) {
			return true, nil, errs[calls-1]
		}
		return true, answer(action.(clienttesting.CreateAction)), nil
	}, &calls
}

var (
	serverError = apierrors.NewInternalError(errors.New("etcd is down"))
	throttled   = apierrors.NewTooManyRequests("slow down", 1)
	forbidden   = apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "", errors.New("no"))
)

func TestTokenReviewer(t *testing.T) {
	authenticated := func(a clienttesting.CreateAction) runtime.Object {
		review := a.GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if review.Spec.Token == "good" {
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
				Username: "prometheus", UID: "u1", Groups: []string{"monitoring"}, Extra: map[string]authenticationv1.ExtraValue{"scope": {"a"}},
			}}
		} else {
			review.Status = authenticationv1.TokenReviewStatus{Error: "token expired"}
		}
		return review
	}
	tests := []struct {
		name      string
		token     string
		errs      []error
		wantUser  string
		wantErr   string
		wantCalls int
	}{
		{name: "authenticated", token: "good", wantUser: "prometheus", wantCalls: 1},
		{name: "refused with the server's reason", token: "old", wantErr: "token expired", wantCalls: 1},
		{name: "a server error is asked again", token: "good", errs: []error{serverError, throttled}, wantUser: "prometheus", wantCalls: 3},
		{name: "a refusal of the review itself is not", token: "good", errs: []error{forbidden}, wantErr: "kgen could not review the caller: TokenReview: tokenreviews.authentication.k8s.io is forbidden", wantCalls: 1},
		{name: "retries run out", token: "good", errs: []error{serverError, serverError, serverError, serverError, serverError, serverError}, wantErr: "kgen could not review the caller: TokenReview: Internal error occurred: etcd is down", wantCalls: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			react, calls := failing(tt.errs, authenticated)
			client.PrependReactor("create", "tokenreviews", react)
			r := &tokenReviewer{client: client.AuthenticationV1().TokenReviews(), backoff: fastBackoff, timeout: time.Minute}
			resp, ok, err := r.AuthenticateToken(context.Background(), tt.token)
			if *calls != tt.wantCalls {
				t.Errorf("%d TokenReviews, want %d", *calls, tt.wantCalls)
			}
			if tt.wantErr != "" {
				if err == nil || ok || !startsWith(err.Error(), tt.wantErr) {
					t.Fatalf("AuthenticateToken() = %v, %v; want an error %q", ok, err, tt.wantErr)
				}
				return
			}
			if err != nil || !ok {
				t.Fatalf("AuthenticateToken() = %v, %v", ok, err)
			}
			u := resp.User
			if u.GetName() != tt.wantUser || u.GetUID() != "u1" || len(u.GetGroups()) != 1 || u.GetExtra()["scope"][0] != "a" {
				t.Errorf("user %+v", u)
			}
		})
	}
}

func startsWith(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

func TestAccessReviewer(t *testing.T) {
	// The API server allows prometheus to get /metrics, denies /admin
	// outright, and has no opinion on anything else.
	answer := func(a clienttesting.CreateAction) runtime.Object {
		review := a.GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		attrs := review.Spec.NonResourceAttributes
		switch {
		case review.Spec.User == "prometheus" && attrs.Path == "/metrics" && attrs.Verb == "get" &&
			len(review.Spec.Groups) == 1 && review.Spec.Extra["scope"][0] == "a":
			review.Status.Allowed = true
		case attrs.Path == "/admin":
			review.Status = authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "never"}
		}
		return review
	}
	prometheus := &user.DefaultInfo{Name: "prometheus", Groups: []string{"monitoring"}, Extra: map[string][]string{"scope": {"a"}}}
	tests := []struct {
		name      string
		user      string
		path      string
		errs      []error
		want      authorizer.Decision
		wantErr   bool
		wantCalls int // over both requests
	}{
		{name: "allowed", path: "/metrics", want: authorizer.DecisionAllow, wantCalls: 1},
		{name: "denied", path: "/admin", want: authorizer.DecisionDeny, wantCalls: 1},
		{name: "no opinion", path: "/debug/pprof/", want: authorizer.DecisionNoOpinion, wantCalls: 1},
		{name: "a server error is asked again", path: "/metrics", errs: []error{serverError}, want: authorizer.DecisionAllow, wantCalls: 2},
		{name: "an error is no opinion, and not cached", path: "/metrics", errs: []error{forbidden, forbidden}, want: authorizer.DecisionNoOpinion, wantErr: true, wantCalls: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			react, calls := failing(tt.errs, answer)
			client.PrependReactor("create", "subjectaccessreviews", react)
			r := newAccessReviewer(client.AuthorizationV1().SubjectAccessReviews(), fastBackoff, time.Minute, time.Hour, time.Hour)
			attrs := authorizer.AttributesRecord{User: prometheus, Verb: "get", Path: tt.path}
			for range 2 { // the second answer comes from the cache
				got, _, err := r.Authorize(context.Background(), attrs)
				if got != tt.want || (err != nil) != tt.wantErr {
					t.Fatalf("Authorize() = %v, %v; want %v (error: %t)", got, err, tt.want, tt.wantErr)
				}
			}
			if *calls != tt.wantCalls {
				t.Errorf("%d SubjectAccessReviews for two requests, want %d", *calls, tt.wantCalls)
			}
		})
	}
}

// An allowed answer is kept for allowTTL, any other for denyTTL: a caller
// given the right sees it within denyTTL.
func TestAccessReviewerCacheTTLs(t *testing.T) {
	allowed := false
	client := fake.NewClientset()
	calls := 0
	client.PrependReactor("create", "subjectaccessreviews", func(action clienttesting.Action) (bool, runtime.Object, error) {
		calls++
		review := action.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		review.Status.Allowed = allowed
		return true, review, nil
	})
	r := newAccessReviewer(client.AuthorizationV1().SubjectAccessReviews(), fastBackoff, time.Minute, time.Hour, 50*time.Millisecond)
	attrs := authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "late"}, Verb: "get", Path: "/metrics"}
	decide := func() authorizer.Decision {
		d, _, err := r.Authorize(context.Background(), attrs)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := decide(); d != authorizer.DecisionNoOpinion {
		t.Fatalf("before the grant: %v", d)
	}
	allowed = true
	if d := decide(); d != authorizer.DecisionNoOpinion || calls != 1 {
		t.Fatalf("within the refusal's TTL: %v after %d reviews, want the cached refusal after 1", d, calls)
	}
	time.Sleep(60 * time.Millisecond)
	if d := decide(); d != authorizer.DecisionAllow || calls != 2 {
		t.Fatalf("after the refusal's TTL: %v after %d reviews, want allowed after 2", d, calls)
	}
	allowed = false
	if d := decide(); d != authorizer.DecisionAllow || calls != 2 {
		t.Fatalf("within the allowance's TTL: %v after %d reviews, want the cached allowance", d, calls)
	}
}

// While the reviews fail, any bearer token makes a 500: its error line is
// logged once a minute, not once a request.
func TestReviewFailureLoggedOnceAMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var e everyMinute
		if !e.log() || e.log() {
			t.Fatal("want the first failure logged, the next one not")
		}
		time.Sleep(59 * time.Second)
		if e.log() {
			t.Fatal("logged again within the minute")
		}
		time.Sleep(time.Second)
		if !e.log() {
			t.Fatal("not logged again after a minute")
		}
	})
}
