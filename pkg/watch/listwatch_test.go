package watch

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

func TestListWatch(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.String())
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/apis/apps/v1/namespaces/a/deployments" && r.URL.Query().Get("watch") == "true":
			fmt.Fprintln(w, `{"type":"ADDED","object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"a","resourceVersion":"5","managedFields":[{}]}}}`)
			fmt.Fprintln(w, `{"type":"BOOKMARK","object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"resourceVersion":"6","annotations":{"k8s.io/initial-events-end":"true"}}}}`)
			fmt.Fprintln(w, `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old"}}`)
		case r.URL.Path == "/apis/apps/v1/namespaces/a/deployments":
			fmt.Fprint(w, `{"apiVersion":"apps/v1","kind":"DeploymentList","metadata":{"resourceVersion":"9","continue":"c"},
				"items":[{"metadata":{"name":"d","namespace":"a","managedFields":[{}]},"spec":{}}]}`)
		case r.URL.Path == "/api/v1/configmaps":
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"no"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	client, err := rest.UnversionedRESTClientFor(&rest.Config{Host: srv.URL,
		ContentConfig: rest.ContentConfig{NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lw := newListWatch(client, Key{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Namespace: "a", Selector: "x=y"})

	list, err := lw.ListWithContext(ctx, metav1.ListOptions{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	l := list.(*List)
	if l.ResourceVersion != "9" || l.Continue != "c" || len(l.Items) != 1 || l.Items[0].Kind != "Deployment" || l.Items[0].Name != "d" {
		t.Errorf("list: %+v", l)
	}
	if u, err := l.Items[0].Unstructured(); err != nil || u.GetAPIVersion() != "apps/v1" || u.GetManagedFields() != nil {
		t.Errorf("list item: %v %v", u, err)
	}
	if want := "/apis/apps/v1/namespaces/a/deployments?labelSelector=x%3Dy&limit=10"; paths[0] != want {
		t.Errorf("list request %s, want %s", paths[0], want)
	}

	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "4", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	var events []apiwatch.Event
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				done = true
				break
			}
			events = append(events, e)
		case <-timeout:
			t.Fatal("the watch did not end")
		}
	}
	w.Stop()
	if len(events) != 3 {
		t.Fatalf("got %d events, want 3: %v", len(events), events)
	}
	if o, ok := events[0].Object.(*Object); !ok || events[0].Type != apiwatch.Added || o.Name != "d" || o.ResourceVersion != "5" {
		t.Errorf("first event: %+v", events[0])
	}
	if o, ok := events[1].Object.(*Object); !ok || events[1].Type != apiwatch.Bookmark || o.GetAnnotations()["k8s.io/initial-events-end"] != "true" {
		t.Errorf("bookmark: %+v", events[1])
	}
	if err := apierrors.FromObject(events[2].Object); events[2].Type != apiwatch.Error || !apierrors.IsResourceExpired(err) {
		t.Errorf("error event: %+v (%v)", events[2], err)
	}

	forbidden := newListWatch(client, Key{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}})
	if _, err := forbidden.ListWithContext(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list error: %v, want Forbidden", err)
	}
	if _, err := forbidden.WatchWithContext(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("watch error: %v, want Forbidden", err)
	}
}
