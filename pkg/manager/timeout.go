package manager

import (
	"context"
	"io"
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// timeoutExceptWatches moves a client configuration's Timeout (kubectl's
// --request-timeout) from the HTTP client, which ends every request after
// it, watches included, to each request that is not a watch. kubectl ends
// a watch at its --request-timeout too, but a controller's informers would
// then list again every few seconds, and log each watch cut short.
func timeoutExceptWatches(config *rest.Config) {
	timeout := config.Timeout
	if timeout <= 0 {
		return
	}
	config.Timeout = 0
	config.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return &requestTimeout{next: next, timeout: timeout}
	})
}

// requestTimeout ends a request that is not a watch after timeout: waiting
// for the response and reading its body.
type requestTimeout struct {
	next    http.RoundTripper
	timeout time.Duration
}

func (t *requestTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
		return t.next.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(req.Context(), t.timeout)
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// WrappedRoundTripper lets client-go see the transport under it.
func (t *requestTimeout) WrappedRoundTripper() http.RoundTripper { return t.next }

// cancelOnClose ends a request's context once its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}
