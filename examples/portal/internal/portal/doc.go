// Package portal is an HTTP API and a web page in front of the WebApps of
// examples/webapp: what a team puts between its users (or a CI job) and its
// platform API. It writes parents; kgen writes their children and reports
// on the parent's Ready condition, which the portal reads back.
//
// The API, for the WebApps in one namespace:
//
//	POST /apps          {"name", "image", "replicas", "port"}: create (201) or update (200)
//	GET  /apps          {"items": [app, ...]}
//	GET  /apps/{name}   app, or 404
//	GET  /              the page: a form and a table of the apps
//
// Writes are server-side applies with the field manager "kgen-portal", so
// the portal owns the fields it sets, and only those; a field another
// manager owns is a conflict (409), never silently taken over. Errors are
// JSON: {"error": "...", "causes": [{"field", "message"}]}.
//
// The package knows the one kind it serves (example.com/v1alpha1 WebApp,
// resource webapps) and uses the dynamic client, so it needs no generated
// types. It does not know kgen's rules: it sets the label the example rule
// selects (tier: web) and reads the Ready condition that kgen writes.
package portal
