package watch

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// deployment is a Deployment as the API server sends it after kgen created
// it: labels, owner reference, defaults, managed fields.
const deployment = `{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"app-00042","namespace":"kgen-2000","uid":"6f1c2a4e-8a7b-4c1d-9e2f-0a1b2c3d4e5f","resourceVersion":"123456","generation":1,"creationTimestamp":"2026-11-21T10:00:00Z","labels":{"app.kubernetes.io/managed-by":"kgen","kgen.dev/child":"deployment","kgen.dev/parent-uid":"0f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f","kgen.dev/rule":"webapp"},"annotations":{"kgen.dev/parent":"kgen-2000/app-00042","kgen.dev/template-hash":"4b8d1c9f2e7a6b3c"},"ownerReferences":[{"apiVersion":"example.com/v1alpha1","kind":"WebApp","name":"app-00042","uid":"0f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f","controller":true,"blockOwnerDeletion":true}],"managedFields":[{"manager":"kgen","operation":"Update","apiVersion":"apps/v1","time":"2026-11-21T10:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:annotations":{".":{},"f:kgen.dev/parent":{},"f:kgen.dev/template-hash":{}},"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{},"f:kgen.dev/child":{},"f:kgen.dev/parent-uid":{},"f:kgen.dev/rule":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"0f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f\"}":{}}},"f:spec":{"f:progressDeadlineSeconds":{},"f:replicas":{},"f:revisionHistoryLimit":{},"f:selector":{},"f:strategy":{"f:rollingUpdate":{".":{},"f:maxSurge":{},"f:maxUnavailable":{}},"f:type":{}},"f:template":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:envFrom":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{".":{},"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}},"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}}}}]},"spec":{"replicas":1,"selector":{"matchLabels":{"app":"app-00042"}},"template":{"metadata":{"labels":{"app":"app-00042"}},"spec":{"containers":[{"name":"app","image":"nginx:1.27","ports":[{"name":"http","containerPort":8080,"protocol":"TCP"}],"envFrom":[{"configMapRef":{"name":"app-00042-config"}}],"resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","securityContext":{},"schedulerName":"default-scheduler"}},"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"25%","maxSurge":"25%"}},"revisionHistoryLimit":10,"progressDeadlineSeconds":600},"status":{}}`

// BenchmarkDecodeObject measures turning a watch event's object into a
// cached *Object, and reports the cached JSON's size.
func BenchmarkDecodeObject(b *testing.B) {
	data := []byte(deployment)
	var o *Object
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if o, err = decodeObject(data, schema.GroupVersionKind{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(data)), "received-bytes")
	b.ReportMetric(float64(o.size), "json-bytes")
	b.ReportMetric(float64(o.Size()), "cached-bytes")
}

// BenchmarkObjectUnstructured measures reading a cached object in full.
func BenchmarkObjectUnstructured(b *testing.B) {
	o, err := decodeObject([]byte(deployment), schema.GroupVersionKind{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := o.Unstructured(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompactWritten measures what Writes.Wrote does to a write's
// answer, compactWritten, against deflating its JSON too, as Compact does.
func BenchmarkCompactWritten(b *testing.B) {
	o, err := decodeObject([]byte(deployment), schema.GroupVersionKind{})
	if err != nil {
		b.Fatal(err)
	}
	u, err := o.Unstructured()
	if err != nil {
		b.Fatal(err)
	}
	for name, compact := range map[string]func(*unstructured.Unstructured) error{
		"plain":    func(u *unstructured.Unstructured) error { _, err := compactWritten(u); return err },
		"deflated": func(u *unstructured.Unstructured) error { _, err := Compact(u); return err },
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := compact(u.DeepCopy()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
