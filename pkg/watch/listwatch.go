package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// listWatch lists and watches one resource and decodes what it receives
// straight into *Object (see decodeObject). The dynamic client would decode
// every object into maps first, only for the informer's transform to turn
// them back into JSON: under load that was a third of kgen's CPU time.
type listWatch struct {
	client   rest.Interface
	key      Key
	segments []string // the resource's path
}

func newListWatch(client rest.Interface, key Key) *listWatch {
	gv := key.GVR.GroupVersion()
	segments := []string{"/api", gv.Version}
	if gv.Group != "" {
		segments = []string{"/apis", gv.Group, gv.Version}
	}
	if key.Namespace != "" {
		segments = append(segments, "namespaces", key.Namespace)
	}
	return &listWatch{client: client, key: key, segments: append(segments, key.GVR.Resource)}
}

func (lw *listWatch) request(opts metav1.ListOptions) *rest.Request {
	opts.LabelSelector = lw.key.Selector
	return lw.client.Get().AbsPath(lw.segments...).
		SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion)
}

// List implements cache.ListerWatcher.
func (lw *listWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

// Watch implements cache.ListerWatcher.
func (lw *listWatch) Watch(opts metav1.ListOptions) (apiwatch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// ListWithContext implements cache.ListerWatcherWithContext.
func (lw *listWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	res := lw.request(opts).Do(ctx)
	data, err := res.Raw()
	if err != nil {
		// Error decodes the server's Status ("secrets is forbidden: User
		// ... cannot list ..."); Raw's error has only the HTTP status.
		return nil, res.Error()
	}
	return decodeList(data)
}

// WatchWithContext implements cache.ListerWatcherWithContext.
func (lw *listWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (apiwatch.Interface, error) {
	opts.Watch = true
	body, err := lw.request(opts).Stream(ctx)
	if err != nil {
		return nil, err
	}
	s := &eventStream{body: body, result: make(chan apiwatch.Event), done: make(chan struct{})}
	go s.run()
	return s, nil
}

// List is a list of *Object, as listWatch returns it.
type List struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []*Object
}

// DeepCopyObject copies the list; the items' JSON is shared, as it is never
// modified.
func (l *List) DeepCopyObject() runtime.Object {
	out := &List{TypeMeta: l.TypeMeta, ListMeta: *l.ListMeta.DeepCopy(), Items: make([]*Object, len(l.Items))}
	for i, o := range l.Items {
		out.Items[i] = o.DeepCopyObject().(*Object)
	}
	return out
}

// decodeList decodes a list response. Its items do not name their kind, so
// they get the list's kind without "List".
func decodeList(data []byte) (*List, error) {
	var in struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ListMeta   `json:"metadata"`
		Items      []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("decode list: %w", err)
	}
	gvk := schema.FromAPIVersionAndKind(in.APIVersion, strings.TrimSuffix(in.Kind, "List"))
	out := &List{TypeMeta: metav1.TypeMeta{APIVersion: in.APIVersion, Kind: in.Kind}, ListMeta: in.Metadata,
		Items: make([]*Object, 0, len(in.Items))}
	for i, item := range in.Items {
		o, err := decodeObject(item, gvk)
		if err != nil {
			return nil, fmt.Errorf("decode list item %d: %w", i, err)
		}
		out.Items = append(out.Items, o)
	}
	return out, nil
}

// eventStream is a watch.Interface over a JSON watch stream.
type eventStream struct {
	body   io.ReadCloser
	result chan apiwatch.Event
	done   chan struct{}
	once   sync.Once
}

// ResultChan implements watch.Interface.
func (s *eventStream) ResultChan() <-chan apiwatch.Event { return s.result }

// Stop implements watch.Interface.
func (s *eventStream) Stop() {
	s.once.Do(func() {
		close(s.done)
		s.body.Close()
	})
}

func (s *eventStream) run() {
	defer close(s.result)
	defer s.Stop()
	dec := json.NewDecoder(s.body)
	for {
		var event struct {
			Type   apiwatch.EventType `json:"type"`
			Object json.RawMessage    `json:"object"`
		}
		if err := dec.Decode(&event); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return // the server ended the watch: the reflector starts another
			}
			s.fail(fmt.Errorf("unable to decode an event from the watch stream: %w", err))
			return
		}
		var obj runtime.Object
		switch event.Type {
		case apiwatch.Error:
			status := &metav1.Status{}
			if err := json.Unmarshal(event.Object, status); err != nil {
				s.fail(fmt.Errorf("unable to decode a watch error: %w", err))
				return
			}
			obj = status
		case apiwatch.Added, apiwatch.Modified, apiwatch.Deleted, apiwatch.Bookmark:
			o, err := decodeObject(event.Object, schema.GroupVersionKind{})
			if err != nil {
				s.fail(fmt.Errorf("unable to decode a %s event: %w", event.Type, err))
				return
			}
			obj = o
		default:
			s.fail(fmt.Errorf("unknown watch event type %q", event.Type))
			return
		}
		if !s.send(apiwatch.Event{Type: event.Type, Object: obj}) {
			return
		}
	}
}

// fail reports err as an Error event unless the watch was stopped (then the
// error is only the closed body).
func (s *eventStream) fail(err error) {
	select {
	case <-s.done:
		return
	default:
	}
	s.send(apiwatch.Event{Type: apiwatch.Error, Object: &apierrors.NewInternalError(err).ErrStatus})
}

func (s *eventStream) send(e apiwatch.Event) bool {
	select {
	case s.result <- e:
		return true
	case <-s.done:
		return false
	}
}

// NewRESTClient returns a client for Config.REST: config's server,
// credentials and limits, speaking JSON.
func NewRESTClient(config *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(config)
	c.ContentType, c.AcceptContentTypes = "application/json", "application/json"
	c.GroupVersion, c.APIPath = nil, ""
	// For error responses only: bodies are decoded by listWatch.
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return rest.UnversionedRESTClientFor(c)
}
