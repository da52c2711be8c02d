package reconcile

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Scoper tells whether a kind is namespaced (true) or cluster-scoped.
//
// The controller answers from discovery (a RESTMapper); kgenctl render,
// which works without a cluster, uses a StaticScoper.
type Scoper interface {
	Namespaced(gvk schema.GroupVersionKind) (bool, error)
}

// ErrUnknownKind is matched by the error a StaticScoper returns for a kind it
// does not know.
var ErrUnknownKind = errors.New("unknown kind")

// StaticScoper knows the scope of Kubernetes' built-in kinds and of the
// custom resources whose CustomResourceDefinitions were added to it. It never
// guesses: any other kind is an error matching ErrUnknownKind.
//
// Built-in kinds are known by group and kind, whatever the version; custom
// resources by group, kind and the versions their CRD declares.
type StaticScoper struct {
	crds map[schema.GroupKind]crdScope
}

type crdScope struct {
	namespaced bool
	versions   []string
}

var _ Scoper = (*StaticScoper)(nil)

// NewStaticScoper returns a StaticScoper that knows the built-in kinds.
func NewStaticScoper() *StaticScoper {
	return &StaticScoper{crds: map[schema.GroupKind]crdScope{}}
}

// Namespaced tells whether the kind is namespaced.
func (s *StaticScoper) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	gk := gvk.GroupKind()
	if c, ok := s.crds[gk]; ok {
		if !slices.Contains(c.versions, gvk.Version) {
			return false, fmt.Errorf("%w: %s: its CustomResourceDefinition declares versions %s, not %s",
				ErrUnknownKind, gk, strings.Join(c.versions, ", "), gvk.Version)
		}
		return c.namespaced, nil
	}
	if namespaced, ok := builtinKinds[gk]; ok {
		return namespaced, nil
	}
	return false, fmt.Errorf("%w: %s is not a built-in kind and no CustomResourceDefinition for it was given", ErrUnknownKind, describeGVK(gvk))
}

// AddCRD learns the scope of a custom resource from its
// apiextensions.k8s.io/v1 CustomResourceDefinition.
func (s *StaticScoper) AddCRD(crd *unstructured.Unstructured) error {
	if gvk := crd.GroupVersionKind(); gvk.Group != "apiextensions.k8s.io" || gvk.Kind != "CustomResourceDefinition" {
		return fmt.Errorf("%s %q is not a CustomResourceDefinition", gvk.Kind, crd.GetName())
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	scope, _, _ := unstructured.NestedString(crd.Object, "spec", "scope")
	if group == "" || kind == "" {
		return fmt.Errorf("CustomResourceDefinition %q: spec.group and spec.names.kind are required", crd.GetName())
	}
	var c crdScope
	switch scope {
	case "Namespaced":
		c.namespaced = true
	case "Cluster":
	default:
		return fmt.Errorf("CustomResourceDefinition %q: spec.scope must be Namespaced or Cluster, not %q", crd.GetName(), scope)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		if m, ok := v.(map[string]any); ok {
			if name, ok := m["name"].(string); ok && name != "" {
				c.versions = append(c.versions, name)
			}
		}
	}
	if len(c.versions) == 0 {
		return fmt.Errorf("CustomResourceDefinition %q: spec.versions names no version", crd.GetName())
	}
	s.crds[schema.GroupKind{Group: group, Kind: kind}] = c
	return nil
}

func describeGVK(gvk schema.GroupVersionKind) string {
	return fmt.Sprintf("kind %s (apiVersion %s)", gvk.Kind, gvk.GroupVersion())
}

// builtinKinds is the scope of every kind Kubernetes 1.36 serves, by group
// and kind (true: namespaced). It was taken from the discovery documents the
// Kubernetes repository records in api/discovery for that release, leaving
// out subresources; update it when a release adds kinds.
var builtinKinds = map[schema.GroupKind]bool{
	{Group: "", Kind: "Binding"}:               true,
	{Group: "", Kind: "ComponentStatus"}:       false,
	{Group: "", Kind: "ConfigMap"}:             true,
	{Group: "", Kind: "Endpoints"}:             true,
	{Group: "", Kind: "Event"}:                 true,
	{Group: "", Kind: "LimitRange"}:            true,
	{Group: "", Kind: "Namespace"}:             false,
	{Group: "", Kind: "Node"}:                  false,
	{Group: "", Kind: "PersistentVolume"}:      false,
	{Group: "", Kind: "PersistentVolumeClaim"}: true,
	{Group: "", Kind: "Pod"}:                   true,
	{Group: "", Kind: "PodTemplate"}:           true,
	{Group: "", Kind: "ReplicationController"}: true,
	{Group: "", Kind: "ResourceQuota"}:         true,
	{Group: "", Kind: "Secret"}:                true,
	{Group: "", Kind: "Service"}:               true,
	{Group: "", Kind: "ServiceAccount"}:        true,

	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          false,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   false,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     false,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        false,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: false,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   false,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:                 false,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                             false,

	{Group: "apps", Kind: "ControllerRevision"}: true,
	{Group: "apps", Kind: "DaemonSet"}:          true,
	{Group: "apps", Kind: "Deployment"}:         true,
	{Group: "apps", Kind: "ReplicaSet"}:         true,
	{Group: "apps", Kind: "StatefulSet"}:        true,

	{Group: "authentication.k8s.io", Kind: "SelfSubjectReview"}:       false,
	{Group: "authentication.k8s.io", Kind: "TokenReview"}:             false,
	{Group: "authorization.k8s.io", Kind: "LocalSubjectAccessReview"}: true,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectAccessReview"}:  false,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectRulesReview"}:   false,
	{Group: "authorization.k8s.io", Kind: "SubjectAccessReview"}:      false,

	{Group: "autoscaling", Kind: "HorizontalPodAutoscaler"}: true,
	{Group: "batch", Kind: "CronJob"}:                       true,
	{Group: "batch", Kind: "Job"}:                           true,

	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}: false,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:        false,
	{Group: "certificates.k8s.io", Kind: "PodCertificateRequest"}:     true,
	{Group: "coordination.k8s.io", Kind: "Lease"}:                     true,
	{Group: "coordination.k8s.io", Kind: "LeaseCandidate"}:            true,
	{Group: "discovery.k8s.io", Kind: "EndpointSlice"}:                true,
	{Group: "events.k8s.io", Kind: "Event"}:                           true,

	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                 false,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}: false,
	{Group: "internal.apiserver.k8s.io", Kind: "StorageVersion"}:                false,

	{Group: "networking.k8s.io", Kind: "IPAddress"}:     false,
	{Group: "networking.k8s.io", Kind: "Ingress"}:       true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:  false,
	{Group: "networking.k8s.io", Kind: "NetworkPolicy"}: true,
	{Group: "networking.k8s.io", Kind: "ServiceCIDR"}:   false,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:        false,
	{Group: "policy", Kind: "PodDisruptionBudget"}:      true,

	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:        false,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}: false,
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:               true,
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:        true,

	{Group: "resource.k8s.io", Kind: "DeviceClass"}:               false,
	{Group: "resource.k8s.io", Kind: "DeviceTaintRule"}:           false,
	{Group: "resource.k8s.io", Kind: "ResourceClaim"}:             true,
	{Group: "resource.k8s.io", Kind: "ResourceClaimTemplate"}:     true,
	{Group: "resource.k8s.io", Kind: "ResourcePoolStatusRequest"}: false,
	{Group: "resource.k8s.io", Kind: "ResourceSlice"}:             false,

	{Group: "scheduling.k8s.io", Kind: "PodGroup"}:      true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}: false,
	{Group: "scheduling.k8s.io", Kind: "Workload"}:      true,

	{Group: "storage.k8s.io", Kind: "CSIDriver"}:                        false,
	{Group: "storage.k8s.io", Kind: "CSINode"}:                          false,
	{Group: "storage.k8s.io", Kind: "CSIStorageCapacity"}:               true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                     false,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:                 false,
	{Group: "storage.k8s.io", Kind: "VolumeAttributesClass"}:            false,
	{Group: "storagemigration.k8s.io", Kind: "StorageVersionMigration"}: false,
}
