package portal

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// Cancelling Serve's context stops new connections but lets a request in
// flight finish, with its own context still live, and Serve returns nil.
// A request that outlives the shutdown timeout makes Serve return an error.
func TestServeShutsDownGracefully(t *testing.T) {
	tests := []struct {
		name    string
		release bool // whether the request in flight finishes
		wantErr string
	}{
		{name: "request in flight finishes", release: true},
		{name: "request in flight outlives the timeout", wantErr: "shut down: context deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			listener, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			started, release := make(chan struct{}), make(chan struct{})
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(started)
				select {
				case <-release:
				case <-r.Context().Done():
				}
				if err := r.Context().Err(); err != nil {
					http.Error(w, "request context: "+err.Error(), http.StatusInternalServerError)
					return
				}
				_, _ = io.WriteString(w, "done")
			})
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			served := make(chan error, 1)
			go func() { served <- Serve(ctx, listener, handler, 500*time.Millisecond) }()

			type answer struct {
				code int
				body string
				err  error
			}
			answered := make(chan answer, 1)
			url := "http://" + listener.Addr().String() + "/"
			go func() {
				resp, err := http.Get(url)
				if err != nil {
					answered <- answer{err: err}
					return
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				answered <- answer{resp.StatusCode, string(body), err}
			}()
			<-started
			cancel()
			if tt.release {
				// Had Serve closed the connection instead of waiting for
				// the request, the client would see an error here.
				close(release)
				a := <-answered
				if a.err != nil || a.code != http.StatusOK || a.body != "done" {
					t.Errorf("the request in flight: %d %q %v, want 200 done", a.code, a.body, a.err)
				}
			}
			select {
			case err := <-served:
				if tt.wantErr == "" && err != nil {
					t.Errorf("Serve = %v, want nil", err)
				}
				if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
					t.Errorf("Serve = %v, want %q", err, tt.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not return after its context was cancelled")
			}
			if resp, err := http.Get(url); err == nil {
				resp.Body.Close()
				t.Error("a new request was served after shutdown")
			}
		})
	}
}
