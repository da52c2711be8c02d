package metricsserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// The reviews are asked here, and not through k8s.io/apiserver's delegating
// authenticator and authorizer (authenticatorfactory, authorizerfactory),
// which controller-runtime's secure metrics use: those reach the API server
// through its webhook package, which imports the egress selector and so
// gRPC, whose golang.org/x/net/trace executes an html/template. A binary
// that can execute a template keeps every exported method of every type it
// uses through an interface (the linker cannot tell which one a template
// calls): with it, and kubectl's Go template printer, kgenctl was 94 MB
// instead of 58, and an idle 'kgenctl run' had 13 MiB more of its binary
// in memory (cmd/kgenctl's TestNoReflectMethod keeps it out). What is
// asked is the same: a TokenReview of the bearer token, a
// SubjectAccessReview of the verb on the path, cached and retried as those
// packages do. The parts that need no webhook (the token cache, client
// certificates, the union of the authenticators) are still
// k8s.io/apiserver's.

// errReview marks a review that could not be made (kgen may not create
// TokenReviews, the API server is down): the caller is not to blame.
var errReview = errors.New("kgen could not review the caller")

// maxReviewCache bounds the SubjectAccessReview answers kept, as the API
// server's webhook authorizer bounds its cache.
const maxReviewCache = 8192

// maxCachedAttrs bounds the size of the path and verb whose answer is
// cached, as the webhook authorizer's: a caller's paths must not fill the
// memory.
const maxCachedAttrs = 10000

// tokenReviewer authenticates a bearer token with a TokenReview, as the API
// server's webhook token authenticator does (without audiences: the
// metrics server asks for none). token/cache caches its answers.
type tokenReviewer struct {
	client  authenticationclient.TokenReviewInterface
	backoff wait.Backoff
	timeout time.Duration
}

var _ authenticator.Token = (*tokenReviewer)(nil)

func (r *tokenReviewer) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	var result *authenticationv1.TokenReview
	if err := withRetries(ctx, r.backoff, func() (err error) {
		result, err = r.client.Create(ctx, review, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, false, fmt.Errorf("%w: TokenReview: %w", errReview, err)
	}
	status := result.Status
	if !status.Authenticated {
		if status.Error != "" {
			return nil, false, errors.New(status.Error)
		}
		return nil, false, nil
	}
	var extra map[string][]string
	if status.User.Extra != nil {
		extra = make(map[string][]string, len(status.User.Extra))
		for k, v := range status.User.Extra {
			extra[k] = v
		}
	}
	return &authenticator.Response{User: &user.DefaultInfo{
		Name:   status.User.Username,
		UID:    status.User.UID,
		Groups: status.User.Groups,
		Extra:  extra,
	}}, true, nil
}

// accessReviewer authorises a request with a SubjectAccessReview, caching
// an allowed answer for allowTTL and any other for denyTTL, as the API
// server's webhook authorizer does. An error is no opinion, which the
// caller refuses.
type accessReviewer struct {
	client            authorizationclient.SubjectAccessReviewInterface
	backoff           wait.Backoff
	timeout           time.Duration
	allowTTL, denyTTL time.Duration
	answers           *cache.LRUExpireCache
}

var _ authorizer.Authorizer = (*accessReviewer)(nil)

func newAccessReviewer(client authorizationclient.SubjectAccessReviewInterface, backoff wait.Backoff, timeout, allowTTL, denyTTL time.Duration) *accessReviewer {
	return &accessReviewer{client: client, backoff: backoff, timeout: timeout, allowTTL: allowTTL, denyTTL: denyTTL,
		answers: cache.NewLRUExpireCache(maxReviewCache)}
}

func (r *accessReviewer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	var spec authorizationv1.SubjectAccessReviewSpec
	if u := attrs.GetUser(); u != nil {
		spec = authorizationv1.SubjectAccessReviewSpec{User: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
		if extra := u.GetExtra(); extra != nil {
			spec.Extra = make(map[string]authorizationv1.ExtraValue, len(extra))
			for k, v := range extra {
				spec.Extra[k] = v
			}
		}
	}
	if attrs.IsResourceRequest() {
		// The metrics server asks only of paths; a resource request would
		// need the resource attributes, which it never makes.
		return authorizer.DecisionNoOpinion, "", errors.New("resource requests are not reviewed")
	}
	spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: attrs.GetPath(), Verb: attrs.GetVerb()}
	key, err := json.Marshal(spec)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	status, ok := r.cached(string(key))
	if !ok {
		ctx, cancel := context.WithTimeout(ctx, r.timeout)
		defer cancel()
		var result *authorizationv1.SubjectAccessReview
		if err := withRetries(ctx, r.backoff, func() (err error) {
			result, err = r.client.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			return err
		}); err != nil {
			return authorizer.DecisionNoOpinion, "", fmt.Errorf("SubjectAccessReview: %w", err)
		}
		status = result.Status
		ttl := r.denyTTL
		if status.Allowed {
			ttl = r.allowTTL
		}
		if len(attrs.GetPath())+len(attrs.GetVerb()) < maxCachedAttrs {
			r.answers.Add(string(key), status, ttl)
		}
	}
	switch {
	case status.Denied && status.Allowed:
		return authorizer.DecisionDeny, status.Reason, errors.New("the SubjectAccessReview both allowed and denied the request")
	case status.Denied:
		return authorizer.DecisionDeny, status.Reason, nil
	case status.Allowed:
		return authorizer.DecisionAllow, status.Reason, nil
	default:
		return authorizer.DecisionNoOpinion, status.Reason, nil
	}
}

func (r *accessReviewer) cached(key string) (authorizationv1.SubjectAccessReviewStatus, bool) {
	v, ok := r.answers.Get(key)
	if !ok {
		return authorizationv1.SubjectAccessReviewStatus{}, false
	}
	return v.(authorizationv1.SubjectAccessReviewStatus), true
}

// withRetries calls review until it succeeds, fails for good, or backoff
// runs out, and returns its last error.
func withRetries(ctx context.Context, backoff wait.Backoff, review func() error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(context.Context) (bool, error) {
		last = review()
		switch {
		case last == nil:
			return true, nil
		case transient(last):
			return false, nil
		default:
			return false, last
		}
	})
	if last != nil {
		return last
	}
	return err
}

// transient reports whether a review failed in a way worth asking again,
// as the API server's webhooks retry: a connection lost or reset, a server
// error or timeout, too many requests, or an answer that says when to ask
// again.
func transient(err error) bool {
	if utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err) || apierrors.IsInternalError(err) ||
		apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) {
		return true
	}
	_, retry := apierrors.SuggestsClientDelay(err)
	return retry
}
