package portal

import (
	"bytes"
	_ "embed"
	"errors"
	"html/template"
	"net/http"
)

//go:embed page.html
var pageHTML string

// pageTemplate is the page at /. html/template escapes every value by
// where it stands, so names and messages from the cluster are only text.
var pageTemplate = template.Must(template.New("page").Parse(pageHTML))

// pageData is what the page shows.
type pageData struct {
	Namespace string
	Apps      []App
	// Error is why the apps could not be listed, if they could not.
	Error string
}

// page serves the form and the table of apps. It lists the apps itself, so
// it shows them without JavaScript; its script only posts the form as JSON
// and refreshes the table from GET /apps.
func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	code := http.StatusOK
	data := pageData{Namespace: h.namespace}
	apps, err := h.apps(r.Context())
	if err != nil {
		var e *httpError
		if !errors.As(err, &e) {
			h.respondError(w, r, err)
			return
		}
		code, data.Error = e.code, e.body.Error
		h.logFailure(r, e)
	}
	data.Apps = apps
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, data); err != nil {
		h.respondError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes()) // the client may be gone; nothing to do then
}
