package manager

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// kgenctl run --request-timeout ends a slow request, but not a watch,
// which the server keeps open as long as it likes (an audit saw every
// watch cut, and listed again, every 3 s).
func TestRequestTimeoutSparesWatches(t *testing.T) {
	const slow = 300 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			time.Sleep(slow)
			_, _ = w.Write([]byte(`{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"2"}}}` + "\n"))
			return
		}
		time.Sleep(slow)
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"ConfigMapList","metadata":{"resourceVersion":"1"},"items":[]}`))
	}))
	defer srv.Close()
	config := &rest.Config{Host: srv.URL, Timeout: slow / 3}
	timeoutExceptWatches(config)
	if config.Timeout != 0 {
		t.Fatalf("config.Timeout = %v, want 0 (the HTTP client's timeout ends watches)", config.Timeout)
	}
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	cms := client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("ns")
	if _, err := cms.List(context.Background(), metav1.ListOptions{}); err == nil {
		t.Error("a list slower than --request-timeout succeeded")
	}
	w, err := cms.Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok || ev.Type != "ADDED" {
			t.Errorf("watch event %v (open %t), want the ADDED sent after the timeout", ev, ok)
		}
	case <-time.After(5 * time.Second):
		t.Error("no watch event")
	}
}
