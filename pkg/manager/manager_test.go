package manager

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"kgen.dev/kgen/rules"
)

// A rule's serviceAccount is impersonated with kgen's own credentials; a
// kgen that itself runs impersonated (--as) refuses to, rather than let
// the credential underneath impersonate the account in the --as user's
// stead, which a check of the --as user's RBAC would never show.
func TestImpersonatorUnderAs(t *testing.T) {
	sa := rules.ServiceAccount{Namespace: "team", Name: "writer"}
	if _, err := impersonator(&rest.Config{Host: "https://example.invalid"})(sa); err != nil {
		t.Fatalf("impersonator() = %v with kgen's own credentials", err)
	}
	as := &rest.Config{Host: "https://example.invalid", Impersonate: rest.ImpersonationConfig{UserName: "system:serviceaccount:kgen-system:kgen"}}
	_, err := impersonator(as)(sa)
	if err == nil || !strings.Contains(err.Error(), "--as") || !strings.Contains(err.Error(), "system:serviceaccount:team:writer") {
		t.Errorf("impersonator() under --as = %v, want an error naming --as and the account", err)
	}
}

// A parent whose children fail on every retry spends the events' budget
// of one reason, not of every reason: a failure of another kind that comes
// next is still recorded.
func TestEventSpamKeyPerReason(t *testing.T) {
	c := record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{SpamKeyFunc: eventSpamKey})
	event := func(reason, message string) *corev1.Event {
		return &corev1.Event{Source: corev1.EventSource{Component: "kgen"}, Type: corev1.EventTypeWarning, Reason: reason, Message: message,
			InvolvedObject: corev1.ObjectReference{APIVersion: "example.com/v1", Kind: "App", Namespace: "team", Name: "web", UID: "u"}}
	}
	skipped := 0
	for i := range 40 {
		r, err := c.EventCorrelate(event("Forbidden", fmt.Sprintf("child c%d: forbidden", i%4)))
		if err != nil {
			t.Fatal(err)
		}
		if r.Skip {
			skipped++
		}
	}
	if skipped == 0 {
		t.Error("40 events of one reason at once: none was held back")
	}
	r, err := c.EventCorrelate(event("DeleteFailed", "child m: forbidden"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Skip {
		t.Error("the first DeleteFailed event was held back by the Forbidden ones")
	}
}

// The not-ready annotation a shard publishes on its Lease stays within
// its budget, whatever the number of rules that wait: a Lease whose
// annotations exceed 256 KiB is refused, and its shard loses it. Messages
// are cut first, then dropped (reasons kept), then rules left out.
func TestNotReadyAnnotationBounded(t *testing.T) {
	long := strings.Repeat(`"quoted" <error> `, 200)
	for _, n := range []int{1, 30, 3000, 30000} {
		notReady := map[string][2]string{}
		for i := range n {
			notReady[fmt.Sprintf("rule-%05d", i)] = [2]string{"Waiting", long}
		}
		notReady["zz-refused"] = [2]string{"Forbidden", long} // last by name, first by gravity
		out := notReadyAnnotation(notReady)
		if len(out) > maxNotReadyBytes {
			t.Errorf("%d rules: %d bytes, want at most %d", n, len(out), maxNotReadyBytes)
		}
		var back map[string][2]string
		if err := json.Unmarshal([]byte(out), &back); err != nil {
			t.Fatalf("%d rules: %v", n, err)
		}
		if back["zz-refused"][0] != "Forbidden" {
			t.Errorf("%d rules: the Forbidden rule's reason is lost: %v", n, back["zz-refused"])
		}
		named := len(back)
		left, ok := back[leftOut]
		if ok {
			named--
		}
		if ok != (named < n+1) {
			t.Errorf("%d rules, %d named: left-out entry %v, want one exactly when some are left out", n+1, named, left)
		}
		if n == 1 && !strings.HasPrefix(back["rule-00000"][1], `"quoted" <error>`) {
			t.Errorf("one rule: its message is lost: %q", back["rule-00000"][1])
		}
	}
}
