package kinds

import (
	"maps"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resource is what discovery says of a kind's API resource.
type Resource struct {
	// Resource is the resource name, the lower-case plural: "deployments".
	Resource string
	// Namespaced is true for namespaced kinds, false for cluster-scoped ones.
	Namespaced bool
	// Status is true when the resource has a status subresource.
	Status bool
}

// Builtin returns the resource of a built-in kind, known by group and kind
// whatever the version; ok is false for any other kind.
func Builtin(gk schema.GroupKind) (r Resource, ok bool) {
	r, ok = builtins[gk]
	return r, ok
}

// Builtins returns a copy of the whole table, by group and kind.
func Builtins() map[schema.GroupKind]Resource { return maps.Clone(builtins) }

// builtins is every top-level resource that kube-apiserver 1.36 serves with
// all API versions enabled (--runtime-config=api/all=true and every alpha
// and beta feature gate), as its discovery documents report them. The e2e
// test TestBuiltinKindsMatchDiscovery fails when it differs; update it from
// that test's output when kgen moves to a new Kubernetes release.
var builtins = map[schema.GroupKind]Resource{
	{Group: "", Kind: "Binding"}:               {Resource: "bindings", Namespaced: true},
	{Group: "", Kind: "ComponentStatus"}:       {Resource: "componentstatuses"},
	{Group: "", Kind: "ConfigMap"}:             {Resource: "configmaps", Namespaced: true},
	{Group: "", Kind: "Endpoints"}:             {Resource: "endpoints", Namespaced: true},
	{Group: "", Kind: "Event"}:                 {Resource: "events", Namespaced: true},
	{Group: "", Kind: "LimitRange"}:            {Resource: "limitranges", Namespaced: true},
	{Group: "", Kind: "Namespace"}:             {Resource: "namespaces", Status: true},
	{Group: "", Kind: "Node"}:                  {Resource: "nodes", Status: true},
	{Group: "", Kind: "PersistentVolume"}:      {Resource: "persistentvolumes", Status: true},
	{Group: "", Kind: "PersistentVolumeClaim"}: {Resource: "persistentvolumeclaims", Namespaced: true, Status: true},
	{Group: "", Kind: "Pod"}:                   {Resource: "pods", Namespaced: true, Status: true},
	{Group: "", Kind: "PodTemplate"}:           {Resource: "podtemplates", Namespaced: true},
	{Group: "", Kind: "ReplicationController"}: {Resource: "replicationcontrollers", Namespaced: true, Status: true},
	{Group: "", Kind: "ResourceQuota"}:         {Resource: "resourcequotas", Namespaced: true, Status: true},
	{Group: "", Kind: "Secret"}:                {Resource: "secrets", Namespaced: true},
	{Group: "", Kind: "Service"}:               {Resource: "services", Namespaced: true, Status: true},
	{Group: "", Kind: "ServiceAccount"}:        {Resource: "serviceaccounts", Namespaced: true},

	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          {Resource: "mutatingadmissionpolicies"},
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   {Resource: "mutatingadmissionpolicybindings"},
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     {Resource: "mutatingwebhookconfigurations"},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        {Resource: "validatingadmissionpolicies", Status: true},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: {Resource: "validatingadmissionpolicybindings"},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   {Resource: "validatingwebhookconfigurations"},

	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}: {Resource: "customresourcedefinitions", Status: true},

	{Group: "apiregistration.k8s.io", Kind: "APIService"}: {Resource: "apiservices", Status: true},

	{Group: "apps", Kind: "ControllerRevision"}: {Resource: "controllerrevisions", Namespaced: true},
	{Group: "apps", Kind: "DaemonSet"}:          {Resource: "daemonsets", Namespaced: true, Status: true},
	{Group: "apps", Kind: "Deployment"}:         {Resource: "deployments", Namespaced: true, Status: true},
	{Group: "apps", Kind: "ReplicaSet"}:         {Resource: "replicasets", Namespaced: true, Status: true},
	{Group: "apps", Kind: "StatefulSet"}:        {Resource: "statefulsets", Namespaced: true, Status: true},

	{Group: "authentication.k8s.io", Kind: "SelfSubjectReview"}: {Resource: "selfsubjectreviews"},
	{Group: "authentication.k8s.io", Kind: "TokenReview"}:       {Resource: "tokenreviews"},

	{Group: "authorization.k8s.io", Kind: "LocalSubjectAccessReview"}: {Resource: "localsubjectaccessreviews", Namespaced: true},
	{Group: "authorization.k8s.io", Kind: "SelfSubjectAccessReview"}:  {Resource: "selfsubjectaccessreviews"},
	{Group: "authorization.k8s.io", Kind: "SelfSubjectRulesReview"}:   {Resource: "selfsubjectrulesreviews"},
	{Group: "authorization.k8s.io", Kind: "SubjectAccessReview"}:      {Resource: "subjectaccessreviews"},

	{Group: "autoscaling", Kind: "HorizontalPodAutoscaler"}: {Resource: "horizontalpodautoscalers", Namespaced: true, Status: true},

	{Group: "batch", Kind: "CronJob"}: {Resource: "cronjobs", Namespaced: true, Status: true},
	{Group: "batch", Kind: "Job"}:     {Resource: "jobs", Namespaced: true, Status: true},

	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}: {Resource: "certificatesigningrequests", Status: true},
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:        {Resource: "clustertrustbundles"},
	{Group: "certificates.k8s.io", Kind: "PodCertificateRequest"}:     {Resource: "podcertificaterequests", Namespaced: true, Status: true},

	{Group: "coordination.k8s.io", Kind: "Lease"}:          {Resource: "leases", Namespaced: true},
	{Group: "coordination.k8s.io", Kind: "LeaseCandidate"}: {Resource: "leasecandidates", Namespaced: true},

	{Group: "discovery.k8s.io", Kind: "EndpointSlice"}: {Resource: "endpointslices", Namespaced: true},

	{Group: "events.k8s.io", Kind: "Event"}: {Resource: "events", Namespaced: true},

	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                 {Resource: "flowschemas", Status: true},
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}: {Resource: "prioritylevelconfigurations", Status: true},

	{Group: "internal.apiserver.k8s.io", Kind: "StorageVersion"}: {Resource: "storageversions", Status: true},

	{Group: "networking.k8s.io", Kind: "IPAddress"}:     {Resource: "ipaddresses"},
	{Group: "networking.k8s.io", Kind: "Ingress"}:       {Resource: "ingresses", Namespaced: true, Status: true},
	{Group: "networking.k8s.io", Kind: "IngressClass"}:  {Resource: "ingressclasses"},
	{Group: "networking.k8s.io", Kind: "NetworkPolicy"}: {Resource: "networkpolicies", Namespaced: true},
	{Group: "networking.k8s.io", Kind: "ServiceCIDR"}:   {Resource: "servicecidrs", Status: true},

	{Group: "node.k8s.io", Kind: "RuntimeClass"}: {Resource: "runtimeclasses"},

	{Group: "policy", Kind: "PodDisruptionBudget"}: {Resource: "poddisruptionbudgets", Namespaced: true, Status: true},

	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:        {Resource: "clusterroles"},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}: {Resource: "clusterrolebindings"},
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:               {Resource: "roles", Namespaced: true},
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:        {Resource: "rolebindings", Namespaced: true},

	{Group: "resource.k8s.io", Kind: "DeviceClass"}:               {Resource: "deviceclasses"},
	{Group: "resource.k8s.io", Kind: "DeviceTaintRule"}:           {Resource: "devicetaintrules", Status: true},
	{Group: "resource.k8s.io", Kind: "ResourceClaim"}:             {Resource: "resourceclaims", Namespaced: true, Status: true},
	{Group: "resource.k8s.io", Kind: "ResourceClaimTemplate"}:     {Resource: "resourceclaimtemplates", Namespaced: true},
	{Group: "resource.k8s.io", Kind: "ResourcePoolStatusRequest"}: {Resource: "resourcepoolstatusrequests", Status: true},
	{Group: "resource.k8s.io", Kind: "ResourceSlice"}:             {Resource: "resourceslices"},

	{Group: "scheduling.k8s.io", Kind: "PodGroup"}:      {Resource: "podgroups", Namespaced: true, Status: true},
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}: {Resource: "priorityclasses"},
	{Group: "scheduling.k8s.io", Kind: "Workload"}:      {Resource: "workloads", Namespaced: true},

	{Group: "storage.k8s.io", Kind: "CSIDriver"}:             {Resource: "csidrivers"},
	{Group: "storage.k8s.io", Kind: "CSINode"}:               {Resource: "csinodes"},
	{Group: "storage.k8s.io", Kind: "CSIStorageCapacity"}:    {Resource: "csistoragecapacities", Namespaced: true},
	{Group: "storage.k8s.io", Kind: "StorageClass"}:          {Resource: "storageclasses"},
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:      {Resource: "volumeattachments", Status: true},
	{Group: "storage.k8s.io", Kind: "VolumeAttributesClass"}: {Resource: "volumeattributesclasses"},

	{Group: "storagemigration.k8s.io", Kind: "StorageVersionMigration"}: {Resource: "storageversionmigrations", Status: true},
}
