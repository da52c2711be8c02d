package manager

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"

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
